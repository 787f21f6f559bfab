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

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pdsim._version import __version__
from pdsim.config import SimConfig
from pdsim.errors import ConfigError
from pdsim.run_folder import MANIFEST, begin_folder, finish_folder
from pdsim.sweep.backends import SUMMARY_FILE, SweepError, Task, run_dask, run_local, run_point
from pdsim.sweep.grid import (
    SweepSpec,
    expand_points,
    load_sweep_file,
    parse_grid,
    parse_range,
    parse_values,
)
from pdsim.sweep.points import (
    SweepPoint,
    apply_base_overrides,
    describe,
    point_id,
    resolve_points,
    set_dotted,
)
from pdsim.sweep.table import point_row, table_columns, write_table

ProgressFn = Callable[[int, int], None]
Backend = Literal["local", "dask"]

POINTS_DIR = "points"
POINT_FILE = "point.json"


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
                                  f"({describe(self.points[dup].params)})")
        self.computed: list[int] = []
        self.cached: list[int] = []

    def point_dir(self, out_dir: str | Path, point: SweepPoint) -> Path:
        return Path(out_dir) / POINTS_DIR / point.point_id

    def is_done(self, out_dir: str | Path, point: SweepPoint) -> bool:
        """A point is done iff its folder matches the manifest written last (``run_folder``):
        a point whose files were edited, or left half-written, is computed again."""
        from pdsim.errors import InputFileError
        from pdsim.run_folder import check_folder

        pdir = self.point_dir(out_dir, point)
        try:
            manifest = check_folder(pdir)
        except InputFileError:
            return False
        return manifest.get("point_id") == point.point_id and SUMMARY_FILE in manifest.get(
            "files", {})

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
                write_json(pdir / POINT_FILE, {"point_id": point.point_id,
                                               "pdsim_version": __version__,
                                               "params": point.params})
                begin_folder(pdir)  # a rerun's point is incomplete until its manifest
                names = [POINT_FILE]
                for name, data in files:  # summary.json comes last
                    if name != MANIFEST:  # the point's own manifest replaces the run's
                        write_atomic(pdir / name, data)
                        names.append(name)
                finish_folder(pdir, names, {"point_id": point.point_id,
                                            "pdsim_version": __version__})
            summary = dict(files)[SUMMARY_FILE]
            docs[idx] = json.loads(summary.decode("utf-8"))
            self.computed.append(idx)
            if progress is not None:
                progress(len(docs), total)

        run_files = run_files and out_dir is not None
        if tasks:
            if backend == "local":
                run_local(tasks, run_files, workers, on_result)
            else:
                run_dask(tasks, run_files, workers, address, on_result)
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
