"""``pdsim plot RESULT_DIR``: PNG plots of what ``pdsim run --out``, ``pdsim compare
--out`` or ``pdsim sweep --out`` wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pdsim.commands._options import out_path


def register(app: typer.Typer) -> None:
    """Add the ``plot`` command to ``app``."""
    from pdsim.commands._shared import console, user_errors

    @app.command()
    @user_errors
    def plot(
        result_dir: Annotated[Path, typer.Argument(
            help="A folder written by pdsim run --out, compare --out or sweep --out.")],
        out: Annotated[Path | None, typer.Option(parser=out_path,
            help="Write the PNG files here instead of RESULT_DIR.")] = None,
    ) -> None:
        """Plot a result folder: latency CDFs, per-position acceptance, KV usage, queue
        depth and throughput over time (before/after bars for a comparison; sweep.png,
        each metric against the swept parameter, for a sweep)."""
        from pdsim.plots import plot_result_dir

        files = plot_result_dir(result_dir, out)
        for f in files:
            console.print(f"wrote {f}", markup=False, highlight=False)
        if not (result_dir / "timeseries.csv").is_file() and (result_dir
                                                               / "summary.json").is_file():
            console.print("note: no timeseries.csv in the folder, so no KV usage or queue "
                          "depth plots", markup=False, highlight=False)
