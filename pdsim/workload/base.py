"""What a workload generator hands the engine: one row per request, as arrays."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pdsim._model import MAX_REQUESTS, MAX_TOKENS
from pdsim.errors import RequestSpecsError


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
        self._check_values()

    def _check_values(self) -> None:
        """Every request servable, whatever made the specs; ``RequestSpecsError`` names the
        first bad request (vectorized: one pass per array)."""
        where = f"requests ({self.source})"
        for name in ("prompt_tokens", "output_tokens"):
            tokens = np.asarray(getattr(self, name))
            if tokens.dtype.kind not in "iu":
                raise RequestSpecsError(f"{where}: {name} must hold integers "
                                        f"(got {tokens.dtype})")
            bad = np.flatnonzero((tokens < 1) | (tokens > MAX_TOKENS))
            if len(bad):
                raise RequestSpecsError(f"{where}: request {bad[0]}: {name} is "
                                        f"{tokens[bad[0]]}; allowed: 1..{MAX_TOKENS:,}")
        if self.closed_loop_concurrency is not None:
            if not 1 <= self.closed_loop_concurrency <= MAX_REQUESTS:
                raise RequestSpecsError(f"{where}: closed-loop concurrency is "
                                        f"{self.closed_loop_concurrency}; allowed: "
                                        f"1..{MAX_REQUESTS:,}")
            return  # arrivals are NaN: the engine releases them
        t = np.asarray(self.arrival_s, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(t) | (t < 0))
        if len(bad):
            raise RequestSpecsError(f"{where}: request {bad[0]}: arrival_s is {t[bad[0]]}; "
                                    f"arrival times must be finite and >= 0")
        back = np.flatnonzero(np.diff(t) < 0)
        if len(back):
            i = int(back[0]) + 1
            raise RequestSpecsError(f"{where}: request {i} arrives at {t[i]} s, before "
                                    f"request {i - 1} at {t[i - 1]} s; arrival times must "
                                    f"be sorted ascending")

    def __len__(self) -> int:
        return len(self.prompt_tokens)
