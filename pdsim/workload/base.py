"""What a workload generator hands the engine: one row per request, as arrays."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SpecsOrigin:
    """Where a run's requests came from: notes for reports (the engine never reads them).

    ``arrivals`` says how arrival times were made (the arrival kind, ``recorded``,
    ``closed loop``, ...). A trace gives its file, the time scale applied and the rows
    skipped for zero lengths; a replayed ``vllm bench serve`` result gives its model, rate,
    burstiness, concurrency limit, the failed requests left out and the replay mode.
    """

    arrivals: str = ""
    trace_file: str = ""
    time_scale: float = 1.0
    skipped_zero_length_rows: int = 0
    model_id: str | None = None
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    dropped_failed: int = 0
    replay_mode: str = ""


@dataclass(frozen=True)
class RequestSpecs:
    """The requests of a run, before simulation.

    ``arrival_s`` is the arrival time of each request in seconds from the start, sorted
    ascending; under a closed loop (``closed_loop_concurrency`` set) it is NaN and the
    engine releases request i when an earlier one finishes. ``prompt_tokens`` and
    ``output_tokens`` are >= 1. ``hash_ids`` optionally gives each request's prompt as a
    sequence of block hashes (Mooncake traces) for prefix caching, one per
    ``hash_block_tokens`` prompt tokens (None: the engine's KV block size). ``source`` is
    ``synthetic``, ``mooncake`` or ``azure``; ``origin`` notes where the requests came from
    (the engine never reads it).
    """

    arrival_s: np.ndarray  # float64, seconds
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    closed_loop_concurrency: int | None = None
    hash_ids: tuple[tuple[int, ...], ...] | None = None
    hash_block_tokens: int | None = None
    source: str = "synthetic"
    origin: SpecsOrigin = SpecsOrigin()

    def __post_init__(self) -> None:
        n = len(self.prompt_tokens)
        if len(self.arrival_s) != n or len(self.output_tokens) != n:
            raise ValueError("arrival_s, prompt_tokens and output_tokens must have equal length")
        if self.hash_ids is not None and len(self.hash_ids) != n:
            raise ValueError("hash_ids must have one entry per request")

    def __len__(self) -> int:
        return len(self.prompt_tokens)
