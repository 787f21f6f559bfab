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

    __slots__ = ("_c", "_draft_modules_prefill", "_draft_passes_decode")

    def __init__(self, cfg: SimpleStepTimeConfig, draft_passes_decode: int,
                 draft_modules_prefill: int) -> None:
        self._c = cfg
        self._draft_passes_decode = draft_passes_decode
        self._draft_modules_prefill = draft_modules_prefill

    def step_time_s(self, batch: StepBatch) -> float:
        c = self._c
        tokens = batch.prefill_tokens + batch.decode_tokens
        t = c.overhead_s + max(c.weights_floor_s, tokens * c.per_token_s)
        t += batch.decode_context_tokens * c.per_context_token_s
        t += batch.prefill_attention_pairs * c.per_attention_pair_s
        draft_cost = c.per_token_s * c.drafter_token_cost_ratio
        if self._draft_passes_decode and batch.decode_requests:
            per_pass = max(c.drafter_floor_s, batch.decode_requests * draft_cost)
            t += self._draft_passes_decode * per_pass
        if self._draft_modules_prefill and (batch.prefill_tokens or batch.drafter_repair_tokens):
            work = batch.prefill_tokens + batch.drafter_repair_tokens
            t += self._draft_modules_prefill * max(c.drafter_floor_s, work * draft_cost)
        return t

    def decode_step_times_s(self, decode_requests: np.ndarray, decode_tokens: np.ndarray,
                            decode_context_tokens: np.ndarray,
                            drafter_repair_tokens: np.ndarray) -> np.ndarray:
        """``step_time_s`` of pure-decode steps, vectorized (the same terms, in the
        same order, so the results agree to the last bit)."""
        c = self._c
        t = decode_tokens * c.per_token_s
        np.maximum(t, c.weights_floor_s, out=t)
        t += c.overhead_s
        t += decode_context_tokens * c.per_context_token_s
        if self._draft_passes_decode:
            per_pass = decode_requests * (c.per_token_s * c.drafter_token_cost_ratio)
            np.maximum(per_pass, c.drafter_floor_s, out=per_pass)
            per_pass *= self._draft_passes_decode
            t += np.where(decode_requests > 0, per_pass, 0.0)
        if self._draft_modules_prefill and drafter_repair_tokens.any():
            draft_cost = c.per_token_s * c.drafter_token_cost_ratio
            work = drafter_repair_tokens * draft_cost
            np.maximum(work, c.drafter_floor_s, out=work)
            work *= self._draft_modules_prefill
            t += np.where(drafter_repair_tokens > 0, work, 0.0)
        return t
