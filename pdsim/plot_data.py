"""What the plots read, from memory or from disk: ``RunData`` of a ``Results`` or a
``Comparison``, or read back from what ``pdsim run --out`` / ``pdsim compare --out`` wrote
(``summary.json``, ``requests.csv`` or ``.parquet``, ``timeseries.csv``, ``compare.json``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pdsim.errors import InputFileError
from pdsim.timeseries import TimeSeries, read_timeseries, timeseries

if TYPE_CHECKING:
    from pdsim.results import Results

#: Per-request columns the latency and throughput plots read.
REQUEST_COLUMNS = ("status", "arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s",
                   "e2e_s", "output_tokens")
#: Headline metrics of a before/after comparison: (summary key, label, display scale,
#: unit, higher is better).
CHANGE_METRICS = (
    ("acceptance_length", "acceptance length", 1.0, "", True),
    ("output_throughput_tok_s", "output throughput", 1.0, " tok/s", True),
    ("mean_tpot_s", "mean TPOT", 1e3, " ms", False),
    ("p50_tpot_s", "p50 TPOT", 1e3, " ms", False),
    ("mean_itl_s", "mean ITL", 1e3, " ms", False),
    ("mean_ttft_s", "mean TTFT", 1e3, " ms", False),
    ("p99_ttft_s", "p99 TTFT", 1e3, " ms", False),
    ("mean_e2e_s", "mean E2E", 1.0, " s", False),
)
"""(summary key, label, display scale, unit, higher is better) of the before/after chart."""


# a transfer topology's port: node0/nic3/tx, node1/gpu2/nvlink/rx
_PORT_NAME = re.compile(r"(node\d+)/(nic|gpu)\d+/(?:nvlink/)?(tx|rx)")


def link_groups(names: Sequence[str]) -> dict[str, list[str]]:
    """Link tracks as the throughput plot draws them: ``{label: [track names]}``, in order
    of first appearance. A topology's ports sum per node, kind and direction (``node0
    NICs tx`` over ``node0/nic0/tx`` ... ``node0/nic7/tx``): one curve per NIC would be one
    legend entry per NIC (dozens on a few nodes), and what a node's NICs carry together
    is what a reader compares. P->D pair links (no topology) keep one curve each."""
    groups: dict[str, list[str]] = {}
    for name in names:
        m = _PORT_NAME.fullmatch(name)
        label = name if m is None else (
            f"{m.group(1)} {'NICs' if m.group(2) == 'nic' else 'NVLink'} {m.group(3)}")
        groups.setdefault(label, []).append(name)
    return groups


@dataclass(frozen=True)
class MetricChange:
    """One ``CHANGE_METRICS`` metric after the fix against before it."""

    label: str
    change_pct: float
    better: bool  # moved the right way (an unchanged metric is not better)
    shown: str  # "before -> after" in display units


def metric_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[MetricChange]:
    """The ``CHANGE_METRICS`` both summaries give finitely (and before is not 0)."""
    out = []
    for key, label, scale, unit, higher_better in CHANGE_METRICS:
        b, a = before.get(key), after.get(key)
        if b is None or a is None or not (math.isfinite(b) and math.isfinite(a)) or b == 0:
            continue
        change = (a / b - 1.0) * 100.0
        out.append(MetricChange(label, change, change > 0 if higher_better else change < 0,
                                f"{b * scale:.4g} -> {a * scale:.4g}{unit}"))
    return out


@dataclass(frozen=True)
class RunData:
    """What the plots need of one run: its summary, and (when known) its per-request
    columns (``REQUEST_COLUMNS``) and time series. Build it with ``run_data`` or
    ``read_run_dir``."""

    name: str
    summary: dict[str, Any]
    requests: dict[str, np.ndarray] | None = None
    series: TimeSeries | None = None


def run_data(res: Results, name: str | None = None) -> RunData:
    """A ``Results`` reduced to what the plots read (``timeseries(res)`` included)."""
    return RunData(name or res.config.name, res.summary.as_dict(), _request_columns(res.records),
                   timeseries(res))


def _request_columns(records: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    cols: dict[str, np.ndarray] = {
        "status": np.asarray([str(r["status"]) for r in records], dtype=object)}
    for k in REQUEST_COLUMNS[1:]:
        cols[k] = np.asarray([np.nan if r[k] is None else r[k] for r in records],
                             dtype=np.float64)
    return cols


def as_runs(data: Any) -> dict[str, RunData]:
    """Any accepted input as named runs, in order."""
    from pdsim.compare import Comparison
    from pdsim.results import Results

    if isinstance(data, RunData):
        return {data.name: data}
    if isinstance(data, Results):
        return {data.config.name: run_data(data)}
    if isinstance(data, Comparison):
        return {k: run_data(v, k) for k, v in data.variants.items()}
    if isinstance(data, Mapping):
        out = {}
        for k, v in data.items():
            name = str(k)
            if isinstance(v, RunData):
                out[name] = v if v.name == name else replace(v, name=name)
            else:
                out[name] = run_data(v, name)
        if not out:
            raise ValueError("nothing to plot: no runs given")
        return out
    raise TypeError(f"cannot plot a {type(data).__name__}: expected Results, Comparison, "
                    "RunData or a mapping of names to them")


def as_summaries(data: Any) -> dict[str, dict[str, Any]]:
    """Any accepted comparison input as its variants' summaries (JSON form), in order."""
    from pdsim.compare import Comparison

    if isinstance(data, Comparison):
        return {k: v.summary.as_dict() for k, v in data.variants.items()}
    if isinstance(data, Mapping) and "summaries" in data:
        return dict(data["summaries"])
    if isinstance(data, Mapping):
        return {k: (dict(v) if isinstance(v, Mapping) else v.summary.as_dict())
                for k, v in data.items()}
    raise TypeError(f"cannot compare a {type(data).__name__}")


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(str(path), None, f"cannot read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(str(path), exc.lineno, f"not valid JSON: {exc.msg}",
                             exc.colno) from None


def check_summary(summary: Any, where: str) -> dict[str, Any]:
    """A run's summary as read back from a file, checked before anything draws it: a
    mapping whose metrics are numbers (or null), lists of numbers or sections (mappings),
    and whose ``name`` is text; ``InputFileError`` naming the key otherwise."""
    if not isinstance(summary, dict):
        raise InputFileError(where, None, "a summary must be a JSON object of metrics")
    for key, value in summary.items():
        if key == "name":
            ok = value is None or isinstance(value, str)
        elif isinstance(value, list):
            ok = all(v is None or (isinstance(v, int | float) and not isinstance(v, bool))
                     for v in value)
        else:
            ok = value is None or isinstance(value, int | float | dict)
        if not ok:
            what = "text" if key == "name" else "a number, a list of numbers or null"
            raise InputFileError(where, None, f"{key}: {json.dumps(value)[:60]} is not what "
                                 f"pdsim writes there ({what})")
    return dict(summary)


def _num(v: Any) -> float:
    return math.nan if v is None or v == "" else float(v)


def read_requests(path: str | Path) -> dict[str, np.ndarray]:
    """``REQUEST_COLUMNS`` of a ``requests.csv`` or ``requests.parquet``."""
    p = Path(path)
    if p.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise InputFileError(str(p), None, "reading Parquet needs pyarrow") from None
        try:
            table = pq.read_table(p, columns=list(REQUEST_COLUMNS))
        except Exception as exc:  # pyarrow raises many types for a bad file
            raise InputFileError(str(p), None, f"cannot read Parquet: {exc}") from None
        rows = table.to_pylist()
        return _request_columns(rows)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(str(p), None, f"cannot read: {exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REQUEST_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputFileError(str(p), 1, f"missing column(s) {', '.join(missing)}")
    rows = []
    for line, row in enumerate(reader, start=2):
        try:
            rows.append({"status": row["status"],
                         **{k: _num(row[k]) for k in REQUEST_COLUMNS[1:]}})
        except (TypeError, ValueError) as exc:
            raise InputFileError(str(p), line, f"not a number: {exc}") from None
    return _request_columns(rows)


def read_run_dir(path: str | Path) -> RunData:
    """A folder written by ``pdsim run --out``: ``summary.json``, ``requests.csv`` (or
    ``requests.parquet``) and, if present, ``timeseries.csv``."""
    d = Path(path)
    doc = _read_json(d / "summary.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict):
        raise InputFileError(str(d / "summary.json"), None, "no 'summary' object: not "
                             "written by pdsim run")
    where = str(d / "summary.json")
    summary = check_summary(doc["summary"], where)
    summary.setdefault("name", doc.get("name"))
    check_summary({"name": summary["name"]}, where)
    requests = None
    for fname in ("requests.csv", "requests.parquet"):
        if (d / fname).is_file():
            requests = read_requests(d / fname)
            break
    series = read_timeseries(d / "timeseries.csv") if (d / "timeseries.csv").is_file() \
        else None
    return RunData(str(doc.get("name") or d.name), summary, requests, series)


def read_compare_json(path: str | Path) -> dict[str, RunData]:
    """The variants of a ``compare.json`` (``pdsim compare --out``): summaries only."""
    p = Path(path)
    doc = _read_json(p)
    if not isinstance(doc, dict) or not isinstance(doc.get("summaries"), dict):
        raise InputFileError(str(p), None, "no 'summaries' object: not written by "
                             "pdsim compare")
    return {str(k): RunData(str(k), check_summary(v, f"{p}: summaries.{k}"))
            for k, v in doc["summaries"].items()}
