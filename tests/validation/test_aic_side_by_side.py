"""The AIConfigurator side-by-side (validation/aic_side_by_side.py): its committed estimates
are of the suite's rows under the fixed split, and the comparison scores both on the same
rows. Needs no aiconfigurator."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from validation import aic_estimate as W
from validation import aic_side_by_side as A
from validation import silicon as S


@pytest.fixture(scope="module")
def sample() -> list[S.SiliconRow]:
    return S.load_sample()


@pytest.fixture(scope="module")
def committed() -> tuple[dict[str, str], list[A.Estimate]]:
    return A.read_predictions()


def _score(row: S.SiliconRow, ttft_ape: float = 10.0, tpot_ape: float = 5.0,
           error: str = "") -> dict[str, object]:
    return {"row_id": row.id, "split": row.split, "partition": row.partition,
            "ttft_ape": ttft_ape, "tpot_ape": tpot_ape, "error": error}


# ------------------------------------------------------------ the committed CSV


def test_committed_rows_are_the_suite_rows_under_the_fixed_split(
        sample: list[S.SiliconRow],
        committed: tuple[dict[str, str], list[A.Estimate]]) -> None:
    _, estimates = committed
    suite = {r.id: r for r in A.suite_rows(sample)}
    # when the suite's expressibility rules change this fails: re-estimate with
    # A.PREDICT_COMMAND (aiconfigurator in a separate virtual environment)
    assert [e.row_id for e in estimates] == sorted(suite), (
        f"the suite's rows changed: run {A.PREDICT_COMMAND}")
    for e in estimates:
        assert e.split == S.split_of(e.row_id) == suite[e.row_id].split
        assert e.partition == suite[e.row_id].partition
    # the fixed rule's held-out share of the expressible rows, not a re-drawn split
    assert sum(e.split == "held-out" for e in estimates) == sum(
        S.is_held_out(i) for i in suite)


def test_committed_csv_says_what_made_it(
        committed: tuple[dict[str, str], list[A.Estimate]]) -> None:
    meta, estimates = committed
    assert meta["aiconfigurator"].startswith("aiconfigurator ")
    assert meta["estimated"][:4].isdigit()
    assert "--predict" in meta["command"]
    for e in estimates:
        # an estimate is either two positive figures or a reason
        assert e.ok != bool(e.error)
        if e.ok:
            assert e.ttft_ms > 0 and e.tpot_ms > 0


# ------------------------------------------------------------ the comparison


def test_comparison_pairs_the_same_rows_for_both(
        sample: list[S.SiliconRow],
        committed: tuple[dict[str, str], list[A.Estimate]]) -> None:
    _, estimates = committed
    by_id = {r.id: r for r in sample}
    ok = [e for e in estimates if e.ok][:6]
    failed = [e for e in estimates if not e.ok][:2]
    unsuite = next(r for r in sample if r.id not in {e.row_id for e in estimates})
    scores = [_score(by_id[e.row_id], 10.0 + i) for i, e in enumerate(ok[:5] + failed)]
    scores.append(_score(by_id[ok[5].row_id], error="3 requests did not finish"))
    scores.append(_score(unsuite))
    cmp = A.compare(A.pdsim_scores(scores), estimates, A.measured_ms(sample))
    # pdsim's unfinished row is left out of both sides; AIConfigurator's failures and a
    # row it never saw are counted apart, not compared
    assert [p.row_id for p in cmp.pairs] == sorted(e.row_id for e in ok[:5])
    assert [e.row_id for e in cmp.aic_failed] == sorted(e.row_id for e in failed)
    assert cmp.not_estimated == [unsuite.id]
    for p in cmp.pairs:
        e = next(x for x in ok if x.row_id == p.row_id)
        ttft, tpot = by_id[p.row_id].ttft_ms, by_id[p.row_id].tpot_ms
        assert p.aic_ttft_ape == pytest.approx(abs(e.ttft_ms - ttft) / ttft * 100)
        assert p.aic_tpot_ape == pytest.approx(abs(e.tpot_ms - tpot) / tpot * 100)
        assert p.pdsim_tpot_ape == 5.0
    table = "\n".join(A.tables(cmp))
    assert f"| both scored | both | {len(cmp.pairs)} |" in table
    assert A.coverage(cmp).startswith(f"Of the {len(scores) - 1} rows pdsim scored, "
                                      f"AIConfigurator estimates {len(cmp.pairs)}")


def test_comparison_refuses_a_split_that_is_not_the_fixed_one(
        sample: list[S.SiliconRow],
        committed: tuple[dict[str, str], list[A.Estimate]]) -> None:
    _, estimates = committed
    row = next(r for r in sample if r.id == estimates[0].row_id)
    wrong = {**_score(row), "split": "fit" if row.split == "held-out" else "held-out"}
    with pytest.raises(A.InputError, match="fixed split"):
        A.compare(A.pdsim_scores([wrong]), estimates, A.measured_ms(sample))


def test_doc_section_reads_the_committed_estimates(sample: list[S.SiliconRow]) -> None:
    rows = A.suite_rows(sample)[:40]
    text = "\n".join(A.doc_section([_score(r) for r in rows], sample))
    assert text.startswith("## Beside AIConfigurator")
    assert "Of the 40 rows pdsim scored" in text
    held = sum(r.split == "held-out" for r in rows if r.id in {
        e.row_id for e in A.read_predictions()[1] if e.ok})
    assert f"On the {held} held-out rows both score" in text


def test_headline_scores_the_held_out_rows_without_a_fit_twin_apart() -> None:
    held = [A.Pair(f"h{i}", "held-out", "p", 10.0 * (i + 1), 1.0, 50.0, 2.0)
            for i in range(3)]
    cmp = A.Comparison(held, [], [])
    assert "without a fit twin" not in A.headline(cmp)
    # h0 (pdsim TTFT 10%) has a twin: the others average 25%
    text = A.headline(cmp, frozenset({"h0"}))
    assert "On the 3 held-out rows both score, the mean TTFT error is 20.0% for pdsim" in text
    assert "(on the 2 of them without a fit twin: TTFT 25.0% and 50.0%" in text


# ------------------------------------------------------------------ the CLI


def test_cli_compares_without_aiconfigurator(tmp_path: Path, sample: list[S.SiliconRow],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps([_score(r) for r in A.suite_rows(sample)[:30]]))
    assert A.main([str(scores)]) == 0
    out = capsys.readouterr().out
    assert "| both scored | both |" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--predict"], "error: --aic-python: needed with --predict"),
    (["--predict", "--aic-python", sys.executable], "aiconfigurator is not installed"),
    (["--predict", "--aic-python", "/nonexistent/python"], "error: --aic-python: cannot run"),
    (["{tmp}/missing.json"], "cannot read it"),
    (["{tmp}/bad.json"], "not JSON"),
    (["{tmp}/scores.json", "--predictions", "{tmp}/none.csv"], "no such predictions file"),
])
def test_cli_bad_input_is_one_error_line(tmp_path: Path, argv: list[str], message: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    if "not installed" in message and importlib.util.find_spec("aiconfigurator"):
        pytest.skip("aiconfigurator is installed for this interpreter")
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "scores.json").write_text("[]")
    code = A.main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err


# ------------------------------------------------------------------ the worker


def test_worker_passes_the_row_fields_as_aiconfigurators_scoring_does(
        sample: list[S.SiliconRow]) -> None:
    agg = next(r for r in sample if r.fields["mode"] == "agg"
               and r.fields["model_path"] == "meta-llama/Llama-3.1-70B")
    args = W.estimate_args(agg.fields)
    assert args["model_path"] == "meta-llama/Meta-Llama-3.1-70B"
    assert args["batch_size"] == int(agg.fields["batch_size"])
    assert not any(k.startswith(("prefill_", "decode_")) for k in args)
    dis = next(r for r in sample if r.fields["mode"] == "disagg"
               and r.fields["prefill_num_workers"])
    args = W.estimate_args(dis.fields)
    assert args["prefill_num_workers"] == int(dis.fields["prefill_num_workers"])
    assert args["decode_tp_size"] == int(dis.fields["decode_tp_size"])
    assert "batch_size" not in args and "tp_size" not in args
    assert args["backend_version"] == (dis.fields["backend_version"] or None)
