"""``pdsim report RESULT_DIR``: a self-contained interactive HTML page (``report.html``) of
what ``pdsim run --out``, ``pdsim compare --out`` or ``pdsim sweep --out`` wrote."""

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to ``app``."""
    from pdsim.commands._shared import console, user_errors

    @app.command()
    @user_errors
    def report(
        result_dir: Annotated[Path, typer.Argument(
            help="A folder written by pdsim run --out, compare --out or sweep --out.")],
    ) -> None:
        """Write RESULT_DIR/report.html: summary tables, latency CDFs, time series,
        per-position acceptance, the before/after comparison or the sweep curves, and the
        resolved config, as interactive plotly charts that work offline (needs
        pip install 'pdsim[report]')."""
        from pdsim.html_report import report_dir_html, write_report
        from pdsim.run_folder import reseal

        path = write_report(result_dir, report_dir_html(result_dir))
        reseal(result_dir, [path])  # a page --report sealed, written again
        console.print(f"wrote {path}", markup=False, highlight=False)
