"""Every YAML example in docs/workloads.md validates (and runs, if its files ship)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from wl_stats import workload

from pdsim.rng import RandomStreams
from pdsim.workload import generate_requests

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

DOC = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_doc_has_examples() -> None:
    assert len(BLOCKS) >= 12


@pytest.mark.parametrize("text", BLOCKS)
def test_doc_example(text: str) -> None:
    data = yaml.safe_load(text)
    assert list(data) == ["workload"]
    cfg = workload(data["workload"])
    path = cfg.trace.path if cfg.trace is not None else "pkg:"
    if path.startswith("pkg:"):
        specs = generate_requests(cfg, RandomStreams(0))
        assert len(specs) > 0
