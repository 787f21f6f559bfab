"""Routing benchmark: every routing policy on a shared-prefix workload.

Two deployments of Llama-3.1-70B on H100s (roofline step times, TP 4, 24 GPUs each), with
prefix caching on every instance that prefills: P/D with 4 P and 2 D, and 6 colocated
instances. The workload (``workload.shared_prefix``) has 200 prefix groups of 8,192 tokens
(document-QA-like: 1.6M tokens of prefixes; Zipf popularity, exponent 0.8), each followed
by a unique suffix of 256..768 tokens, outputs of 100..300 tokens, Poisson arrivals. Each
instance's KV pool (120 GiB, about 393k tokens) holds the prefixes of about a quarter of
the groups, so where a request goes decides whether its prefix is computed again. Every
policy runs on the same requests (paired: the workload's streams do not depend on the
router); ``prefix_only`` is ``prefix_aware`` with the prefix term alone (no load terms).

For each deployment and policy it prints TTFT p50/p99, mean TPOT, goodput under the SLO
(TTFT <= 2 s and TPOT <= 50 ms at p90), the prefix-cache hit rate (prompt tokens found
cached / prompt tokens looked up) and the busiest prefilling instance's share of the
requests; it writes ``results/routing.csv``.

    .venv/bin/python benchmarks/routing.py [--requests 1500] [--rate 8] [--workers 2]
"""

from __future__ import annotations

import argparse
import csv
import io
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from _bench import RESULTS, provenance

from pdsim.loader import load_config
from pdsim.output import write_atomic
from pdsim.simulation import simulate

# (label, router overrides): every registered policy with its default weights, and
# prefix_aware with the prefix term alone (cache affinity without the load terms)
POLICIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("round_robin", ("router.policy=round_robin",)),
    ("random", ("router.policy=random",)),
    ("least_loaded", ("router.policy=least_loaded",)),
    ("kv_load_aware", ("router.policy=kv_load_aware",)),
    ("prefix_aware", ("router.policy=prefix_aware",)),
    ("cache_aware", ("router.policy=cache_aware",)),
    ("prefix_only", ("router.policy=prefix_aware",
                     "router.weights={queue: 0, kv_usage: 0, prefix: 1}")),
)
DEPLOYMENTS = ("pd_4p2d", "colocated_6")
GROUPS, PREFIX_TOKENS, KV_GIB = 200, 8192, 120.0
COLUMNS = ("deployment", "policy", "p50_ttft_s", "p99_ttft_s", "mean_tpot_s",
           "goodput_req_s", "slo_attainment", "prefix_cache_hit_rate", "busiest_share",
           "completed", "num_requests")


def _instances(count: int, seqs: int, budget: int, kv_gib: float | None,
               prefix_caching: bool) -> dict[str, Any]:
    return {"count": count, "kv_cache_gib": kv_gib,
            "scheduler": {"max_num_seqs": seqs, "max_num_batched_tokens": budget,
                          "block_size": 16, "enable_prefix_caching": prefix_caching}}


def base_config(deployment: str, requests: int, rate: float) -> dict[str, Any]:
    """The benchmark's config (a YAML-shaped mapping) for one deployment."""
    if deployment == "pd_4p2d":
        cluster = {"mode": "disaggregated",
                   "prefill": _instances(4, 32, 8192, KV_GIB, True),
                   "decode": _instances(2, 128, 2048, KV_GIB, False)}
    else:
        cluster = {"mode": "colocated", "colocated": _instances(6, 128, 8192, KV_GIB, True)}
    return {
        "name": f"routing-{deployment}",
        "seed": 0,
        "model": {"profile": "llama-3.1-70b"},
        "step_time": {"kind": "roofline", "hardware": "h100-sxm", "tensor_parallel_size": 4},
        "cluster": cluster,
        "slo": {"ttft_s": 2.0, "tpot_s": 0.05},
        "workload": {
            "num_requests": requests,
            "arrivals": {"kind": "poisson", "rate_per_s": rate},
            "shared_prefix": {"num_groups": GROUPS, "prefix_tokens": PREFIX_TOKENS,
                              "zipf_exponent": 0.8, "hash_block_tokens": 16},
            "prompt_tokens": {"kind": "uniform", "mean_tokens": 512, "range_ratio": 0.5},
            "output_tokens": {"kind": "uniform", "mean_tokens": 200, "range_ratio": 0.5},
        },
    }


def run_one(point: tuple[str, str, int, float]) -> dict[str, Any]:
    """One deployment under one policy: the table's row."""
    deployment, policy, requests, rate = point
    cfg = load_config(base_config(deployment, requests, rate), list(dict(POLICIES)[policy]))
    res = simulate(cfg)
    s = res.summary.as_dict()
    column = "decode_instance" if deployment.startswith("colocated") else "prefill_instance"
    spread = Counter(r[column] for r in res.records if r["status"] == "finished")
    return {
        "deployment": deployment, "policy": policy,
        **{k: s[k] for k in COLUMNS[2:] if k in s},
        "busiest_share": max(spread.values()) / max(1, sum(spread.values())),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    out = ["| deployment | policy | TTFT p50 s | TTFT p99 s | TPOT mean ms | goodput req/s "
           "| SLO met | prefix hit rate | busiest instance |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['deployment']} | {r['policy']} | {r['p50_ttft_s']:.3f} | "
                   f"{r['p99_ttft_s']:.3f} | {1e3 * r['mean_tpot_s']:.1f} | "
                   f"{r['goodput_req_s']:.2f} | {r['slo_attainment']:.1%} | "
                   f"{r['prefix_cache_hit_rate']:.1%} | {r['busiest_share']:.0%} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--rate", type=float, default=8.0, help="arrivals per second")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    points = [(d, p, args.requests, args.rate) for d in DEPLOYMENTS for p, _ in POLICIES]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(run_one, points))
    wall = time.perf_counter() - t0
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_atomic(RESULTS / "routing.csv", buf.getvalue())
    prov = provenance()
    print(table(rows))
    print(f"\n{len(points)} runs of {args.requests} requests at {args.rate:g}/s in "
          f"{wall:.1f} s; {prov['date']}, commit {prov['commit']}, {prov['machine']}")


if __name__ == "__main__":
    main()
