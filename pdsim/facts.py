"""Facts an instance leaves behind: what the engine hands over and metrics read."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class InstanceFacts:
    """What one instance did: its step end times and per-step log."""

    name: str
    role: str
    num_blocks: int
    step_end_s: np.ndarray
    # columns: start_s, end_s, prefill_tokens, decode_requests, kv_used_blocks, running,
    # waiting, receiving
    step_log: np.ndarray
    busy_s: float
    preemptions: int
    pool: str = ""
    """The instance's pool name ('' for a role's one unnamed group)."""
