"""Engine invariants, checked after every SimPy event in the tests.

``run_checked(cfg)`` runs a simulation one event at a time (``env.step()``) and, after each
event, checks every invariant below; the first violation raises ``InvariantViolation``
naming the instance, the request and the simulated time. This is the only module that
reads engine internals for checking, so an engine refactoring updates this file alone.

Invariants (after every event):

1. **KV block accounting** (per instance): used + free blocks = total; no block is in two
   block tables or both owned and free; no block is freed twice (``BlockPool.free`` raises
   on it, and the driver counts frees per request).
2. **Blocks have owners**: every block table belongs to a request that instance holds
   (waiting, receiving, running or pinned for a transfer); a request that finished,
   failed or was rejected holds no blocks anywhere; an instance that is down holds no
   request and no block.
3. **KV covers the computation**: a running request holds at least the blocks for the
   tokens it has computed (prefill) or its context (decode); the decode rows (request of
   each row, its block count) agree with the block pool and with the running list.
4. **P frees a request's blocks exactly once** after its prefill ends (D read them, the
   lease expired, the transfer failed or an instance went down): never twice, and by the
   end of the run exactly once per attempt that finished its prefill.
5. **D never computes on KV it does not have**: a request enters a D instance's batch
   either with nothing computed (local recompute) or with its remote KV landed
   (``transfer_end_s`` set, not in the future) and no more tokens computed than it
   loaded; nothing in the batch is still waiting for remote KV.
6. **Per-request timestamps are ordered** (those that are set): arrival <= p_queued <=
   p_start <= p_end <= d_queued <= transfer_start <= transfer_end <= first_token <=
   finish; none is later than the end of a step an instance has already committed; once
   set a timestamp never changes (a retry after an instance outage starts a new attempt,
   which resets the per-hop timestamps but not arrival, first token or finish).
7. **Speculative counters**: per request and per decode row, accepted <= drafted at
   every position (``accepted_per_pos[i] <= num_drafts``), the per-position counts are
   non-increasing and sum to the accepted tokens, draft tokens = drafts x N, and output
   tokens never exceed the target (a finished request has exactly its target).
8. **Request conservation**: every request that has arrived is finished, failed,
   rejected, or in flight in exactly one instance's queue (waiting, receiving or
   running), never two; arrived = finished + failed + rejected + in flight, and the
   simulation's done counter equals finished + failed + rejected. No request whose
   arrival time has passed is still undispatched (open-loop workloads).
9. **Closed loops**: requests are released in order, and the k-th release (k >= C, the
   concurrency) comes no earlier than the (k - C)-th request ended.
10. **Liveness**: while requests are in flight the event queue is never empty (no
    deadlock), and the run ends with every request finished, failed or rejected and
    every KV pool empty.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pdsim.config import Role
from pdsim.engine.request import Phase, Request, Status
from pdsim.results import Results
from pdsim.simulation import Simulation

if TYPE_CHECKING:
    from pdsim.config import SimConfig
    from pdsim.engine.instance import Instance
    from pdsim.workload import RequestSpecs

# The order a request's timestamps are reached in (those that are set).
TIMESTAMP_ORDER: tuple[str, ...] = (
    "arrival_s", "p_queued_s", "p_start_s", "p_end_s", "d_queued_s", "transfer_start_s",
    "transfer_end_s", "first_token_s", "finish_s",
)
_TERMINAL = (Status.FINISHED, Status.FAILED, Status.REJECTED)
# timestamps of the request as a whole; the others are per attempt (see _attempt)
_END_TO_END = frozenset({"arrival_s", "first_token_s", "finish_s"})
# slack for float sums of step times
_EPS = 1e-9


class InvariantViolation(AssertionError):
    """An engine invariant broke: a bug in pdsim, never a user error."""


def _fail(sim: Simulation, what: str) -> None:
    raise InvariantViolation(f"t={sim.env.now:.9f}s: {what}")


def _attempt(req: Request) -> int:
    """Which attempt the request is on: 0, then +1 per retry after an instance outage."""
    return int(getattr(req, "attempts", 0))


def _dispatched(req: Request) -> bool:
    """The proxy has handled the request (queued it on an instance, or rejected it)."""
    return (req.status is not Status.IN_FLIGHT or not math.isnan(req.p_queued_s)
            or not math.isnan(req.d_queued_s))


# ----------------------------------------------------------------- stateless checks


def check_invariants(sim: Simulation) -> None:
    """Check the invariants that need no history (1-3, 5 in part, 6 in part, 7-9); raise
    ``InvariantViolation`` on the first that fails."""
    homes: dict[int, str] = {}
    pinned_on: dict[int, str] = {}
    for inst in sim.instances:
        _check_pool(sim, inst)
        _check_queues(sim, inst, homes, pinned_on)
        _check_decode_slots(sim, inst)
    counts = dict.fromkeys(Status, 0)
    now = sim.env.now
    closed_loop = sim.closed_loop
    for req in sim.requests:
        counts[req.status] += 1
        dispatched = _dispatched(req)
        if req.status in _TERMINAL:
            if req.id in homes:
                _fail(sim, f"request {req.id} is {req.status.value} but still queued on "
                           f"{homes[req.id]}")
            if req.id in pinned_on:
                _fail(sim, f"request {req.id} is {req.status.value} but P {pinned_on[req.id]} "
                           f"still pins its blocks")
            for inst in sim.instances:
                if inst.pool.held(req.id):
                    _fail(sim, f"request {req.id} is {req.status.value} but holds "
                               f"{inst.pool.held(req.id)} blocks on {inst.name}")
        elif dispatched and req.id not in homes:
            _fail(sim, f"request {req.id} is in flight but on no instance's queue")
        elif not dispatched:
            if req.id in homes:
                _fail(sim, f"request {req.id} was never dispatched but is queued on "
                           f"{homes[req.id]}")
            if not closed_loop and req.arrival_s < now - _EPS:
                _fail(sim, f"request {req.id} arrived at {req.arrival_s} but was never "
                           f"dispatched")
        if dispatched:
            _check_timestamps(sim, req, now)
        _check_counters(sim, req)
    terminal = counts[Status.FINISHED] + counts[Status.FAILED] + counts[Status.REJECTED]
    arrived = sum(1 for r in sim.requests if _dispatched(r))
    if arrived != terminal + len(homes):
        _fail(sim, f"arrived {arrived} != finished {counts[Status.FINISHED]} + failed "
                   f"{counts[Status.FAILED]} + rejected {counts[Status.REJECTED]} + in flight "
                   f"{len(homes)}")
    if sim.num_done != terminal:
        _fail(sim, f"done counter {sim.num_done} != finished + failed + rejected {terminal}")
    if closed_loop:
        _check_closed_loop(sim)


def _check_closed_loop(sim: Simulation) -> None:
    """A closed loop of C clients: the k-th request (k >= C) is released no earlier than
    the (k - C)-th request ended (finished or failed; a rejection ends at its arrival)."""
    c = sim.specs.closed_loop_concurrency
    assert c is not None
    ends = sorted(r.finish_s if not math.isnan(r.finish_s) else r.arrival_s
                  for r in sim.requests if r.status in _TERMINAL)
    released = [r for r in sim.requests if _dispatched(r)]
    if released != sim.requests[: len(released)]:
        _fail(sim, "closed-loop requests were released out of order")
    if len(released) > c + len(ends):
        _fail(sim, f"{len(released)} requests released with only {len(ends)} ended and "
                   f"{c} clients")
    for k in range(c, len(released)):
        if released[k].arrival_s < ends[k - c] - _EPS:
            _fail(sim, f"closed loop: request {released[k].id} arrived at "
                       f"{released[k].arrival_s}, before the request whose end released it "
                       f"ended ({ends[k - c]})")


def _check_pool(sim: Simulation, inst: Instance) -> None:
    pool = inst.pool
    try:
        pool.check()
    except Exception as exc:  # KVCacheError, named in the violation
        _fail(sim, f"{inst.name}: KV pool: {exc}")
    if pool.num_used + pool.num_free != pool.num_blocks:
        _fail(sim, f"{inst.name}: used {pool.num_used} + free {pool.num_free} != total "
                   f"{pool.num_blocks}")
    if pool.num_used != sum(len(t) for t in pool.tables.values()):
        _fail(sim, f"{inst.name}: num_used {pool.num_used} != blocks in tables")


def _check_queues(sim: Simulation, inst: Instance, homes: dict[int, str],
                  pinned_on: dict[int, str]) -> None:
    held_here: set[int] = set()
    queues: tuple[tuple[str, Any], ...] = (
        ("waiting", inst.waiting), ("receiving", inst.receiving.values()),
        ("running", inst.running))
    for qname, queue in queues:
        for req in queue:
            where = f"{inst.name}.{qname}"
            if req.id in homes:
                _fail(sim, f"request {req.id} is queued twice: {homes[req.id]} and {where}")
            homes[req.id] = where
            held_here.add(req.id)
    for rid, req in inst.receiving.items():
        if rid != req.id:
            _fail(sim, f"{inst.name}.receiving maps {rid} to request {req.id}")
        if req.phase is not Phase.WAITING_FOR_REMOTE_KVS:
            _fail(sim, f"request {rid} in {inst.name}.receiving is {req.phase.value}")
    for qname, queue in (("waiting", inst.waiting), ("prefilling", inst.prefilling)):
        kept = getattr(queue, "tokens_left", None)
        left = sum(r.seq_tokens - r.num_computed for r in queue)
        if kept is not None and kept != left:
            _fail(sim, f"{inst.name}.{qname} counts {kept} tokens still to compute, its "
                       f"requests {left}")
    for req in inst.prefilling:
        if req.id not in held_here or req not in inst.running:
            _fail(sim, f"request {req.id} is prefilling on {inst.name} but not running")
    for rid in inst.pinned:
        if inst.role is not Role.PREFILL:
            _fail(sim, f"{inst.name} ({inst.role.value}) pins request {rid}")
        if rid in pinned_on:
            _fail(sim, f"request {rid} pinned on {pinned_on[rid]} and {inst.name}")
        pinned_on[rid] = inst.name
        if rid in held_here:
            _fail(sim, f"request {rid} is pinned on {inst.name} and also queued there")
    if not getattr(inst, "up", True) and (held_here or inst.pinned or inst.pool.num_used):
        _fail(sim, f"{inst.name} is down but holds requests {sorted(held_here)}, pins "
                   f"{sorted(inst.pinned)} or {inst.pool.num_used} blocks")
    for owner in inst.pool.tables:
        if owner not in held_here and owner not in inst.pinned:
            _fail(sim, f"{inst.name}: request {owner} holds {inst.pool.held(owner)} blocks "
                       f"but is neither queued nor pinned there")
    layout, pool = inst.layout, inst.pool
    for req in inst.running:
        if req.phase is Phase.PREFILL:
            need = layout.blocks_for(req.num_computed) if req.num_computed else 0
            if pool.held(req.id) < need:
                _fail(sim, f"{inst.name}: request {req.id} computed {req.num_computed} tokens "
                           f"but holds {pool.held(req.id)} < {need} blocks")
        elif req.phase is not Phase.DECODE:
            _fail(sim, f"request {req.id} is running on {inst.name} in phase "
                       f"{req.phase.value}")
    for req in inst.waiting:
        if req.phase is not Phase.WAITING:
            _fail(sim, f"request {req.id} waits on {inst.name} in phase {req.phase.value}")
        if req.num_computed and pool.held(req.id) < layout.blocks_for(req.num_computed):
            _fail(sim, f"{inst.name}: waiting request {req.id} counts {req.num_computed} "
                       f"computed tokens but holds {pool.held(req.id)} blocks")


def _check_decode_slots(sim: Simulation, inst: Instance) -> None:
    rows = inst.rows
    used = [s for s, r in enumerate(rows.request_of_row) if r is not None]
    if not inst.decodes:
        if used:
            _fail(sim, f"prefill instance {inst.name} has decode slots {used} in use")
        return
    dense = rows.count  # rows 0..count-1: the engine keeps them dense
    if used != list(range(dense)):
        _fail(sim, f"{inst.name}: decode rows in use {used} are not 0..{dense - 1}")
    n = inst.n_spec
    decoding = {r.id for r in inst.running if r.phase is Phase.DECODE}
    run = getattr(inst, "active_run", None)
    finished = set(run.finished_rows) if run is not None else set()
    seen: set[int] = set()
    for s in used:
        req = rows.request_of_row[s]
        assert req is not None
        if s in finished:  # finished inside a decode run: vacated when it is committed
            if req.phase is not Phase.DONE or inst.pool.held(req.id):
                _fail(sim, f"{inst.name}: row {s} of finished request {req.id} is "
                           f"{req.phase.value} and holds {inst.pool.held(req.id)} blocks")
            continue
        seen.add(req.id)
        if req.slot != s or req.phase is not Phase.DECODE:
            _fail(sim, f"{inst.name}: slot {s} holds request {req.id} (slot {req.slot}, "
                       f"{req.phase.value})")
        drafts = int(rows.drafts[s])
        pos = [int(x) for x in rows.accepted_per_pos[s, :n]] if n else []
        _check_spec(sim, f"{inst.name} slot {s} (request {req.id})", drafts, drafts * n,
                    int(rows.accepted_tokens[s]), pos)
        held = inst.pool.held(req.id)
        if int(rows.blocks_held[s]) != held:
            _fail(sim, f"{inst.name}: slot {s} mirrors {int(rows.blocks_held[s])} blocks, the "
                       f"pool says request {req.id} holds {held}")
        context = int(rows.context_tokens[s])
        if held < inst.layout.blocks_for(context):
            _fail(sim, f"{inst.name}: request {req.id} has context {context} but "
                       f"holds only {held} blocks")
        out, target = int(rows.output_tokens[s]), int(rows.target_tokens[s])
        if out > target:
            _fail(sim, f"{inst.name}: request {req.id} emitted {out} > target {target}")
    if seen != decoding:
        _fail(sim, f"{inst.name}: decode slots hold {sorted(seen)}, running decodes are "
                   f"{sorted(decoding)}")


def _check_spec(sim: Simulation, who: str, drafts: int, draft_tokens: int, accepted: int,
                per_pos: list[int]) -> None:
    if accepted > draft_tokens:
        _fail(sim, f"{who}: accepted {accepted} > drafted {draft_tokens}")
    if per_pos:
        if draft_tokens != drafts * len(per_pos):
            _fail(sim, f"{who}: {draft_tokens} draft tokens != {drafts} drafts x "
                       f"{len(per_pos)}")
        if sum(per_pos) != accepted:
            _fail(sim, f"{who}: per-position accepted {per_pos} do not sum to {accepted}")
        prev = drafts
        for i, a in enumerate(per_pos):
            if a < 0 or a > prev:
                _fail(sim, f"{who}: accepted at position {i} is {a}, above "
                           f"{'the drafts' if i == 0 else 'position ' + str(i - 1)} ({prev})")
            prev = a
    elif accepted or draft_tokens:
        _fail(sim, f"{who}: {accepted} accepted / {draft_tokens} drafted without speculation")


def _check_counters(sim: Simulation, req: Request) -> None:
    if req.num_output > req.output_target:
        _fail(sim, f"request {req.id} emitted {req.num_output} > its target {req.output_target}")
    per_pos = [int(x) for x in req.accepted_per_pos]
    _check_spec(sim, f"request {req.id}", req.num_drafts, req.num_draft_tokens,
                req.num_accepted_tokens, per_pos)
    if req.status is Status.FINISHED and req.num_output != req.output_target:
        emitted = _row_settling(sim, req)  # finished inside a decode run, not yet settled
        if emitted != req.output_target:
            _fail(sim, f"request {req.id} finished with "
                       f"{req.num_output if emitted is None else emitted} of "
                       f"{req.output_target} tokens")


def _row_settling(sim: Simulation, req: Request) -> int | None:
    """Tokens emitted by ``req``'s decode row if the request finished inside the decode
    run being followed and its row waits for the run's commit to be settled; else None."""
    inst = sim.by_name.get(req.d_instance)
    if inst is None:
        return None
    run = inst.active_run
    if run is None or req.slot < 0 or req.slot not in run.finished_rows \
            or inst.rows.request_of_row[req.slot] is not req:
        return None
    return int(inst.rows.output_tokens[req.slot])


def _check_timestamps(sim: Simulation, req: Request, now: float) -> None:
    prev_name, prev = "", -math.inf
    for name in TIMESTAMP_ORDER:
        t = getattr(req, name)
        if math.isnan(t):
            continue
        if t > now + _EPS:
            _fail(sim, f"request {req.id}: {name}={t} is in the future")
        if t < prev - _EPS:
            _fail(sim, f"request {req.id}: {name}={t} before {prev_name}={prev}")
        prev_name, prev = name, t


# ------------------------------------------------------------------ stateful checks


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
        if req is None or not had_table or math.isnan(req.p_end_s):
            return  # preemption on P, before the prefill ended: not the hand-over free
        key = (inst.name, owner, _attempt(req))
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
                    if req.kv_from_remote and not (req.transfer_end_s <= now + _EPS):
                        _fail(sim, f"{inst.name} computes request {req.id} from remote KV "
                                   f"that has not landed (transfer_end_s="
                                   f"{req.transfer_end_s})")
            if inst.role is Role.PREFILL:
                for rid in inst.pinned:
                    if self.p_frees.get((inst.name, rid, _attempt(self._by_id[rid])), 0):
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
        if math.isnan(req.transfer_end_s) or req.transfer_end_s > sim.env.now + _EPS:
            _fail(sim, f"{inst.name} admitted request {req.id} before its KV landed")
        if req.num_computed > req.remote_tokens:
            _fail(sim, f"{inst.name} admitted request {req.id} with {req.num_computed} "
                       f"computed tokens but loaded only {req.remote_tokens}")

    def _check_set_once(self, req: Request) -> None:
        # a retry after an outage starts a new attempt with fresh per-hop timestamps
        stamps = self._stamps.setdefault((req.id, _attempt(req)), {})
        if not stamps and _attempt(req):
            stamps.update((k, v) for k, v in self._stamps.get((req.id, _attempt(req) - 1),
                                                             {}).items() if k in _END_TO_END)
        for name in TIMESTAMP_ORDER:
            t = getattr(req, name)
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
            if math.isnan(req.p_end_s):
                continue
            n = self.p_frees.get((req.p_instance, req.id, _attempt(req)), 0)
            if n != 1:
                _fail(sim, f"{req.p_instance} freed request {req.id}'s blocks {n} times after "
                           f"its prefill (expected exactly once)")
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
    request is done, then ``finalize``, so the checked run is the run.
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
    return sim.finalize()


__all__ = ["TIMESTAMP_ORDER", "InvariantChecker", "InvariantViolation", "check_invariants",
           "run_checked"]
