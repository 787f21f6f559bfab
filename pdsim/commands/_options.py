"""Command-line options several ``pdsim`` commands share.

No ``from __future__ import annotations`` in the modules that use these: typer reads the
option types at runtime from their globals.
"""

from pathlib import Path
from typing import Annotated

import typer

SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", "-s", metavar="KEY=VALUE",
    help="Override a config value: dotted.key=value (repeatable).")]
SeedOpt = Annotated[int | None, typer.Option(help="Random seed (overrides the config's).")]
ConfigArg = Annotated[Path, typer.Argument(help="YAML config file.")]


def out_path(text: str) -> Path:
    """An output path given on the command line. Empty (``--out "$UNSET"``) is refused:
    ``Path("")`` is the working folder, which the command would write into unasked."""
    if not text.strip():
        raise typer.BadParameter("is empty (an unset variable?); an empty path would "
                                 "write into the working folder, so name the folder")
    return Path(text)
