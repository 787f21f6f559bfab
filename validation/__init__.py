"""pdsim against published measurements: one row per measurement, one command for the table.

Each row file in ``validation/rows/`` names a published figure (value, unit, source, the
table or figure it comes from, what had to be assumed), a pdsim configuration that
reproduces its setup, how to read pdsim's figure from the run(s), a tolerance and a role
(``fit``: the step-time helper may fit defaults to it; ``holdout``: kept out of every fit).

``python -m validation`` runs every row; ``--write`` regenerates ``docs/validation.md``
and ``--check`` compares it without writing.
"""

from validation.harness import RowResult, run_row, run_rows
from validation.rows import Row, load_rows

__all__ = ["Row", "RowResult", "load_rows", "run_row", "run_rows"]
