"""Optional CLI commands, one module each.

Every module here defines ``register(app: typer.Typer) -> None``; ``pdsim.cli`` calls the
modules in name order, so adding a command never means editing the core CLI.

Command modules must not use ``from __future__ import annotations``: typer reads the
option types at run time, from the module's globals.
"""

from __future__ import annotations

import importlib
import pkgutil

import typer


def register_all(app: typer.Typer) -> None:
    """Register every command module of this package on ``app``."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    for name in names:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(app)
