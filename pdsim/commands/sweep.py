"""``pdsim sweep``: simulate a grid of config variants, resumably, into one table.

No ``from __future__ import annotations`` here: typer reads the option types at runtime
from this module's globals.
"""

import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pdsim.commands._options import ConfigArg, SeedOpt, SetOpt

# (column, header, display scale, digits): the metrics the terminal table shows
SHOWN_METRICS: tuple[tuple[str, str, float, int], ...] = (
    ("completed", "done", 1.0, 0),
    ("output_throughput_tok_s", "out tok/s", 1.0, 1),
    ("mean_tpot_s", "TPOT ms", 1e3, 2),
    ("p90_ttft_s", "p90 TTFT ms", 1e3, 1),
    ("acceptance_length", "acc len", 1.0, 3),
    ("goodput_req_s", "goodput req/s", 1.0, 3),
    ("slo_met", "SLO met", 1.0, 0),
)


def _fmt(v: Any, scale: float, digits: int) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float) and not isinstance(v, bool):
        return f"{v * scale:.{digits}f}" if digits else f"{v * scale:.0f}"
    return str(v)


def sweep_table(rows: list[dict[str, Any]], param_keys: list[str], title: str) -> Table:
    """Point, its settings and the headline metrics (every column is in sweep.csv)."""
    t = Table(title=title, header_style="bold")
    t.add_column("point", justify="right")
    for k in param_keys:
        t.add_column(k, justify="right")
    metrics = [m for m in SHOWN_METRICS if any(m[0] in r for r in rows)]
    for _, header, _, _ in metrics:
        t.add_column(header, justify="right")
    for r in rows:
        t.add_row(str(r["point"]), *(str(r.get(k, "")) for k in param_keys),
                  *(_fmt(r.get(key), scale, d) for key, _, scale, d in metrics))
    return t


def register(app: typer.Typer) -> None:
    from pdsim.commands._shared import (
        console,
        err_console,
        interrupt_exit_code,
        sigterm_as_interrupt,
        user_errors,
    )

    @app.command()
    @user_errors
    def sweep(
        config: ConfigArg,
        out: Annotated[Path, typer.Option(
            help="Output folder: sweep.csv, sweep.parquet, points/<id>/ (the cache).")],
        grid: Annotated[list[str] | None, typer.Option(
            help="A grid axis: dotted.key=v1,v2,... or dotted.key=start:stop:step "
                 "(repeatable; the cartesian product is swept).")] = None,
        sweep_file: Annotated[Path | None, typer.Option(
            help="YAML sweep file: base_overrides, grid, points (docs/sweeps.md).")] = None,
        set_: SetOpt = None,
        seed: SeedOpt = None,
        backend: Annotated[str, typer.Option(
            help="local (process pool) or dask (dask.distributed).")] = "local",
        workers: Annotated[int | None, typer.Option(
            help="Local processes (default: CPU count; 1 runs inline), or LocalCluster "
                 "workers for --backend dask without --address.")] = None,
        address: Annotated[str | None, typer.Option(
            help="Dask scheduler address, e.g. tcp://host:8786 (default: a LocalCluster).")
        ] = None,
        force: Annotated[bool, typer.Option(
            help="Recompute points already in --out.")] = False,
        records: Annotated[bool, typer.Option(
            help="Keep each point's requests.csv and other run files (else summary only).")
        ] = True,
        json_: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    ) -> None:
        """Simulate CONFIG at every point of a grid; resumable, one table for all points."""
        from pdsim.errors import ConfigError
        from pdsim.loader import load_config
        from pdsim.output import to_json
        from pdsim.sweep import Sweep as SweepRun
        from pdsim.sweep import SweepSpec, apply_base_overrides, load_sweep_file, parse_grid

        if backend not in ("local", "dask"):
            raise ConfigError("--backend", f"unknown backend {backend!r}; allowed: local, dask")
        spec = load_sweep_file(sweep_file) if sweep_file is not None else SweepSpec()
        for axis in grid or []:
            spec.grid.append(parse_grid(axis))
        base = load_config(config)
        base = apply_base_overrides(base, spec.base_overrides)
        if set_ or seed is not None:
            base = load_config(base.model_dump(mode="json"), set_ or [], seed=seed)
        from pdsim.run_folder import prepare_out_dir

        prepare_out_dir(out)  # before any point is simulated
        run = SweepRun(base, spec.expand())
        keys = list(dict.fromkeys(k for p in run.points for k in p.params))

        prog = Progress(TextColumn("[bold]sweep points"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err_console, transient=True,
                        disable=not err_console.is_terminal)
        task = prog.add_task("sweep", total=len(run.points))

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        try:
            with prog, sigterm_as_interrupt():
                rows = run.run(out, backend=backend,  # type: ignore[arg-type]
                               workers=workers, address=address, progress=update,
                               force=force, run_files=records)
        except KeyboardInterrupt as exc:
            err_console.print(f"interrupted: {len(run.computed)} points finished in this run "
                              f"are kept in {out}/points; rerun the same command to finish")
            raise typer.Exit(interrupt_exit_code(exc)) from None
        if json_:
            sys.stdout.write(to_json(rows))
            return
        console.print(sweep_table(rows, keys, title=f"pdsim sweep: {base.name}"))
        console.print(f"{len(rows)} points: {len(run.computed)} simulated, "
                      f"{len(run.cached)} from the cache; wrote {out}/sweep.csv")
