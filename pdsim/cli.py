"""The ``pdsim`` command line. The only part of pdsim that writes files.

Every user error (bad config, bad input file) is printed as ``error: <where>: <what>``
with exit code 2 and no traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from pdsim.commands._options import ConfigArg, SeedOpt, SetOpt, out_path
from pdsim.commands._shared import (
    configure_logging,
    console,
    err_console,
    interrupt_exit_code,
    load,
    print_config_warnings,
    sigterm_as_interrupt,
    simulation_progress,
    user_errors,
)
from pdsim.errors import PdsimError

__all__ = ["app", "console", "err_console", "main", "user_errors"]

class _FullHelpGroup(TyperGroup):
    """The command list shows each command's whole first paragraph, wrapped, where click
    would cut it at the terminal width with "..."."""

    # Any: typer ships its own copy of click, whose Context the annotations must name
    def format_commands(self, ctx: Any, formatter: Any) -> None:
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and cmd.help and not cmd.short_help:
                cmd.short_help = " ".join(cmd.help.split("\n\n")[0].split())
        super().format_commands(ctx, formatter)


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, cls=_FullHelpGroup,
                  help="pdsim: simulate P/D disaggregated LLM serving with MTP speculation.")


def _print_version(value: bool) -> None:
    if value:
        from pdsim._version import __version__

        sys.stdout.write(f"pdsim {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print pdsim's version and exit.")] = False,
    verbose: Annotated[int, typer.Option(
        "--verbose", "-v", count=True, show_default=False,
        help="Log more (debug lines) to stderr.")] = 0,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Log only warnings and errors (no progress lines).")] = False,
) -> None:
    """pdsim: simulate P/D disaggregated LLM serving with MTP speculation. Progress is a
    bar on a terminal and a log line every few seconds otherwise (CI, nohup, Slurm)."""
    configure_logging(-1 if quiet else verbose)


@app.command()
@user_errors
def run(
    config: ConfigArg,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    out: Annotated[Path | None, typer.Option(
        parser=out_path,
        help="Write here: summary.json, requests.csv (and requests.parquet with pyarrow), "
             "bench_result.json (vllm bench serve --save-result form), timeseries.csv, "
             "config.resolved.yaml; with --plots the PNG plots, with --timeline "
             "timeline.json, with --report report.html; manifest.json last (the run and "
             "every file's SHA-256).")] = None,
    plots: Annotated[bool, typer.Option(help="Also write PNG plots to --out.")] = False,
    timeline: Annotated[bool, typer.Option(
        help="Also write a Perfetto/Chrome trace (timeline.json) to --out.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    report: Annotated[bool, typer.Option(
        help="Also write --out/report.html (interactive; needs pdsim[report]).")] = False,
) -> None:
    """Simulate CONFIG and print a summary (written to --out too)."""
    _check_report(report, out)
    from pdsim.report import summary_table
    from pdsim.simulation import Simulation

    cfg = load(config, set_, seed)
    print_config_warnings(cfg)
    if out is not None:
        from pdsim.run_folder import prepare_out_dir

        prepare_out_dir(out)  # before the work, not after it
    else:  # nothing reads the step log: keep its aggregates only
        from pdsim.results import summary_only

        cfg = summary_only(cfg)
    prog, update = simulation_progress()
    interrupted = 0
    with sigterm_as_interrupt():
        try:
            sim = Simulation(cfg, keep_requests=False)  # facts recorded as requests end
        except KeyboardInterrupt as exc:  # nothing simulated yet: nothing to keep
            raise typer.Exit(interrupt_exit_code(exc)) from None
        with prog:
            try:
                res = sim.run(progress=update)
            except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: keep what finished
                interrupted = interrupt_exit_code(exc)
                res = sim.results()
                res.partial = True
    if out is not None:
        from pdsim.writers import write_run

        write_run(res, out, plots=plots, timeline=timeline)
        if report:
            from pdsim.html_report import report_dir_html, write_report

            write_report(out, report_dir_html(out))
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
    out: Annotated[Path | None, typer.Option(
        parser=out_path, help="Write compare.json here.")] = None,
    plots: Annotated[bool, typer.Option(help="Also write comparison plots to --out.")] = False,
    report: Annotated[bool, typer.Option(
        help="Also write --out/report.html (interactive, with latency CDFs and time series "
             "of both runs; needs pdsim[report]).")] = False,
) -> None:
    """P/D before the fix vs after it (same workload, same random streams).

    Prints the table and a headline; --out writes compare.json, with --plots the
    comparison PNGs."""
    from pdsim.compare import Comparison, variant_configs
    from pdsim.report import comparison_table
    from pdsim.simulation import simulate

    _check_report(report, out)
    cfg = load(config, set_, seed)
    speculating = cfg.speculative.method != "none"
    if not speculating and not colocated:
        raise PdsimError("speculative.method: none: without a drafter the fix changes "
                         "nothing, so before and after are the same run; compare a config "
                         "with speculation (or add --colocated for P/D against colocated)")
    print_config_warnings(cfg)
    if out is not None:
        from pdsim.run_folder import prepare_out_dir

        prepare_out_dir(out)
    cmp = Comparison({})
    variants = variant_configs(cfg, colocated)
    for i, (name, vcfg) in enumerate(variants.items(), start=1):
        # a display per variant: its name, and an ETA from its own rate, not the elapsed
        # time of the variants before it
        prog, update = simulation_progress(f"{name} ({i}/{len(variants)})")
        with prog:
            cmp.variants[name] = simulate(vcfg, progress=update)
    console.print(comparison_table(cmp, title=f"{cfg.name}: P/D before vs after the fix"))
    h = cmp.headline()
    if not speculating:
        console.print("no speculative decoding: P/D before and after the fix are the same "
                      "run; the colocated column is the comparison")
    else:
        console.print(
            f"acceptance rate {h['acceptance_rate_change_points']:+.1f} points, output "
            f"throughput {h['output_throughput_change_pct']:+.0f}%, TPOT "
            f"{h['tpot_change_pct']:+.0f}% (acceptance length "
            f"{h['acceptance_length_before']:.3f} -> {h['acceptance_length_after']:.3f})")
    if out is not None:
        from pdsim.writers import write_compare

        for path in write_compare(cmp, cfg, out, plots=plots, report=report):
            console.print(f"wrote {path}")


def _check_report(report: bool, out: Path | None) -> None:
    """``--report`` writes into ``--out``, and needs plotly: fail before simulating."""
    if not report:
        return
    if out is None:
        raise PdsimError("--report needs --out (report.html is written there)")
    from pdsim.html_report import require_plotly

    require_plotly()


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
    print_config_warnings(cfg)


@app.command()
def schema() -> None:
    """Print the JSON Schema of config files as users write them.

    Before the loader fills defaults from model.profile; schema/pdsim.schema.json is this
    output."""
    from pdsim.loader import config_schema_json

    sys.stdout.write(config_schema_json())


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
    scrape: Annotated[Path, typer.Argument(
        help="A Prometheus scrape of vLLM's /metrics (totals since start).")],
    scrape2: Annotated[Path | None, typer.Argument(
        help="A later scrape: rates over the interval between the two.")] = None,
    label: Annotated[list[str] | None, typer.Option(
        metavar="NAME=VALUE",
        help="Only series with this label: name=value (repeatable).")] = None,
    method: Annotated[str | None, typer.Option(
        help="The drafter vLLM ran (speculative.method: ngram, draft_model, eagle, eagle3, "
             "mtp); its metrics do not say, so without this the snippet marks mtp as "
             "assumed.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", parser=out_path,
        help="Write the YAML snippet to this file (default: stdout).")] = None,
) -> None:
    """Acceptance rates from vLLM's Prometheus metrics, as a pdsim config snippet.

    The YAML snippet goes to stdout (or --output), the report to stderr, so `> file.yaml`
    gives a valid file."""
    from typing import get_args

    from pdsim.config_sections import SpecMethod
    from pdsim.realdata import import_metrics_report
    from pdsim.run_folder import refuse_inputs

    if output is not None:  # before the scrapes are read, so any error comes first
        refuse_inputs([output], [scrape, scrape2])
    methods = [m for m in get_args(SpecMethod) if m != "none"]
    if method is not None and method not in methods:
        raise PdsimError(f"--method {method}: expected one of {', '.join(methods)}")

    selector = {}
    for item in label or []:
        if "=" not in item:
            raise PdsimError(f"--label {item}: expected name=value")
        k, v = item.split("=", 1)
        selector[k] = v
    paths = [str(scrape)] + ([str(scrape2)] if scrape2 is not None else [])
    stats, snippet = import_metrics_report(paths, selector or None, method=method)
    for line in stats.summary_lines():
        err_console.print(line, markup=False, highlight=False)
    snippet = snippet if snippet.endswith("\n") else snippet + "\n"
    if output is None:
        sys.stdout.write(snippet)
    else:
        from pdsim.output import write_atomic

        write_atomic(output, snippet)
        err_console.print(f"wrote {output}", markup=False, highlight=False)


def _register_commands() -> None:
    from pdsim.commands import register_all

    register_all(app)


_register_commands()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
