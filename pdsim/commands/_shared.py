"""What every ``pdsim`` command shares: the consoles, logging, the user-error wrapper,
progress (a bar on a terminal, log lines otherwise) and config loading. ``pdsim.cli`` and
the command modules both import from here, so the command modules never import
``pdsim.cli``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from pdsim.errors import PdsimError

if TYPE_CHECKING:
    from pdsim.config import SimConfig

console = Console(width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)

F = TypeVar("F", bound=Callable[..., Any])
PROGRESS_INTERVAL_S = 10.0
"""Seconds between two progress lines in a log that is not a terminal."""
_log = logging.getLogger("pdsim")


def user_errors(fn: F) -> F:
    """Turn pdsim's user-facing errors into ``error: ...`` and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PdsimError as exc:
            _print_error(str(exc))
            raise typer.Exit(2) from None
        except OSError as exc:  # a file pdsim writes or reads, gone wrong under it
            where = exc.filename if exc.filename is not None else "file system"
            _print_error(f"{where}: {exc.strerror or exc}")
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _print_error(text: str) -> None:
    for line in text.splitlines() or ["unknown error"]:
        err_console.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, Slurm, Kubernetes) delivered while a command ran: handled
    where Ctrl-C is (a ``KeyboardInterrupt``), so what finished is kept."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``); the
    previous handler comes back after it. A no-op off the main thread."""

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupt_exit_code(exc: BaseException) -> int:
    """The shell's exit code for an interrupt: 128 + the signal's number."""
    return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (test runners swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(verbosity: int) -> None:
    """Send the ``pdsim`` logger to stderr: INFO by default (progress lines when stderr
    is not a terminal), DEBUG with ``-v``, only warnings and errors with ``-q``."""
    level = (logging.DEBUG if verbosity > 0 else logging.INFO if verbosity == 0
             else logging.WARNING)
    log = logging.getLogger("pdsim")
    for handler in list(log.handlers):
        if isinstance(handler, _StderrHandler):
            log.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s",
                                           datefmt="%Y-%m-%dT%H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def _fmt_s(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class LogProgress:
    """Progress as plain log lines, for logs that are not a terminal (CI, nohup, Slurm):
    an INFO line every ``interval_s`` seconds at most, and one when the work is done if
    any came before (work done within the first interval logs nothing), each with
    done/total, the elapsed time and an ETA (elapsed x remaining / done)."""

    def __init__(self, label: str, interval_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.interval_s = PROGRESS_INTERVAL_S if interval_s is None else interval_s
        self._clock = clock
        self._start = clock()
        self._last: float | None = None
        self._finished = False

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, done: int, total: int) -> None:
        now = self._clock()
        finished = total > 0 and done >= total
        if finished and self._last is None and not self._finished:
            self._finished = True  # done within the first interval: a debug line only
            _log.debug("%s: %d/%d done in %s", self.label, done, total,
                       _fmt_s(now - self._start))
            return
        if finished and self._finished:
            return
        due = now - (self._start if self._last is None else self._last) >= self.interval_s
        if not (due or finished):
            return
        self._last = now
        self._finished = finished
        elapsed = now - self._start
        if total > 0:
            pct = f" ({100.0 * done / total:.0f}%)"
            eta = (f", ETA {_fmt_s(elapsed * (total - done) / done)}" if 0 < done < total
                   else "")
        else:
            pct = eta = ""
        of = f"/{total}" if total > 0 else ""
        _log.info("%s: %d%s%s, elapsed %s%s", self.label, done, of, pct, _fmt_s(elapsed),
                  eta)


def progress_display(label: str) -> tuple[AbstractContextManager[Any],
                                          Callable[[int, int], None]]:
    """Progress for ``label`` and the ``(done, total)`` callback that advances it: a
    transient bar with an ETA on a terminal, periodic log lines (``LogProgress``)
    otherwise."""
    if not err_console.is_terminal:
        lp = LogProgress(label)
        return lp, lp.update
    prog = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=err_console, transient=True)
    task = prog.add_task(label, total=None)

    def update(done: int, total: int) -> None:
        prog.update(task, completed=done, total=total)

    return prog, update


def simulation_progress(name: str | None = None
                        ) -> tuple[AbstractContextManager[Any], Callable[[int, int], None]]:
    """``progress_display`` for requests of a simulation (``name``: which one, when a
    command runs several)."""
    return progress_display(f"simulating {name} (requests)" if name else
                            "simulating (requests)")


def print_config_warnings(*cfgs: SimConfig) -> None:
    """``cfg.warnings`` (fits borrowed from another model or GPU, ignored settings) on
    stderr, one ``warning:`` line each, every distinct one once over ``cfgs`` (a sweep's
    points): wherever a run starts, as ``show-config`` shows them."""
    for warning in dict.fromkeys(w for cfg in cfgs for w in cfg.warnings):
        err_console.print(f"warning: {warning}", markup=False, highlight=False)


def load(config: Path, overrides: list[str] | None, seed: int | None = None) -> SimConfig:
    """``load_config`` with the CLI's ``--set`` overrides and ``--seed``."""
    from pdsim.loader import derived_values, load_config

    cfg = load_config(config, overrides or [], seed=seed)
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("config %s: name %s, seed %d, %d override(s)", config, cfg.name, cfg.seed,
                   len(overrides or []))
        for key, value in derived_values(cfg).items():
            _log.debug("derived %s: %s", key, value)
    return cfg
