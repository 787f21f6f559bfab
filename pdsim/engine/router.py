"""Routing policies: small registered objects that pick an instance for a request.

A policy sees read-only candidates and returns the index of its choice; it never yields
to SimPy and never mutates an instance. Ties are broken by instance index. The names live in
``pdsim.policies.ROUTERS`` (below the config, which validates ``router.policy`` against it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from pdsim.policies import ROUTERS

if TYPE_CHECKING:
    import numpy as np

    from pdsim.engine.instance import Instance
    from pdsim.engine.request import Request


class RoutingPolicy(Protocol):
    """Picks one of ``candidates`` (all up) for ``request``; returns its position."""

    def choose(self, candidates: Sequence[Instance], request: Request) -> int: ...


@ROUTERS.register("round_robin")
class RoundRobin:
    """Cycle through the candidates in index order (vLLM's toy proxy)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._next: dict[tuple[int, ...], int] = {}

    def choose(self, candidates: Sequence[Instance], request: Request) -> int:
        if len(candidates) == 1:
            return 0  # its own cycle of one: the count kept for it would never matter
        key = tuple([c.index for c in candidates])
        i = self._next.get(key, 0) % len(candidates)
        self._next[key] = i + 1
        return i


@ROUTERS.register("least_loaded")
class LeastLoaded:
    """The candidate with the least outstanding prefill tokens, then fewest requests."""

    def __init__(self, rng: np.random.Generator) -> None:
        pass

    def choose(self, candidates: Sequence[Instance], request: Request) -> int:
        best = min(range(len(candidates)),
                   key=lambda i: (*candidates[i].load(), candidates[i].index))
        return best


@ROUTERS.register("random")
class RandomChoice:
    """Uniformly at random, from the ``routing`` stream."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, candidates: Sequence[Instance], request: Request) -> int:
        return int(self._rng.integers(len(candidates)))


def make_router(name: str, rng: np.random.Generator) -> RoutingPolicy:
    """The registered policy ``name``; ``KeyError(name)`` when there is none."""
    policy: RoutingPolicy = ROUTERS.lookup(name)(rng)
    return policy
