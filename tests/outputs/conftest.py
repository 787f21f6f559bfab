"""Shared runs for the output tests: small, simulated once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

import pdsim
from pdsim.compare import Comparison, compare
from pdsim.results import Results

ROOT = Path(__file__).resolve().parents[2]
MTP3 = ROOT / "configs" / "mtp3.yaml"


@pytest.fixture(scope="session")
def mtp3_cfg() -> pdsim.SimConfig:
    return pdsim.load_config(MTP3, overrides=["workload.num_requests=120"])


@pytest.fixture(scope="session")
def mtp3_res(mtp3_cfg: pdsim.SimConfig) -> Results:
    return pdsim.simulate(mtp3_cfg)


@pytest.fixture(scope="session")
def mtp3_cmp(mtp3_cfg: pdsim.SimConfig) -> Comparison:
    return compare(mtp3_cfg, colocated=True)


@pytest.fixture(scope="session")
def res_2p2d() -> Results:
    """Two prefill and two decode instances: four links, transfers that share them."""
    cfg = pdsim.load_config(MTP3, overrides=[
        "workload.num_requests=150", "workload.arrivals.rate_per_s=12",
        "cluster.prefill.count=2", "cluster.decode.count=2"])
    return pdsim.simulate(cfg)
