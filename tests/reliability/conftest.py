"""Fixtures shared by the reliability tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from rel_support import small

from pdsim.loader import load_config


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small run's folder as `pdsim run --out` writes it (the readers' fuzzers edit copies)."""
    from pdsim.simulation import simulate
    from pdsim.writers import write_run

    out = tmp_path_factory.mktemp("run") / "o"
    write_run(simulate(load_config(small({"workload": {"num_requests": 5}}))), out)
    return out
