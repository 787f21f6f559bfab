"""Memory and time of writing a run folder for the largest clusters the bounds allow.

Builds a P/D cluster of ``--pools`` pools per role of ``--per-pool`` instances each (default
5 x 1,000 P and 5 x 1,000 D: 10,000 instances; a pool holds at most 1,024), simulates
``--requests`` requests on it, then writes the run folder (``pdsim run --out``'s files,
without plots) and prints the peak resident memory before and after the write, the write's
wall time and the size of ``timeseries.csv`` (one row per instance per time bin, the
largest file). Issue 26: the writer streams timeseries.csv a track at a time, so its
memory is one track's, not every instance's rows.

    .venv/bin/python benchmarks/writer_memory.py [--pools 5] [--per-pool 1000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from _bench import provenance

from pdsim.loader import load_config
from pdsim.simulation import simulate
from pdsim.writers import write_run


def _config(pools: int, per_pool: int, requests: int) -> dict[str, object]:
    sched = {"max_num_seqs": 16, "max_num_batched_tokens": 512, "block_size": 16,
             "num_blocks": 512}
    return {
        "name": "writer-memory",
        "model": {"layer_groups": [{"kind": "attention", "num_layers": 4,
                                    "kv_bytes_per_token_per_layer": 256}],
                  "max_model_len": 2048},
        "cluster": {
            "prefill": [{"name": f"p{i}", "count": per_pool, "scheduler": sched}
                        for i in range(pools)],
            "decode": [{"name": f"d{i}", "count": per_pool, "scheduler": sched}
                       for i in range(pools)]},
        "workload": {"num_requests": requests,
                     "arrivals": {"kind": "poisson", "rate_per_s": 2000.0},
                     "prompt_tokens": {"kind": "uniform", "mean_tokens": 120,
                                       "range_ratio": 0.5},
                     "output_tokens": {"kind": "uniform", "mean_tokens": 40,
                                       "range_ratio": 0.5}},
    }


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", type=int, default=5)
    ap.add_argument("--per-pool", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = simulate(load_config(_config(args.pools, args.per_pool, args.requests)))
    sim_s = time.perf_counter() - t0
    before = _peak_rss_mib()
    with tempfile.TemporaryDirectory(prefix="pdsim-writer-memory-") as tmp:
        out = Path(tmp) / "run"
        t0 = time.perf_counter()
        write_run(res, out)
        write_s = time.perf_counter() - t0
        ts_mib = (out / "timeseries.csv").stat().st_size / 2**20
    after = _peak_rss_mib()
    p = provenance()
    print(f"{len(res.instances):,} instances, {args.requests:,} requests "
          f"({p['commit']}, {p['machine']}, Python {p['python']}, {p['date']})")
    print(f"simulate: {sim_s:.1f} s; write_run: {write_s:.1f} s; timeseries.csv "
          f"{ts_mib:.0f} MiB")
    print(f"peak RSS before writing {before:.0f} MiB, after {after:.0f} MiB "
          f"(the writer added {after - before:.0f} MiB)")


if __name__ == "__main__":
    sys.exit(main())
