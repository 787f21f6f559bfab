"""Fixtures that reach engine internals, kept here so one place follows engine changes.

Everything else in tests/core goes through public interfaces (``load_config``,
``Simulation``, ``Results``, ``compare``) and the documented pure functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from pdsim import SimConfig, Simulation
from pdsim.config import Role
from pdsim.engine.request import Request


@dataclass
class DecodeEntry:
    """A request's drafter stale-slot row the moment it entered decode on an instance."""

    instance: str
    role: Role
    request: Request
    stale: np.ndarray
    kv_from_remote: bool
    padded: bool  # its first step there was padded with placeholder drafts


class DecodeEntries(list[DecodeEntry]):
    """``DecodeEntry`` records of the simulations ``attach``ed, in order."""

    def attach(self, sim: Simulation) -> Simulation:
        """Record every request entering decode in ``sim`` (through the engine's
        ``decode_entered`` hook); returns ``sim``."""

        def entered(inst: Any, req: Request) -> None:
            self.append(DecodeEntry(inst.name, inst.role, req,
                                    np.array(inst.rows.stale_weight[req.slot],
                                             dtype=np.float64),
                                    bool(req.kv_from_remote),
                                    bool(req.padded_first_steps)))

        sim.hooks.decode_entered.append(entered)
        return sim


@pytest.fixture
def decode_entries() -> Iterator[DecodeEntries]:
    """Records a ``DecodeEntry`` each time a request enters its decode phase in a
    simulation given to ``attach``.

    The row is the instance's stale weights for the request's row right after its first
    (prefill) step there.
    """
    yield DecodeEntries()


@pytest.fixture(scope="session")
def chunk_of() -> Callable[..., int]:
    """``chunk_of(cfg, role, prompt_tokens, computed, budget)``: the prefill chunk the
    scheduler of a ``role`` instance picks for a crafted request (``Scheduler.chunk_tokens``)."""
    sims: dict[int, tuple[SimConfig, Simulation]] = {}

    def chunk(cfg: SimConfig, role: Role, prompt_tokens: int, computed: int,
              budget: int) -> int:
        held = sims.get(id(cfg))
        if held is None or held[0] is not cfg:
            held = sims[id(cfg)] = (cfg, Simulation(cfg))
        sim = held[1]
        inst = sim.by_role[role][0]
        req = Request(10**6, 0.0, prompt_tokens, 8, cfg.speculative.num_speculative_tokens)
        req.num_computed = computed
        return int(inst.scheduler.chunk_tokens(req, budget))

    return chunk


def check_instance(inst: Any) -> None:
    """Block-pool and batch invariants of one instance, at any moment."""
    inst.pool.check()
    held = sum(len(t) for t in inst.pool.tables.values())
    assert held == inst.pool.num_used <= inst.pool.num_blocks
    assert len(inst.running) <= inst.scheduler.max_num_seqs


@pytest.fixture
def checked_run() -> Callable[[Simulation], Any]:
    """Run a simulation, checking every instance's invariants after every SimPy event."""

    def run(sim: Simulation) -> Any:
        env = sim.env
        step = env.step
        events = 0

        def checked_step() -> None:
            nonlocal events
            step()
            events += 1
            for inst in sim.instances:
                check_instance(inst)

        env.step = checked_step  # type: ignore[method-assign]
        res = sim.run()
        assert events > 0
        return res

    return run
