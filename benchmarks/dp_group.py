"""Attention-DP engines: what lockstep ranks cost in simulated time and in wall time.

DeepSeek-R1 FP8 on 8 H200 with attention DP + EP8, colocated, a closed loop of 1,024
(validation row ``trtllm-dsr1-h200-maxtput``'s config), run two ways: as 8 lone
instances (``attention_dp_size: 1``, each priced as if every rank carried its batch) and
as one attention-DP engine of 8 ranks under each rank balance (each padding to the largest
rank as its backend does, and two without padding). Once with the row's fixed
lengths (the ranks stay balanced) and once with lengths drawn uniformly within +-90% of
1,024 / 2,048 (the ranks' batches drift apart). Prints output throughput, mean TPOT and
the wall time of each run (prints only).

    .venv/bin/python benchmarks/dp_group.py [--requests 2048]
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path
from typing import Any

import yaml

from pdsim.loader import load_config
from pdsim.simulation import simulate

ROW = Path(__file__).resolve().parents[1] / "validation" / "rows" / \
    "23_trtllm-dsr1-h200-maxtput.yaml"
# (label, attention_dp_size, attention_dp_balance, attention_dp_padding: None = the
# balance's backend rule)
VARIANTS: tuple[tuple[str, int, str, str | None], ...] = (
    ("8 lone instances", 1, "vllm", None),
    ("engine, trtllm balance", 8, "trtllm", None),
    ("engine, vllm balance", 8, "vllm", None),
    ("engine, sglang round robin", 8, "sglang_round_robin", None),
    ("engine, trtllm, no padding", 8, "trtllm", "none"),
    ("engine, vllm, no padding", 8, "vllm", "none"),
)


def config(requests: int, dp: int, balance: str, uneven: bool,
           padding: str | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = copy.deepcopy(yaml.safe_load(ROW.read_text())["config"])
    cfg["workload"]["num_requests"] = requests
    group = cfg["cluster"]["colocated"]
    group.update(attention_dp_size=dp, attention_dp_balance=balance)
    if padding is not None:
        group["attention_dp_padding"] = padding
    if uneven:
        cfg["workload"]["prompt_tokens"] = {"kind": "uniform", "mean_tokens": 1024,
                                            "range_ratio": 0.9}
        cfg["workload"]["output_tokens"] = {"kind": "uniform", "mean_tokens": 2048,
                                            "range_ratio": 0.9}
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2048)
    args = ap.parse_args()
    print(f"{'lengths':8s} {'deployment':28s} {'tok/s':>9s} {'TPOT ms':>8s} {'wall s':>7s}")
    for uneven in (False, True):
        for label, dp, balance, padding in VARIANTS:
            t = time.perf_counter()
            cfg = config(args.requests, dp, balance, uneven, padding)
            s = simulate(load_config(cfg)).summary
            wall = time.perf_counter() - t
            print(f"{'uneven' if uneven else 'fixed':8s} {label:28s} "
                  f"{s['output_throughput_tok_s']:9.0f} {s['mean_tpot_s'] * 1e3:8.2f} "
                  f"{wall:7.1f}")


if __name__ == "__main__":
    main()
