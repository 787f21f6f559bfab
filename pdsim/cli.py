"""The ``pdsim`` command line. The only part of pdsim that writes files.

Every user error (bad config, bad input file) is printed as ``error: <where>: <what>``
with exit code 2 and no traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from pdsim.commands._options import ConfigArg, SeedOpt, SetOpt
from pdsim.commands._shared import (
    console,
    err_console,
    interrupt_exit_code,
    load,
    sigterm_as_interrupt,
    simulation_progress,
    user_errors,
)
from pdsim.errors import PdsimError

__all__ = ["app", "console", "err_console", "main", "user_errors"]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="pdsim: simulate P/D disaggregated LLM serving with MTP speculation.")


@app.command()
@user_errors
def run(
    config: ConfigArg,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: Annotated[Path | None, typer.Option(
        help="Write summary.json, requests.csv and config.resolved.yaml here.")] = None,
    plots: Annotated[bool, typer.Option(help="Also write PNG plots to --out.")] = False,
    timeline: Annotated[bool, typer.Option(
        help="Also write a Perfetto/Chrome trace (timeline.json) to --out.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Simulate CONFIG and print a summary (written to --out too)."""
    from pdsim.report import summary_table
    from pdsim.simulation import Simulation

    cfg = load(config, set_, seed)
    if out is not None:
        from pdsim.run_folder import prepare_out_dir

        prepare_out_dir(out)  # before the work, not after it
    prog, update = simulation_progress()
    interrupted = 0
    with sigterm_as_interrupt():
        try:
            sim = Simulation(cfg)
        except KeyboardInterrupt as exc:  # nothing simulated yet: nothing to keep
            raise typer.Exit(interrupt_exit_code(exc)) from None
        with prog:
            try:
                res = sim.run(progress=update)
            except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: keep what finished
                interrupted = interrupt_exit_code(exc)
                res = sim.finalize()
                res.partial = True
    if out is not None:
        from pdsim.writers import write_run

        write_run(res, out, plots=plots, timeline=timeline)
    if json_:
        from pdsim.output import to_json

        sys.stdout.write(to_json(res.summary.as_dict()))
    else:
        title = f"pdsim: {cfg.name}" + (" (PARTIAL: interrupted)" if res.partial else "")
        console.print(summary_table(res.summary, title=title))
        if out is not None:
            console.print(f"wrote {out}/")
    if interrupted:
        raise typer.Exit(interrupted)


@app.command()
@user_errors
def compare(
    config: ConfigArg,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    colocated: Annotated[bool, typer.Option(
        help="Also simulate the same instances colocated (standalone serving).")] = False,
    out: Annotated[Path | None, typer.Option(help="Write compare.json here.")] = None,
    plots: Annotated[bool, typer.Option(help="Also write comparison plots to --out.")] = False,
) -> None:
    """P/D before the fix vs after it (same workload, same random streams)."""
    from pdsim.compare import compare as run_compare
    from pdsim.report import comparison_table

    cfg = load(config, set_, seed)
    if out is not None:
        from pdsim.run_folder import prepare_out_dir

        prepare_out_dir(out)
    prog, update = simulation_progress()
    with prog:
        cmp = run_compare(cfg, colocated=colocated, progress=update)
    console.print(comparison_table(cmp, title=f"{cfg.name}: P/D before vs after the fix"))
    h = cmp.headline()
    console.print(
        f"acceptance rate {h['acceptance_rate_change_points']:+.1f} points, output throughput "
        f"{h['output_throughput_change_pct']:+.0f}%, TPOT {h['tpot_change_pct']:+.0f}% "
        f"(acceptance length {h['acceptance_length_before']:.3f} -> "
        f"{h['acceptance_length_after']:.3f})")
    if out is not None:
        from pdsim.output import write_json

        write_json(out / "compare.json", cmp.to_dict())
        console.print(f"wrote {out}/compare.json")
        if plots:
            from pdsim.writers import write_compare_plots

            for path in write_compare_plots(cmp, out):
                console.print(f"wrote {path}")


@app.command("show-config")
@user_errors
def show_config(config: ConfigArg, set_: SetOpt = None, seed: SeedOpt = None) -> None:
    """Print the resolved config and its derived values."""
    from pdsim.loader import derived_values, dump_config

    cfg = load(config, set_, seed)
    sys.stdout.write(dump_config(cfg))
    sys.stdout.write("# derived values\n")
    for k, v in derived_values(cfg).items():
        sys.stdout.write(f"# {k}: {v}\n")
    for warning in cfg.foreign_fit_warnings:
        err_console.print(f"warning: {warning}", markup=False, highlight=False)


@app.command()
def schema() -> None:
    """Print the config's JSON Schema."""
    from pdsim.config import SimConfig

    sys.stdout.write(json.dumps(SimConfig.model_json_schema(), indent=2) + "\n")


@app.command()
@user_errors
def profile(
    model: Annotated[str, typer.Argument(help="Model profile name (e.g. deepseek-v3).")],
    hardware: Annotated[str, typer.Argument(help="Hardware profile name (e.g. h200).")],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="Expert-parallel size.")] = 1,
    num_speculative_tokens: Annotated[int | None, typer.Option(
        "--spec", help="Drafts per step (default: the profile's drafter).")] = None,
    block_size: int = 64,
    gpu_memory_utilization: float = 0.9,
) -> None:
    """Print a model profile's derived numbers on a hardware profile."""
    from pdsim.perf.report import profile_report

    for table in profile_report(model, hardware, tensor_parallel_size=tp,
                                expert_parallel_size=ep,
                                num_speculative_tokens=num_speculative_tokens,
                                block_size=block_size,
                                gpu_memory_utilization=gpu_memory_utilization):
        console.print(table)


@app.command("import-metrics")
@user_errors
def import_metrics(
    metrics: Annotated[list[Path], typer.Argument(
        help="One Prometheus scrape (totals) or two (rates over the interval between).")],
    label: Annotated[list[str] | None, typer.Option(
        help="Only series with this label: name=value (repeatable).")] = None,
) -> None:
    """Acceptance rates from vLLM's Prometheus metrics, as a pdsim config snippet."""
    from pdsim.realdata import import_metrics_report

    selector = {}
    for item in label or []:
        if "=" not in item:
            raise PdsimError(f"--label {item}: expected name=value")
        k, v = item.split("=", 1)
        selector[k] = v
    stats, snippet = import_metrics_report([str(p) for p in metrics], selector or None)
    for line in stats.summary_lines():
        console.print(line, markup=False, highlight=False)
    sys.stdout.write(snippet if snippet.endswith("\n") else snippet + "\n")


def _register_commands() -> None:
    from pdsim.commands import register_all

    register_all(app)


_register_commands()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
