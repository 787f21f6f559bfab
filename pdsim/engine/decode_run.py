"""Decode runs: an instance's pure-decode steps, planned in one vectorized pass.

When an instance's scheduler has nothing but decode work, the steps it will take next
(up to a cap, a block shortage or its last request finishing) are computed together with
a few (steps x rows) array operations instead of one SimPy event each. The instance then
follows the run, waking only at the step boundaries where something happens:

- a request finishes: it is finished there, at that boundary's time, as step by step;
- something outside changed the instance (any ``Instance.notify``: a request handed
  over, KV landed, a transfer failed): at the first boundary after the change the
  instance does what its scheduler would do there. Giving a handed-over request its
  blocks and starting its transfer leaves the decode steps as they are, so the run goes
  on; anything else (a prefill to admit, a block count it cannot vouch for) ends the run
  at that boundary and the scheduler takes over.

Nothing about the outside world is predicted: a run stops wherever scheduling step by
step could differ, so it is exact by construction
(``tests/reliability/test_rel_decode_runs.py`` checks it on every shipped config and on
random ones). A run is committed (rows' state, block growth, the step log) when it ends;
until then the rows hold their state from its start, and rows whose requests finished
wait in ``finished_rows`` to be vacated. Acceptance draws are counter-based per request
(``AcceptanceSampler``), so the steps see exactly the draws the same steps taken one by
one would.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np

from pdsim.engine.request import Phase
from pdsim.perf.base import decode_step_times_s

if TYPE_CHECKING:
    from pdsim.engine.instance import Instance


class DecodeRun:
    """The planned steps of one decode run and how far the instance has followed them.

    Steps are indexed 0..num_steps-1 from the run's start; boundary ``j`` is the end of
    step ``j``. ``cur`` is the last boundary the instance has reached.
    """

    def __init__(self, inst: Instance, num_steps: int, ends_rel: np.ndarray,
                 accepted: np.ndarray | None, cum: np.ndarray, fstep: np.ndarray,
                 act: np.ndarray, need: np.ndarray, k_j: np.ndarray,
                 growth_blocks: int) -> None:
        self.inst = inst
        self.num_steps = num_steps
        self.t0 = inst.env.now
        self.ends_rel = ends_rel
        self.ends = (ends_rel + self.t0).tolist()
        self.accepted = accepted
        self.cum = cum
        self.fstep = fstep
        self.act = act
        self.need = need
        self.k_j = k_j
        self.k = inst.k
        self.held0 = inst.blocks[: self.k].copy()
        self.base = inst.step_count
        self.running_other = len(inst.running) - self.k
        # blocks the rows may still take (finished rows counted until the end: an upper
        # bound), reserved against hand-overs admitted during the run
        self.growth_blocks = growth_blocks
        self.held_alive = int(self.held0.sum())
        # finishing steps in order, each with its rows (highest first, as step by step)
        done = np.flatnonzero(fstep < num_steps)
        order = np.lexsort((-done, fstep[done]))
        self._finishes: list[tuple[int, list[int]]] = []
        for s in done[order].tolist():
            f = int(fstep[s])
            if self._finishes and self._finishes[-1][0] == f:
                self._finishes[-1][1].append(s)
            else:
                self._finishes.append((f, [s]))
        self._next_finish = 0
        self.finished_rows: list[int] = []
        self.cur = -1
        self.target = -1
        self.dirty = num_steps  # first boundary with an outside change to act on
        self.handling = True  # the instance is acting at a boundary (not waiting)
        self.poked = False  # an outside change came while it was
        self._armed: set[int] = set()
        # queue depths and blocks held outside the rows, for the step log: the state at
        # the start, then (boundary, before acting, after acting) at each boundary reached
        self._state0 = self._state()
        self._snaps: list[tuple[int, tuple[int, int, int], tuple[int, int, int]]] = []

    # ------------------------------------------------------------ following

    def next_stop(self) -> int:
        """The next boundary the instance must wake at."""
        j = min(self.dirty, self.num_steps - 1)
        if self._next_finish < len(self._finishes):
            j = min(j, self._finishes[self._next_finish][0])
        return j

    def wait_for(self, j: int) -> None:
        """The instance now waits for boundary ``j``."""
        self.target = j
        self.handling = False
        self._arm(j)

    def _arm(self, j: int) -> None:
        if j in self._armed:
            return
        self._armed.add(j)
        env = self.inst.env
        ev = env.timeout(max(0.0, self.ends[j] - env.now))
        ev.callbacks.append(lambda _e: self._fire(j))

    def _fire(self, j: int) -> None:
        self._armed.discard(j)
        inst = self.inst
        if inst.active_run is self and self.target == j and not self.handling:
            self.handling = True
            inst.wake_run()

    def poke(self, now: float) -> None:
        """Something outside changed the instance at ``now``: act at the next boundary."""
        if self.handling:
            self.poked = True  # at a boundary: acted on there, or at the next one
            return
        j = min(bisect.bisect_left(self.ends, now, self.cur + 1), self.num_steps - 1)
        self.dirty = min(self.dirty, j)
        if j < self.target:
            self.target = j
            self._arm(j)

    def at_boundary(self, j: int) -> bool:
        """The instance reached boundary ``j``: finish what finished there and act as its
        scheduler would. True when the run ends here."""
        self.cur = j
        finished = False
        if self._next_finish < len(self._finishes) and self._finishes[self._next_finish][0] == j:
            rows = self._finishes[self._next_finish][1]
            self._next_finish += 1
            for s in rows:
                self._finish_row(s, j)
            finished = True
        before = self._state()
        if j == self.num_steps - 1:
            self._snaps.append((j, before, before))
            return True
        ok = True
        if self.dirty <= j or finished or self.poked:
            self.dirty = self.num_steps
            self.poked = False
            if self.inst.waiting:
                ok = self._admit_transfers(j)
        self._snaps.append((j, before, self._state()))
        if self.poked:  # changed while acting: look again at the next boundary
            self.poked = False
            self.dirty = j + 1
        return not ok

    def catch_up(self, now: float) -> None:
        """Count the steps that ended by ``now`` as reached (they needed no action: the
        instance wakes at every boundary that does), so a commit includes them."""
        reached = bisect.bisect_right(self.ends, now) - 1
        self.cur = max(self.cur, min(reached, self.next_stop() - 1))

    def _state(self) -> tuple[int, int, int]:
        inst = self.inst
        return (len(inst.waiting), len(inst.receiving), inst.pool.num_used - self.held_alive)

    def _admit_transfers(self, j: int) -> bool:
        """The scheduler's admission loop at boundary ``j``, as far as it keeps the decode
        steps unchanged: hand-overs get their blocks and start loading. False when it would
        do anything else (the run must end here)."""
        inst = self.inst
        waiting = inst.waiting
        budget = inst.max_batched_tokens - int(self.k_j[j + 1]) * (1 + inst.n_spec)
        while waiting and budget > 0 and len(inst.running) < inst.max_num_seqs:
            req = waiting[0]
            if not inst.awaits_remote_kv(req):
                return False
            if not inst.load_remote_kv(req, reserve=self.growth_blocks):
                return False  # it might fit step by step: let the scheduler decide
            waiting.popleft()
        return True

    def _finish_row(self, s: int, j: int) -> None:
        """Row ``s`` emitted its last token in step ``j``: settle it and finish its request
        now, as step by step; the row is vacated when the run is committed."""
        inst = self.inst
        req = inst.req_of_slot[s]
        assert req is not None
        inst.out[s] = inst.tgt[s]
        a = self.accepted
        if a is not None:
            per_pos = (a[: j + 1, s, None] > inst.arange_n).sum(axis=0)
            inst.n_drafts[s] += j + 1
            inst.n_acc[s] += int(per_pos.sum())
            inst.acc_pos[s] += per_pos
        inst.settle_slot(req, self.base + j)
        inst.running.remove(req)
        self.held_alive -= int(self.held0[s])
        inst.pool.free(req.id)
        req.phase = Phase.DONE
        self.finished_rows.append(s)
        inst.sim.finish(req, self.ends[j])

    # ------------------------------------------------------------- commit

    def commit(self) -> None:
        """Apply the steps up to the last boundary reached to the rows, the pool and the
        step log; vacate the finished rows."""
        m = self.cur + 1
        inst = self.inst
        k = self.k
        if m <= 0:
            return
        fstep, cum, need, held0 = self.fstep, self.cum, self.need, self.held0
        last = np.minimum(fstep, m - 1)  # last step each row takes part in
        cols = inst.run_rows[:k]
        emitted = cum[last, cols]
        out = inst.out[:k]
        np.minimum(out + emitted, inst.tgt[:k], out=out)
        inst.ctx[:k] += emitted
        a = self.accepted
        n = inst.n_spec
        if a is not None:
            am = a[:m] * self.act[:m]
            per_pos = (am[:, :, None] > inst.arange_n).sum(axis=0)
            inst.n_drafts[:k] += last + 1
            inst.n_acc[:k] += per_pos.sum(axis=1)
            inst.acc_pos[:k] += per_pos
            if inst.multi_module:
                inst.prev_rej[:k] = n - a[last, cols]
        final_need = need[last, cols]
        grow = np.flatnonzero((final_need > held0) & (fstep >= m))
        if len(grow):
            slots = inst.req_of_slot
            owners = [slots[s].id for s in grow.tolist()]  # type: ignore[union-attr]
            ok = inst.pool.allocate_many(owners, (final_need[grow] - held0[grow]).tolist())
            assert ok, "a decode run outgrew the free blocks it checked"
            inst.blocks[grow] = final_need[grow]
        self._log(m)
        for s in sorted(self.finished_rows, reverse=True):
            inst.vacate_slot(s)
        inst.busy_s += float(self.ends_rel[m - 1])

    def _log(self, m: int) -> None:
        """Per step: start, end, prefill tokens (0), decode rows, KV blocks in use,
        running, waiting and receiving after the step, as step by step logs them."""
        inst = self.inst
        alive = inst.run_steps[:m] < self.fstep  # still running after step j
        log = np.empty((m, 8))
        log[:, 1] = self.ends_rel[:m]
        log[:, 1] += self.t0
        log[0, 0] = self.t0
        log[1:, 0] = log[:-1, 1]
        log[:, 2] = 0
        log[:, 3] = self.k_j[:m]
        log[:, 4] = (self.need[:m] * alive).sum(axis=1)
        log[:, 5] = alive.sum(axis=1)
        log[:, 5] += self.running_other
        queues = np.empty((m, 3))
        queues[:] = self._state0
        for j, before, after in self._snaps:
            queues[j] = before
            queues[j + 1:] = after
        log[:, 4] += queues[:, 2]
        log[:, 6:8] = queues[:, :2]
        inst.step_end_s.frombytes(log[:, 1].tobytes())
        inst.step_log.frombytes(log.tobytes())


def plan_decode_run(inst: Instance) -> DecodeRun | None:
    """Plan the instance's next pure-decode steps, or None when they cannot be planned.

    Call it only where the scheduler would take a pure-decode step now (it has just
    planned one, or nothing waits). Not planned: no decode rows, a prefill running,
    per-request acceptance rates that would change over the steps (a multi-module
    re-prefill cache short of entries, decaying stale weights), too few free blocks for
    even one step.
    """
    k = inst.k
    if not k or inst.prefilling or not inst.decodes:
        return None
    n = inst.n_spec
    if inst.multi_module and (inst.cache_valid[:k] < n - 1).any():
        return None
    has_stale = bool(n) and bool(inst.stale[:k].any())
    if has_stale and inst.decay_tokens is not None:
        return None
    env = inst.env
    K = inst.run_length_hint()
    out0 = inst.out[:k]
    tgt = inst.tgt[:k]
    q = 1 + n
    steps = inst.run_steps[:K]
    if n:
        a: np.ndarray | None = inst.sampler.draw_steps(
            K, inst.akey[:k], inst.adraw[:k] + inst.n_drafts[:k],
            inst.surv[:k] if has_stale else None)
        assert a is not None
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
    limit = min(K, int(fstep.max()) + 1)
    # blocks each row holds during step j, never less than now (a finished row keeps its
    # last count: an upper bound): non-decreasing in j, so one check finds the first
    # shortage
    held0 = inst.blocks[:k]
    need = inst.layout.blocks_for_array(ctx_start + q)
    np.maximum(need, held0, out=need)
    need *= act
    np.maximum.accumulate(need, axis=0, out=need)
    need_total = need.sum(axis=1)
    held_sum = int(held0.sum())
    capacity = inst.pool.num_free + held_sum
    if need_total[limit - 1] > capacity:
        limit = int(np.searchsorted(need_total, capacity, side="right"))
        if limit == 0:
            return None
    dts = decode_step_times_s(inst.step_model, k_j[:limit], k_j[:limit] * q,
                              ctx_sum[:limit], repair[:limit])
    ends_rel = dts.cumsum()
    # a step in progress when a scheduled fault strikes must stay undone until then, so
    # none may end after one
    m = limit
    fault_in = inst.sim.faults.next_scheduled_after(env.now) - env.now
    if fault_in < ends_rel[-1]:
        m = int(np.searchsorted(ends_rel, fault_in, side="right"))
        if m == 0:
            return None
    return DecodeRun(inst, m, ends_rel[:m], a, cum, fstep, act, need, k_j,
                     int(need_total[m - 1]) - held_sum)
