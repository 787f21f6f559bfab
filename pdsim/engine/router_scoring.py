"""The scoring routing policies: KV- and load-aware, and prefix-cache-aware.

Each term scores a candidate in [0, 1], higher better, as llm-d's inference scheduler
scorers do (docs/routing.md cites them): the queue and running terms are min-max
normalised over the candidates (the shortest gets 1, the longest 0, all 1 when equal), the
KV term is ``1 - kv_usage``, the prefix term the fraction of the request's hash blocks
whose leading run the candidate's prefix cache holds. The policy picks the largest
weighted sum, ties to the lowest instance index. The weights are ``router.weights``.

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


def best_index(candidates: Sequence[RouteTarget], scores: Sequence[float]) -> int:
    """The position of the highest score; ties to the lowest instance index."""
    return min(range(len(candidates)), key=lambda i: (-scores[i], candidates[i].index))


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
        return best_index(candidates, self.load_scores(candidates))


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
        return best_index(candidates, scores)
