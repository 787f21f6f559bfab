"""The invariants that need no history, checked on a simulation's state (see the
package docstring for the list)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pdsim.config import Role
from pdsim.engine.request import Phase, Request, Status
from pdsim.simulation import Simulation

if TYPE_CHECKING:
    from pdsim.engine.instance import Instance

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


def _landed_s(req: Request) -> float:
    """When the current attempt's KV landed on D, from its hand-over record (NaN if it
    has not, or there is none)."""
    handover = req.handover
    return math.nan if handover is None else handover.kv_landed_s


# the hand-over's timestamps, read from its record (``HandOver``), by the name the
# request's timestamp order gives them
_HANDOVER_STAMPS = {"transfer_start_s": "kv_start_s", "transfer_end_s": "kv_landed_s"}


def _stamp(req: Request, name: str) -> float:
    """Timestamp ``name`` of ``TIMESTAMP_ORDER``: the hand-over's from its record."""
    field = _HANDOVER_STAMPS.get(name)
    if field is None:
        return float(getattr(req, name))
    handover = req.handover
    return math.nan if handover is None else float(getattr(handover, field))


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
        t = _stamp(req, name)
        if math.isnan(t):
            continue
        if t > now + _EPS:
            _fail(sim, f"request {req.id}: {name}={t} is in the future")
        if t < prev - _EPS:
            _fail(sim, f"request {req.id}: {name}={t} before {prev_name}={prev}")
        prev_name, prev = name, t
    _check_handover(sim, req)


# ------------------------------------------------------------------ stateful checks


def _check_handover(sim: Simulation, req: Request) -> None:
    """The current attempt's hand-over record agrees with the request: the P and D it
    names are the request's, its pin time is P's end, D got it when D queued it, and the
    KV load either landed (with the bytes P's layout gives for its tokens) or failed,
    never both, and only after it started."""
    handover = req.handover
    if handover is None:
        return
    who = f"request {req.id}'s hand-over record"
    if handover.attempt != _attempt(req):
        _fail(sim, f"{who} is for attempt {handover.attempt}, the request is on "
                   f"{_attempt(req)}")
    if handover.p_name != req.p_instance or handover.pinned_s != req.p_end_s:
        _fail(sim, f"{who} names P {handover.p_name} pinned at {handover.pinned_s}; the "
                   f"request says {req.p_instance} at {req.p_end_s}")
    if handover.d_name and (handover.d_name != req.d_instance
                            or handover.sent_s != req.d_queued_s):
        _fail(sim, f"{who} names D {handover.d_name} at {handover.sent_s}; the request "
                   f"says {req.d_instance} at {req.d_queued_s}")
    landed = not math.isnan(handover.kv_landed_s)
    if (landed or handover.kv_failed) and math.isnan(handover.kv_start_s):
        _fail(sim, f"{who}: the KV load ended ({handover!r}) but never started")
    if landed and handover.kv_failed:
        _fail(sim, f"{who}: the KV load both landed and failed ({handover.kv_failed})")
    if landed:
        want = sim.by_name[handover.p_name].layout.transfer_bytes(handover.kv_tokens)
        if handover.kv_nbytes != want:
            _fail(sim, f"{who}: {handover.kv_nbytes} bytes landed for {handover.kv_tokens} "
                       f"tokens, P's layout gives {want}")
    elif handover.kv_nbytes:
        _fail(sim, f"{who}: {handover.kv_nbytes} bytes counted but nothing landed")
