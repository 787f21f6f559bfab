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

from pdsim.rng import (
    counter_key,
    counter_keys,
    counter_uniform_rows,
    counter_uniform_run,
    counter_uniform_steps,
    counter_uniforms,
)


class AcceptanceSampler:
    """Vectorized accepted-prefix draws, one counter-based uniform per request and step.

    A request is identified by its key (``request_key(id)``) and a step by the request's
    verification counter (how many verifications it has had before).
    """

    __slots__ = ("_keys", "_n", "_survival_asc", "_survival_desc", "stream_key")

    first_draws_width = 128  # verifications per request in ``first_draws_table``
    keys_cached_below = 1 << 22  # request ids whose keys ``request_key`` keeps in a table

    def __init__(self, conditional_rates: np.ndarray, stream_key: int) -> None:
        cond = np.asarray(conditional_rates, dtype=np.float64)
        self._n = len(cond)
        # P(a >= i + 1), i = 0..N-1, is non-increasing; ascending for searchsorted
        self._survival_asc = self.survival_of(cond)[::-1].copy()
        self._survival_desc = self.survival_of(cond).tolist()
        self.stream_key = stream_key
        self._keys = np.zeros(0, dtype=np.uint64)

    @property
    def num_drafts(self) -> int:
        return self._n

    def request_key(self, request_id: int) -> int:
        """The key of a request's acceptance draws (``counter_key`` of the stream)."""
        keys = self._keys
        if 0 <= request_id < len(keys):
            return int(keys[request_id])
        if not 0 <= request_id < self.keys_cached_below:
            return counter_key(self.stream_key, request_id)
        return int(self.request_keys(request_id, 1)[0])

    def request_keys(self, first_id: int, count: int) -> np.ndarray:
        """The keys of requests ``first_id .. first_id + count - 1`` (uint64), read from a
        table computed for ids 0..n-1 at once (n doubling as ids grow)."""
        end = first_id + count
        if not 0 <= first_id <= end <= self.keys_cached_below:
            return counter_keys(self.stream_key, np.arange(first_id, end))
        if end > len(self._keys):
            size = max(1024, 2 * len(self._keys), end)
            self._keys = counter_keys(self.stream_key, np.arange(size))
        return self._keys[first_id:end]

    @property
    def clean_survival(self) -> np.ndarray:
        """P(a >= i + 1), i = 0..N-1, at the clean rates."""
        return self._survival_asc[::-1]

    @staticmethod
    def survival_of(rates: np.ndarray) -> np.ndarray:
        """Per-request P(a >= i + 1) from a (k, N) matrix of conditional rates."""
        return np.cumprod(rates, axis=-1)

    def _accepted(self, u: np.ndarray, survival: np.ndarray | None) -> np.ndarray:
        """``#{i : u < P(a >= i + 1)}`` for each uniform: one comparison per draft position
        (cheaper than a binary search per uniform for the few positions there are), at
        the clean rates or per request (``survival`` is (k, N), ``u`` is (..., k))."""
        if not self._n:
            return np.zeros(u.shape, dtype=np.int64)
        per_pos = self._survival_desc if survival is None else survival.T
        accepted: np.ndarray = (u < per_pos[0]).astype(np.int64)
        for p in per_pos[1:]:
            accepted += u < p
        return accepted

    def draw(self, keys: np.ndarray, counters: np.ndarray,
             survival: np.ndarray | None = None) -> np.ndarray:
        """Accepted prefix lengths (int64, each in [0, N]) of the requests with ``keys``
        (uint64) at their verification ``counters``.

        ``survival`` is a (k, N) matrix of per-request ``P(a >= i + 1)`` (``survival_of``
        the conditional rates, lowered by stale KV); the clean rates are used when it is
        None.
        """
        return self._accepted(counter_uniforms(keys, counters), survival)

    def draw_steps(self, steps: int, keys: np.ndarray, counters: np.ndarray,
                   survival: np.ndarray | None = None) -> np.ndarray:
        """Accepted prefix lengths (steps x k) for ``steps`` consecutive verifications of
        the same k requests, from their ``counters`` on; ``survival`` as in ``draw``.
        Row j equals ``draw(keys, counters + j, survival)``.
        """
        return self._accepted(counter_uniform_steps(keys, counters, steps), survival)

    def draw_run(self, steps: int, key: int, counter: int,
                 survival: np.ndarray | None = None) -> np.ndarray:
        """Accepted prefix lengths (1-D, ``steps`` long) of one request's next ``steps``
        verifications from ``counter`` on: ``draw_steps`` for a single request, whose
        ``survival`` (length N) is non-increasing, so one binary search per draw."""
        u = counter_uniform_run(key, counter, steps)
        asc = self._survival_asc if survival is None else survival[::-1]
        below: np.ndarray = asc.searchsorted(u, side="right")
        return self._n - below

    def first_draws_table(self, first_id: int, count: int, width: int | None = None
                          ) -> np.ndarray:
        """The clean-rate accepted prefix lengths of the first ``width`` (default
        ``first_draws_width``) verifications of requests ``first_id .. first_id + count -
        1``, one row each: row ``i`` is ``draw_run(width, request_key(first_id + i), 0)``,
        computed for all the requests at once."""
        keys = self.request_keys(first_id, count)
        return self._accepted(counter_uniform_rows(
            keys, self.first_draws_width if width is None else width), None)


def expected_tokens_per_step(conditional_rates: np.ndarray) -> float:
    """E[a + 1] for the given conditional rates: 1 + sum of P(first i+1 accepted)."""
    return 1.0 + float(np.cumprod(np.asarray(conditional_rates, dtype=np.float64)).sum())
