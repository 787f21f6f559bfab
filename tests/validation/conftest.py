"""Make the repository's ``validation`` package importable (it is not installed with pdsim)."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    # appended, so an installed or PYTHONPATH pdsim keeps precedence
    sys.path.append(_ROOT)
