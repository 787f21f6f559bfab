"""Turn a workload config into concrete requests, from the named random streams."""

from __future__ import annotations

import numpy as np

from pdsim.rng import RandomStreams
from pdsim.workload.arrivals import arrival_times
from pdsim.workload.base import RequestSpecs, SpecsOrigin
from pdsim.workload.config import ClosedLoopArrivals, WorkloadConfig
from pdsim.workload.lengths import sample_lengths
from pdsim.workload.shared_prefix import GROUP_STREAM, draw_groups, prefix_hash_ids
from pdsim.workload.traces import replay_trace

ARRIVALS_STREAM = "arrivals"
PROMPT_STREAM = "lengths.prompt"
OUTPUT_STREAM = "lengths.output"


def generate_requests(cfg: WorkloadConfig, streams: RandomStreams) -> RequestSpecs:
    """The run's requests.

    With ``cfg.trace`` the trace is replayed (no randomness). Otherwise arrival times come
    from stream ``arrivals``, prompt lengths from ``lengths.prompt`` and output lengths
    from ``lengths.output`` (with ``shared_prefix``, prefix groups from
    ``workload.prefix_groups``), each a fresh generator, so changing one distribution never
    shifts another's draws. Raises ``InputFileError`` for an unreadable or malformed trace.
    """
    closed = cfg.arrivals if isinstance(cfg.arrivals, ClosedLoopArrivals) else None
    concurrency = closed.concurrency if closed is not None else None
    if cfg.trace is not None:
        return replay_trace(cfg.trace, duration_s=cfg.duration_s,
                            closed_loop_concurrency=concurrency)
    arrival_s = arrival_times(cfg.arrivals, cfg.num_requests, cfg.duration_s,
                              streams.fresh(ARRIVALS_STREAM))
    n = len(arrival_s)
    prompt = sample_lengths(cfg.prompt_tokens, n, streams.fresh(PROMPT_STREAM))
    output = sample_lengths(cfg.output_tokens, n, streams.fresh(OUTPUT_STREAM))
    hash_ids, block_tokens = None, None
    shared = cfg.shared_prefix
    if shared is not None:  # prompt = the group's prefix + the drawn suffix
        prompt = prompt + shared.prefix_tokens
        groups = draw_groups(shared, n, streams.fresh(GROUP_STREAM))
        hash_ids = prefix_hash_ids(shared, groups, prompt)
        block_tokens = shared.hash_block_tokens
    return RequestSpecs(arrival_s=arrival_s.astype(np.float64, copy=False),
                        prompt_tokens=prompt, output_tokens=output,
                        closed_loop_concurrency=concurrency, hash_ids=hash_ids,
                        hash_block_tokens=block_tokens,
                        origin=SpecsOrigin(arrivals=cfg.arrivals.kind))
