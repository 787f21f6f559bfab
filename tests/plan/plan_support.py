"""A small plan space for the tests: Llama-3.1-8B with an EAGLE-3 head on 2 H100s.

12 candidates (colocated 2 x TP1 or 1 x TP2, disaggregated 1 P + 1 D at TP1; 0 or 2 draft
tokens; two batch limits), each run at 60 short requests: a whole plan takes seconds.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from pdsim.config import SimConfig
from pdsim.loader import load_config
from pdsim.plan.spec import PlanSpec, plan_spec

REPO = Path(__file__).resolve().parents[2]
LLAMA_HF = REPO / "tests" / "data" / "hf_configs" / "Llama-3.1-8B.config.json"
DSV3_HF = REPO / "tests" / "data" / "hf_configs" / "DeepSeek-V3.config.json"
DSV3_PLAN = REPO / "configs" / "plan" / "deepseek_v3_h200.yaml"

SMALL: dict[str, Any] = {
    "name": "plan-small",
    "seed": 0,
    "model": {"profile": "llama-3.1-8b"},
    "speculative": {"method": "eagle3", "num_speculative_tokens": 2,
                    "acceptance": {"kind": "per_position", "rates": [0.7, 0.5]}},
    "step_time": {"kind": "roofline", "hardware": "h100-sxm", "tensor_parallel_size": 1},
    "cluster": {"mode": "colocated", "colocated": {
        "count": 2, "scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 2048,
                                  "block_size": 16}}},
    "workload": {"num_requests": 60, "arrivals": {"kind": "poisson", "rate_per_s": 8.0},
                 "prompt_tokens": {"kind": "fixed", "tokens": 256},
                 "output_tokens": {"kind": "fixed", "tokens": 32}},
    "slo": {"ttft_s": 0.1, "tpot_s": 0.02, "percentile": 90},
}
SMALL_PLAN: dict[str, Any] = {
    "gpus": 2, "num_speculative_tokens": [0, 2], "min_requests": 100, "tol": 0.2,
    "decode": {"max_num_seqs": [4, 32]}, "colocated": {"max_num_seqs": [4, 32]},
    "served_model": "meta-llama/Llama-3.1-8B",
}


def small_config(**slo: float) -> SimConfig:
    data = copy.deepcopy(SMALL)
    data["slo"].update(slo)
    return load_config(data)


def small_spec(**changes: Any) -> PlanSpec:
    return plan_spec({**SMALL_PLAN, **changes})


def write_small(path: Path, plan: dict[str, Any] | None = None) -> Path:
    """The small config with its ``plan:`` section, as a YAML file."""
    doc = {**copy.deepcopy(SMALL), "plan": plan if plan is not None else SMALL_PLAN}
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path
