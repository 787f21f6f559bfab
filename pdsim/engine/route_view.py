"""What a routing policy may read of an instance: a small read-only view.

``RouteTarget`` is the whole interface (``Instance`` implements it; tests hand-build
others): the index ties break by, the load ``least_loaded`` reads, the state the scoring
policies read and the prefix-cache lookup. Each call costs O(1), the prefix lookup
O(matched blocks + 1); none changes the instance (the prefix cache's LRU order included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol


class RoutingState(NamedTuple):
    """An instance's load as vLLM's metrics report it.

    ``waiting``: requests queued, or allocated and receiving their KV (vLLM's
    ``num_requests_waiting`` counts both); ``running``: requests scheduled
    (``num_requests_running``); ``kv_usage``: the fraction of the KV pool's blocks in use
    (``kv_cache_usage_perc``), 0..1; ``cached_blocks``: hash blocks in its prefix cache
    (0 without one).
    """

    waiting: int
    running: int
    kv_usage: float
    cached_blocks: int = 0


class RouteTarget(Protocol):
    """One candidate instance, as a routing policy sees it."""

    @property
    def index(self) -> int:
        """The instance's index in the cluster (ties break to the lowest)."""
        ...

    def load(self) -> tuple[int, int]:
        """(prompt tokens still to prefill, requests held): ``least_loaded``'s key."""
        ...

    def routing_state(self) -> RoutingState:
        """Waiting and running requests and KV usage, now."""
        ...

    def cached_prefix_blocks(self, hash_ids: Sequence[int]) -> int:
        """How many leading blocks of ``hash_ids`` the instance's prefix cache holds (0
        without a prefix cache)."""
        ...
