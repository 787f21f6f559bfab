"""Drawing how many drafts each request accepts in a verification step.

A request with N drafts accepts a prefix of length ``a`` in [0, N] and emits ``a + 1``
tokens. Draft i is accepted with its conditional probability given drafts 0..i-1 were,
possibly lowered by stale KV in the module that drafted it, so
``P(a >= i + 1) = c_0 * ... * c_i`` (the survival function). ``a`` is drawn by inversion
from one uniform per request and verification, ``a = #{i : u < P(a >= i + 1)}``, which
has exactly that distribution.

The uniform of a request's t-th verification is a pure function of (request, t)
(``pdsim.rng.counter_uniforms`` on the ``acceptance`` stream's key): no shared stream is
consumed, so a decode run and the same steps one at a time see the same draws, and two
configurations that schedule a request differently still give it the same luck.
"""

from __future__ import annotations

import numpy as np

from pdsim.rng import counter_key, counter_uniform_steps, counter_uniforms


class AcceptanceSampler:
    """Vectorized accepted-prefix draws, one counter-based uniform per request and step.

    A request is identified by its key (``request_key(id)``) and a step by the request's
    verification counter (how many verifications it has had before).
    """

    __slots__ = ("_cond", "_n", "_survival_asc", "stream_key")

    def __init__(self, conditional_rates: np.ndarray, stream_key: int) -> None:
        self._cond = np.asarray(conditional_rates, dtype=np.float64)
        self._n = len(self._cond)
        # P(a >= i + 1), i = 0..N-1, is non-increasing; ascending for searchsorted
        self._survival_asc = np.cumprod(self._cond)[::-1].copy()
        self.stream_key = stream_key

    @property
    def num_drafts(self) -> int:
        return self._n

    def request_key(self, request_id: int) -> int:
        """The key of a request's acceptance draws."""
        return counter_key(self.stream_key, request_id)

    @property
    def clean_survival(self) -> np.ndarray:
        """P(a >= i + 1), i = 0..N-1, at the clean rates."""
        return self._survival_asc[::-1]

    def _accepted(self, u: np.ndarray, rates: np.ndarray | None,
                  survival: np.ndarray | None) -> np.ndarray:
        if survival is None:
            if rates is None:
                below: np.ndarray = np.searchsorted(self._survival_asc, u, side="right")
                return self._n - below
            survival = np.cumprod(rates, axis=-1)
        accepted: np.ndarray = (u[..., None] < survival).sum(axis=-1)
        return accepted

    def draw(self, keys: np.ndarray, counters: np.ndarray,
             rates: np.ndarray | None = None, *,
             survival: np.ndarray | None = None) -> np.ndarray:
        """Accepted prefix lengths (int64, each in [0, N]) of the requests with ``keys``
        (uint64) at their verification ``counters``.

        ``rates`` is a (k, N) matrix of per-request conditional rates, or ``survival`` its
        cumulative product along N (``P(a >= i + 1)`` per request, for callers that keep
        it); the clean rates are used when both are None.
        """
        return self._accepted(counter_uniforms(keys, counters), rates, survival)

    def draw_steps(self, steps: int, keys: np.ndarray, counters: np.ndarray,
                   rates: np.ndarray | None = None, *,
                   survival: np.ndarray | None = None) -> np.ndarray:
        """Accepted prefix lengths (steps x k) for ``steps`` consecutive verifications of
        the same k requests, from their ``counters`` on; ``rates`` / ``survival`` as in
        ``draw``. Row j equals ``draw(keys, counters + j, ...)``.
        """
        return self._accepted(counter_uniform_steps(keys, counters, steps), rates, survival)


def expected_tokens_per_step(conditional_rates: np.ndarray) -> float:
    """E[a + 1] for the given conditional rates: 1 + sum of P(first i+1 accepted)."""
    return 1.0 + float(np.cumprod(np.asarray(conditional_rates, dtype=np.float64)).sum())
