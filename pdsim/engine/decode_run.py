"""Vectorized decode runs: many pure-decode steps of one instance in one pass.

Between external events nothing can change what a decode instance does except its own
requests finishing, so the steps until the next such event are computed together with a
few (steps x rows) array operations instead of one SimPy event each.
"""

from __future__ import annotations

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
    Acceptance uniforms are drawn for the whole window, so a run differs from a
    step-by-step one in which uniform each step sees, never in the model. The queue
    depths logged for the steps of a run are those at its start.
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
    K = inst.max_run_steps if pace >= inst.max_run_steps else max(1, int(pace) + 2)
    q = 1 + n
    if n:
        rates = None
        if has_stale:
            rates = inst.cond * np.exp(-inst.beta * stale[:, inst.module_of_pos])
        a = inst.sampler.draw_steps(K, k, rates)
        e = a + 1
    else:
        a = None
        e = np.ones((K, k), dtype=np.int64)
    cum = np.cumsum(e, axis=0)
    out0 = inst.out[:k]
    tgt = inst.tgt[:k]
    fin = (out0 + cum) >= tgt
    fstep = np.where(fin.any(axis=0), fin.argmax(axis=0), K)  # step each row finishes
    steps = np.arange(K)[:, None]
    act = steps <= fstep  # row r decodes in step j
    ctx_start = inst.ctx[:k] + cum - e
    k_j = act.sum(axis=1)
    ctx_sum = (ctx_start * act).sum(axis=1)
    if n:
        assert a is not None
        prev = np.vstack((inst.prev_rej[:k][None, :], n - a[:-1]))
        repair = (np.maximum(prev - 1, 0) * act).sum(axis=1)
    else:
        repair = np.zeros(K, dtype=np.int64)
    # Finishes inside a run are applied when the run is committed, at their exact
    # times, when nobody can observe them early (open loop, no load-reading router,
    # nothing waiting to take the freed place). Otherwise the run ends with the step
    # in which its first request finishes, applied when simulated time reaches it.
    cut = full or bool(inst.waiting) or not inst.sim.early_finish_ok
    # never past the step in which the last row finishes: no empty steps
    limit = min(K, int(fstep.min() if cut else fstep.max()) + 1)
    # blocks each row holds at the start of step j, never less than now
    held0 = inst.blocks[:k]
    need = np.maximum.accumulate(
        np.maximum(inst.layout.blocks_for_array(ctx_start + q), held0) * act, axis=0)
    short = np.flatnonzero((need - held0).sum(axis=1) > inst.pool.num_free)
    if len(short):
        limit = min(limit, int(short[0]))
    dts = decode_step_times_s(inst.step_model, k_j[:limit], k_j[:limit] * q,
                              ctx_sum[:limit], repair[:limit])
    ends_a = np.cumsum(dts)
    # steps that start before the horizon; a step in progress when a scheduled fault
    # strikes must stay undone until then, so none may end after one
    fault_in = inst.sim.faults.next_scheduled_after(env.now) - env.now
    m = min(int(np.searchsorted(ends_a - dts, horizon, side="left")),
            int(np.searchsorted(ends_a, fault_in, side="right")))
    if m == 0:
        return 0.0
    ends_a = ends_a[:m]
    ends = ends_a.tolist()
    inst._last_dt = ends[-1] / m
    # commit m steps
    t0 = env.now
    base = len(inst.step_end_s)
    done_in = fstep < m
    last = np.minimum(fstep, m - 1)  # last step each row takes part in
    cols = np.arange(k)
    emitted = cum[last, cols]
    mact = act[:m]
    taken = last + 1
    np.minimum(out0 + emitted, tgt, out=out0)
    inst.ctx[:k] += emitted
    if n:
        assert a is not None
        am = a[:m] * mact
        inst.n_drafts[:k] += taken
        inst.n_acc[:k] += am.sum(axis=0)
        inst.acc_pos[:k] += (am[:, :, None] > inst._arange_n).sum(axis=0)
        inst.prev_rej[:k] = n - a[last, cols]
    final_need = need[last, cols]
    for s in np.flatnonzero(final_need > held0).tolist():
        req = inst.req_of_slot[s]
        assert req is not None
        extra = int(final_need[s] - held0[s])
        inst.pool.allocate(req.id, extra)
        held0[s] += extra
    # per-step log: KV blocks in use and running requests after each step
    alive = steps[:m] < fstep  # still running after step j
    other = inst.pool.num_used - int(held0.sum())
    kv_used = other + (need[:m] * alive).sum(axis=1)
    running_after = len(inst.running) - (~alive).sum(axis=1)
    log = np.empty((m, 8))
    log[:, 1] = t0 + ends_a
    log[0, 0] = t0
    log[1:, 0] = log[:-1, 1]
    log[:, 2] = 0
    log[:, 3] = k_j[:m]
    log[:, 4] = kv_used
    log[:, 5] = running_after
    log[:, 6] = len(inst.waiting)
    log[:, 7] = len(inst.receiving)
    inst.step_end_s.frombytes(log[:, 1].tobytes())
    inst.step_log.frombytes(log.tobytes())
    if cut:
        inst._pending = [(inst.req_of_slot[s], base + m - 1)
                         for s in np.flatnonzero(done_in).tolist()]
    else:
        for s in np.flatnonzero(done_in)[::-1].tolist():
            f = int(fstep[s])
            inst._finish_row(s, base + f, t0 + ends[f])
    return float(ends[-1])
