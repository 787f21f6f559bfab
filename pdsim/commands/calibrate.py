"""``pdsim calibrate``: fit step-time (and stale-KV) parameters to benchmark results.

Exit codes: 0 the fit ran (whatever its quality: read the error table); 2 a user error.
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
from pdsim.commands._options import ConfigArg, SeedOpt, SetOpt, out_path

if TYPE_CHECKING:
    from pdsim.realdata.calibrate import CalibrationReport

METHODS = {"auto": "auto", "least-squares": "least_squares", "nelder-mead": "nelder_mead"}


def _fmt_param(v: float) -> str:
    return f"{v:.4g}"


def parameter_table(rep: "CalibrationReport") -> Table:
    """Each parameter: start, fitted value, change, search range."""
    t = Table(title="calibrated parameters", header_style="bold")
    for name, justify in (("parameter", "left"), ("initial", "right"), ("fitted", "right"),
                          ("change", "right"), ("searched", "right")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for p in rep.parameters:
        t.add_row(p.path, _fmt_param(p.initial), _fmt_param(p.fitted), format_error(p.change),
                  f"{_fmt_param(p.lower)} .. {_fmt_param(p.upper)}")
    return t


def error_table(rep: "CalibrationReport") -> Table:
    """Per result: RMS and largest relative error over the fitted metrics, before/after."""
    t = Table(title="relative error over the fitted metrics", header_style="bold")
    for name in ("result", "used for", "RMS before", "RMS after", "max before", "max after"):
        t.add_column(name, justify="left" if name in ("result", "used for") else "right")
    for d in rep.datasets:
        role = d.role + (" (standalone)" if d.deployment == "standalone" else "")
        keys = [k for k in rep.metrics if k in {r.key for r in d.before.rows}]
        t.add_row(d.source, role,
                  *(format_error(x).lstrip("+") for x in (
                      d.before.rms_error(keys), d.after.rms_error(keys),
                      d.before.max_abs_error(keys), d.after.max_abs_error(keys))))
    return t


def detail_table(rep: "CalibrationReport", index: int) -> Table:
    """One result's fitted metrics: real, before and after, with their errors."""
    d = rep.datasets[index]
    t = Table(title=f"{d.source} ({d.role})", header_style="bold")
    for name in ("metric", "real", "before", "error", "after", "error"):
        t.add_column(name, justify="left" if name == "metric" else "right")
    after = {r.key: r for r in d.after.rows}
    for r in d.before.rows:
        if r.key not in rep.metrics:
            continue
        a = after[r.key]
        t.add_row(r.label, format_value(r.key, r.real), format_value(r.key, r.simulated),
                  format_error(r.rel_error), format_value(r.key, a.simulated),
                  format_error(a.rel_error))
    return t


def calibrated_yaml(rep: "CalibrationReport", sources: list[str]) -> str:
    """The calibrated config as YAML, headed by comments saying how it was fitted."""
    from pdsim.loader import dump_config

    lines = [f"# calibrated by `pdsim calibrate` against {', '.join(sources)}",
             f"# {rep.method}, {rep.evaluations} evaluations: {rep.message}"]
    for p in rep.parameters:
        lines.append(f"# {p.path}: {_fmt_param(p.initial)} -> {_fmt_param(p.fitted)}")
    before, after = rep.fit_rms("before"), rep.fit_rms("after")
    lines.append(f"# RMS relative error on the fitted data: {before:.2%} -> {after:.2%}")
    return "\n".join(lines) + "\n" + dump_config(rep.config)


def _param_specs(items: list[str]) -> tuple[list[str], dict[str, tuple[float, float]]]:
    from pdsim.errors import PdsimError

    paths: list[str] = []
    bounds: dict[str, tuple[float, float]] = {}
    for item in items:
        path, _, rng = item.partition("=")
        path = path.strip()
        paths.append(path)
        if not rng:
            continue
        lo, sep, hi = rng.partition(":")
        try:
            if not sep:
                raise ValueError
            bounds[path] = (float(lo), float(hi))
        except ValueError:
            raise PdsimError(f"--param {item}: expected PATH or PATH=LOWER:UPPER") from None
    return paths, bounds


def register(app: typer.Typer) -> None:
    """Add ``pdsim calibrate`` to ``app``."""
    from pdsim.commands._shared import console, err_console, user_errors

    ResultList = Annotated[list[Path] | None, typer.Option(
        metavar="RESULT.json",
        help="A vllm bench serve result (repeatable).")]

    @app.command()
    @user_errors
    def calibrate(
        config: ConfigArg,
        against: Annotated[list[Path], typer.Option(
            metavar="RESULT.json",
            help="Result of the deployment CONFIG describes, to fit (repeatable).")],
        standalone: ResultList = None,
        standalone_config: Annotated[Path | None, typer.Option(
            help="Config of the standalone results (default: CONFIG's instances "
                 "colocated).")] = None,
        held_out: ResultList = None,
        param: Annotated[list[str] | None, typer.Option(
            metavar="KEY[=LO:HI]",
            help="Dotted config path to fit, optionally with a range: "
                 "step_time.per_token_s=1e-6:1e-3 (repeatable; default: see docs).")] = None,
        metric: Annotated[list[str] | None, typer.Option(
            metavar="METRIC",
            help="Metric key to fit, e.g. mean_tpot_ms (repeatable; default: mean and p50 "
                 "TTFT and TPOT, mean ITL and E2E, output throughput).")] = None,
        set_: SetOpt = None,
        seed: SeedOpt = None,
        mode: Annotated[str, typer.Option(
            help="Replay: auto, rate or concurrency (as in pdsim validate).")] = "auto",
        max_evals: Annotated[int, typer.Option(
            help="Most objective evaluations (each simulates every fitted result once).")
        ] = 60,
        max_requests: Annotated[int | None, typer.Option(
            help="Replay only the first N requests of each result (faster, approximate).")
        ] = None,
        method: Annotated[str, typer.Option(
            help="Optimiser: least-squares (scipy least_squares, trf), nelder-mead, or auto "
                 "(nelder-mead when a speculative.* parameter is fitted).")] = "auto",
        out: Annotated[Path | None, typer.Option(parser=out_path,
            help="Write the calibrated config (YAML) here.")] = None,
        json_: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")
                         ] = False,
    ) -> None:
        """Fit CONFIG's step-time factors (and stale-KV parameters) to real results."""
        from pdsim.errors import PdsimError
        from pdsim.loader import load_config
        from pdsim.realdata import read_bench_result
        from pdsim.realdata.calibrate import calibrate as run_calibrate

        if mode not in ("auto", "rate", "concurrency"):
            raise PdsimError(f"--mode {mode}: expected auto, rate or concurrency")
        if method not in METHODS:
            raise PdsimError(f"--method {method}: expected {', '.join(METHODS)}")
        if max_evals < 1:
            raise PdsimError(f"--max-evals {max_evals}: must be >= 1")
        if max_requests is not None and max_requests < 1:
            raise PdsimError(f"--max-requests {max_requests}: must be >= 1")
        if out is not None:
            from pdsim.run_folder import prepare_out_file, refuse_inputs

            refuse_inputs([out], [config, standalone_config, *against, *(standalone or []),
                                  *(held_out or [])])
            prepare_out_file(out)  # before the fit, not after it
        cfg = load_config(config, set_ or [], seed=seed)
        st_cfg = (None if standalone_config is None
                  else load_config(standalone_config, set_ or [], seed=seed))
        fit = [read_bench_result(p) for p in against]
        st = [read_bench_result(p) for p in standalone or []]
        held = [read_bench_result(p) for p in held_out or []]
        params, bounds = _param_specs(param or [])
        from pdsim.realdata.validate import real_metrics

        known = set().union(*(real_metrics(r) for r in fit + st))
        unknown = [m for m in metric or [] if m not in known]
        if unknown:
            raise PdsimError(f"--metric {', '.join(unknown)}: unknown; known: "
                             f"{', '.join(sorted(known))}")
        err_console.print(f"calibrating against {len(fit) + len(st)} result(s), at most "
                          f"{max_evals} evaluations ...", markup=False, highlight=False)
        rep = run_calibrate(
            cfg, fit, params or None, standalone=st, held_out=held, standalone_config=st_cfg,
            metrics=metric or None, bounds=bounds, mode=mode,  # type: ignore[arg-type]
            max_requests=max_requests, max_evals=max_evals,
            method=METHODS[method])  # type: ignore[arg-type]
        if out is not None:
            from pdsim.output import write_atomic

            write_atomic(out, calibrated_yaml(rep, [str(p) for p in against
                                                    + list(standalone or [])]))
        if json_:
            from pdsim.output import to_json

            sys.stdout.write(to_json(rep.to_dict()))
            return
        console.print(parameter_table(rep))
        console.print(error_table(rep))
        for i in range(len(rep.datasets)):
            console.print(detail_table(rep, i))
        lines = [f"{rep.method}, {rep.evaluations} evaluations: {rep.message}",
                 f"RMS relative error on the fitted data: {rep.fit_rms('before'):.2%} -> "
                 f"{rep.fit_rms('after'):.2%}"]
        held_b, held_a = rep.fit_rms("before", "held-out"), rep.fit_rms("after", "held-out")
        if not (math.isnan(held_b) or math.isnan(held_a)):
            lines.append(f"RMS relative error on the held-out data: {held_b:.2%} -> "
                         f"{held_a:.2%}")
        for line in lines:
            console.print(line, markup=False, highlight=False)
        if out is not None:
            console.print(f"wrote {out}", markup=False, highlight=False)
