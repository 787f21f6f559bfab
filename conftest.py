"""Test lanes.

The **default** lane is what `.venv/bin/pytest` runs: every test but the docs lane, the one to
run often. The **docs** lane (`pytestmark = pytest.mark.docs_lane` in a test file) executes the
README's and docs' commands, the notebook and the validation rows: slow, and it only moves when
the docs or a default figure do. `--lanes all` (what `.ci/run` passes) runs both; `--lanes docs`
the docs lane alone. `PDSIM_TEST_LANES` sets the same when no option is given. A test file
named on the command line runs whatever its lane (`pytest tests/core/test_core_docs_regen.py`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

LANES = ("default", "docs", "all")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lanes", choices=LANES, default=None,
        help="which test lanes to run: default (all but the docs lane), docs, or all "
             "(default: $PDSIM_TEST_LANES, else 'default')")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "docs_lane: executes docs, the notebook or validation rows (--lanes docs/all)")


def _lanes(config: pytest.Config) -> str:
    chosen = config.getoption("--lanes") or os.environ.get("PDSIM_TEST_LANES") or "default"
    if chosen not in LANES:
        raise pytest.UsageError(
            f"PDSIM_TEST_LANES: {chosen!r} is not a lane; allowed: {', '.join(LANES)}")
    return chosen


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lanes = _lanes(config)
    if lanes == "all":
        return
    want_docs = lanes == "docs"
    named = {Path(arg.split("::")[0]).resolve() for arg in config.args}
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        in_lane = (item.get_closest_marker("docs_lane") is not None) == want_docs
        (keep if in_lane or item.path in named else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
