"""Decode runs: an instance's decode steps, planned in vectorized passes.

When an instance's scheduler has nothing but decode work, the steps it will take next
(up to a cap, a block shortage or its last request finishing) are computed together with
a few (steps x rows) array operations instead of one SimPy event each. The instance then
follows the run, waking only at the step boundaries where something happens:

- a request finishes: it is finished there, at that boundary's time, as step by step;
- something outside changed the instance (any ``Instance.notify``: a request handed
  over, KV landed, a transfer failed): at the first boundary after the change the
  instance does what its scheduler would do there. Giving a handed-over request its
  blocks and starting its transfer leaves the decode steps as they are. Admitting a
  request whose prompt completes in one chunk (D's recompute of the last prompt tokens
  after its KV landed, a short prompt on a colocated instance) makes the next step a
  mixed one, priced as such; when it ends, the request joins the run as a new row and
  the steps after it are re-priced. Anything else (a prompt that needs several chunks,
  a block count the run cannot vouch for, prefix-cache lookups) ends the run at that
  boundary and the scheduler takes over.

Nothing about the outside world is predicted: a run stops wherever scheduling step by
step could differ, so it is exact by construction
(``tests/reliability/test_rel_decode_runs.py`` checks every request record and every
logged step on every shipped config and on random ones). A run is committed (rows' state,
block growth, the step log) when it ends; until then the rows hold their state from when
they entered it, and rows whose requests finished (at their finishing step's end, as
step by step) wait in ``finished_rows`` to be settled into their requests and vacated.
Acceptance draws are counter-based per request (``AcceptanceSampler``), so the
steps see exactly the draws the same steps taken one by one would.
"""

from __future__ import annotations

import bisect
import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from pdsim.engine.events import StepEnd
from pdsim.engine.request import Request
from pdsim.perf.base import StepBatch, decode_step_times_s

if TYPE_CHECKING:
    from pdsim.engine.instance import Instance
    from pdsim.engine.kvcache import KVLayout



class DecodeRun:
    """The planned steps of one decode run and how far the instance has followed them.

    Steps are indexed 0..num_steps-1 from the run's start; boundary ``j`` is the end of
    step ``j``; ``cur`` is the last boundary reached. Columns of the (steps x columns)
    arrays are the instance's decode rows: those it had at the start, then the rows that
    joined, in order. Per column: accepted drafts per step (``accepted``), tokens emitted
    by the end of each step (``cum``), whether it decodes in each step (``act``, from its
    first step to its finishing step ``fstep``; ``fstep`` is the step count when it does
    not finish in the window) and the blocks it holds during each step (``need``,
    never less than at its start, kept after it finishes: an upper bound).
    """

    join_room = 32  # columns first allocated for rows that join; doubled when short

    def __init__(self, inst: Instance, steps: int, max_steps: int, ahead: _Ahead) -> None:
        self.inst = inst
        k = inst.k
        K = len(ahead.k_j)
        self.K = K
        self.q = 1 + inst.n_spec
        self.num_steps = steps
        self.max_steps = max_steps  # how far joining rows may extend the run
        self.t0 = inst.env.now
        self.base = inst.step_count
        # per step: decode rows, their context, drafter repair, prefill chunks, times
        self.k_j = ahead.k_j
        self.ctx_sum = ahead.ctx_sum
        self.repair = ahead.repair
        self.prefill = np.zeros(K, dtype=np.int64)
        self.pairs = np.zeros(K, dtype=np.float64)
        self.dts = np.zeros(K, dtype=np.float64)
        self.ends_rel = np.zeros(K, dtype=np.float64)
        self.ends = np.zeros(0)  # absolute end times of steps 0..num_steps-1
        # per column, with room for rows that join (grown on demand)
        cap = min(inst.row_capacity, k + self.join_room)
        self.ncols = k
        accepted, fstep = ahead.accepted, ahead.fstep
        self.accepted = _widen(accepted, cap) if accepted is not None else None
        self.cum = _widen(ahead.cum, cap)
        self.act = _widen(ahead.act, cap)
        self.need = _widen(ahead.need, cap)
        self.fstep = _widen(fstep, cap, K)
        self.held0 = _widen(inst.blocks[:k], cap)
        self.held_alive = int(self.held0[:k].sum())  # blocks the unfinished columns held
        self.alive_cols = k
        # blocks the columns may still take, reserved against what is admitted mid-run
        self.reserve = int(ahead.need[steps - 1].sum()) - self.held_alive
        # finishing steps, each with its columns (highest first, as step by step)
        self._finishes: dict[int, list[int]] = {}
        for s in np.flatnonzero(fstep < steps)[::-1].tolist():
            self._finishes.setdefault(int(fstep[s]), []).append(s)
        self._finish_steps = sorted(self._finishes)
        self._chunks: list[tuple[Request, int]] = []  # admitted for step cur + 1
        self.finished_rows: list[int] = []
        self.cur = -1
        self.target = -1
        self.dirty = steps  # first boundary with an outside change to act on
        self.handling = True  # the instance is acting at a boundary (not waiting)
        self.poked = False  # an outside change came while it was
        self._gen = 0  # bumped when step times change: earlier wake-ups are void
        self._armed: set[int] = set()
        # queue depths, blocks held outside the columns and running requests that are not
        # decoding columns, for the step log: at the start, then (boundary, before
        # acting, after acting) at each boundary reached
        self._state0 = self._state()
        self._snaps: list[tuple[int, tuple[int, int, int, int], tuple[int, int, int, int]]] = []
        self.fault_in = inst.sim.faults.next_scheduled_after(self.t0) - self.t0
        self._retime(0)

    # ------------------------------------------------------------ following

    def next_stop(self) -> int:
        """The next boundary the instance must wake at."""
        j = min(self.dirty, self.num_steps - 1)
        fs = self._finish_steps
        i = bisect.bisect_right(fs, self.cur)
        if i < len(fs):
            j = min(j, fs[i])
        return j

    def wait_for(self, j: int) -> None:
        """The instance now waits for boundary ``j``."""
        assert j > self.cur, f"boundary {j} already reached ({self.cur})"
        self.target = j
        self.handling = False
        if j in self._armed:
            return
        self._armed.add(j)
        env = self.inst.env
        ev = StepEnd(env, max(0.0, self.ends.item(j) - env.now), self.inst.step_priority)
        ev.callbacks.append(functools.partial(self._fire, self._gen, j))

    def _fire(self, gen: int, j: int, _event: object = None) -> None:
        if gen != self._gen:
            return
        self._armed.discard(j)
        if self.inst.active_run is not self or self.target != j or self.handling:
            return
        self.handling = True
        if self.at_boundary(j):
            self.inst.end_run()
        else:
            self.wait_for(self.next_stop())

    def poke(self, now: float) -> None:
        """Something outside changed the instance at ``now``: act at the next boundary."""
        if self.handling:
            self.poked = True  # at a boundary: acted on there, or at the next one
            return
        j = min(bisect.bisect_left(self.ends, now, self.cur + 1), self.num_steps - 1)
        self.dirty = min(self.dirty, j)
        if j < self.target:
            self.wait_for(j)

    def catch_up(self, now: float) -> None:
        """Count the steps that ended by ``now`` as reached (they needed no action: the
        instance wakes at every boundary that does), so a commit includes them."""
        reached = bisect.bisect_right(self.ends, now) - 1
        self.cur = max(self.cur, min(reached, self.next_stop() - 1))

    def at_boundary(self, j: int) -> bool:
        """The instance reached boundary ``j``: apply what step ``j`` finished and act as
        its scheduler would. True when the run ends here."""
        inst = self.inst
        self.cur = j
        now = self.ends.item(j)
        joined = self._chunks
        self._chunks = []
        for req, n in joined:  # prompts completed by a mixed step come first, as step by step
            inst.complete_chunk(req, n, self.base + j, now)
        finished = j in self._finishes
        if finished:
            for s in self._finishes[j]:
                self._finish_row(s, j)
        before = self._state()
        ok = True
        for req, _ in joined:
            if req.slot >= 0 and not self._join(req, j):
                ok = False
        if j >= self.num_steps - 1 or not ok:
            self._snaps.append((j, before, before))
            return True
        acted = bool(joined)
        if self.dirty <= j or finished or joined or self.poked:
            self.dirty = self.num_steps
            self.poked = False
            if inst.waiting:
                ok = self._admit(j)
                acted = True
        self._snaps.append((j, before, self._state() if acted else before))
        if self.poked:  # changed while acting: look again at the next boundary
            self.poked = False
            self.dirty = j + 1
        # a mixed step priced longer can push the run's end before the next scheduled fault
        # back to this boundary: then the run ends here and the scheduler takes the chunks
        # admitted just now as running prefills
        return not ok or j >= self.num_steps - 1

    def _state(self) -> tuple[int, int, int, int]:
        inst = self.inst
        return (len(inst.waiting), len(inst.receiving), inst.pool.num_used - self.held_alive,
                len(inst.running) - self.alive_cols)

    # ------------------------------------------------------------ acting

    def _admit(self, j: int) -> bool:
        """The scheduler's admission loop at boundary ``j``, as far as the run can follow
        it: hand-overs get their blocks and start loading; a prompt that one chunk
        completes is admitted into step ``j + 1``. False when it would do anything else
        (the run must end here)."""
        inst = self.inst
        waiting = inst.waiting
        pool, layout = inst.pool, inst.layout
        budget = inst.max_batched_tokens - self.k_j.item(j + 1) * self.q
        chunks = self._chunks
        prefill, pairs = 0, 0.0  # step j + 1's prefill tokens and attention pairs
        while waiting and budget > 0 and len(inst.running) < inst.max_num_seqs:
            req = waiting[0]
            if inst.awaits_remote_kv(req):
                if not inst.load_remote_kv(req, reserve=self.reserve):
                    return False  # it might fit step by step: let the scheduler decide
                waiting.popleft()
                continue
            if inst.kv.caches_prefixes or inst.k + len(chunks) >= inst.row_capacity:
                return False
            n = inst.chunk_tokens(req, budget)
            if n <= 0 or req.num_computed + n < req.seq_tokens:
                return False  # not one final chunk
            extra = layout.blocks_for(inst.prefill_target_tokens(req, n)) - pool.held(req.id)
            if extra > pool.num_free - self.reserve:
                return False
            waiting.popleft()
            pool.allocate(req.id, extra)
            inst.start_prefill(req)
            chunks.append((req, n))
            budget -= n
            prefill += n
            pairs += n * (req.num_computed + (n + 1) / 2)
        if chunks:
            self.prefill[j + 1] += prefill
            self.pairs[j + 1] += pairs
            self._price_mixed(j + 1)
            self.dirty = min(self.dirty, j + 1)
        return True

    def _join(self, req: Request, j: int) -> bool:
        """``req`` entered decode at boundary ``j`` (a new row, the instance's last): make
        it a column from step ``j + 1`` and re-price the steps. False if it cannot be one
        (the run must end here)."""
        inst = self.inst
        c = req.slot
        s = j + 1
        if c != self.ncols or s >= self.max_steps:
            return False
        row = _look_ahead_row(inst, c, self.K - s)
        if row is None:
            return False
        f, live = row.fstep, len(row.ctx_start)  # finishing step from s; steps it decodes
        held = int(inst.blocks[c])
        steps_new = min(self.max_steps, max(self.num_steps, s + f + 1))
        grow = int(row.need[min(steps_new - 1 - s, live - 1)]) - held
        if grow > inst.pool.num_free - self.reserve:
            return False
        # the column, from step s
        if c == self.cum.shape[1]:
            self._grow_columns()
        self.ncols = c + 1
        e = s + live
        if row.accepted is not None:
            assert self.accepted is not None
            self.accepted[s:e, c] = row.accepted[:live]
        self.cum[s:e, c] = row.cum[:live]
        self.act[s:e, c] = True
        self.need[s:e, c] = row.need
        self.need[e:, c] = row.need[-1]  # kept after it finishes
        self.fstep[c] = s + f
        self.held0[c] = held
        self.held_alive += held
        self.alive_cols += 1
        self.reserve += grow
        if s + f < steps_new:
            if s + f not in self._finishes:
                bisect.insort(self._finish_steps, s + f)
            self._finishes.setdefault(s + f, []).insert(0, c)
        # the steps it takes part in
        self.k_j[s:e] += 1
        self.ctx_sum[s:e] += row.ctx_start
        self.repair[s] += row.repair_first
        if row.repair_after is not None:
            self.repair[s + 1:e] += row.repair_after
        self.num_steps = steps_new
        self._retime(s)
        return self.num_steps > s

    def _grow_columns(self) -> None:
        cols = min(self.inst.row_capacity, 2 * self.cum.shape[1])
        if self.accepted is not None:
            self.accepted = _widen(self.accepted, cols)
        self.cum = _widen(self.cum, cols)
        self.act = _widen(self.act, cols)
        self.need = _widen(self.need, cols)
        self.fstep = _widen(self.fstep, cols, self.K)
        self.held0 = _widen(self.held0, cols)

    def _retime(self, lo: int) -> None:
        """Price the (pure-decode) steps from ``lo`` on again and move their ends."""
        m = self.num_steps
        k_j = self.k_j[lo:m]
        self.dts[lo:m] = decode_step_times_s(self.inst.step_model, k_j, k_j * self.q,
                                             self.ctx_sum[lo:m], self.repair[lo:m])
        ends = self.ends_rel
        np.add.accumulate(self.dts[lo:m], out=ends[lo:m])  # a cumulative sum
        if lo:
            ends[lo:m] += ends[lo - 1]
        self._moved(lo)

    def _price_mixed(self, j: int) -> None:
        """Step ``j`` now also computes prefill chunks: price it as a mixed step; the
        steps after it move by the difference."""
        kj = self.k_j.item(j)
        dt = self.inst.step_model.step_time_s(StepBatch(
            self.prefill.item(j), self.pairs.item(j), kj, kj * self.q,
            self.ctx_sum.item(j), self.repair.item(j)))
        self.ends_rel[j:self.num_steps] += dt - self.dts.item(j)
        self.dts[j] = dt
        self._moved(j)

    def _moved(self, lo: int) -> None:
        """Step ends from ``lo`` on changed: no step may end after the next scheduled
        fault (a step in progress then must stay undone until it strikes), and wake-ups
        armed for the old times are void."""
        m = self.num_steps
        ends = self.ends_rel
        if ends[m - 1] > self.fault_in:
            self.num_steps = m = max(self.cur + 1, int(ends[:m].searchsorted(
                self.fault_in, side="right")))
        self.ends = ends[:m] + self.t0
        if lo:
            self._gen += 1
            self._armed.clear()

    def _finish_row(self, s: int, j: int) -> None:
        """Column ``s`` emitted its last token in step ``j``: its request finishes now, as
        step by step. The row keeps its slot until the run is committed, which counts its
        steps with everyone else's and then settles it into the request and vacates it."""
        inst = self.inst
        inst.out[s] = inst.tgt[s]
        self.held_alive -= self.held0.item(s)
        self.alive_cols -= 1
        self.finished_rows.append(s)
        inst.finish_row(s, self.base + j, self.ends.item(j), vacate=False, settle=False)

    # ------------------------------------------------------------- commit

    def commit(self) -> None:
        """Apply the steps up to the last boundary reached to the rows, the pool and the
        step log; settle the finished rows into their requests and vacate them."""
        m = self.cur + 1
        if m <= 0:
            return
        inst = self.inst
        k = self.ncols
        fstep, need, held0 = self.fstep[:k], self.need, self.held0[:k]
        act = self.act[:m, :k]
        last = np.minimum(fstep, m - 1)  # last step each column takes part in (if any)
        cols = inst.run_rows[:k]
        emitted = self.cum[last, cols]
        out = inst.out[:k]
        np.minimum(out + emitted, inst.tgt[:k], out=out)
        inst.ctx[:k] += emitted
        a = self.accepted
        if a is not None:
            n = inst.n_spec
            am = a[:m, :k] * act
            took = np.add.reduce(act, axis=0, dtype=np.int64)
            inst.n_drafts[:k] += took
            inst.n_acc[:k] += np.add.reduce(am, axis=0)
            acc_pos = inst.acc_pos
            for i in range(n):  # drafts accepted at position i: the steps with a > i
                acc_pos[:k, i] += np.add.reduce(am > i, axis=0)
            if inst.multi_module:
                rej = inst.prev_rej[:k]
                np.copyto(rej, n - a[last, cols], where=took > 0)
        final_need = need[last, cols]
        grow = np.flatnonzero((final_need > held0) & (fstep >= m))
        if len(grow):
            slots = inst.req_of_slot
            owners = [slots[s].id for s in grow.tolist()]  # type: ignore[union-attr]
            ok = inst.pool.allocate_many(owners, (final_need[grow] - held0[grow]).tolist())
            assert ok, "a decode run outgrew the free blocks it checked"
            inst.blocks[grow] = final_need[grow]
        self._log(m, act)
        finished = sorted(self.finished_rows, reverse=True)
        for s in finished:  # their requests finished in the run: settle, then vacate
            req = inst.req_of_slot[s]
            assert req is not None
            inst.settle_slot(req, self.base + self.fstep.item(s))
        inst.vacate_slots(finished)
        inst.busy_s += float(self.ends_rel[m - 1])

    def _log(self, m: int, act: np.ndarray) -> None:
        """Per step: start, end, prefill tokens, decode rows, KV blocks in use, running,
        waiting and receiving after the step, as step by step logs them."""
        inst = self.inst
        k = self.ncols
        alive = act & (inst.run_steps[:m] < self.fstep[:k])  # still running after step j
        log = np.empty((m, 8))
        log[:, 1] = self.ends_rel[:m]
        log[:, 1] += self.t0
        log[0, 0] = self.t0
        log[1:, 0] = log[:-1, 1]
        log[:, 2] = self.prefill[:m]
        log[:, 3] = self.k_j[:m]
        log[:, 4] = (self.need[:m, :k] * alive).sum(axis=1)
        log[:, 5] = alive.sum(axis=1)
        # each step logs the state after the last boundary acted at before it, or the state
        # before acting if its own boundary was one
        snaps = [sn for sn in self._snaps if sn[0] < m]
        js = np.array([sn[0] for sn in snaps], dtype=np.int64)
        afters = np.array([self._state0, *(sn[2] for sn in snaps)], dtype=np.float64)
        state = afters[np.searchsorted(js, inst.run_steps[:m, 0], side="left")]
        if snaps:
            state[js] = [sn[1] for sn in snaps]
        log[:, 4] += state[:, 2]
        log[:, 5] += state[:, 3]
        log[:, 6:8] = state[:, :2]
        inst.step_end_s.frombytes(log[:, 1].tobytes())
        inst.step_log.frombytes(log.tobytes())


def _widen(arr: np.ndarray, cols: int, fill: int = 0) -> np.ndarray:
    """``arr`` (k, or steps x k) in an array of ``cols`` columns, the rest ``fill``: room
    for joining columns."""
    shape = (*arr.shape[:-1], cols)
    out = np.full(shape, fill, dtype=arr.dtype) if fill else np.zeros(shape, dtype=arr.dtype)
    out[..., : arr.shape[-1]] = arr
    return out


def plan_decode_run(inst: Instance) -> DecodeRun | None:
    """Plan the instance's next decode steps, or None when they cannot be planned.

    Call it only where the scheduler would take a pure-decode step now (it has just
    planned one, or nothing waits). Not planned: no decode rows, a prefill running,
    per-request acceptance rates that would change over the steps (a multi-module
    re-prefill cache short of entries, decaying stale weights), too few free blocks for
    even one step.
    """
    k = inst.k
    if not k or inst.prefilling or not inst.decodes:
        return None
    K = inst.max_run_steps
    ahead = _look_ahead(inst, k, K)
    if ahead is None:
        return None
    # never past the step in which the last row finishes (no empty steps) unless rows
    # join; never past a block shortage
    max_steps = K
    limit = min(K, int(ahead.fstep.max()) + 1)
    need_total = ahead.need.sum(axis=1)
    capacity = inst.pool.num_free + int(inst.blocks[:k].sum())
    if need_total[limit - 1] > capacity:
        limit = max_steps = int(np.searchsorted(need_total, capacity, side="right"))
        if limit == 0:
            return None
    run = DecodeRun(inst, limit, max_steps, ahead)
    return run if run.num_steps > 0 else None


class _Ahead(NamedTuple):
    """Decode rows over the next steps, on their own: per step and row the
    accepted drafts, tokens emitted by the step's end (``cum``), whether the row decodes
    (``act``) and the blocks it holds (``need``: never less than now, kept after it
    finishes); per row its finishing step (``fstep``, the step count if none); per step
    the rows decoding (``k_j``), their context (``ctx_sum``) and the drafter's repair."""

    accepted: np.ndarray | None
    cum: np.ndarray
    act: np.ndarray
    need: np.ndarray
    fstep: np.ndarray
    k_j: np.ndarray
    ctx_sum: np.ndarray
    repair: np.ndarray


def _look_ahead(inst: Instance, k: int, steps: int) -> _Ahead | None:
    """The next ``steps`` decode steps of rows ``0..k-1`` (a run's rows when it is
    planned), or None when their acceptance rates would change over the steps (a
    multi-module re-prefill cache short of entries, decaying stale weights)."""
    rows = slice(0, k)
    n = inst.n_spec
    if inst.multi_module and (inst.cache_valid[rows] < n - 1).any():
        return None
    has_stale = bool(n) and bool(inst.stale[rows].any())
    if has_stale and inst.decay_tokens is not None:
        return None
    a: np.ndarray | None = None
    if n:
        a = inst.sampler.draw_steps(steps, inst.akey[rows],
                                    inst.adraw[rows] + inst.n_drafts[rows],
                                    inst.surv[rows] if has_stale else None)
        e = a + 1
    else:
        e = np.ones((steps, k), dtype=np.int64)
    cum = e.cumsum(axis=0)
    # cum rises every step: the steps before a row's finishing step are those with
    # cum < remaining, so their count is the finishing step
    fstep = (cum < inst.tgt[rows] - inst.out[rows]).sum(axis=0)
    act = inst.run_steps[:steps] <= fstep
    ctx_start = cum - e
    ctx_start += inst.ctx[rows]
    k_j = act.sum(axis=1)
    ctx_sum = (ctx_start * act).sum(axis=1)
    repair = np.zeros(steps, dtype=np.int64)
    if inst.multi_module:
        assert a is not None
        # multi-module MTP's standalone repair: the drafter re-prefills the positions the
        # previous step rejected, bar one
        repair[0] = np.maximum(inst.prev_rej[rows] - 1, 0).sum()
        if steps > 1:
            repair[1:] = (np.maximum(n - 1 - a[:-1], 0) * act[1:]).sum(axis=1)
    need = inst.layout.blocks_for_array(ctx_start, 1 + n)
    np.maximum(need, inst.blocks[rows], out=need)
    need *= act
    np.maximum.accumulate(need, axis=0, out=need)
    return _Ahead(a, cum, act, need, fstep, k_j, ctx_sum, repair)


class _AheadRow(NamedTuple):
    """One decode row over the next steps (a row joining a run), as 1-D arrays over the
    steps it decodes (``live`` = ``len(ctx_start)``, up to and including its finishing
    step): what ``_Ahead`` holds for one column, without the steps after it finishes.
    ``accepted`` and ``cum`` span all the steps asked for."""

    accepted: np.ndarray | None
    cum: np.ndarray
    fstep: int  # its finishing step, the step count when it does not finish
    ctx_start: np.ndarray
    need: np.ndarray
    repair_first: int
    repair_after: np.ndarray | None  # drafter repair in its steps after the first


def _look_ahead_row(inst: Instance, c: int, steps: int) -> _AheadRow | None:
    """``_look_ahead`` of the single row ``c``, or None as there. A row joins a run once
    per request, so its look-ahead's cost is its number of array operations: a row
    entering decode fresh reads it from a table built for a block of requests
    (``FreshRows``), any other computes it alone, with 1-D draws."""
    n = inst.n_spec
    multi = inst.multi_module
    if multi and inst.cache_valid[c] < n - 1:
        return None
    ctx, left = int(inst.ctx[c]), int(inst.tgt[c]) - int(inst.out[c])
    held = int(inst.blocks[c])
    repair_first = max(int(inst.prev_rej[c]) - 1, 0) if multi else 0
    a: np.ndarray | None = None
    if n:
        has_stale = any(inst.stale[c].tolist())
        if has_stale and inst.decay_tokens is not None:
            return None
        counter = int(inst.adraw[c]) + int(inst.n_drafts[c])
        if not counter and not has_stale and inst.fresh_rows is not None:
            req = inst.req_of_slot[c]
            assert req is not None
            fresh = inst.fresh_rows.look_ahead(req.id, steps, ctx, left, held, repair_first)
            if fresh is not None:
                return fresh
        a = inst.sampler.draw_run(steps, int(inst.akey[c]), counter,
                                  inst.surv[c] if has_stale else None)[None]
    terms = _row_terms(a, steps, np.array([ctx]), np.array([left]), n, multi, inst.layout,
                       np.int64)
    return _cut_row(a, terms, 0, steps, held, repair_first, multi)


class _RowTerms(NamedTuple):
    """Decode rows from their draws, one per array row (a single row, or one per request of
    a block) with the steps along the columns: tokens emitted by the end of each step
    (``cum``), the finishing step (``fstep``, the step count when a row does not finish),
    the context at each step's start, the blocks each step needs without what the row
    already holds, and the drafter's repair in each step (0 in the first: it depends on
    the step before the row's first)."""

    cum: np.ndarray
    fstep: np.ndarray
    ctx_start: np.ndarray
    need: np.ndarray
    repair: np.ndarray


def _row_terms(a: np.ndarray | None, steps: int, ctx: np.ndarray, left: np.ndarray, n: int,
               multi: bool, layout: KVLayout, dtype: type[np.signedinteger[Any]]
               ) -> _RowTerms:
    """``_RowTerms`` of rows with accepted drafts ``a`` (rows x steps; None without a
    drafter: one token a step), context ``ctx`` and output tokens ``left`` (one per row)."""
    e = a + 1 if a is not None else np.ones((len(ctx), steps), dtype=dtype)
    cum = np.add.accumulate(e, axis=1, dtype=dtype)
    # cum rises every step: the steps before a row's finishing step are those with
    # cum < left, so their count is the finishing step
    fstep = np.add.reduce(cum < left[:, None], axis=1)
    ctx_start = cum - e
    ctx_start += ctx[:, None]
    need = layout.blocks_for_array(ctx_start, 1 + n)  # rises with the context
    repair = np.zeros_like(ctx_start)
    if multi:
        assert a is not None
        # multi-module MTP's standalone repair: the drafter re-prefills the positions the
        # previous step rejected, bar one
        np.maximum(n - 1 - a[:, :-1], 0, out=repair[:, 1:])
    return _RowTerms(cum, fstep, ctx_start, need, repair)


def _cut_row(a: np.ndarray | None, t: _RowTerms, r: int, steps: int, held: int,
             repair_first: int, multi: bool) -> _AheadRow:
    """Row ``r``'s ``_AheadRow`` over ``steps`` steps from its draws and terms (computed
    over those steps or more): cut at its finishing step, never needing fewer blocks than
    it holds."""
    f = min(int(t.fstep[r]), steps)
    live = min(f + 1, steps)
    need = t.need[r, :live]
    if held > need.item(0):  # the need rises with the context: else it is never below
        need = np.maximum(need, held)
    return _AheadRow(None if a is None else a[r, :steps], t.cum[r, :steps], f,
                     t.ctx_start[r, :live], need, repair_first,
                     t.repair[r, 1:live] if multi and live > 1 else None)


class FreshRows:
    """Look-aheads of requests entering decode fresh, built for a block of requests at
    once: a request's first decode row, before any verification, at the clean rates,
    with its whole prompt as context and all its output but the first token to go.

    Such a row's look-ahead depends on nothing but the request (its counter-based draws,
    its prompt and output lengths) and the instance's layout, so it is computed for
    1,024 requests in one vectorized pass (``_row_terms`` on a block) instead of one
    request at a time when it joins a run. ``look_ahead`` checks the row is indeed fresh
    and returns what ``_look_ahead_row`` would compute for it, else None. The last few
    blocks are kept; a dropped one is rebuilt alike if asked again.
    """

    block = 1024  # requests per block
    blocks_kept = 4

    def __init__(self, inst: Instance) -> None:
        sim = inst.sim
        self._sampler = inst.sampler
        self._layout = inst.layout
        self._n = inst.n_spec
        self._multi = inst.multi_module
        self.width = inst.sampler.first_draws_width
        self._prompt = sim.specs.prompt_tokens
        self._output = sim.specs.output_tokens
        self._blocks: dict[int, tuple[np.ndarray, _RowTerms, np.ndarray, np.ndarray]] = {}

    def look_ahead(self, request_id: int, steps: int, ctx: int, left: int, held: int,
                   repair_first: int) -> _AheadRow | None:
        """``_look_ahead_row`` of request ``request_id``'s row over ``steps`` steps, given
        the row's context, output tokens left, blocks held and first step's repair; None
        when the row is not fresh (or the window is longer than the table)."""
        if steps > self.width:
            return None
        b, r = divmod(request_id, self.block)
        tab = self._blocks.get(b)
        if tab is None:
            if len(self._blocks) >= self.blocks_kept:
                del self._blocks[next(iter(self._blocks))]
            tab = self._blocks[b] = self._build(b)
        a, t, prompt, left_fresh = tab
        if ctx != prompt[r] or left != left_fresh[r]:
            return None
        return _cut_row(a, t, r, steps, held, repair_first, self._multi)

    def _build(self, b: int) -> tuple[np.ndarray, _RowTerms, np.ndarray, np.ndarray]:
        """The block's draws and terms over ``width`` steps, its prompts and output left."""
        lo = b * self.block
        hi = min(lo + self.block, len(self._prompt))
        prompt = self._prompt[lo:hi]
        left = self._output[lo:hi] - 1  # the first token came with the prefill
        # 32-bit arithmetic when every value fits (half the memory traffic)
        small = max(int(prompt.max()), int(left.max())) + (self.width + 2) * (self._n + 1) \
            + 2 * self._layout.block_size < 2**31
        dtype = np.int32 if small else np.int64
        a = self._sampler.first_draws_table(lo, hi - lo).astype(dtype)
        prompt, left = prompt.astype(dtype), left.astype(dtype)
        terms = _row_terms(a, self.width, prompt, left, self._n, self._multi, self._layout,
                           dtype)
        return a, terms, prompt, left
