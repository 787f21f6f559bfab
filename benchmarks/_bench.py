"""Shared helpers of the benchmark scripts: where results go and what produced them."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
CACHE = RESULTS / "cache"


def provenance() -> dict[str, str]:
    """Date, commit (with ``+dirty`` when the tree has changes), machine: for the README."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no", "--", "pdsim"):
        commit += "+dirty"
    return {
        "date": dt.date.today().isoformat(),
        "commit": commit,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
