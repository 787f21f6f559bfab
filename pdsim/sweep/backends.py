"""Where sweep points run: inline, a local process pool, or a Dask cluster. A point travels
as config JSON and comes back as its files (name, bytes), so no state or file system is
shared."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pdsim.config import SimConfig
from pdsim.errors import PdsimError

SUMMARY_FILE = "summary.json"


class SweepError(PdsimError):
    """A sweep could not run (a backend problem, a point that raised)."""


def run_point(config_json: str, run_files: bool) -> list[tuple[str, bytes]]:
    """Simulate one point; return its files (name, bytes), ``summary.json`` last.

    Runs in a worker (a process, a Dask worker, or inline): it receives the config as
    JSON, so it needs no shared state and no shared file system. ``run_files``: every
    file ``pdsim run --out`` writes; otherwise the summary alone.
    """
    from pdsim.output import to_json
    from pdsim.results import summary_only
    from pdsim.simulation import simulate
    from pdsim.writers import summary_document, write_run

    cfg = SimConfig.model_validate_json(config_json)
    res = simulate(cfg if run_files else summary_only(cfg))
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


def run_local(tasks: Sequence[Task], run_files: bool, workers: int,
              on_result: ResultFn) -> None:
    """Run ``tasks`` inline (one worker or one task) or in a spawned process pool."""
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


def run_dask(tasks: Sequence[Task], run_files: bool, workers: int, address: str | None,
             on_result: ResultFn) -> None:
    """Run ``tasks`` on the Dask scheduler at ``address``, or on a ``LocalCluster``."""
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
