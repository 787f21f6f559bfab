"""What every ``pdsim`` command shares: the consoles, the user-error wrapper, the progress
bar and config loading. ``pdsim.cli`` and the command modules both import from here, so the
command modules never import ``pdsim.cli``.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pdsim.errors import PdsimError

if TYPE_CHECKING:
    from pdsim.config import SimConfig

console = Console(width=None if sys.stdout.isatty() else 120)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)

F = TypeVar("F", bound=Callable[..., Any])


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


def simulation_progress() -> tuple[Progress, Callable[[int, int], None]]:
    """A transient ``simulating`` bar on stderr and the callback that advances it."""
    prog = Progress(TextColumn("[bold]simulating"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err_console, transient=True,
                    disable=not err_console.is_terminal)
    task = prog.add_task("sim", total=None)

    def update(done: int, total: int) -> None:
        prog.update(task, completed=done, total=total)

    return prog, update


def load(config: Path, overrides: list[str] | None, seed: int | None = None) -> SimConfig:
    """``load_config`` with the CLI's ``--set`` overrides and ``--seed``."""
    from pdsim.loader import load_config

    return load_config(config, overrides or [], seed=seed)
