"""pdsim beside AIConfigurator on the silicon sample's rows that pdsim's suite scores.

    python -m validation.silicon --sample 0 --workers 1 --json SCORES.json   # pdsim
    python -m validation.aic_side_by_side SCORES.json                        # the comparison
    python -m venv AIC_VENV && AIC_VENV/bin/pip install aiconfigurator==0.12.0
    python -m validation.aic_side_by_side --predict --aic-python AIC_VENV/bin/python --jobs 2

The comparison reads AIConfigurator's committed estimates (``PREDICTIONS``,
validation/data/aic-side-by-side.csv: one row per expressible suite row, with the
AIConfigurator version, date and command in its header) and a pdsim scores JSON
(``python -m validation.silicon --json``), keeps the rows both score, and prints the mean
and median absolute percentage error of the mean TTFT and TPOT of each, per split (the
fixed fit/held-out split of ``validation.silicon.split_of``) and per partition (backend x
mode x system). Rows AIConfigurator cannot estimate are counted by reason and listed. It
needs no aiconfigurator.

``--predict`` re-runs AIConfigurator's own estimate on every expressible row (the suite's
``plan_row``) through ``validation/aic_estimate.py`` under ``--aic-python``, an interpreter
of a separate virtual environment with aiconfigurator installed from PyPI (never a pdsim
dependency), and rewrites the CSV. Nothing here is fitted or tuned: AIConfigurator runs as
shipped, on the row's own fields (``aic_estimate`` says how, and the two departures this
machine forces).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from validation.silicon import (
    CSV_PATH,
    PARTITION_MIN_ROWS,
    NotExpressible,
    SiliconRow,
    fit_twins,
    load_sample,
    plan_row,
    recipe_layout_fields,
    split_of,
)

HERE = Path(__file__).resolve().parent
PREDICTIONS = HERE / "data" / "aic-side-by-side.csv"
WORKER = HERE / "aic_estimate.py"
PREDICT_COMMAND = ("python -m validation.aic_side_by_side --predict --aic-python "
                   "AIC_VENV/bin/python")
COMPARE_COMMAND = "python -m validation.aic_side_by_side SCORES.json"
AIC_PACKAGES = ("aiconfigurator", "aiconfigurator-core")
AIC_ENV = {"AIC_ALLOW_UNLISTED_VERSIONS": "1"}
"""Set for the worker: aiconfigurator's escape for legacy suites that query raw backend
versions, as the sample's rows do (validation/aic_estimate.py)."""

COLUMNS = ("id", "split", "partition", "model_path", "aic_model_path", "backend_version",
           "aic_backend_version", "aic_ttft_ms", "aic_tpot_ms", "aic_error")


class InputError(Exception):
    """Bad input: ``error: <file or field>: <what>``."""


# ------------------------------------------------------------------ the estimates


@dataclass(frozen=True)
class Estimate:
    """AIConfigurator's estimate of one row (``ttft_ms``/``tpot_ms`` NaN where it could
    not estimate; ``error`` says why)."""

    row_id: str
    split: str
    partition: str
    ttft_ms: float
    tpot_ms: float
    error: str
    database: str = ""
    """The backend perf database used (``default``: aiconfigurator's own default)."""
    aliased: bool = False
    """Whether the model was estimated under another checkpoint's bundled config."""

    @property
    def ok(self) -> bool:
        return not self.error and math.isfinite(self.ttft_ms) and math.isfinite(self.tpot_ms)


def _float(text: str, where: str) -> float:
    if text == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{where}: not a number: {text!r}") from None


def read_predictions(path: Path = PREDICTIONS) -> tuple[dict[str, str], list[Estimate]]:
    """The header (``# key: value`` lines before the table) and the estimates of a
    predictions CSV."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    meta: dict[str, str] = {}
    for ln in lines:
        if ln.startswith("# ") and ": " in ln:
            key, value = ln[2:].split(": ", 1)
            meta[key] = value
    reader = csv.DictReader(ln for ln in lines if not ln.startswith("#"))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"{path}: missing columns {', '.join(missing)}")
    out = []
    for n, rec in enumerate(reader, start=1):
        where = f"{path}: row {n}"
        out.append(Estimate(rec["id"], rec["split"], rec["partition"],
                            _float(rec["aic_ttft_ms"], where),
                            _float(rec["aic_tpot_ms"], where), rec["aic_error"],
                            rec["aic_backend_version"],
                            rec["aic_model_path"] != rec["model_path"]))
    return meta, out


def suite_rows(rows: Sequence[SiliconRow]) -> list[SiliconRow]:
    """The rows pdsim's suite scores (every expressible row), in id order."""
    out = []
    for r in rows:
        try:
            plan_row(r)
        except NotExpressible:
            continue
        out.append(r)
    return sorted(out, key=lambda r: r.id)


def _aic_versions(python: str) -> str:
    code = ("import importlib.metadata as m; print(', '.join(p + ' ' + m.version(p) for p "
            f"in {AIC_PACKAGES!r}))")
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True,
                              check=False)
    except OSError as exc:
        raise InputError(f"--aic-python: cannot run {python} ({exc.strerror or exc})") from None
    if done.returncode != 0:
        raise InputError(f"--aic-python: aiconfigurator is not installed for {python} "
                         f"(pip install aiconfigurator in a separate virtual environment)")
    return done.stdout.strip()


def predict(rows: Sequence[SiliconRow], python: str, jobs: int = 1) -> list[dict[str, Any]]:
    """AIConfigurator's estimate of every row, by ``jobs`` workers under ``python`` (row i
    to worker i mod jobs; each worker estimates identical arguments once)."""
    jobs = max(1, min(jobs, len(rows)))
    by_id: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        feeds = [stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
                 for _ in range(jobs)]
        outs = [stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
                for _ in range(jobs)]
        # stderr to files, not pipes: a worker blocked on a full pipe would wait for the
        # workers before it to finish (AIConfigurator logs freely)
        errs = [stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
                for _ in range(jobs)]
        for i, r in enumerate(rows):
            feeds[i % jobs].write(json.dumps(r.fields) + "\n")
        procs = []
        for feed, out, err_file in zip(feeds, outs, errs, strict=True):
            feed.seek(0)
            procs.append(subprocess.Popen([python, str(WORKER)], stdin=feed, stdout=out,
                                          stderr=err_file, text=True,
                                          env={**os.environ, **AIC_ENV}))
        for proc, out, err_file in zip(procs, outs, errs, strict=True):
            proc.wait()
            if proc.returncode != 0:
                err_file.seek(0)
                tail = err_file.read().strip().splitlines()[-1:] or ["no output"]
                raise InputError(f"--aic-python: the estimate failed ({tail[0]})")
            out.seek(0)
            by_id.update((d["id"], d) for d in map(json.loads, out.read().splitlines()))
    if set(by_id) != {r.id for r in rows}:
        raise InputError("--aic-python: the workers did not answer every row")
    return [by_id[r.id] for r in rows]


def prediction_records(rows: Sequence[SiliconRow],
                       answers: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The CSV records of the worker's answers, one per row (same order)."""
    out = []
    for r, a in zip(rows, answers, strict=True):
        ttft, tpot = a["aic_ttft_ms"], a["aic_tpot_ms"]
        out.append({
            "id": r.id, "split": r.split, "partition": r.partition,
            "model_path": r.fields["model_path"], "aic_model_path": a["aic_model_path"],
            "backend_version": r.fields["backend_version"],
            "aic_backend_version": a["aic_backend_version"],
            "aic_ttft_ms": "" if ttft is None else f"{ttft:.4f}",
            "aic_tpot_ms": "" if tpot is None else f"{tpot:.4f}",
            "aic_error": a["aic_error"],
        })
    return out


def write_predictions(path: Path, records: Sequence[dict[str, str]], versions: str,
                      date: str) -> None:
    meta = {
        "what": ("AIConfigurator's own estimates of the silicon-sample rows pdsim's suite "
                 "scores (validation/aic_side_by_side.py; the sample: "
                 "validation/data/aic-silicon/, Apache-2.0)"),
        "aiconfigurator": f"{versions} (PyPI)",
        "estimated": date,
        "command": f"{PREDICT_COMMAND} (the worker under AIC_ALLOW_UNLISTED_VERSIONS=1)",
        "columns": ("aic_model_path is the model path estimated (an alias where "
                    "aiconfigurator bundles no config.json for the row's); "
                    "aic_backend_version the perf database used ('default' where the "
                    "row's version ships none); aic_error why it could not estimate"),
    }
    with path.open("w", newline="", encoding="utf-8") as f:
        f.writelines(f"# {k}: {v}\n" for k, v in meta.items())
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(records)


# ------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class PdsimScore:
    """The part of a pdsim score the comparison reads (from ``validation.silicon.Score``
    or its JSON)."""

    row_id: str
    split: str
    partition: str
    ttft_ape: float
    tpot_ape: float


def pdsim_scores(items: Iterable[Any]) -> list[PdsimScore]:
    """pdsim's scored rows that finished (``Score`` objects or their JSON dicts)."""
    out = []
    for s in items:
        d = s if isinstance(s, dict) else {
            "row_id": s.row_id, "split": s.split, "partition": s.partition,
            "error": s.error, "ttft_ape": s.ttft_ape, "tpot_ape": s.tpot_ape}
        t1, t2 = float(d["ttft_ape"]), float(d["tpot_ape"])
        if d.get("error") or not (math.isfinite(t1) and math.isfinite(t2)):
            continue
        out.append(PdsimScore(d["row_id"], d["split"], d["partition"], t1, t2))
    return out


def read_scores(path: Path) -> list[PdsimScore]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: not a list of scores (python -m validation.silicon "
                         "--json)")
    keys = ("row_id", "split", "partition", "ttft_ape", "tpot_ape")
    for n, d in enumerate(data):
        if not isinstance(d, dict) or any(k not in d for k in keys):
            raise InputError(f"{path}: score {n}: needs {', '.join(keys)}")
    return pdsim_scores(data)


@dataclass(frozen=True)
class Pair:
    """One row both score: the absolute percentage errors of each."""

    row_id: str
    split: str
    partition: str
    pdsim_ttft_ape: float
    pdsim_tpot_ape: float
    aic_ttft_ape: float
    aic_tpot_ape: float


@dataclass(frozen=True)
class Comparison:
    pairs: list[Pair]
    aic_failed: list[Estimate]
    """Rows pdsim scored that AIConfigurator could not estimate."""
    not_estimated: list[str]
    """Rows pdsim scored that the predictions file does not hold."""


def compare(scores: Sequence[PdsimScore], estimates: Sequence[Estimate],
            measured: dict[str, tuple[float, float]]) -> Comparison:
    """The rows pdsim scored, paired with AIConfigurator's estimates of them. ``measured``:
    each row's measured mean TTFT and TPOT (ms). A row's split is checked against the
    fixed rule on both sides."""
    by_id = {e.row_id: e for e in estimates}
    pairs: list[Pair] = []
    failed: list[Estimate] = []
    missing: list[str] = []
    for s in sorted(scores, key=lambda s: s.row_id):
        if s.split != split_of(s.row_id):
            raise InputError(f"scores: {s.row_id}: split {s.split!r} is not the fixed "
                             f"split's {split_of(s.row_id)!r}")
        e = by_id.get(s.row_id)
        if e is None:
            missing.append(s.row_id)
            continue
        if e.split != s.split:
            raise InputError(f"predictions: {e.row_id}: split {e.split!r} is not the fixed "
                             f"split's {s.split!r}")
        if not e.ok:
            failed.append(e)
            continue
        ttft, tpot = measured[s.row_id]
        pairs.append(Pair(s.row_id, s.split, s.partition, s.ttft_ape, s.tpot_ape,
                          abs(e.ttft_ms - ttft) / ttft * 100, abs(e.tpot_ms - tpot) / tpot * 100))
    return Comparison(pairs, failed, missing)


def measured_ms(rows: Iterable[SiliconRow]) -> dict[str, tuple[float, float]]:
    return {r.id: (r.ttft_ms, r.tpot_ms) for r in rows}


def _cells(pairs: Sequence[Pair]) -> str:
    def mm(xs: list[float]) -> str:
        return f"{statistics.fmean(xs):.1f}% | {statistics.median(xs):.1f}%"

    return (f"{len(pairs)} | {mm([p.pdsim_ttft_ape for p in pairs])} | "
            f"{mm([p.aic_ttft_ape for p in pairs])} | {mm([p.pdsim_tpot_ape for p in pairs])}"
            f" | {mm([p.aic_tpot_ape for p in pairs])}")


HEAD = ("| {what} | split | rows | pdsim TTFT mean | median | AIC TTFT mean | median | "
        "pdsim TPOT mean | median | AIC TPOT mean | median |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
SPLITS = ("fit", "held-out")


ERROR_KINDS: tuple[tuple[str, str], ...] = (
    ("MoE data missing", "no MoE perf data for the row's quantisation and parallelism"),
    ("Cross-node EP requires DeepEP", "cross-node expert parallelism without DeepEP "
                                      "all-to-all data"),
    ("Failed to download", "no bundled config.json and HuggingFace not reachable"),
    ("OOM:", "out of memory: the model does not fit at the row's parallelism"),
)
"""AIConfigurator's errors, by a phrase of their text, as the report groups them."""


def _short(error: str) -> str:
    """An error's kind, without the row's detail (model, sizes, paths)."""
    kind, _, text = error.partition(": ")
    for phrase, name in ERROR_KINDS:
        if phrase in text:
            return f"{name}, {kind}"
    return f"{text[:80]}, {kind}"


def failure_kinds(failed: Sequence[Estimate]) -> list[tuple[str, int]]:
    """AIConfigurator's errors by kind, most frequent first."""
    counts = Counter(_short(e.error) for e in failed)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def tables(cmp: Comparison) -> list[str]:
    """The comparison's markdown tables: per split, then per partition."""
    lines = [HEAD.format(what="compared")]
    for split in SPLITS:
        sel = [p for p in cmp.pairs if p.split == split]
        if sel:
            lines.append(f"| both scored | {split} | {_cells(sel)} |")
    if cmp.pairs:
        lines.append(f"| both scored | both | {_cells(cmp.pairs)} |")
    lines += ["", f"By partition (**bold** counts: at least {PARTITION_MIN_ROWS} rows "
              "in the split):", "", HEAD.format(what="partition")]
    for part in sorted({p.partition for p in cmp.pairs}):
        for split in SPLITS:
            sel = [p for p in cmp.pairs if p.partition == part and p.split == split]
            if not sel:
                continue
            n, rest = _cells(sel).split(" | ", 1)
            n = f"**{n}**" if len(sel) >= PARTITION_MIN_ROWS else n
            lines.append(f"| {part} | {split} | {n} | {rest} |")
    return lines


def coverage(cmp: Comparison) -> str:
    """Which rows are compared, and why the others are not."""
    n = len(cmp.pairs) + len(cmp.aic_failed) + len(cmp.not_estimated)
    text = (f"Of the {n} rows pdsim scored, AIConfigurator estimates {len(cmp.pairs)}, and "
            "the comparison is restricted to those")
    if cmp.aic_failed:
        text += (f"; it cannot estimate {len(cmp.aic_failed)} (its own errors, by kind: "
                 + "; ".join(f"{v}: {k}" for k, v in failure_kinds(cmp.aic_failed)) + ")")
    if cmp.not_estimated:
        text += f"; {len(cmp.not_estimated)} are not in the predictions file"
    return text + "."


def _mean(xs: Iterable[float]) -> str:
    vals = list(xs)
    return f"{statistics.fmean(vals):.1f}%" if vals else "-"


def headline(cmp: Comparison, twins: frozenset[str] = frozenset()) -> str:
    """Both tools' mean errors on the held-out rows both score (and on those of them
    without a fit twin, ``validation.silicon.fit_twins``), beside issue 25's quote."""
    held = [p for p in cmp.pairs if p.split == "held-out"]
    alone = [p for p in held if p.row_id not in twins]
    text = (f"On the {len(held)} held-out rows both score, the mean TTFT error is "
            f"{_mean(p.pdsim_ttft_ape for p in held)} for pdsim and "
            f"{_mean(p.aic_ttft_ape for p in held)} for AIConfigurator, the mean TPOT error "
            f"{_mean(p.pdsim_tpot_ape for p in held)} and "
            f"{_mean(p.aic_tpot_ape for p in held)}")
    if len(alone) < len(held):
        text += (f" (on the {len(alone)} of them without a fit twin: TTFT "
                 f"{_mean(p.pdsim_ttft_ape for p in alone)} and "
                 f"{_mean(p.aic_ttft_ape for p in alone)}, TPOT "
                 f"{_mean(p.pdsim_tpot_ape for p in alone)} and "
                 f"{_mean(p.aic_tpot_ape for p in alone)})")
    return (text + f"; on all {len(cmp.pairs)} rows both score "
            f"AIConfigurator's are {_mean(p.aic_ttft_ape for p in cmp.pairs)} (TTFT) and "
            f"{_mean(p.aic_tpot_ape for p in cmp.pairs)} (TPOT), where issue 25 quoted 56% "
            "and 25%.")


def doc_section(scores: Iterable[Any], rows: Sequence[SiliconRow],
                predictions: Path = PREDICTIONS) -> list[str]:
    """docs/validation-silicon.md's "Beside AIConfigurator" section for pdsim's ``scores``
    (``Score`` objects) and the committed estimates (pure: same inputs, same text)."""
    meta, estimates = read_predictions(predictions)
    cmp = compare(pdsim_scores(scores), estimates, measured_ms(rows))
    ok = [e for e in estimates if e.ok]
    return [
        "## Beside AIConfigurator",
        "",
        ("AIConfigurator's own estimates of the suite's rows are committed in "
         f"`validation/data/{PREDICTIONS.name}`: {meta.get('aiconfigurator', '?')}, "
         f"estimated {meta.get('estimated', '?')} by `validation/aic_side_by_side.py "
         "--predict`, which runs `validation/aic_estimate.py` in a separate virtual "
         "environment (aiconfigurator is no pdsim dependency). Each row is estimated as "
         "AIConfigurator scores the sample itself "
         "(`tools/accuracy_regression_testing/predict_silicon_sample.py` at the sample's "
         "commit 095f58a): `cli_estimate` on the row's model, system, mode, backend and "
         "version, ISL/OSL, GEMM and MoE quant modes and its batch and parallel fields, a "
         "backend version without a perf database retried with the default one. 0.12.0 is "
         "the release nearest that commit that installs from PyPI (0.11.0, 80 commits "
         "before it, needs an aiconfigurator-core 0.11.0 that PyPI holds only as a "
         "placeholder); it ships the same silicon_sample.csv byte for byte, and one perf "
         f"database per system and backend, which {sum(e.database == 'default' for e in ok)}"
         f" of the {len(ok)} estimated rows use. Forced here, and recorded per row: "
         f"{sum(e.aliased for e in estimates)} rows of Llama-3.1-70B and "
         "Llama-3.1-8B-Instruct, whose config.json AIConfigurator fetches from HuggingFace "
         "(not reachable here), are estimated with its bundled Meta-Llama-3.1-70B (the "
         "same repository before its rename) and Meta-Llama-3.1-8B (the same "
         "architecture); checkpoints whose bundled twin differs in quantisation are not "
         "aliased. The estimates run with `AIC_ALLOW_UNLISTED_VERSIONS=1`, "
         "AIConfigurator's escape for suites that query raw backend versions, as 095f58a "
         "did (its YAML metadata parsed once per file, which changes no value: 90 rows "
         "estimated with and without it agree to the last digit). Nothing is fitted or "
         "tuned. "
         f"`{COMPARE_COMMAND}` prints this comparison for any scores JSON."),
        "",
        headline(cmp, fit_twins(rows)),
        "",
        " ".join(filter(None, (coverage(cmp), layouts_note(cmp, rows)))),
        "",
        *tables(cmp),
    ]


def layouts_note(cmp: Comparison, rows: Sequence[SiliconRow]) -> str:
    """How many compared rows pdsim runs at their recipe's layout where AIConfigurator, as
    its own scoring of the sample does, takes the layout the row records
    (``validation.silicon.recipe_layout_fields``), and both tools' held-out TPOT on the
    others."""
    rewritten = {r.id for r in rows if recipe_layout_fields(r) is not r.fields}
    moved = [p for p in cmp.pairs if p.row_id in rewritten]
    same = [p for p in cmp.pairs if p.split == "held-out" and p.row_id not in rewritten]
    if not moved:
        return ""
    return (f"{len(moved)} of the compared rows pdsim runs at their recipe's layout, where "
            "the export multiplied it out (docs/validation-silicon.md, \"How a row is "
            "run\"), while AIConfigurator, as its own scoring of the sample does, takes the "
            f"layout the row records; on the {len(same)} held-out rows whose layout both "
            f"read alike the mean TPOT error is {_mean(p.pdsim_tpot_ape for p in same)} for "
            f"pdsim and {_mean(p.aic_tpot_ape for p in same)} for AIConfigurator, the mean "
            f"TTFT error {_mean(p.pdsim_ttft_ape for p in same)} and "
            f"{_mean(p.aic_ttft_ape for p in same)}.")


# ---------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation.aic_side_by_side",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scores", nargs="?", type=Path,
                    help="pdsim scores JSON (python -m validation.silicon --json)")
    ap.add_argument("--predictions", type=Path, default=PREDICTIONS,
                    help="AIConfigurator's estimates (default: the committed CSV)")
    ap.add_argument("--predict", action="store_true",
                    help="re-estimate every suite row with AIConfigurator and rewrite "
                         "--predictions")
    ap.add_argument("--aic-python", help="python of a virtual environment with "
                                         "aiconfigurator installed (for --predict)")
    ap.add_argument("--jobs", type=int, default=1, help="estimating processes (--predict)")
    ap.add_argument("--csv", type=Path, default=CSV_PATH, help="the silicon sample")
    args = ap.parse_args(argv)
    try:
        rows = load_sample(args.csv)
        if args.predict:
            if not args.aic_python:
                raise InputError("--aic-python: needed with --predict (an interpreter "
                                 "with aiconfigurator installed)")
            versions = _aic_versions(args.aic_python)
            chosen = suite_rows(rows)
            records = prediction_records(chosen, predict(chosen, args.aic_python, args.jobs))
            date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
            write_predictions(args.predictions, records, versions, date)
            print(f"wrote {args.predictions}: {len(records)} rows, "
                  f"{sum(not r['aic_error'] for r in records)} estimated")
        if args.scores is None:
            if not args.predict:
                ap.error("give a scores JSON (python -m validation.silicon --json) or "
                         "--predict")
            return 0
        if not args.predictions.exists():
            raise InputError(f"{args.predictions}: no such predictions file (run with "
                             "--predict --aic-python PY, aiconfigurator installed there)")
        meta, estimates = read_predictions(args.predictions)
        cmp = compare(read_scores(args.scores), estimates, measured_ms(rows))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"AIConfigurator: {meta.get('aiconfigurator', '?')}, estimated "
          f"{meta.get('estimated', '?')} ({args.predictions})")
    print(headline(cmp, fit_twins(rows)))
    print(" ".join(filter(None, (coverage(cmp), layouts_note(cmp, rows)))))
    print()
    print("\n".join(tables(cmp)))
    if cmp.aic_failed:
        print()
        print("Rows AIConfigurator cannot estimate:")
        for e in cmp.aic_failed:
            print(f"  {e.row_id} ({e.split}): {e.error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
