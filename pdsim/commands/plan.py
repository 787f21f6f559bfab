"""``pdsim plan``: the best deployment of CONFIG's model on ``--gpus`` GPUs under its SLOs.

No ``from __future__ import annotations`` here: typer reads the option types at runtime
from this module's globals.
"""

import math
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from pdsim.commands._options import SeedOpt, SetOpt, out_path

ConfigArg = Annotated[Path, typer.Argument(
    help="YAML config (model, hardware, workload, SLOs) with an optional plan: section.")]


def _num(v: Any, digits: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


def front_table(pl: Any, title: str) -> Table:
    """The Pareto front, best output tokens/s per GPU first."""
    t = Table(title=title, header_style="bold")
    for col in ("#", "deployment", "rate req/s", "out tok/s/GPU", "tok/s/user",
                "goodput req/s/GPU", "ties"):
        t.add_column(col, justify="left" if col == "deployment" else "right")
    for i in pl.front:
        p = pl.points[i]
        t.add_row(("* " if p.chosen else "") + str(p.index), p.label, _num(p.rate_per_s, 3),
                  _num(p.tok_s_per_gpu), _num(p.tok_s_per_user), _num(p.goodput_per_gpu, 4),
                  ",".join(map(str, p.ties)) or "-")
    return t


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
    def plan(
        config: ConfigArg,
        gpus: Annotated[int | None, typer.Option(
            help="GPU budget; every candidate uses all of it (default: plan.gpus).")] = None,
        out: Annotated[Path, typer.Option(parser=out_path,
            help="Output folder: plan.csv, plan.json, plan.png, report.html, front/, "
                 "cache/ (a rerun resumes from it).")] = Path("plan-out"),
        set_: SetOpt = None,
        seed: SeedOpt = None,
        objective: Annotated[str | None, typer.Option(
            help="goodput (each candidate at its highest SLO-meeting rate) or workload "
                 "(at the config's rate); default: plan.objective.")] = None,
        mode: Annotated[list[str] | None, typer.Option(
            metavar="MODE",
            help="Only this deployment mode (colocated, disaggregated; repeatable).")] = None,
        mtp: Annotated[list[int] | None, typer.Option(
            metavar="N", help="Only these draft-token counts (repeatable).")] = None,
        tol: Annotated[float | None, typer.Option(
            help="Rate bisection tolerance (default: plan.tol, 0.05).")] = None,
        min_requests: Annotated[int | None, typer.Option(
            help="Requests per simulated rate at least (default: plan.min_requests).")
        ] = None,
        prune: Annotated[bool, typer.Option(
            help="Skip candidates whose roofline TPOT bound misses the SLO.")] = True,
        backend: Annotated[str, typer.Option(
            help="local (process pool) or dask (dask.distributed).")] = "local",
        workers: Annotated[int | None, typer.Option(
            help="Local processes (default: CPU count; 1 runs inline), or LocalCluster "
                 "workers for --backend dask without --address.")] = None,
        address: Annotated[str | None, typer.Option(
            help="Dask scheduler address (default: a LocalCluster).")] = None,
        force: Annotated[bool, typer.Option(help="Recompute runs already in --out/cache.")
                         ] = False,
        round_trip: Annotated[bool, typer.Option(
            help="With plan.hf_config: import every front point's serve lines back, "
                 "simulate the imported deployment and compare.")] = True,
        report: Annotated[bool, typer.Option(
            help="Write --out/report.html (needs pdsim[report]).")] = True,
        json_: Annotated[bool, typer.Option("--json", help="Print plan.json.")] = False,
    ) -> None:
        """Search deployments of CONFIG's model on --gpus GPUs; the Pareto front of output
        tokens/s per GPU against tokens/s per user under the SLOs, with vllm serve lines."""
        from pdsim.errors import ConfigError
        from pdsim.output import write_atomic
        from pdsim.plan import plan as run_plan
        from pdsim.plan import read_plan_config
        from pdsim.plan.front import VALIDATION_ERROR
        from pdsim.plan.outputs import (
            front_files,
            front_plot_png,
            plan_csv,
            plan_document,
            report_html,
            to_json_text,
        )
        from pdsim.run_folder import prepare_out_dir

        if backend not in ("local", "dask"):
            raise ConfigError("--backend", f"unknown backend {backend!r}; allowed: local, dask")
        if report:
            from pdsim.html_report import require_plotly

            require_plotly()
        cfg, spec = read_plan_config(config, set_ or [], seed=seed)
        update: dict[str, Any] = {}
        for key, value in (("objective", objective), ("tol", tol),
                           ("min_requests", min_requests)):
            if value is not None:
                update[key] = value
        if mode:
            update["modes"] = tuple(mode)
        if mtp:
            update["num_speculative_tokens"] = tuple(mtp)
        if update:
            from pdsim.plan.spec import plan_spec

            spec = plan_spec({**spec.model_dump(mode="json"), **update}, "plan (flags)")
        budget = gpus if gpus is not None else spec.gpus
        if budget is None:
            raise ConfigError("--gpus", "give the GPU budget (--gpus N or plan.gpus)")
        print_config_warnings(cfg)
        prepare_out_dir(out)
        prog, tick = progress_display("plan runs")
        t0 = time.perf_counter()
        try:
            with prog, sigterm_as_interrupt():
                pl = run_plan(cfg, spec, budget, out_dir=out, backend=backend,
                              workers=workers, address=address, progress=tick, force=force,
                              prune=prune)
        except KeyboardInterrupt as exc:
            err_console.print(f"interrupted: the runs finished are kept in {out}/cache; "
                              f"rerun the same command to resume")
            raise typer.Exit(interrupt_exit_code(exc)) from None
        wall = time.perf_counter() - t0
        import resource

        # this process and every worker it waited for (pool workers are reaped each round)
        cpu = sum(getattr(resource.getrusage(who), f) for who in (
            resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
        doc = plan_document(pl, wall)
        doc["cpu_s"] = cpu
        write_atomic(out / "plan.csv", plan_csv(pl))
        write_atomic(out / "plan.json", to_json_text(doc))
        title = f"{cfg.name}: {budget} GPUs, {spec.objective}"
        write_atomic(out / "plan.png", front_plot_png(pl, title))
        hf = spec.hf_config
        for name, text in front_files(pl, spec.served_model, hf, str(out)).items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            write_atomic(out / name, text)
        if hf is not None and round_trip:
            import json as _json

            from pdsim.plan.serve_lines import check_round_trip

            hf_doc = _json.loads(Path(hf).read_text(encoding="utf-8"))
            checks = {}
            for i in pl.front:
                p = pl.points[i]
                assert p.config is not None
                checks[str(i)] = check_round_trip(p.config, p.figures, hf_doc,
                                                  spec.served_model)
            doc["round_trip"] = checks
            write_atomic(out / "plan.json", to_json_text(doc))
            bad = [k for k, v in checks.items() if not v["ok"]]
            err_console.print(f"round trip through import-vllm: {len(checks) - len(bad)} of "
                              f"{len(checks)} front points give the same deployment and "
                              f"figures" + (f"; not: {', '.join(bad)}" if bad else ""),
                              markup=False, highlight=False)
        counts = ", ".join(f"{v} {k}" for k, v in sorted(pl.counts.items()))
        notes = [f"{len(pl.points)} candidates ({counts}); {pl.runs_simulated} runs "
                 f"simulated, {pl.runs_cached} read from the cache, {pl.runs_shared} shared "
                 f"between candidates, in {pl.rounds} rounds; {wall:.1f} s wall, {cpu:.1f} s "
                 f"CPU (this process and its local workers).",
                 f"Ties: front points whose figures both differ by less than "
                 f"{VALIDATION_ERROR:.1%} (pdsim's median error on held-out absolute "
                 f"measurements, docs/validation.md) cannot be ranked by pdsim."]
        if report:
            from pdsim.html_report import write_report

            write_report(out, report_html(pl, f"pdsim plan: {title}", notes))
        if json_:
            sys.stdout.write(to_json_text(doc))
            return
        console.print(front_table(pl, f"pdsim plan: {title}, Pareto front "
                                      f"(* chosen)"))
        for n in notes:
            console.print(n, markup=False, highlight=False, soft_wrap=True)
        if pl.chosen is None:
            console.print("no candidate meets the SLOs", markup=False)
        else:
            c = pl.points[pl.chosen]
            console.print(f"chosen: {c.label}: {c.tok_s_per_gpu:.1f} output tok/s per GPU, "
                          f"{c.tok_s_per_user:.1f} tok/s per user, "
                          f"{c.goodput_per_gpu:.4g} req/s of goodput per GPU",
                          markup=False, highlight=False, soft_wrap=True)
            for key in ("fitted", "borrowed", "not_fitted"):
                items = c.provenance.get(key) or ["-"]
                console.print(f"  {key.replace('_', ' ')}: {'; '.join(items)}",
                              markup=False, highlight=False, soft_wrap=True)
            if any(ch.layout.dp > 1 for _, ch in c.candidate.roles):
                console.print("  caution: attention data parallelism with expert parallelism "
                              "is validated on few deployments (docs/validation.md, rows 23, "
                              "24, 39 and 40: DeepSeek-R1 at maximum throughput, near the "
                              "30% tolerance)",
                              markup=False, highlight=False, soft_wrap=True)
            b = pl.baseline
            if b is not None:
                verdict = ("beats it" if c.goodput_per_gpu > b.goodput_per_gpu
                           else "does not beat it")
                console.print(f"the config as written ({cfg.name}): "
                              f"{b.goodput_per_gpu:.4g} req/s of goodput per GPU "
                              f"({b.status}); the chosen point {verdict}",
                              markup=False, highlight=False, soft_wrap=True)
        console.print(f"wrote {out}/plan.csv, plan.json, plan.png"
                      + (", report.html" if report else "")
                      + f" and front/ ({len(pl.front)} points: config.yaml, serve.sh"
                      + (", deployment.yaml" if hf is not None else "") + ")",
                      markup=False, highlight=False, soft_wrap=True)
