"""The simple step-time model (see ``SimpleStepTimeConfig``)."""

from __future__ import annotations

import numpy as np

from pdsim.perf.base import StepBatch
from pdsim.perf.config import SimpleStepTimeConfig


class SimpleStepTime:
    """Linear cost with a weight-read floor; the drafter runs ``draft_passes`` passes.

    ``draft_passes_decode`` is the number of sequential drafter passes after verification
    (N for MTP/EAGLE, 0 without a drafter); ``draft_modules_prefill`` is how many drafter
    modules process each prefill token (N for multi-module MTP, 1 for other eagle-family
    drafters, 0 otherwise).
    """

    __slots__ = ("_c", "_draft_cost_s", "_draft_modules_prefill", "_draft_passes_decode",
                 "_tables")

    def __init__(self, cfg: SimpleStepTimeConfig, draft_passes_decode: int,
                 draft_modules_prefill: int) -> None:
        self._c = cfg
        self._draft_passes_decode = draft_passes_decode
        self._draft_modules_prefill = draft_modules_prefill
        self._draft_cost_s = cfg.per_token_s * cfg.drafter_token_cost_ratio
        self._tables: tuple[np.ndarray, np.ndarray, np.ndarray] = (
            np.zeros(0), np.zeros(0), np.zeros(0))

    def step_time_s(self, batch: StepBatch) -> float:
        c = self._c
        t = self._target_s(batch.prefill_tokens + batch.decode_tokens)
        t += batch.decode_context_tokens * c.per_context_token_s
        t += batch.prefill_attention_pairs * c.per_attention_pair_s
        t += self._decode_passes_s(batch.decode_requests)
        t += self._prefill_passes_s(batch.prefill_tokens + batch.drafter_repair_tokens)
        return t

    def _target_s(self, tokens: int) -> float:
        """The target's fixed cost and its weight-bound (or token-bound) forward pass."""
        c = self._c
        return c.overhead_s + max(c.weights_floor_s, tokens * c.per_token_s)

    def _decode_passes_s(self, requests: int) -> float:
        """The drafter's passes after verification, over the decoding requests."""
        if not self._draft_passes_decode or not requests:
            return 0.0
        return self._draft_passes_decode * max(self._c.drafter_floor_s,
                                               requests * self._draft_cost_s)

    def _prefill_passes_s(self, tokens: int) -> float:
        """The drafter modules over prefill tokens and re-prefilled (repair) positions."""
        if not self._draft_modules_prefill or not tokens:
            return 0.0
        return self._draft_modules_prefill * max(self._c.drafter_floor_s,
                                                 tokens * self._draft_cost_s)

    def decode_step_times_s(self, decode_requests: np.ndarray, decode_tokens: np.ndarray,
                            decode_context_tokens: np.ndarray,
                            drafter_repair_tokens: np.ndarray) -> np.ndarray:
        """``step_time_s`` of pure-decode steps, vectorized: the terms that depend on a
        count (query tokens, requests, repair positions) are read from tables the scalar
        terms fill, and added in ``step_time_s``'s order (its attention-pair term is
        0.0 here, adding it changes nothing), so the results agree to the last bit in a
        handful of array operations."""
        tables = self._tables
        try:
            t: np.ndarray = tables[0][decode_tokens]
            t += decode_context_tokens * self._c.per_context_token_s
            t += tables[1][decode_requests]
            t += tables[2][drafter_repair_tokens]
        except IndexError:  # a count past the tables: grow them and price again
            self._grow_tables(int(decode_tokens.max()), int(decode_requests.max()),
                              int(drafter_repair_tokens.max()))
            return self.decode_step_times_s(decode_requests, decode_tokens,
                                            decode_context_tokens, drafter_repair_tokens)
        return t

    def _grow_tables(self, tokens: int, requests: int, repair: int) -> None:
        """Tables of the count terms up to at least the counts given (doubling)."""
        terms = (self._target_s, self._decode_passes_s, self._prefill_passes_s)
        grown = []
        for table, term, need in zip(self._tables, terms, (tokens, requests, repair),
                                     strict=True):
            size = max(2 * len(table), need + 1, 64)
            grown.append(np.array([term(x) for x in range(size)], dtype=np.float64))
        self._tables = (grown[0], grown[1], grown[2])
