"""Routing policies: small registered objects that pick an instance for a request.

A policy sees read-only candidates (``RouteTarget``: every up instance of one role,
whichever pools they belong to) and returns the index of its choice; it never yields to
SimPy and never mutates an instance. Ties are broken by instance index. The names live in
``pdsim.policies.ROUTERS`` (below the config, which validates ``router.policy`` against
it); a policy class is built with the run's ``routing`` random stream and the
``router`` config section, and declares the ``router.weights`` it reads in
``weight_fields`` (none here; the scoring policies are in ``router_scoring``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol

from pdsim.engine import router_scoring
from pdsim.engine.route_view import RouteTarget
from pdsim.policies import ROUTERS

if TYPE_CHECKING:
    import numpy as np

    from pdsim.config_sections import RouterConfig
    from pdsim.engine.request import Request

__all__ = ["ROUTERS", "RouteTarget", "RoutingPolicy", "make_router", "router_scoring"]


class RoutingPolicy(Protocol):
    """Picks one of ``candidates`` (all up) for ``request``; returns its position."""

    def choose(self, candidates: Sequence[RouteTarget], request: Request) -> int: ...


@ROUTERS.register("round_robin")
class RoundRobin:
    """Cycle through the candidates in index order (vLLM's toy proxy)."""

    weight_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, rng: np.random.Generator, config: RouterConfig | None = None) -> None:
        self._next: dict[tuple[int, ...], int] = {}

    def choose(self, candidates: Sequence[RouteTarget], request: Request) -> int:
        if len(candidates) == 1:
            return 0  # its own cycle of one: the count kept for it would never matter
        key = tuple([c.index for c in candidates])
        i = self._next.get(key, 0) % len(candidates)
        self._next[key] = i + 1
        return i


@ROUTERS.register("least_loaded")
class LeastLoaded:
    """The candidate with the least outstanding prefill tokens, then fewest requests."""

    weight_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, rng: np.random.Generator, config: RouterConfig | None = None) -> None:
        pass

    def choose(self, candidates: Sequence[RouteTarget], request: Request) -> int:
        best = min(range(len(candidates)),
                   key=lambda i: (*candidates[i].load(), candidates[i].index))
        return best


@ROUTERS.register("random")
class RandomChoice:
    """Uniformly at random, from the ``routing`` stream."""

    weight_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, rng: np.random.Generator, config: RouterConfig | None = None) -> None:
        self._rng = rng

    def choose(self, candidates: Sequence[RouteTarget], request: Request) -> int:
        return int(self._rng.integers(len(candidates)))


def make_router(name: str, rng: np.random.Generator,
                config: RouterConfig | None = None) -> RoutingPolicy:
    """The registered policy ``name``, built with ``rng`` and the ``router`` section
    (its weights; None: the defaults); ``KeyError(name)`` when there is none."""
    policy: RoutingPolicy = ROUTERS.lookup(name)(rng, config)
    return policy
