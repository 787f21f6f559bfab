"""Running ``pdsim serve``: the ports (uvicorn, one server each, on one event loop), the
driver, and a clean stop on SIGINT or SIGTERM. Writes nothing: ``run_servers`` returns
when the servers have stopped, and the command reads the state and writes ``--out``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator

import prometheus_client
import uvicorn
from starlette.applications import Starlette

from pdsim.errors import PdsimError
from pdsim.serve.app import ServeState, build_app

#: seconds open streams get to finish once a stop is asked for
GRACEFUL_STOP_S = 2
BACKLOG = 2048


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to ``run_servers`` (uvicorn's own handling
    re-raises the signal once it stops, which would end the process before the records
    are written)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _config(app: Starlette, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                          access_log=False, timeout_graceful_shutdown=GRACEFUL_STOP_S)


class PortError(PdsimError):
    """A port ``pdsim serve`` cannot listen on."""


def listen(host: str, port: int, what: str) -> socket.socket:
    """A bound socket for ``what`` (``PortError``, ``error: --port: ...``, when the port
    is taken or the host unknown)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family = infos[0][0]
        # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on sockets that say so,
        # and without it every streamed chunk waits for the client's delayed ACK
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)  # connections wait in the backlog until uvicorn accepts them
    except OSError as exc:
        raise PortError(f"--port: cannot listen on {host}:{port} for {what}: "
                        f"{exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


async def run_servers(state: ServeState, host: str, port: int, pd_endpoints: bool,
                      announce: Callable[[str, str, int], None]) -> None:
    """Serve until SIGINT or SIGTERM. ``announce(what, host, port)`` is called once per
    port once it is bound (``what``: ``main`` or an instance's name); port 0 takes a
    free one, and under ``--pd-endpoints`` the instances then take free ones too (else
    ``port + 1``, ``port + 2``, ... in the config's instance order)."""
    targets: list[tuple[str, int]] = [("main", port)]
    if pd_endpoints:
        for i, inst in enumerate(state.cluster.instances()):
            targets.append((inst.name, 0 if port == 0 else port + 1 + i))
    socks: list[socket.socket] = []
    try:
        for what, p in targets:
            socks.append(listen(host, p, what))
    except PortError:
        for sock in socks:
            sock.close()
        raise
    bound = [(what, sock.getsockname()[1]) for (what, _), sock in zip(targets, socks,
                                                                      strict=True)]
    state.ports.update((what, p) for what, p in bound if what != "main")
    for what, p in bound[1:] + bound[:1]:  # the main port last: then every port listens
        announce(what, host, p)
    servers = [_Server(_config(build_app(state, None if what == "main" else what), host, p))
               for what, p in targets]
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # as vLLM
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def ask_stop() -> None:
        for s in servers:
            s.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, ask_stop)
    driver = asyncio.create_task(state.driver.run(stop))
    tasks = [asyncio.create_task(s.serve(sockets=[sock]))
             for s, sock in zip(servers, socks, strict=True)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        stop.set()
        state.driver.poke()
        await driver
