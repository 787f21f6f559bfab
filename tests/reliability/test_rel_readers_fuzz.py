"""Hostile-input fuzz of the file readers (issue 26, item 5), beside
``test_rel_surfaces_fuzz`` (config.json, ``vllm serve`` lines, topology and pools,
summary.json and compare.json): deployment files, Prometheus scrapes, Mooncake traces,
``bench_result.json``, and what ``pdsim plot``, ``report`` and a sweep's resume read back
(requests.csv, timeseries.csv, sweep.csv, point.json, manifest.json). Each input either
gives a result or one ``PdsimError``; never another exception, and never more than
``BUDGET_S`` seconds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from rel_support import small
from test_rel_surfaces_fuzz import FUZZ, SCALARS, VALUES, _json_text, bounded

from pdsim.loader import load_config

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
REAL = ROOT / "examples" / "real"
# numbers and words a careless or hostile text file holds where a number belongs
TOKENS = st.sampled_from(["0", "-1", "1", "NaN", "nan", "+Inf", "-Inf", "1e400", "-1e400",
                          "1" + "0" * 400, "0x10", "abc", "", "1.5", "2.5e-3", "1_000",
                          "\u00e9", "\x00", "}", "{", '"', "9" * 30])


# ------------------------------------------------------------------ deployment files

DEPLOYMENT = DATA / "vllm_deployments" / "llama-3.1-8b-1p1d.yaml"
DEPLOY_KEYS = ["hf_config", "hardware", "prefill", "decode", "colocated", "extra"]
ENTRY_KEYS = ["command", "count", "hardware", "name", "extra"]


@FUZZ
@given(st.dictionaries(st.sampled_from(DEPLOY_KEYS), VALUES, max_size=2),
       st.sampled_from(["prefill", "decode"]),
       st.dictionaries(st.sampled_from(ENTRY_KEYS), VALUES, max_size=2))
def test_deployment_files_import_or_fail_cleanly(tmp_path: Path, top: dict[str, Any],
                                                 role: str, entry: dict[str, Any]) -> None:
    from typer.testing import CliRunner

    from pdsim.cli import app

    data = yaml.safe_load(DEPLOYMENT.read_text())
    data["hf_config"] = str(DATA / "hf_configs" / "Llama-3.1-8B.config.json")
    data[role] = {**data[role], **entry}
    data.update(top)
    dep = tmp_path / "deployment.yaml"
    dep.write_text(_json_text(data))  # JSON is YAML: NaN and 1e400 reach the reader
    with bounded(data):
        res = CliRunner().invoke(app, ["import-vllm", "--deployment", str(dep), "--out",
                                       str(tmp_path / "o")])
        assert res.exit_code in (0, 2), (res.exit_code, res.output, data)
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception


# ------------------------------------------------------------------ Prometheus scrapes

SCRAPE = (REAL / "metrics_after.txt").read_text().splitlines()


def _mutate_lines(lines: list[str], edits: list[tuple[int, str, str]]) -> str:
    out = list(lines)
    for pos, how, token in edits:
        i = pos % max(1, len(out))
        if how == "value" and out and " " in out[i]:
            out[i] = out[i].rsplit(" ", 1)[0] + " " + token
        elif how == "drop" and out:
            del out[i]
        elif how == "repeat" and out:
            out.insert(i, out[i])
        else:
            out.insert(i, token)
    return "\n".join(out) + "\n"


EDITS = st.lists(st.tuples(st.integers(0, 10_000),
                           st.sampled_from(["value", "value", "drop", "repeat", "insert"]),
                           TOKENS), min_size=1, max_size=4)


@FUZZ
@given(EDITS, st.booleans())
def test_metrics_scrapes_import_or_fail_cleanly(tmp_path: Path,
                                                edits: list[tuple[int, str, str]],
                                                two: bool) -> None:
    from pdsim.realdata.prometheus import import_metrics_report

    after = tmp_path / "after.txt"
    after.write_text(_mutate_lines(SCRAPE, edits), encoding="utf-8")
    paths = [str(REAL / "metrics_before.txt"), str(after)] if two else [str(after)]
    with bounded(edits):
        import_metrics_report(paths, {"model_name": "synthetic/mtp3-a"})


# ------------------------------------------------------------------ Mooncake traces

TRACE_KEYS = ["timestamp", "input_length", "output_length", "hash_ids"]


@FUZZ
@given(st.lists(st.one_of(
    st.dictionaries(st.sampled_from(TRACE_KEYS), VALUES, min_size=3, max_size=4),
    st.fixed_dictionaries({"timestamp": SCALARS, "input_length": SCALARS,
                           "output_length": SCALARS}),
    TOKENS), min_size=1, max_size=4))
def test_mooncake_traces_read_or_fail_cleanly(tmp_path: Path, lines: list[Any]) -> None:
    from pdsim.workload.traces import read_mooncake

    trace = tmp_path / "trace.jsonl"
    good = {"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}
    text = [json.dumps(good)] + [x if isinstance(x, str) else _json_text(x) for x in lines]
    trace.write_text("\n".join(text) + "\n", encoding="utf-8")
    with bounded(lines):
        read_mooncake(trace)


# ------------------------------------------------------------------ bench_result.json

BENCH = json.loads((REAL / "bench_result.json").read_text())


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(BENCH)), VALUES, min_size=1, max_size=3))
def test_bench_results_read_or_fail_cleanly(tmp_path: Path, patch: dict[str, Any]) -> None:
    from pdsim.realdata.bench_metrics import summary_metrics
    from pdsim.realdata.bench_result import read_bench_result

    f = tmp_path / "bench_result.json"
    f.write_text(_json_text({**BENCH, **patch}))
    with bounded(patch):
        summary_metrics(read_bench_result(f))


# ------------------------------------------------- result folders read back

@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pdsim.sweep import expand_points, run_sweep

    out = tmp_path_factory.mktemp("sweep") / "o"
    run_sweep(load_config(small({"workload": {"num_requests": 5}})),
              expand_points([("seed", [1, 2])]), out)
    return out


def _copy(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


FOLDER_FILES = ["sweep.csv", "manifest.json", "point.json", "point-manifest"]


@FUZZ
@given(st.sampled_from(FOLDER_FILES), EDITS, VALUES)
def test_sweep_folders_read_or_fail_cleanly(sweep_dir: Path, tmp_path: Path, which: str,
                                            edits: list[tuple[int, str, str]],
                                            value: Any) -> None:
    """What ``pdsim plot`` and ``report`` read of a sweep folder, and what its resume
    reads (each point's ``point.json`` and manifest)."""
    from pdsim.run_folder import check_sealed
    from pdsim.sweep import Sweep
    from pdsim.sweep_figures import read_sweep_dir

    d = _copy(sweep_dir, tmp_path / "s")
    point = next((d / "points").iterdir())
    if which == "sweep.csv":
        f = d / "sweep.csv"
        f.write_text(_mutate_lines(f.read_text().splitlines(), edits))
    else:
        f = {"manifest.json": d / "manifest.json", "point.json": point / "point.json",
             "point-manifest": point / "manifest.json"}[which]
        doc = json.loads(f.read_text())
        key = sorted(doc)[edits[0][0] % len(doc)]
        f.write_text(_json_text({**doc, key: value}))
    with bounded((which, edits, value)):
        check_sealed(d, "sweep.csv")
        read_sweep_dir(d)
    sweep = Sweep(load_config(small({"workload": {"num_requests": 5}})),
                  [{"seed": 1}, {"seed": 2}])
    with bounded(("resume", which, edits, value)):
        for p in sweep.points:
            sweep.is_done(d, p)


@FUZZ
@given(st.sampled_from(["requests.csv", "timeseries.csv", "manifest.json"]), EDITS,
       VALUES, st.booleans())
def test_run_folders_read_or_fail_cleanly(run_dir: Path, tmp_path: Path, which: str,
                                          edits: list[tuple[int, str, str]], value: Any,
                                          reseal: bool) -> None:
    """What ``pdsim plot`` and ``report`` read of a run folder; ``reseal``: the manifest
    rewritten over the edited files, so the readers behind its check are reached."""
    from pdsim.plot_data import read_run_dir
    from pdsim.run_folder import check_folder, finish_folder

    d = _copy(run_dir, tmp_path / "r")
    (d / "requests.parquet").unlink(missing_ok=True)  # so requests.csv is what is read
    f = d / which
    if which == "manifest.json":
        doc = json.loads(f.read_text())
        f.write_text(_json_text({**doc, sorted(doc)[edits[0][0] % len(doc)]: value}))
    else:
        f.write_text(_mutate_lines(f.read_text().splitlines(), edits))
        if reseal:
            manifest = json.loads((d / "manifest.json").read_text())
            files = [n for n in manifest.pop("files") if (d / n).is_file()]
            finish_folder(d, files, manifest)
    with bounded((which, edits, value)):
        check_folder(d, "summary.json")
        read_run_dir(d)


def test_the_reader_fuzzers_reach_their_targets(tmp_path: Path, sweep_dir: Path,
                                                run_dir: Path) -> None:
    """Unmodified, every input of this file reads: the fuzz starts from working files."""
    from pdsim.plot_data import read_run_dir
    from pdsim.realdata.bench_result import read_bench_result
    from pdsim.realdata.prometheus import import_metrics_report
    from pdsim.run_folder import check_folder
    from pdsim.sweep_figures import read_sweep_dir
    from pdsim.workload.traces import read_mooncake

    stats, _ = import_metrics_report([str(REAL / "metrics_before.txt"),
                                      str(REAL / "metrics_after.txt")],
                                     {"model_name": "synthetic/mtp3-a"})
    assert stats is not None
    # the mutation helper with an edit that changes nothing reads as the file does
    plain = tmp_path / "after.txt"
    plain.write_text(_mutate_lines(SCRAPE, [(0, "value", SCRAPE[0].rsplit(" ", 1)[1])]))
    assert plain.read_text() == "\n".join(SCRAPE) + "\n"
    assert import_metrics_report([str(plain)], {"model_name": "synthetic/mtp3-a"})
    assert read_bench_result(REAL / "bench_result.json").completed == BENCH["completed"]
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 8}\n')
    assert len(read_mooncake(trace).time_s) == 1
    assert check_folder(sweep_dir, "sweep.csv") and read_sweep_dir(sweep_dir)
    assert check_folder(run_dir, "summary.json") and read_run_dir(run_dir).name == "small"
