"""The stateful invariants (P-side frees, D admissions, timestamps set once) and the
driver that checks everything after every event."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pdsim.config import Role
from pdsim.invariants.checks import (
    _END_TO_END,
    _EPS,
    _TERMINAL,
    TIMESTAMP_ORDER,
    _attempt,
    _dispatched,
    _fail,
    _landed_s,
    _stamp,
    check_invariants,
)
from pdsim.simulation import Simulation

if TYPE_CHECKING:
    from pdsim.config import SimConfig
    from pdsim.engine.instance import Instance
    from pdsim.engine.request import Request
    from pdsim.results import Results
    from pdsim.workload import RequestSpecs


class InvariantChecker:
    """Checks all invariants of one simulation after every event, keeping the history
    the stateful ones need (P-side frees, D admissions, timestamps set once).

    It watches every P instance's frees through the engine's ``blocks_freed`` hook;
    create it before the simulation starts.
    """

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.events = 0
        self._by_id = {r.id: r for r in sim.requests}
        # P-side frees of a request's blocks after its prefill ended, per attempt (an
        # outage retry sends the request through P again): (instance, id, attempt) -> n
        self.p_frees: dict[tuple[str, int, int], int] = {}
        self._running: dict[str, set[int]] = {i.name: set() for i in sim.instances}
        self._stamps: dict[tuple[int, int], dict[str, float]] = {}
        sim.hooks.blocks_freed.append(self._on_free)

    def _on_free(self, inst: Instance, owner: int, had_table: bool) -> None:
        if inst.role is Role.PREFILL:
            self._on_p_free(inst, owner, had_table)

    def _on_p_free(self, inst: Instance, owner: int, had_table: bool) -> None:
        req = self._by_id.get(owner)
        handover = req.handover if req is not None else None
        if handover is None or not had_table:
            return  # preemption on P, before the prefill ended: not the hand-over free
        if handover.p_name != inst.name:
            _fail(self.sim, f"{inst.name} freed request {owner}'s pinned blocks, but its "
                            f"hand-over record names {handover.p_name}")
        key = (inst.name, owner, handover.attempt)
        self.p_frees[key] = n = self.p_frees.get(key, 0) + 1
        if n > 1:
            _fail(self.sim, f"{inst.name} freed request {owner}'s blocks {n} times after its "
                            f"prefill")

    def check(self) -> None:
        """All invariants, after one event."""
        sim = self.sim
        check_invariants(sim)
        now = sim.env.now
        for inst in sim.instances:
            running = {r.id for r in inst.running}
            new = running - self._running[inst.name]
            self._running[inst.name] = running
            if inst.role is Role.DECODE:
                for rid in sorted(new):
                    self._check_d_admission(inst, self._by_id[rid])
                for req in inst.running:
                    if req.id in inst.receiving:
                        _fail(sim, f"{inst.name} computes request {req.id} while its KV "
                                   f"is still in flight")
                    landed = _landed_s(req)
                    if req.kv_from_remote and not (landed <= now + _EPS):
                        _fail(sim, f"{inst.name} computes request {req.id} from remote KV "
                                   f"that has not landed (its hand-over record's "
                                   f"kv_landed_s={landed})")
            if inst.role is Role.PREFILL:
                for rid in inst.pinned:
                    handover = self._by_id[rid].handover
                    if handover is None or handover.p_name != inst.name:
                        _fail(sim, f"{inst.name} pins request {rid}, whose hand-over record "
                                   f"is {handover!r}")
                    assert handover is not None
                    if self.p_frees.get((inst.name, rid, handover.attempt), 0):
                        _fail(sim, f"{inst.name} still pins request {rid} after freeing it")
                    if not inst.pool.held(rid):
                        _fail(sim, f"{inst.name} pins request {rid} but holds no blocks "
                                   f"for it")
        for req in sim.requests:
            if _dispatched(req):
                self._check_set_once(req)

    def _check_d_admission(self, inst: Instance, req: Request) -> None:
        """A request just entered D's batch: local recompute or landed remote KV."""
        sim = self.sim
        if req.num_computed == 0:
            return
        if not req.kv_from_remote:
            allowed = req.prefix_hit_tokens
            if req.num_computed > allowed:
                _fail(sim, f"{inst.name} admitted request {req.id} with {req.num_computed} "
                           f"tokens computed, neither recomputed locally nor loaded")
            return
        handover = req.handover
        landed = _landed_s(req)
        if handover is None or math.isnan(landed) or landed > sim.env.now + _EPS:
            _fail(sim, f"{inst.name} admitted request {req.id} before its KV landed")
        assert handover is not None
        if handover.d_name != inst.name:
            _fail(sim, f"{inst.name} admitted request {req.id} with remote KV, but its "
                       f"hand-over record sent it to {handover.d_name or 'no D'}")
        if req.num_computed > handover.kv_tokens:
            _fail(sim, f"{inst.name} admitted request {req.id} with {req.num_computed} "
                       f"computed tokens but loaded only {handover.kv_tokens}")

    def _check_set_once(self, req: Request) -> None:
        # a retry after an outage starts a new attempt with fresh per-hop timestamps
        stamps = self._stamps.setdefault((req.id, _attempt(req)), {})
        if not stamps and _attempt(req):
            stamps.update((k, v) for k, v in self._stamps.get((req.id, _attempt(req) - 1),
                                                             {}).items() if k in _END_TO_END)
        for name in TIMESTAMP_ORDER:
            t = _stamp(req, name)
            if math.isnan(t):
                if name in stamps:
                    _fail(self.sim, f"request {req.id}: {name} was {stamps[name]}, now unset")
                continue
            old = stamps.setdefault(name, t)
            if old != t:
                _fail(self.sim, f"request {req.id}: {name} changed from {old} to {t}")

    def finish(self) -> None:
        """End-of-run checks: everything terminal, every P hand-over freed exactly once."""
        sim = self.sim
        self.check()
        left = [r.id for r in sim.requests if r.status not in _TERMINAL]
        if left:
            _fail(sim, f"run ended with requests {left[:10]} still in flight")
        for req in sim.requests:
            handover = req.handover
            if handover is None:
                continue  # never pinned on a P in its last attempt
            n = self.p_frees.get((handover.p_name, req.id, handover.attempt), 0)
            if n != 1:
                _fail(sim, f"{handover.p_name} freed request {req.id}'s blocks {n} times "
                           f"after its prefill (expected exactly once)")
        for inst in sim.instances:
            if inst.pool.num_used:
                _fail(sim, f"{inst.name} ends the run with {inst.pool.num_used} blocks in use")


# -------------------------------------------------------------------------- driver


def run_checked(cfg: SimConfig, every_event: bool = True,
                requests: RequestSpecs | None = None,
                max_events: int | None = None) -> Results:
    """Simulate ``cfg`` one event at a time, checking every invariant after each event
    (or only at the end when ``every_event`` is false); return the run's ``Results``.

    The run is ``Simulation.run`` taken apart: ``start``, then ``step`` until every
    request is done, then ``results``, so the checked run is the run.
    Raises ``InvariantViolation`` on the first broken invariant, on a deadlock (no event
    left while requests are in flight) or after ``max_events`` events.
    """
    sim = Simulation(cfg, requests)
    checker = InvariantChecker(sim)
    sim.start()
    env = sim.env
    while not sim.done:
        if env.peek() == math.inf:
            _fail(sim, f"deadlock: no event left, {len(sim.requests) - sim.num_done} "
                       f"requests in flight")
        sim.step()
        checker.events += 1
        if every_event:
            checker.check()
        if max_events is not None and checker.events > max_events:
            _fail(sim, f"more than {max_events} events")
    checker.finish()
    return sim.results()
