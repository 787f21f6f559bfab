"""What an instance hands over when a simulation is finalized: read-only copies."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdsim.engine.decode_rows import RowSnapshot


@dataclass(frozen=True)
class InstanceSnapshot:
    """An instance's facts at the end of a run (or where it was interrupted).

    ``step_log`` has one row per step: start_s, end_s, prefill tokens, decode requests,
    KV blocks used, running, waiting, receiving. ``live_rows`` holds, per request still
    decoding, the counters its decode row has not yet settled into it.
    """

    index: int
    name: str
    role: str
    num_blocks: int
    step_end_s: np.ndarray
    step_log: np.ndarray
    busy_s: float
    preemptions: int
    prefix_hit_tokens: int
    prefix_query_tokens: int
    live_rows: dict[int, RowSnapshot]
