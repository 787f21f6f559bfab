"""``pdsim search``: the highest SLO-meeting request rate, and the best P:D split.

No ``from __future__ import annotations`` here: typer reads the option types at runtime
from this module's globals.
"""

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from pdsim.commands._options import SeedOpt, SetOpt

ConfigArg = Annotated[Path, typer.Argument(help="YAML config file (with an slo section).")]


def _ms(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1e3:.1f}"


def _num(v: Any, digits: int = 3) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def trials_table(trials: list[Any], pct: float, title: str) -> Table:
    """Every rate simulated, in the order tried."""
    t = Table(title=title, header_style="bold")
    for col in ("rate req/s", "requests", f"p{pct:g} TTFT ms", f"p{pct:g} TPOT ms",
                "SLO attainment %", "goodput req/s", "SLOs met"):
        t.add_column(col, justify="right")
    for tr in trials:
        t.add_row(_num(tr.rate_per_s), str(tr.num_requests), _ms(tr.slo_ttft_percentile_s),
                  _ms(tr.slo_tpot_percentile_s), _num(tr.slo_attainment * 100, 1),
                  _num(tr.goodput_req_s), "yes" if tr.slo_met else "no")
    return t


def splits_table(splits: list[Any], title: str) -> Table:
    """P:D splits, best goodput per GPU first."""
    t = Table(title=title, header_style="bold")
    for col in ("rank", "P:D", "GPUs", "max rate req/s", "goodput req/s", "goodput/GPU",
                "out tok/s/GPU", "SLO attainment %", "runs"):
        t.add_column(col, justify="right")
    for i, s in enumerate(splits, 1):
        t.add_row(str(i), f"{s.prefill_count}:{s.decode_count}", str(s.gpus),
                  _num(s.rate_per_s), _num(s.goodput_req_s), _num(s.goodput_per_gpu),
                  _num(s.output_throughput_tok_s / s.gpus, 1), _num(s.slo_attainment * 100, 1),
                  str(s.num_trials))
    return t


def register(app: typer.Typer) -> None:
    from pdsim.commands._shared import (
        console,
        err_console,
        print_config_warnings,
        progress_display,
        user_errors,
    )

    @app.command()
    @user_errors
    def search(
        config: ConfigArg,
        set_: SetOpt = None,
        seed: SeedOpt = None,
        lo: Annotated[float | None, typer.Option(
            help="Lower end of the starting bracket (req/s).")] = None,
        hi: Annotated[float | None, typer.Option(
            help="Upper end of the starting bracket (req/s).")] = None,
        tol: Annotated[float, typer.Option(
            help="Stop when the bracket is within this fraction of its upper end.")] = 0.02,
        min_requests: Annotated[int, typer.Option(
            help="Requests per run at least (short runs meet SLOs spuriously).")] = 1000,
        gpu_budget: Annotated[int | None, typer.Option(
            help="Also rank every P:D split of this many GPUs by goodput per GPU.")] = None,
        gpus_per_instance: Annotated[int | None, typer.Option(
            help="GPUs per instance (default: the roofline's tensor_parallel_size, "
                 "else 1).")] = None,
        workers: Annotated[int, typer.Option(
            help="Processes searching P:D splits in parallel.")] = 1,
        json_: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    ) -> None:
        """Bisect the request rate for the highest one that meets CONFIG's SLOs."""
        from dataclasses import asdict

        from pdsim.loader import load_config
        from pdsim.output import to_json
        from pdsim.search import (
            best_pd_split,
            check_searchable,
            max_rate_meeting_slo,
            pd_splits,
        )

        cfg = load_config(config, set_ or [], seed=seed)
        slo = cfg.slo
        if gpu_budget is not None:  # refuse a split it cannot make before the rate search
            pd_splits(cfg, gpu_budget, gpus_per_instance)
        check_searchable(cfg)  # a config error first, then what the runs will rest on
        print_config_warnings(cfg)

        def show(tr: Any) -> None:
            err_console.print(f"  rate {tr.rate_per_s:.4g} req/s: "
                              f"{'meets' if tr.slo_met else 'misses'} the SLOs",
                              highlight=False)

        found = max_rate_meeting_slo(cfg, lo=lo, hi=hi, tol=tol, min_requests=min_requests,
                                     on_trial=None if json_ else show)
        splits = None
        if gpu_budget is not None:
            prog, update = progress_display("P:D splits")
            with prog:
                splits = best_pd_split(
                    cfg, gpu_budget, gpus_per_instance=gpus_per_instance, tol=tol,
                    min_requests=min_requests, workers=workers,
                    progress=update)
        if json_:
            doc: dict[str, Any] = {
                "rate_per_s": found.rate_per_s, "failing_rate_per_s": found.failing_rate_per_s,
                "trials": [asdict(t) for t in found.trials],
                "summary": found.summary.as_dict() if found.summary is not None else None}
            if splits is not None:
                doc["splits"] = [s.to_dict() for s in splits]
            sys.stdout.write(to_json(doc))
            return
        targets = ", ".join(
            f"{name} {getattr(slo, key) * 1e3:g} ms" for name, key in
            (("TTFT", "ttft_s"), ("TPOT", "tpot_s")) if getattr(slo, key) is not None)
        console.print(trials_table(found.trials, slo.percentile,
                                   f"{cfg.name}: p{slo.percentile:g} {targets}"))
        if found.rate_per_s is None:
            console.print(f"no rate tried meets the SLOs (lowest tried: "
                          f"{found.failing_rate_per_s:.4g} req/s)")
        else:
            s: Mapping[str, Any] = found.summary or {}
            fail = (f"; {found.failing_rate_per_s:.4g} req/s misses them"
                    if found.failing_rate_per_s is not None else "")
            console.print(f"highest rate meeting the SLOs: {found.rate_per_s:.4g} req/s "
                          f"(goodput {s.get('goodput_req_s', math.nan):.4g} req/s, "
                          f"output {s.get('output_throughput_tok_s', math.nan):.1f} tok/s)"
                          f"{fail}")
        if splits is not None:
            console.print(splits_table(splits, f"P:D splits of {gpu_budget} GPUs"))
            best = splits[0]
            console.print(f"best split: {best.prefill_count}P:{best.decode_count}D, "
                          f"{best.goodput_per_gpu:.4g} req/s of goodput per GPU")
