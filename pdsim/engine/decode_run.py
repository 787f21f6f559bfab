"""Vectorized decode runs: many pure-decode steps of one instance in one pass.

Between external events nothing can change what a decode instance does except its own
requests finishing, so the steps until the next such event are computed together with a
few (steps x rows) array operations instead of one SimPy event each.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from pdsim.perf.base import decode_step_times_s

if TYPE_CHECKING:
    from pdsim.engine.instance import Instance


def decode_run(inst: Instance) -> float:
    """Run pure-decode steps ahead of the event loop; the simulated time they take.

    Allowed only when the steps are independent of anything external until the
    horizon (``Simulation.quiet_until``): no prefill running, no admissible waiting
    request (the queue is empty, or the batch is full: then nothing can join before a
    request finishes, and the first finish ends the run), no closed-loop
    release (a finish ends the run), per-request acceptance rates constant over the
    steps (no re-prefill cache short of entries, no decaying stale weights) and enough
    free blocks for every step. Within those bounds the steps are exactly the ones the
    step-by-step loop would take, computed with a few (steps x rows) array operations.

    Acceptance draws are counter-based per request (``AcceptanceSampler``), so the steps of
    a run see exactly the draws the same steps taken one by one would. The queue depths
    logged for the steps of a run are those at its start.
    """
    k = inst.k
    full = k >= inst.max_num_seqs
    if not k or inst.prefilling or not inst.decodes or (inst.waiting and not full):
        return 0.0
    n = inst.n_spec
    stale = inst.stale[:k]
    if inst.multi_module and (inst.cache_valid[:k] < n - 1).any():
        return 0.0
    has_stale = bool(n) and bool(stale.any())
    if has_stale and inst.decay_tokens is not None:
        return 0.0
    env = inst.env
    horizon = inst.sim.quiet_until(inst, full) - env.now
    if not horizon > 0:
        return 0.0
    # enough steps to reach the horizon at the last step's pace, within the cap
    pace = horizon / max(inst._last_dt, 1e-9)
    K = inst.max_run_steps if pace >= inst.max_run_steps - 2 else max(1, int(pace) + 2)
    out0 = inst.out[:k]
    tgt = inst.tgt[:k]
    # Finishes inside a run are applied when the run is committed, at their exact
    # times, when nobody can observe them early (open loop, no load-reading router,
    # nothing waiting to take the freed place). Otherwise the run ends with the step
    # in which its first request finishes, applied when simulated time reaches it.
    cut = full or bool(inst.waiting) or not inst.sim.early_finish_ok
    if cut:
        # about as many steps as the first finish is expected to take (a short window
        # only means another run)
        first = int((tgt - out0).min() / inst.tokens_per_step_clean) + 4
        K = min(K, first)
    q = 1 + n
    steps = inst._run_steps[:K]
    if n:
        a = inst.sampler.draw_steps(K, inst.akey[:k], inst.adraw[:k] + inst.n_drafts[:k],
                                    inst.surv[:k] if has_stale else None)
        e = a + 1
    else:
        a = None
        e = np.ones((K, k), dtype=np.int64)
    cum = e.cumsum(axis=0)  # tokens each row has emitted after step j
    # cum rises every step: the steps before a row's finishing step are those with
    # cum < remaining, so their count is the finishing step (K if none in the window)
    fstep = (cum < tgt - out0).sum(axis=0)
    act = steps <= fstep  # row r decodes in step j
    ctx_start = cum - e
    ctx_start += inst.ctx[:k]
    k_j = act.sum(axis=1)
    ctx_sum = (ctx_start * act).sum(axis=1)
    repair = np.zeros(K, dtype=np.int64)
    if inst.multi_module:
        assert a is not None
        # multi-module MTP's standalone repair: the drafter re-prefills the positions the
        # previous step rejected, bar one
        repair[0] = np.maximum(inst.prev_rej[:k] - 1, 0).sum()
        if K > 1:
            repair[1:] = (np.maximum(n - 1 - a[:-1], 0) * act[1:]).sum(axis=1)
    # never past the step in which the last row finishes: no empty steps
    limit = min(K, int(fstep.min() if cut else fstep.max()) + 1)
    # blocks each row holds at the start of step j, never less than now (a finished row
    # keeps its last count): non-decreasing in j, so one check finds the first shortage
    held0 = inst.blocks[:k]
    need = inst.layout.blocks_for_array(ctx_start + q)
    np.maximum(need, held0, out=need)
    need *= act
    np.maximum.accumulate(need, axis=0, out=need)
    need_total = need.sum(axis=1)
    capacity = inst.pool.num_free + int(held0.sum())
    if need_total[limit - 1] > capacity:
        limit = int(np.searchsorted(need_total, capacity, side="right"))
        if limit == 0:
            return 0.0
    dts = decode_step_times_s(inst.step_model, k_j[:limit], k_j[:limit] * q,
                              ctx_sum[:limit], repair[:limit])
    ends_a = dts.cumsum()
    # steps that start before the horizon; a step in progress when a scheduled fault
    # strikes must stay undone until then, so none may end after one
    m = int(np.searchsorted(ends_a - dts, horizon, side="left"))
    fault_in = inst.sim.faults.next_scheduled_after(env.now) - env.now
    if fault_in < math.inf:
        m = min(m, int(np.searchsorted(ends_a, fault_in, side="right")))
    if m == 0:
        return 0.0
    ends_a = ends_a[:m]
    ends = ends_a.tolist()
    inst._last_dt = ends[-1] / m
    # commit m steps
    t0 = env.now
    base = len(inst.step_end_s)
    last = np.minimum(fstep, m - 1)  # last step each row takes part in
    cols = inst._run_rows[:k]
    emitted = cum[last, cols]
    np.minimum(out0 + emitted, tgt, out=out0)
    inst.ctx[:k] += emitted
    if n:
        assert a is not None
        am = a[:m] * act[:m]
        per_pos = (am[:, :, None] > inst._arange_n).sum(axis=0)
        inst.n_drafts[:k] += last + 1
        inst.n_acc[:k] += per_pos.sum(axis=1)
        inst.acc_pos[:k] += per_pos
        if inst.multi_module:
            inst.prev_rej[:k] = n - a[last, cols]
    final_need = need[last, cols]
    grow = np.flatnonzero(final_need > held0)
    if len(grow):
        slots = inst.req_of_slot
        owners = [slots[s].id for s in grow.tolist()]  # type: ignore[union-attr]
        ok = inst.pool.allocate_many(owners, (final_need[grow] - held0[grow]).tolist())
        assert ok, "a decode run outgrew the free blocks it checked"
        held0[grow] = final_need[grow]
    # per-step log: KV blocks in use and running requests after each step
    alive = steps[:m] < fstep  # still running after step j
    other = inst.pool.num_used - int(held0.sum())
    log = np.empty((m, 8))
    log[:, 1] = ends_a
    log[:, 1] += t0
    log[0, 0] = t0
    log[1:, 0] = log[:-1, 1]
    log[:, 2] = 0
    log[:, 3] = k_j[:m]
    log[:, 4] = (need[:m] * alive).sum(axis=1)
    log[:, 4] += other
    log[:, 5] = alive.sum(axis=1)
    log[:, 5] += len(inst.running) - k
    log[:, 6] = len(inst.waiting)
    log[:, 7] = len(inst.receiving)
    inst.step_end_s.frombytes(log[:, 1].tobytes())
    inst.step_log.frombytes(log.tobytes())
    done_in = np.flatnonzero(fstep < m)
    if cut:
        inst._pending = [(inst.req_of_slot[s], base + m - 1) for s in done_in.tolist()]
    else:
        for s in done_in[::-1].tolist():
            f = int(fstep[s])
            inst._finish_row(s, base + f, t0 + ends[f])
    return float(ends[-1])
