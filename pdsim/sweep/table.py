"""The sweep's table: one row per point (its settings, then its flat summary), written as
``sweep.csv`` (and ``sweep.parquet`` with pyarrow) in point order."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pdsim.sweep.points import SweepPoint

TABLE_CSV = "sweep.csv"
TABLE_PARQUET = "sweep.parquet"


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flatten(f"{prefix}.{i}", v, out)
    else:
        out[prefix] = value


def point_row(point: SweepPoint, summary_doc: Mapping[str, Any]) -> dict[str, Any]:
    """A table row: point index and id, its settings, the seed, then the flat summary
    (nested values as ``a.b`` columns, list items as ``a.0``)."""
    row: dict[str, Any] = {"point": point.index, "point_id": point.point_id}
    for k, v in point.params.items():
        row[k] = json.dumps(v) if isinstance(v, dict | list) else v
    row.setdefault("seed", summary_doc.get("seed"))
    _flatten("", summary_doc.get("summary", {}), row)
    return row


def table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every column, in the order first seen going through the rows in point order."""
    cols: dict[str, None] = {}
    for r in rows:
        for k in r:
            cols.setdefault(k, None)
    return list(cols)


def _parquet_rows(rows: Sequence[Mapping[str, Any]], cols: Sequence[str]
                  ) -> list[dict[str, Any]]:
    """One type per column: ints with floats become floats, anything else mixed, text."""
    fixed = [{c: r.get(c) for c in cols} for r in rows]
    for c in cols:
        kinds = {type(r[c]) for r in fixed if r[c] is not None}
        if kinds <= {int, float} and float in kinds:
            for r in fixed:
                if r[c] is not None:
                    r[c] = float(r[c])  # type: ignore[arg-type]
        elif len(kinds) > 1:
            for r in fixed:
                if r[c] is not None:
                    r[c] = str(r[c])
    return fixed


def write_table(out_dir: str | Path, rows: Sequence[Mapping[str, Any]]) -> list[Path]:
    """Write ``sweep.csv`` (and ``sweep.parquet`` with pyarrow) as a unit: beside the
    previous table, swapped in together and sealed by the folder's manifest (which
    readers check), so a killed rewrite never leaves a new CSV beside an old Parquet."""
    from pdsim._version import __version__
    from pdsim.output import records_csv, write_atomic, write_parquet
    from pdsim.run_folder import finish_folder, prepare_out_dir, staged_folder

    out = prepare_out_dir(out_dir)
    cols = table_columns(rows)
    with staged_folder(out) as stage:
        written = [write_atomic(stage / TABLE_CSV,
                                records_csv([dict(r) for r in rows], cols))]
        pq = write_parquet(stage / TABLE_PARQUET, _parquet_rows(rows, cols), cols)
        if pq is not None:
            written.append(pq)
        else:  # no pyarrow now: an older run's Parquet would be another table
            (out / TABLE_PARQUET).unlink(missing_ok=True)
        names = [p.name for p in written]
        finish_folder(stage, names, {"pdsim_version": __version__, "kind": "sweep"})
    return [out / name for name in names]
