"""``pdsim sweep``: simulate a grid of config variants, resumably, into one table.

No ``from __future__ import annotations`` here: typer reads the option types at runtime
from this module's globals.
"""

import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from pdsim.commands._options import ConfigArg, SeedOpt, SetOpt, out_path

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


def _param_cells(rows: list[dict[str, Any]], key: str) -> tuple[list[str], list[str]]:
    """The cells of a swept key's column and legend lines: a whole swept section (a JSON
    object or list) is shown as ``#1``, ``#2``, ... and spelled out in the legend."""
    labels: dict[str, str] = {}
    cells = []
    for r in rows:
        v = r.get(key)
        text = "" if v is None else str(v)
        if text.startswith(("{", "[")):
            text = labels.setdefault(text, f"#{len(labels) + 1}")
        cells.append(text)
    return cells, [f"{key} {label} = {value}" for value, label in labels.items()]


def sweep_table(rows: list[dict[str, Any]], param_keys: list[str], title: str
                ) -> tuple[Table, list[str]]:
    """Point, its settings and the headline metrics (every column is in sweep.csv), and
    the legend of the swept sections shown as ``#n``. No column wraps or truncates: print
    it with ``table_width``."""
    headers = ["point"]
    columns = [[str(r["point"]) for r in rows]]
    legend: list[str] = []
    for k in param_keys:
        cells, lines = _param_cells(rows, k)
        headers.append(k)
        columns.append(cells)
        legend += lines
    for key, header, scale, digits in SHOWN_METRICS:
        if any(key in r for r in rows):
            headers.append(header)
            columns.append([_fmt(r.get(key), scale, digits) for r in rows])
    t = Table(title=title, header_style="bold")
    for header, cells in zip(headers, columns, strict=True):
        t.add_column(header, justify="right", no_wrap=True,
                     min_width=max([len(header), *(len(c) for c in cells)]))
    for i in range(len(rows)):
        t.add_row(*(c[i] for c in columns))
    return t, legend


def table_width(console_width: int, table: Table) -> int:
    """Width to print ``table`` at: the console's, or the table's own when wider (a
    terminal then wraps the lines; a log keeps them whole)."""
    from rich.console import Console

    natural = Console(width=10_000).measure(table).maximum
    return max(console_width, natural)


def register(app: typer.Typer) -> None:
    from pdsim.commands._shared import (
        console,
        err_console,
        interrupt_exit_code,
        print_config_warnings,
        progress_display,
        sigterm_as_interrupt,
        user_errors,
    )

    @app.command()
    @user_errors
    def sweep(
        config: ConfigArg,
        out: Annotated[Path, typer.Option(parser=out_path,
            help="Output folder: sweep.csv, sweep.parquet, points/<id>/ (the cache).")],
        grid: Annotated[list[str] | None, typer.Option(
            metavar="KEY=VALUES",
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
        report: Annotated[bool, typer.Option(
            help="Also write --out/report.html (interactive; needs pdsim[report]).")] = False,
    ) -> None:
        """Simulate CONFIG at every point of a grid; resumable, one table for all points."""
        from pdsim.errors import ConfigError
        from pdsim.loader import load_config
        from pdsim.output import to_json
        from pdsim.sweep import Sweep as SweepRun
        from pdsim.sweep import SweepSpec, apply_base_overrides, load_sweep_file, parse_grid

        if report:  # fail before simulating, not after
            from pdsim.html_report import require_plotly

            require_plotly()
        if backend not in ("local", "dask"):
            raise ConfigError("--backend", f"unknown backend {backend!r}; allowed: local, dask")
        spec = load_sweep_file(sweep_file) if sweep_file is not None else SweepSpec()
        for axis in grid or []:
            spec.grid.append(parse_grid(axis))
        # the file as `pdsim run --set` reads it (a file valid only after --set loads), then
        # the sweep file's base overrides, then --set again so that it wins over them
        base = load_config(config, set_ or [], seed=seed)
        if spec.base_overrides:
            base = apply_base_overrides(base, spec.base_overrides)
            if set_:
                base = load_config(base.model_dump(mode="json"), set_)
        from pdsim.run_folder import prepare_out_dir

        run = SweepRun(base, spec.expand())  # every point validated, nothing written yet
        prepare_out_dir(out)  # before any point is simulated
        keys = list(dict.fromkeys(k for p in run.points for k in p.params))
        print_config_warnings(*(p.config for p in run.points))

        prog, update = progress_display("sweep points")
        try:
            with prog, sigterm_as_interrupt():
                rows = run.run(out, backend=backend,  # type: ignore[arg-type]
                               workers=workers, address=address, progress=update,
                               force=force, run_files=records)
        except KeyboardInterrupt as exc:
            err_console.print(f"interrupted: {len(run.computed)} points finished in this run "
                              f"are kept in {out}/points; rerun the same command to finish")
            raise typer.Exit(interrupt_exit_code(exc)) from None
        if report:
            from pdsim.html_report import REPORT_FILE, report_dir_html, write_report
            from pdsim.loader import dump_config
            from pdsim.run_folder import check_folder, finish_folder, staged_folder

            html = report_dir_html(out, config_text=dump_config(base))
            sealed = check_folder(out, "sweep.csv")  # the table just written
            with staged_folder(out) as stage:
                write_report(stage, html)
            # the manifest again, now sealing the report beside the table
            finish_folder(out, [*sealed["files"], REPORT_FILE],
                          {k: v for k, v in sealed.items() if k != "files"})
            err_console.print(f"wrote {out / REPORT_FILE}", markup=False, highlight=False)
        if json_:
            sys.stdout.write(to_json(rows))
            return
        table, legend = sweep_table(rows, keys, title=f"pdsim sweep: {base.name}")
        console.print(table, width=table_width(console.width, table), crop=False)
        for line in legend:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        console.print(f"{len(rows)} points: {len(run.computed)} simulated, "
                      f"{len(run.cached)} from the cache; wrote {out}/sweep.csv")
