"""Drawing how many drafts each request accepts in a verification step.

A request with N drafts accepts a prefix of length ``a`` in [0, N] and emits ``a + 1``
tokens. Draft i is accepted with its conditional probability given drafts 0..i-1 were,
possibly lowered by stale KV in the module that drafted it. Uniforms are drawn from the
``acceptance`` stream in blocks, so a step costs a few vectorized numpy operations.
"""

from __future__ import annotations

import numpy as np


class AcceptanceSampler:
    """Vectorized accepted-prefix draws for a batch."""

    __slots__ = ("_block", "_block_rows", "_cond", "_n", "_pos", "_rng")

    def __init__(self, conditional_rates: np.ndarray, rng: np.random.Generator,
                 block_rows: int = 8192) -> None:
        self._cond = np.asarray(conditional_rates, dtype=np.float64)
        self._n = len(self._cond)
        self._rng = rng
        self._block_rows = block_rows
        self._block = np.empty((0, self._n))
        self._pos = 0

    @property
    def num_drafts(self) -> int:
        return self._n

    def _uniforms(self, k: int) -> np.ndarray:
        if self._pos + k > len(self._block):
            rows = max(self._block_rows, k)
            rest = self._block[self._pos:]
            self._block = np.concatenate((rest, self._rng.random((rows, self._n))))
            self._pos = 0
        u = self._block[self._pos:self._pos + k]
        self._pos += k
        return u

    def draw(self, k: int, rates: np.ndarray | None = None) -> np.ndarray:
        """Accepted prefix lengths of ``k`` requests (int64, each in [0, N]).

        ``rates`` is a (k, N) matrix of per-request conditional rates; the clean rates are
        used when it is None.
        """
        u = self._uniforms(k)
        ok = u < (self._cond if rates is None else rates)
        accepted: np.ndarray = np.logical_and.accumulate(ok, axis=1).sum(axis=1)
        return accepted


    def draw_steps(self, steps: int, k: int, rates: np.ndarray | None = None) -> np.ndarray:
        """Accepted prefix lengths for ``steps`` consecutive steps of the same ``k`` rows.

        Consumes the uniforms in the order ``steps`` calls of ``draw(k, rates)`` would, so
        a window of steps and the same steps one by one see the same draws.
        """
        u = self._uniforms(steps * k).reshape(steps, k, self._n)
        ok = u < (self._cond if rates is None else rates[None, :, :])
        accepted: np.ndarray = np.logical_and.accumulate(ok, axis=2).sum(axis=2)
        return accepted


def expected_tokens_per_step(conditional_rates: np.ndarray) -> float:
    """E[a + 1] for the given conditional rates: 1 + sum of P(first i+1 accepted)."""
    return 1.0 + float(np.cumprod(np.asarray(conditional_rates, dtype=np.float64)).sum())
