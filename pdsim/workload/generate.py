"""Turn a workload config into concrete requests, from the named random streams."""

from __future__ import annotations

import numpy as np

from pdsim.rng import RandomStreams
from pdsim.workload.base import RequestSpecs
from pdsim.workload.config import FixedLength, WorkloadConfig


def _lengths(dist: FixedLength, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.full(n, dist.tokens, dtype=np.int64)


def generate_requests(cfg: WorkloadConfig, streams: RandomStreams) -> RequestSpecs:
    """Draw the run's requests: arrivals from stream ``arrivals``, lengths from ``lengths``."""
    rng_arr = streams.fresh("arrivals")
    rng_len = streams.fresh("lengths")
    rate = cfg.arrivals.rate_per_s
    if cfg.num_requests is not None:
        n = cfg.num_requests
        arrivals = np.cumsum(rng_arr.exponential(1.0 / rate, size=n))
        if cfg.duration_s is not None:
            arrivals = arrivals[arrivals <= cfg.duration_s]
            n = len(arrivals)
    else:
        assert cfg.duration_s is not None
        est = int(rate * cfg.duration_s * 1.5) + 16
        arrivals = np.cumsum(rng_arr.exponential(1.0 / rate, size=est))
        arrivals = arrivals[arrivals <= cfg.duration_s]
        n = len(arrivals)
    prompt = _lengths(cfg.prompt_tokens, n, rng_len)
    output = _lengths(cfg.output_tokens, n, rng_len)
    return RequestSpecs(arrival_s=arrivals.astype(np.float64), prompt_tokens=prompt,
                        output_tokens=output)
