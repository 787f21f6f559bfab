"""Small configs and in-memory bench results shared by the calibration tests."""

from __future__ import annotations

from pathlib import Path

from pdsim import SimConfig, load_config, simulate
from pdsim.realdata import BenchResult, bench_result_from_dict
from pdsim.realdata.bench_synthesis import run_bench_result

ROOT = Path(__file__).resolve().parents[2]
MTP3 = ROOT / "configs" / "mtp3.yaml"
EXAMPLE_CONFIG = ROOT / "configs" / "calibration_example.yaml"
EXAMPLE_RESULT = ROOT / "examples" / "real" / "bench_result.json"

# About 100 short requests: a simulation takes well under 0.1 s.
SMALL = ["workload.num_requests=100", "workload.arrivals.rate_per_s=6",
         "workload.prompt_tokens={kind: uniform, mean_tokens: 1024, range_ratio: 0.5}",
         "workload.output_tokens={kind: uniform, mean_tokens: 64, range_ratio: 0.5}"]


def small_config(*overrides: str) -> SimConfig:
    """configs/mtp3.yaml (1P1D, MTP-3, simple step time) with a small workload."""
    return load_config(MTP3, [*SMALL, *overrides])


def result_of(cfg: SimConfig, name: str = "pdsim") -> BenchResult:
    """Simulate ``cfg`` and read the run back as a ``vllm bench serve`` result."""
    return bench_result_from_dict(run_bench_result(simulate(cfg)), name)
