"""``pdsim validate``: replay a ``vllm bench serve`` result in pdsim, real vs simulated.

Exit codes: 0 every checked metric is within ``--tolerance``; 1 at least one is not;
2 a user error (bad config, unreadable or unreplayable result).
"""

# No ``from __future__ import annotations``: typer evaluates the command's annotations in
# this module's globals, and the option types come from pdsim.commands._options.
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from pdsim.commands._formats import format_error, format_value
from pdsim.commands._options import ConfigArg, SeedOpt, SetOpt

if TYPE_CHECKING:
    from pdsim.realdata.validate import ValidationReport

EXIT_WITHIN_TOLERANCE = 0
EXIT_OUT_OF_TOLERANCE = 1


def validation_table(rep: "ValidationReport", tolerance: float | None,
                     checked: set[str] | None = None, title: str | None = None) -> Table:
    """Real vs simulated per metric; with a tolerance, a column saying which rows fail."""
    t = Table(title=title or f"{rep.config_name} vs {rep.source}", header_style="bold")
    t.add_column("metric")
    t.add_column("real", justify="right")
    t.add_column("pdsim", justify="right")
    t.add_column("rel. error", justify="right")
    if tolerance is not None:
        t.add_column("check")
    for r in rep.rows:
        cells = [r.label, format_value(r.key, r.real), format_value(r.key, r.simulated),
                 format_error(r.rel_error)]
        if tolerance is not None:
            if (checked is not None and r.key not in checked) or not math.isfinite(r.rel_error):
                cells.append("-")
            elif abs(r.rel_error) > tolerance:
                cells.append("[bold red]FAIL[/]")
            else:
                cells.append("ok")
        t.add_row(*cells)
    return t


def register(app: typer.Typer) -> None:
    """Add ``pdsim validate`` to ``app``."""
    from pdsim.commands._shared import console, user_errors

    @app.command()
    @user_errors
    def validate(
        config: ConfigArg,
        against: Annotated[Path, typer.Option(
            help="A `vllm bench serve --save-result --save-detailed` JSON file.")],
        set_: SetOpt = None,
        seed: SeedOpt = None,
        mode: Annotated[str, typer.Option(
            help="Replay: auto (concurrency when the run had max_concurrency, else rate), "
                 "rate (recorded send times) or concurrency (closed loop).")] = "auto",
        tolerance: Annotated[float, typer.Option(
            help="Largest |relative error| allowed (0.1 = 10%); beyond it exit code 1.")
        ] = 0.10,
        metric: Annotated[list[str] | None, typer.Option(
            metavar="METRIC",
            help="Check only this metric key, e.g. mean_tpot_ms (repeatable; "
                 "default: every row).")] = None,
        index: Annotated[int, typer.Option(
            help="Which result of an --append-result file (default: the last).")] = -1,
        json_: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")
                         ] = False,
    ) -> None:
        """Simulate the workload of a benchmark result under CONFIG; real vs simulated.

        Exit code 0 when every checked metric is within --tolerance, 1 when one is not,
        2 on a user error.
        """
        from pdsim.errors import PdsimError
        from pdsim.loader import load_config
        from pdsim.realdata import read_bench_result
        from pdsim.realdata.validate import validate as run_validate

        if mode not in ("auto", "rate", "concurrency"):
            raise PdsimError(f"--mode {mode}: expected auto, rate or concurrency")
        if not tolerance >= 0:
            raise PdsimError(f"--tolerance {tolerance}: must be >= 0")
        cfg = load_config(config, set_ or [], seed=seed)
        result = read_bench_result(against, index=index)
        rep = run_validate(cfg, result, mode=mode)  # type: ignore[arg-type]
        keys = {r.key for r in rep.rows}
        unknown = [m for m in metric or [] if m not in keys]
        if unknown:
            raise PdsimError(f"--metric {', '.join(unknown)}: unknown; known: "
                             f"{', '.join(r.key for r in rep.rows)}")
        checked = set(metric) if metric else None
        failures = rep.failures(tolerance, checked)
        if json_:
            from pdsim.output import to_json

            doc = rep.to_dict()
            doc["tolerance"] = tolerance
            doc["failures"] = [r.key for r in failures]
            sys.stdout.write(to_json(doc))
        else:
            console.print(validation_table(rep, tolerance, checked))
            console.print(f"replayed {rep.num_requests} requests ({rep.mode}, arrivals "
                          f"{rep.replay}), seed {cfg.seed}", markup=False, highlight=False)
            for note in rep.notes:
                console.print(f"note: {note}", markup=False, highlight=False)
            worst = rep.max_abs_error(checked)
            verdict = (f"{len(failures)} metric(s) off by more than {tolerance:.0%}"
                       if failures else f"all checked metrics within {tolerance:.0%}")
            console.print(f"{verdict} (largest |error| {format_error(worst).lstrip('+')})",
                          markup=False, highlight=False)
        if failures:
            raise typer.Exit(EXIT_OUT_OF_TOLERANCE)
