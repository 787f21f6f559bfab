"""Writing results to disk: atomic files (temporary file, then rename), CSV and JSON.

Only the CLI calls these; ``simulate()`` never touches the file system.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename.

    A reader (or a crash) never sees a half-written file.
    """
    return write_atomic_chunks(path, [data])


def write_atomic_chunks(path: str | Path, chunks: Iterable[str | bytes]) -> Path:
    """``write_atomic`` of the concatenated ``chunks``, written as they come (a writer's
    memory is one chunk, not the whole file)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk if isinstance(chunk, bytes) else chunk.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN and infinities become null; numpy scalars become Python numbers."""
    if isinstance(obj, _Infinite):
        return float(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, Sequence) and not isinstance(obj, str | bytes):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        return _clean(obj.item())
    return obj


def to_json(obj: Any, *, infinite_keys: Iterable[str] = ()) -> str:
    """Deterministic JSON text (sorted keys are not used: insertion order is meaningful).

    NaN and infinities become null, except an infinite value of a top-level key in
    ``infinite_keys``: that is written as ``Infinity`` / ``-Infinity``, the extension
    Python's ``json`` (and so vLLM's result files) write and read."""
    keep = set(infinite_keys)
    if keep and isinstance(obj, Mapping):
        obj = {k: _Infinite(v) if k in keep and isinstance(v, float) and math.isinf(v)
               else v for k, v in obj.items()}
    cleaned = _clean(obj)
    if not keep:
        return json.dumps(cleaned, indent=2, allow_nan=False) + "\n"
    return json.dumps(cleaned, indent=2, allow_nan=True) + "\n"


class _Infinite(float):
    """An infinity ``_clean`` keeps (``to_json``'s ``infinite_keys``)."""


def write_json(path: str | Path, obj: Any, *, infinite_keys: Iterable[str] = ()) -> Path:
    return write_atomic(path, to_json(obj, infinite_keys=infinite_keys))


def records_csv(records: Sequence[dict[str, Any]], fields: Iterable[str]) -> str:
    """CSV text of flat records; list values are joined with ``;``."""
    cols = list(fields)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in records:
        row = []
        for c in cols:
            v = r.get(c)
            if isinstance(v, list | tuple):
                v = ";".join(str(x) for x in v)
            elif isinstance(v, float):
                v = "" if math.isnan(v) else repr(v)
            elif v is None:
                v = ""
            row.append(v)
        w.writerow(row)
    return buf.getvalue()


def write_parquet(path: str | Path, records: Sequence[dict[str, Any]],
                  fields: Iterable[str]) -> Path | None:
    """Write records as Parquet when pyarrow is installed; None otherwise."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    cols = list(fields)
    table = pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in records])
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    return write_atomic(path, buf.getvalue().to_pybytes())
