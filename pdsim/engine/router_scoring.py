"""The scoring routing policies: KV- and load-aware, and prefix-cache-aware.

Each term scores a candidate in [0, 1], higher better, as llm-d's inference scheduler
scorers do (docs/routing.md cites them): the queue and running terms are min-max
normalised over the candidates (the shortest gets 1, the longest 0, all 1 when equal), the
KV term is ``1 - kv_usage``, the prefix term the fraction of the request's hash blocks
whose leading run the candidate's prefix cache holds. The policy picks the largest
weighted sum; exact ties go round robin over the tied candidates in index order (llm-d's
max-score picker draws among ties at random; a turn counter spreads them as evenly without
a draw). The weights are ``router.weights``.

Cost per decision: O(candidates) for the load terms, plus one prefix lookup per candidate
(O(its matched blocks + 1)); no per-token work and no random draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from pdsim.config_sections import RouterConfig
from pdsim.policies import ROUTERS

if TYPE_CHECKING:
    import numpy as np

    from pdsim.engine.request import Request
    from pdsim.engine.route_view import RouteTarget


def spread_scores(values: Sequence[int]) -> list[float]:
    """Min-max scores: ``(max - v) / (max - min)``; all 1.0 when every value is equal."""
    lo, hi = min(values), max(values)
    if hi == lo:
        return [1.0] * len(values)
    span = float(hi - lo)
    return [(hi - v) / span for v in values]


class TieBreaker:
    """Picks the highest score; exact ties go round robin over the tied candidates in
    instance-index order (the first tie to the lowest index), so equal instances share
    the work without a random draw: deterministic, and no stream is consumed."""

    __slots__ = ("_turn",)

    def __init__(self) -> None:
        self._turn = 0

    def best(self, candidates: Sequence[RouteTarget], scores: Sequence[float]) -> int:
        """The position of the chosen candidate."""
        top = max(scores)
        tied = [i for i, s in enumerate(scores) if s == top]
        if len(tied) == 1:
            return tied[0]
        tied.sort(key=lambda i: candidates[i].index)
        pick = tied[self._turn % len(tied)]
        self._turn += 1
        return pick


@ROUTERS.register("kv_load_aware")
class KVLoadAware:
    """Weighted sum of the queue, KV-usage and running terms (llm-d's queue-scorer,
    kv-cache-utilization-scorer and running-requests-size-scorer)."""

    weight_fields: ClassVar[tuple[str, ...]] = ("queue", "kv_usage", "running")

    def __init__(self, rng: np.random.Generator, config: RouterConfig | None = None) -> None:
        w = (config if config is not None else RouterConfig()).weights
        self.queue_weight = w.queue
        self.kv_weight = w.kv_usage
        self.running_weight = w.running
        self.ties = TieBreaker()

    def load_scores(self, candidates: Sequence[RouteTarget]) -> list[float]:
        """Each candidate's weighted load terms."""
        states = [c.routing_state() for c in candidates]
        scores = [self.kv_weight * (1.0 - s.kv_usage) for s in states]
        if self.queue_weight:
            for i, t in enumerate(spread_scores([s.waiting for s in states])):
                scores[i] += self.queue_weight * t
        if self.running_weight:
            for i, t in enumerate(spread_scores([s.running for s in states])):
                scores[i] += self.running_weight * t
        return scores

    def choose(self, candidates: Sequence[RouteTarget], request: Request) -> int:
        if len(candidates) == 1:
            return 0
        return self.ties.best(candidates, self.load_scores(candidates))


@ROUTERS.register("prefix_aware")
class PrefixAware(KVLoadAware):
    """``kv_load_aware``'s terms plus the prefix term (llm-d's prefix-cache-scorer, read
    from the instances' real prefix caches, as its precise, KV-event-fed variant does).
    A request without hash ids scores 0 on the prefix term everywhere: load decides."""

    weight_fields: ClassVar[tuple[str, ...]] = ("queue", "kv_usage", "running", "prefix")

    def __init__(self, rng: np.random.Generator, config: RouterConfig | None = None) -> None:
        super().__init__(rng, config)
        self.prefix_weight = (config if config is not None else RouterConfig()).weights.prefix

    def choose(self, candidates: Sequence[RouteTarget], request: Request) -> int:
        if len(candidates) == 1:
            return 0
        scores = self.load_scores(candidates)
        hashes = request.hash_ids
        if hashes and self.prefix_weight:
            total = len(hashes)
            for i, c in enumerate(candidates):
                scores[i] += self.prefix_weight * c.cached_prefix_blocks(hashes) / total
        return self.ties.best(candidates, scores)


@ROUTERS.register("cache_aware")
class CacheAware:
    """vLLM router's cache-aware policy: when the load (waiting + running requests) is
    imbalanced, by more than ``balance_abs_threshold`` requests and more than
    ``balance_rel_threshold`` times, the least loaded instance; otherwise the instance
    holding the longest leading run of the request's hash blocks if that run is more than
    ``cache_threshold`` of them, else the one with the fewest cached blocks (the most room).
    The router reads the real prefix caches where vLLM's keeps an approximate tree of
    what it sent where."""

    weight_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, rng: np.random.Generator, config: RouterConfig | None = None) -> None:
        c = (config if config is not None else RouterConfig()).cache_aware
        self.cache_threshold = c.cache_threshold
        self.abs_threshold = c.balance_abs_threshold
        self.rel_threshold = c.balance_rel_threshold
        self.ties = TieBreaker()

    def choose(self, candidates: Sequence[RouteTarget], request: Request) -> int:
        if len(candidates) == 1:
            return 0
        states = [c.routing_state() for c in candidates]
        loads = [s.waiting + s.running for s in states]
        lo, hi = min(loads), max(loads)
        if hi - lo > self.abs_threshold and hi > self.rel_threshold * lo:
            return self.ties.best(candidates, [-float(x) for x in loads])
        hashes = request.hash_ids
        if hashes:
            matched = [c.cached_prefix_blocks(hashes) for c in candidates]
            if max(matched) > self.cache_threshold * len(hashes):
                return self.ties.best(candidates, [float(m) for m in matched])
        return self.ties.best(candidates, [-float(s.cached_blocks) for s in states])
