"""Parameter sweeps: a grid of config variants, each a full simulation, in one table.

A sweep is a base config plus a list of *points*, each an ordered mapping of dotted config
keys to values (``{"workload.arrivals.rate_per_s": 4.0}``). Points come from a cartesian
grid (``key=v1,v2`` or ``key=start:stop:step``), from an explicit list, or both (every
explicit point crossed with the grid). Every point keeps the base seed unless the grid
sets ``seed``, so all points draw the same arrivals, lengths and acceptance uniforms: the
comparisons are paired.

Caching: a point's id is a hash of its resolved config, the pdsim version and the seed.
With an output folder, point ``i`` lives in ``OUT/points/<id>/``; its ``summary.json`` is
written last, so a point is done iff that file exists, and a rerun skips done points. The
table (``OUT/sweep.csv``, ``OUT/sweep.parquet`` with pyarrow) lists points in point order
and is built from the stored summaries, so its bytes do not depend on the backend, the
number of workers or the order in which points finished.

Backends: ``local`` (one process per worker, ``workers=1`` runs inline) and ``dask``
(``dask.distributed``: a scheduler address, or a ``LocalCluster`` when none is given).
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

import yaml

from pdsim.config import SimConfig
from pdsim.errors import ConfigError, InputFileError, PdsimError
from pdsim.loader import config_from_dict, parse_override, parse_yaml, read_yaml

ProgressFn = Callable[[int, int], None]
Backend = Literal["local", "dask"]
Point = dict[str, Any]

MAX_RANGE_VALUES = 10_000
POINTS_DIR = "points"
SUMMARY_FILE = "summary.json"
POINT_FILE = "point.json"
TABLE_CSV = "sweep.csv"
TABLE_PARQUET = "sweep.parquet"
SWEEP_FILE_KEYS = ("base_overrides", "grid", "points")


class SweepError(PdsimError):
    """A sweep could not run (a backend problem, a point that raised)."""


# --------------------------------------------------------------------- parsing

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"^\s*({_NUMBER})\s*:\s*({_NUMBER})\s*:\s*({_NUMBER})\s*$")


def parse_range(text: str) -> list[int | float] | None:
    """``start:stop:step`` as its values, stop included within 1e-9 steps; None if not one.

    Integers when all three are integers, floats otherwise. Decimal arithmetic keeps
    ``0.5:0.95:0.05`` at ``0.55``, not ``0.5500000000000002``.
    """
    m = _RANGE.match(text)
    if m is None:
        return None
    try:
        start, stop, step = (Decimal(g) for g in m.groups())
    except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
        return None
    if step == 0:
        raise ConfigError(text, "a range step must not be zero")
    span = (stop - start) / step
    if span < -Decimal("1e-9"):
        raise ConfigError(text, "the range is empty: the step's sign must lead from start "
                                "to stop")
    count = math.floor(span + Decimal("1e-9")) + 1
    if count > MAX_RANGE_VALUES:
        raise ConfigError(text, f"the range has {count} values; at most {MAX_RANGE_VALUES}")
    integral = all(re.fullmatch(r"[-+]?\d+", g) for g in m.groups())
    values = [start + i * step for i in range(count)]
    return [int(v) for v in values] if integral else [float(v) for v in values]


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets, braces and quotes."""
    parts: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_values(text: str, key: str = "") -> list[Any]:
    """``v1,v2,...`` (each a YAML value; ranges ``start:stop:step`` expand in place)."""
    values: list[Any] = []
    for item in _split_top_level(text):
        if not item.strip():
            raise ConfigError(key or text, f"empty value in {text!r}")
        rng = parse_range(item)
        if rng is not None:
            values.extend(rng)
            continue
        try:
            values.append(parse_yaml(item))
        except yaml.YAMLError:  # not YAML: keep the text as a string
            values.append(item.strip())
    return values


def _check_key(key: str, where: str) -> str:
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(where, "a sweep key must be a non-empty dotted path (e.g. "
                                 "workload.arrivals.rate_per_s)")
    return key


def parse_grid(text: str) -> tuple[str, list[Any]]:
    """One ``--grid`` axis: ``dotted.key=v1,v2,...`` or ``dotted.key=start:stop:step``."""
    if "=" not in text:
        raise ConfigError(text, "a grid axis must look like dotted.key=v1,v2,... or "
                                "dotted.key=start:stop:step")
    key, raw = text.split("=", 1)
    key = _check_key(key, text)
    return key, parse_values(raw, key)


@dataclass
class SweepSpec:
    """What to sweep: base overrides, grid axes (in order) and explicit points."""

    base_overrides: list[tuple[str, Any]] = field(default_factory=list)
    grid: list[tuple[str, list[Any]]] = field(default_factory=list)
    points: list[Point] | None = None

    def expand(self) -> list[Point]:
        """Every point, in order: explicit points outermost, then the grid (first axis
        outermost, last axis varying fastest)."""
        return expand_points(self.grid, self.points)


def expand_points(grid: Sequence[tuple[str, Sequence[Any]]],
                  points: Sequence[Mapping[str, Any]] | None = None) -> list[Point]:
    """The cartesian grid, crossed with the explicit points when there are any."""
    keys = [k for k, _ in grid]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ConfigError(dup[0], "the grid sets this key twice")
    for k, vals in grid:
        if not len(vals):
            raise ConfigError(k, "a grid axis needs at least one value")
    combos = [dict(zip(keys, vals, strict=True))
              for vals in itertools.product(*(v for _, v in grid))]
    if points is None:
        return combos
    out: list[Point] = []
    for p in points:
        both = sorted(set(p) & set(keys))
        if both:
            raise ConfigError(both[0], "set by both the grid and an explicit point")
        out.extend({**p, **c} for c in combos)
    return out


def load_sweep_file(path: str | Path) -> SweepSpec:
    """Read a sweep file (YAML: ``base_overrides``, ``grid``, ``points``; docs/sweeps.md)."""
    data = read_yaml(path)
    where = str(path)
    unknown = sorted(set(data) - set(SWEEP_FILE_KEYS))
    if unknown:
        raise InputFileError(where, None, f"unknown key {unknown[0]!r}; allowed: "
                                          f"{', '.join(SWEEP_FILE_KEYS)}")
    spec = SweepSpec()
    base = data.get("base_overrides") or []
    if isinstance(base, Mapping):
        spec.base_overrides = [(_check_key(str(k), where), v) for k, v in base.items()]
    elif isinstance(base, list):
        for item in base:
            if not isinstance(item, str):
                raise InputFileError(where, None, "base_overrides items must be "
                                                  "'dotted.key=value' strings")
            parts, value = parse_override(item)
            spec.base_overrides.append((".".join(parts), value))
    else:
        raise InputFileError(where, None, "base_overrides must be a list of 'key=value' or "
                                          "a mapping")
    grid = data.get("grid") or {}
    if not isinstance(grid, Mapping):
        raise InputFileError(where, None, "grid must be a mapping of dotted key to values")
    for k, v in grid.items():
        key = _check_key(str(k), where)
        if isinstance(v, list):
            vals = list(v)
        elif isinstance(v, str):
            vals = parse_values(v, key)
        else:
            vals = [v]
        spec.grid.append((key, vals))
    pts = data.get("points")
    if pts is not None:
        if not isinstance(pts, list) or not all(isinstance(p, Mapping) for p in pts):
            raise InputFileError(where, None, "points must be a list of mappings of dotted "
                                              "key to value")
        spec.points = [{_check_key(str(k), where): v for k, v in p.items()} for p in pts]
    return spec


# -------------------------------------------------------------------- resolving


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c`` in a YAML-shaped mapping (list items by index); missing sections
    become mappings, so an unknown key reaches validation and is reported there."""
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        here = ".".join(parts[: i + 1])
        if isinstance(node, dict):
            if last:
                node[part] = copy.deepcopy(value)
                return
            if not isinstance(node.get(part), dict | list):
                if node.get(part) is not None:
                    raise ConfigError(here, f"is a value ({node[part]!r}), not a section; "
                                            f"cannot set {key}")
                node[part] = {}
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            if last:
                node[int(part)] = copy.deepcopy(value)
                return
            node = node[int(part)]
        else:
            raise ConfigError(here, "no such list item (index out of range)")


@dataclass(frozen=True)
class SweepPoint:
    """One resolved point: its position, its settings, its config and its cache id."""

    index: int
    params: Point
    config: SimConfig
    point_id: str


def point_id(cfg: SimConfig) -> str:
    """16 hex digits of sha256 over the resolved config, the pdsim version and the seed."""
    from pdsim import __version__

    doc = {"config": cfg.model_dump(mode="json"), "pdsim_version": __version__,
           "seed": cfg.seed}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _describe(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in params.items()) or "the base config"


def resolve_points(base: SimConfig, points: Sequence[Mapping[str, Any]]) -> list[SweepPoint]:
    """Validate every point's config before anything runs.

    Raises ``ConfigError`` naming the offending key (and the point) for a key the config
    does not have or a value it does not accept.
    """
    base_data = base.model_dump(mode="json")
    out = []
    for i, params in enumerate(points):
        data = copy.deepcopy(base_data)
        try:
            for key, value in params.items():
                set_dotted(data, key, value)
            cfg = config_from_dict(data)
        except ConfigError as exc:
            raise ConfigError("", issues=[
                (p or "config", f"{m} (sweep point {i}: {_describe(params)})")
                for p, m in exc.issues]) from None
        out.append(SweepPoint(i, dict(params), cfg, point_id(cfg)))
    return out


def apply_base_overrides(base: SimConfig, overrides: Iterable[tuple[str, Any]]) -> SimConfig:
    """``base`` with ``(dotted key, value)`` pairs applied and validated again."""
    data = base.model_dump(mode="json")
    items = list(overrides)
    for key, value in items:
        set_dotted(data, key, value)
    try:
        return config_from_dict(data)
    except ConfigError as exc:
        raise ConfigError("", issues=[(p, f"{m} (base overrides)") for p, m in exc.issues]) \
            from None


# --------------------------------------------------------------------- workers


def run_point(config_json: str, run_files: bool) -> list[tuple[str, bytes]]:
    """Simulate one point; return its files (name, bytes), ``summary.json`` last.

    Runs in a worker (a process, a Dask worker, or inline): it receives the config as
    JSON, so it needs no shared state and no shared file system. ``run_files``: every
    file ``pdsim run --out`` writes; otherwise the summary alone.
    """
    from pdsim.output import to_json
    from pdsim.simulation import simulate
    from pdsim.writers import summary_document, write_run

    cfg = SimConfig.model_validate_json(config_json)
    res = simulate(cfg)
    summary = to_json(summary_document(res)).encode("utf-8")
    if not run_files:
        return [(SUMMARY_FILE, summary)]
    with tempfile.TemporaryDirectory(prefix="pdsim-point-") as tmp:
        write_run(res, Path(tmp))
        files = [(p.name, p.read_bytes()) for p in sorted(Path(tmp).iterdir())
                 if p.is_file() and p.name != SUMMARY_FILE]
    return [*files, (SUMMARY_FILE, summary)]


Task = tuple[int, str]  # (point index, config JSON)
ResultFn = Callable[[int, list[tuple[str, bytes]]], None]


def _run_local(tasks: Sequence[Task], run_files: bool, workers: int,
               on_result: ResultFn) -> None:
    if workers <= 1 or len(tasks) <= 1:
        for idx, cfg_json in tasks:
            try:
                files = run_point(cfg_json, run_files)
            except Exception as exc:
                exc.add_note(f"in sweep point {idx}")
                raise
            on_result(idx, files)
        return
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx) as pool:
        futs = {pool.submit(run_point, cfg_json, run_files): idx for idx, cfg_json in tasks}
        _collect(futs, on_result, cancel=lambda: [f.cancel() for f in futs])


def _collect(futs: Mapping[Any, int], on_result: ResultFn, cancel: Callable[[], Any],
             as_completed: Callable[[Iterable[Any]], Iterable[Any]] = cf.as_completed) -> None:
    """Hand results over as they finish. On the first failure stop dispatching, wait for
    the points already running and hand over every one that finished, then raise (an
    interrupt hands over what is done and does not wait)."""
    error: BaseException | None = None
    handed: set[int] = set()
    try:
        for fut in as_completed(list(futs)):
            exc = fut.exception()
            if exc is not None:
                exc.add_note(f"in sweep point {futs[fut]}")
                error = exc
                break
            on_result(futs[fut], fut.result())
            handed.add(futs[fut])
    except BaseException as exc:  # KeyboardInterrupt included: keep what finished
        error = exc
    if error is None:
        return
    cancel()
    wait = isinstance(error, Exception)
    for fut, idx in futs.items():
        if idx in handed or not (wait or fut.done()):
            continue
        try:
            if fut.exception() is None:  # blocks until done; raises if cancelled
                on_result(idx, fut.result())
        except Exception:  # cancelled, or failed too: nothing to keep
            continue
    raise error


def _run_dask(tasks: Sequence[Task], run_files: bool, workers: int, address: str | None,
              on_result: ResultFn) -> None:
    try:
        from distributed import Client, LocalCluster
        from distributed import as_completed as dask_as_completed
    except ImportError:
        raise SweepError("the dask backend needs dask.distributed: "
                         "pip install 'pdsim[dask]'") from None
    cluster = None
    try:
        if address:
            try:
                client = Client(address, timeout="20s")  # type: ignore[no-untyped-call]
            except (OSError, TimeoutError) as exc:
                raise SweepError(f"cannot reach the Dask scheduler at {address}: {exc}") \
                    from None
        else:
            cluster = LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=max(1, workers), threads_per_worker=1, processes=True,
                dashboard_address=None)
            client = Client(cluster)  # type: ignore[no-untyped-call]
        token = uuid.uuid4().hex[:12]
        with client:
            futs = {client.submit(run_point, cfg_json, run_files, pure=False,
                                  key=f"pdsim-point-{idx}-{token}"): idx
                    for idx, cfg_json in tasks}
            def cancel() -> None:
                client.cancel(list(futs))  # type: ignore[no-untyped-call]

            _collect(futs, on_result, cancel=cancel, as_completed=dask_as_completed)
    finally:
        if cluster is not None:
            cluster.close()


# ----------------------------------------------------------------------- table


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
    """Write ``sweep.csv`` (and ``sweep.parquet`` with pyarrow) atomically."""
    from pdsim.output import records_csv, write_atomic, write_parquet

    out = Path(out_dir)
    cols = table_columns(rows)
    written = [write_atomic(out / TABLE_CSV, records_csv([dict(r) for r in rows], cols))]
    pq = write_parquet(out / TABLE_PARQUET, _parquet_rows(rows, cols), cols)
    if pq is not None:
        written.append(pq)
    return written


# ----------------------------------------------------------------------- sweep


class Sweep:
    """A resolved sweep: validate all points up front, then run the ones not yet done.

    After ``run``, ``computed`` and ``cached`` hold the indices of the points simulated in
    this run and of those read back from ``out_dir``.
    """

    def __init__(self, base: SimConfig, points: Sequence[Mapping[str, Any]] | None = None
                 ) -> None:
        self.base = base
        self.points = resolve_points(base, points if points is not None else [{}])
        ids = [p.point_id for p in self.points]
        dup = next((i for i, x in enumerate(ids) if ids.index(x) != i), None)
        if dup is not None:
            first = ids.index(ids[dup])
            raise ConfigError("", f"sweep points {first} and {dup} resolve to the same config "
                                  f"({_describe(self.points[dup].params)})")
        self.computed: list[int] = []
        self.cached: list[int] = []

    def point_dir(self, out_dir: str | Path, point: SweepPoint) -> Path:
        return Path(out_dir) / POINTS_DIR / point.point_id

    def is_done(self, out_dir: str | Path, point: SweepPoint) -> bool:
        """A point is done iff its ``summary.json`` (written last) exists."""
        return (self.point_dir(out_dir, point) / SUMMARY_FILE).is_file()

    def run(self, out_dir: str | Path | None = None, backend: Backend = "local",
            workers: int | None = None, address: str | None = None,
            progress: ProgressFn | None = None, force: bool = False,
            run_files: bool = True) -> list[dict[str, Any]]:
        """Simulate every point not done yet; return the rows in point order.

        ``out_dir``: cache and write per-point outputs and the table there (None: keep
        everything in memory). ``backend``: ``local`` process pool (``workers=1`` runs
        inline) or ``dask`` (``address`` of a scheduler, or a LocalCluster of ``workers``).
        ``force``: recompute points already done. ``run_files``: per point, every file
        ``pdsim run --out`` writes (False: ``summary.json`` only).
        """
        from pdsim.output import write_atomic, write_json

        if backend not in ("local", "dask"):
            raise ConfigError("backend", f"unknown backend {backend!r}; allowed: local, dask")
        workers = workers if workers is not None else (os.cpu_count() or 1)
        if workers < 1:
            raise ConfigError("workers", "must be at least 1")
        total = len(self.points)
        docs: dict[int, dict[str, Any]] = {}
        self.computed, self.cached = [], []
        tasks: list[Task] = []
        for p in self.points:
            if out_dir is not None and not force and self.is_done(out_dir, p):
                path = self.point_dir(out_dir, p) / SUMMARY_FILE
                try:
                    docs[p.index] = json.loads(path.read_text(encoding="utf-8"))
                    self.cached.append(p.index)
                    continue
                except (OSError, ValueError):
                    pass  # unreadable: compute it again
            tasks.append((p.index, p.config.model_dump_json()))
        if progress is not None:
            progress(len(docs), total)

        def on_result(idx: int, files: list[tuple[str, bytes]]) -> None:
            if idx in docs:
                return
            point = self.points[idx]
            if out_dir is not None:
                pdir = self.point_dir(out_dir, point)
                pdir.mkdir(parents=True, exist_ok=True)
                from pdsim import __version__

                write_json(pdir / POINT_FILE, {"point_id": point.point_id,
                                               "pdsim_version": __version__,
                                               "params": point.params})
                for name, data in files:  # summary.json comes last
                    write_atomic(pdir / name, data)
            summary = dict(files)[SUMMARY_FILE]
            docs[idx] = json.loads(summary.decode("utf-8"))
            self.computed.append(idx)
            if progress is not None:
                progress(len(docs), total)

        run_files = run_files and out_dir is not None
        if tasks:
            if backend == "local":
                _run_local(tasks, run_files, workers, on_result)
            else:
                _run_dask(tasks, run_files, workers, address, on_result)
        rows = [point_row(p, docs[p.index]) for p in self.points]
        if out_dir is not None:
            write_table(out_dir, rows)
        return rows


def run_sweep(base_cfg: SimConfig, points: Sequence[Mapping[str, Any]] | None = None,
              out_dir: str | Path | None = None, backend: Backend = "local",
              workers: int | None = None, address: str | None = None,
              progress: ProgressFn | None = None, force: bool = False,
              run_files: bool = True) -> list[dict[str, Any]]:
    """Simulate ``base_cfg`` at each point; rows in point order (see ``Sweep.run``).

    ``points``: mappings of dotted config key to value (``expand_points`` builds a grid);
    None is the base config alone. Every point is validated before any runs.
    """
    return Sweep(base_cfg, points).run(out_dir, backend=backend, workers=workers,
                                       address=address, progress=progress, force=force,
                                       run_files=run_files)


__all__ = [
    "Sweep", "SweepError", "SweepPoint", "SweepSpec", "apply_base_overrides",
    "expand_points", "load_sweep_file", "parse_grid", "parse_range", "parse_values",
    "point_id", "point_row", "resolve_points", "run_point", "run_sweep", "set_dotted",
    "table_columns", "write_table",
]
