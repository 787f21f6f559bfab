"""``pdsim serve CONFIG``: the simulated cluster behind vLLM's OpenAI-compatible HTTP API
and metrics, in real time (or ``--speed`` times faster); ``--out`` gets the run folder on
exit (docs/serve.md)."""

from pathlib import Path
from typing import Annotated

import typer

from pdsim.commands._options import ConfigArg, SeedOpt, SetOpt, out_path


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to ``app``."""
    from pdsim.commands._shared import console, err_console, user_errors

    @app.command()
    @user_errors
    def serve(
        config: ConfigArg,
        set_: SetOpt = None,
        seed: SeedOpt = None,
        host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(
            min=0, max=65535, help="Port of the API (the built-in proxy); 0: a free one.")
        ] = 8000,
        speed: Annotated[float, typer.Option(
            min=0.001, max=1000.0,
            help="Simulated seconds per wall second: 10 divides every latency by 10.")
        ] = 1.0,
        pd_endpoints: Annotated[bool, typer.Option(
            "--pd-endpoints",
            help="Also serve each instance on its own port (port+1, port+2, ... in config "
                 "order; free ones with --port 0) with vLLM's disaggregated semantics "
                 "(kv_transfer_params).")] = False,
        served_model_name: Annotated[str | None, typer.Option(
            help="The model name the API answers to (default: the config's model.name).")
        ] = None,
        max_pending: Annotated[int | None, typer.Option(
            min=1, help="Requests in flight above which the API answers 503.")] = None,
        out: Annotated[Path | None, typer.Option(
            parser=out_path,
            help="On exit (Ctrl-C, SIGTERM) write the run folder pdsim run --out writes, "
                 "for the requests served, plus arrivals.jsonl, the request log that "
                 "config.resolved.yaml replays.")] = None,
    ) -> None:
        """Serve CONFIG's cluster over vLLM's OpenAI-compatible API (/v1/completions,
        /v1/chat/completions, /v1/models, /health, /version, /metrics) until Ctrl-C or
        SIGTERM."""
        import asyncio
        import dataclasses

        from pdsim.commands._shared import load, print_config_warnings

        try:
            from pdsim.serve.app import ServeState
            from pdsim.serve.server import run_servers
        except ImportError as exc:
            err_console.print(f"error: pdsim serve needs the serve extra (pip install "
                              f"'pdsim[serve]'): {exc}", markup=False, highlight=False)
            raise typer.Exit(2) from None
        from pdsim.report import summary_table
        from pdsim.serve.replay import log_jsonl, replay_config

        cfg = load(config, set_, seed)
        print_config_warnings(cfg)
        if out is not None:
            from pdsim.run_folder import prepare_out_dir

            prepare_out_dir(out)

        def warn(text: str) -> None:
            err_console.print(f"warning: {text}", markup=False, highlight=False)

        state = ServeState(cfg, speed, served_model_name, max_pending, host, warn)
        said = [f"pdsim serve: {cfg.name}, model {state.model_name}, "
                f"{len(state.cluster.instances())} instance(s); --speed {speed:g}"
                + ("" if speed == 1 else f": every latency divided by {speed:g}")]

        def announce(what: str, h: str, p: int) -> None:
            if what == "main":  # announced last, once every port listens
                said.append(f"listening on http://{h}:{p} (OpenAI API, built-in proxy)")
            else:
                role = state.cluster.sim.by_name[what].role.value
                said.append(f"{role} instance {what} on http://{h}:{p}")
            for line in said:
                print(line, flush=True)
            said.clear()

        asyncio.run(run_servers(state, host, port, pd_endpoints, announce))
        res = state.cluster.results()
        in_flight = len(state.cluster.live) + len(state.cluster.held)
        res.partial = in_flight > 0
        print(f"pdsim serve: stopped; {len(state.log)} request(s) served, "
              f"{in_flight} still in flight; clock lag at most "
              f"{state.driver.max_lag_s:.4f} s (wall)", flush=True)
        if out is not None:
            from pdsim.output import write_atomic
            from pdsim.writers import write_run

            log_path = str(out / "arrivals.jsonl")
            if state.log:
                res = dataclasses.replace(res, config=replay_config(state.config, log_path))
            write_run(res, out)
            write_atomic(log_path, log_jsonl(state.log))
            console.print(f"wrote {out}/ (replay: pdsim run {out}/config.resolved.yaml)",
                          markup=False, highlight=False)
            if state.client_handovers:
                console.print(f"note: {state.client_handovers} request(s) took a client's "
                              f"P -> D hand-over (--pd-endpoints); a replay hands them over "
                              f"at once through the router, so their records differ",
                              markup=False, highlight=False)
        console.print(summary_table(res.summary, title=f"pdsim serve: {cfg.name}"
                                    + (" (PARTIAL: requests in flight)" if res.partial
                                       else "")))
