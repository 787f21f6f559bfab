"""The step-time interface the engine calls once per engine step.

The engine describes a step by what the batch computes (``StepBatch``); a
``StepTimeModel`` turns that into seconds. Everything the model needs to know about the
model architecture, the hardware and the drafter comes from the config it was built with,
so the engine never has to.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np


class StepBatch(NamedTuple):
    """What one engine step computes, summed over the requests in the batch.

    - ``prefill_tokens``: target tokens computed in prefill chunks (prompt chunks, D's
      recompute of the backoff tokens, recompute after preemption).
    - ``prefill_attention_pairs``: sum over prefill chunks of ``chunk * (context_before +
      (chunk + 1) / 2)``, the number of query-key pairs causal attention scores.
    - ``decode_requests``: requests in their decode phase this step.
    - ``decode_tokens``: query tokens of those requests (``1 + num_speculative_tokens`` each
      under speculation, else 1): the target verifies them all.
    - ``decode_context_tokens``: sum of the decode requests' context lengths (KV read).
    - ``drafter_repair_tokens``: positions the drafter re-prefills this step (the
      standalone repair of the previous step's rejected drafts).
    """

    prefill_tokens: int
    prefill_attention_pairs: float
    decode_requests: int
    decode_tokens: int
    decode_context_tokens: int
    drafter_repair_tokens: int = 0


class StepTimeModel(Protocol):
    """Maps a batch to the wall time of one engine step, in seconds."""

    def step_time_s(self, batch: StepBatch) -> float:
        """Duration of a step that computes ``batch``; must be > 0 for a non-empty batch."""
        ...


_SCALAR_UP_TO = 1  # a single step: the scalar call is cheaper than array operations


def decode_step_times_s(model: StepTimeModel, decode_requests: np.ndarray,
                        decode_tokens: np.ndarray, decode_context_tokens: np.ndarray,
                        drafter_repair_tokens: np.ndarray) -> np.ndarray:
    """Step times of consecutive pure-decode steps (no prefill), one per array entry.

    Uses the model's vectorized ``decode_step_times_s`` when it has one (it must agree
    with ``step_time_s`` bit for bit) and there are enough steps for array operations to
    pay off, else calls ``step_time_s`` step by step.
    """
    fast = getattr(model, "decode_step_times_s", None)
    if fast is not None and len(decode_requests) > _SCALAR_UP_TO:
        out: np.ndarray = fast(decode_requests, decode_tokens, decode_context_tokens,
                               drafter_repair_tokens)
        return out
    return np.fromiter(
        (model.step_time_s(StepBatch(0, 0.0, int(r), int(t), int(c), int(x)))
         for r, t, c, x in zip(decode_requests.tolist(), decode_tokens.tolist(),
                               decode_context_tokens.tolist(),
                               drafter_repair_tokens.tolist(), strict=True)),
        dtype=np.float64, count=len(decode_requests))
