"""A ``vllm bench serve`` result's statistics, by vLLM's definitions (see ``bench_result``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from pdsim.realdata.bench_result import PERCENTILE_METRICS, BenchResult, percentile_key


def stat_block(values: Sequence[float] | np.ndarray, metric: str,
               percentiles: Iterable[float]) -> dict[str, float]:
    """vLLM's mean/median/std/percentiles in ms of ``values`` (s); 0 for an empty set."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        arr = np.zeros(1)
    out = {
        f"mean_{metric}_ms": float(np.mean(arr)) * 1000.0,
        f"median_{metric}_ms": float(np.median(arr)) * 1000.0,
        f"std_{metric}_ms": float(np.std(arr)) * 1000.0,
    }
    for p in percentiles:
        out[percentile_key(p, metric)] = float(np.percentile(arr, p)) * 1000.0
    return out


def per_request_latencies(ttft: np.ndarray, e2e: np.ndarray, out_lens: np.ndarray,
                          itls: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """The samples of each metric (s): TTFT and E2E per request, TPOT per request with more
    than one output token, ITL pooled over every chunk gap."""
    multi = out_lens > 1
    tpot = (e2e[multi] - ttft[multi]) / (out_lens[multi] - 1)
    itl = np.concatenate(list(itls)) if len(itls) else np.zeros(0)
    return {"ttft": ttft, "tpot": tpot, "itl": itl, "e2el": e2e}


def summary_metrics(result: BenchResult, percentiles: Sequence[float] = (90, 99)
                    ) -> dict[str, float]:
    """Flat metrics of a result: ``mean_/median_/p90_/p99_`` x ttft, tpot, itl, e2el (ms),
    plus ``request_throughput``, ``output_throughput``, ``total_token_throughput``,
    ``duration_s``, ``completed``.

    Computed from the per-request data when present (so they compare with pdsim's
    numbers whatever percentiles the run saved), else taken from the stored fields; a
    statistic neither can give is NaN. Without ``latencies`` a request's E2E is its TTFT
    plus its chunk gaps.
    """
    out: dict[str, float] = {}
    ok = result.succeeded
    have = (ok is not None and result.ttfts_s is not None and result.itls_s is not None
            and result.output_lens is not None)
    if have:
        assert ok is not None and result.ttfts_s is not None and result.itls_s is not None
        assert result.output_lens is not None
        idx = np.flatnonzero(ok)
        ttft = result.ttfts_s[idx]
        itls = [result.itls_s[i] for i in idx]
        if result.latencies_s is not None:
            e2e = result.latencies_s[idx]
        else:
            e2e = ttft + np.array([float(x.sum()) for x in itls])
        per = per_request_latencies(ttft, e2e, result.output_lens[idx], itls)
        for metric in PERCENTILE_METRICS:
            block = stat_block(per[metric], metric, percentiles)
            out.update({k: v for k, v in block.items() if not k.startswith("std_")})
        n_out = float(result.output_lens[idx].sum())
        n_in = float(result.input_lens[idx].sum()) if result.input_lens is not None else math.nan
        out["request_throughput"] = len(idx) / result.duration_s
        out["output_throughput"] = n_out / result.duration_s
        out["total_token_throughput"] = (n_in + n_out) / result.duration_s
        out["completed"] = float(len(idx))
    else:
        for metric in PERCENTILE_METRICS:
            for key in (f"mean_{metric}_ms", f"median_{metric}_ms",
                        *(percentile_key(p, metric) for p in percentiles)):
                out[key] = result.latency_stats_ms.get(key, math.nan)
        out["request_throughput"] = result.request_throughput
        out["output_throughput"] = result.output_throughput
        out["total_token_throughput"] = result.total_token_throughput
        out["completed"] = float(result.completed)
    out["duration_s"] = result.duration_s
    return out
