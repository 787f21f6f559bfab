"""What an instance needs from the cluster around it, and the hooks observers attach to.

The engine never imports ``pdsim.simulation``: an ``Instance`` reaches the cluster only
through the ``Cluster`` protocol below (``Simulation`` implements it), and tests and the
invariant checker watch the engine through ``EngineHooks`` instead of patching methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pdsim.engine.decode_run import DecodeRun
    from pdsim.engine.instance import Instance
    from pdsim.engine.request import Request


class DrawSource(Protocol):
    """A buffered stream of uniform draws in [0, 1)."""

    def take(self, n: int) -> list[float]: ...


class Cluster(Protocol):
    """The cluster an instance serves in: where its hand-overs, transfers and finished
    requests go."""

    @property
    def provenance_draws(self) -> DrawSource:
        """P's guesses of the tokens it did not see, right or wrong (one draw a guess)."""
        ...

    def on_prefill_done(self, req: Request, p: Instance) -> None:
        """P sampled ``req``'s first token: hand it over to a D."""

    def start_kv_transfer(self, req: Request, d: Instance) -> None:
        """D allocated blocks for ``req``'s remote KV: start moving it."""

    def finish(self, req: Request, at_s: float | None = None) -> None:
        """``req`` emitted its last token (at ``at_s``, default now)."""

    def fail(self, req: Request, reason: str) -> None:
        """``req`` cannot be served."""

    def next_fault_after(self, now_s: float) -> float:
        """The next scheduled fault strictly after ``now_s`` (inf if none): no decode run
        may end a step past it."""
        ...


@dataclass
class EngineHooks:
    """Observers of the engine, shared by a simulation's instances. Each list is called
    in order; an observer reads what it is given and never changes engine state."""

    # a request entered decode on an instance (its row is ``req.slot``)
    decode_entered: list[Callable[[Instance, Request], None]] = field(default_factory=list)
    # an instance planned a decode run and is about to follow it
    run_planned: list[Callable[[Instance, DecodeRun], None]] = field(default_factory=list)
    # an instance freed a request's blocks: (instance, request id, whether it held a table)
    blocks_freed: list[Callable[[Instance, int, bool], None]] = field(default_factory=list)
    # an instance ended one engine step (taken alone, not inside a decode run) at the time
    # given: what it emitted is in its requests and decode rows (``pdsim serve`` streams it)
    step_completed: list[Callable[[Instance, float], None]] = field(default_factory=list)
