"""Small, fast configs for the sweep and search tests."""

from __future__ import annotations

from pathlib import Path

from pdsim.config import SimConfig
from pdsim.loader import load_config

REPO = Path(__file__).resolve().parents[2]
MTP3 = REPO / "configs" / "mtp3.yaml"
SMALL = ["workload.num_requests=120", "workload.prompt_tokens.tokens=256",
         "workload.output_tokens.tokens=24"]


def small_config(*extra: str) -> SimConfig:
    """configs/mtp3.yaml with 120 short requests (a run takes about 0.1 s)."""
    return load_config(MTP3, [*SMALL, *extra])
