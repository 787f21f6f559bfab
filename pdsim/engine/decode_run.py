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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from pdsim.engine.events import StepEnd
from pdsim.engine.look_ahead import Ahead, look_ahead_row
from pdsim.engine.request import Request
from pdsim.perf.base import StepBatch, decode_step_times_s

if TYPE_CHECKING:
    import simpy
    from simpy.events import EventPriority

    from pdsim.engine.look_ahead import FreshRows
    from pdsim.engine.scheduler import Scheduler, StepOutcome
    from pdsim.engine.step_log import StepLog
    from pdsim.perf.base import StepTimeModel


class RunHost(Protocol):
    """What a decode run needs from the instance following it: whether it still follows
    this run, to end it there, and to route what the run's boundaries complete."""

    active_run: DecodeRun | None

    def end_run(self) -> None:
        """Commit the run as far as it got and resume the engine loop."""

    def route(self, out: StepOutcome) -> None:
        """Send on what a boundary completed (finished requests, entered decode)."""

    def start_kv_loads(self, reqs: Sequence[Request]) -> None:
        """Start loading the remote KV of these hand-overs (given their blocks)."""


class DecodeRun:
    """The planned steps of one decode run and how far the instance has followed them.

    Steps are indexed 0..num_steps-1 from the run's start; boundary ``j`` is the end of
    step ``j``; ``reached`` is the last boundary reached. Columns of the (steps x columns)
    arrays are the instance's decode rows: those it had at the start, then the rows that
    joined, in order. Per column: accepted drafts per step (``accepted``), tokens emitted
    by the end of each step (``emitted_by_step``), whether it decodes in each step
    (``decoding``, from its first step to its finishing step ``finish_step``, which is the
    step count when it does not finish in the window) and the blocks it holds during each
    step (``blocks_needed``, never less than at its start, kept after it finishes: an upper
    bound).
    """

    def __init__(self, host: RunHost, env: simpy.Environment, scheduler: Scheduler,
                 step_model: StepTimeModel, step_log: StepLog, fresh_rows: FreshRows | None,
                 steps: int, max_steps: int, ahead: Ahead, *, priority: EventPriority,
                 fault_at_s: float, join_room: int, run_steps: np.ndarray,
                 run_rows: np.ndarray) -> None:
        """The run of ``steps`` steps (at most ``max_steps`` once rows join) looked ahead
        as ``ahead``, from now. Its parts: the instance following it (``host``), the
        scheduler (its queues, rows, KV manager and admission rules), the step-time
        model, the step log it commits to and the fresh rows' look-aheads; its steps'
        ends come at ``priority``, never past ``fault_at_s`` (the next scheduled fault);
        ``join_room`` columns are kept for joining rows; ``run_steps`` and ``run_rows``
        are the step and row index columns (0, 1, 2, ...)."""
        self.host = host
        self.env = env
        self.sched = scheduler
        self.rows = rows = scheduler.rows
        self.kv = scheduler.kv
        self.pool = scheduler.pool
        self.step_model = step_model
        self.step_log = step_log
        self.fresh_rows = fresh_rows
        self.priority = priority
        self.run_steps = run_steps
        self.run_rows = run_rows
        count = rows.count
        window = len(ahead.rows_decoding)
        self.window = window
        self.tokens_per_row = 1 + scheduler.n_spec
        self.num_steps = steps
        self.max_steps = max_steps  # how far joining rows may extend the run
        self.start_s = env.now
        self.first_step = step_log.count
        # per step: decode rows, their context, drafter repair, prefill chunks, times
        self.rows_decoding = ahead.rows_decoding
        self.context_sum = ahead.context_sum
        self.repair = ahead.repair
        self.prefill = np.zeros(window, dtype=np.int64)
        self.pairs = np.zeros(window, dtype=np.float64)
        self.dts = np.zeros(window, dtype=np.float64)
        self.ends_rel = np.zeros(window, dtype=np.float64)
        self.ends: np.ndarray  # absolute end times of steps 0..num_steps-1 (set by _retime)
        # per column, with room for rows that join (grown on demand)
        cap = min(rows.capacity, count + join_room)
        self.columns_grown = 0  # times the columns were doubled for joining rows
        self.num_cols = count
        accepted, finish_step = ahead.accepted, ahead.finish_step
        # (the (steps x columns) arrays' join room is unset: a column is cleared when a row
        # joins into it, so a run never zeroes columns no row takes)
        self.accepted = widen_unset(accepted, cap) if accepted is not None else None
        self.emitted_by_step = widen_unset(ahead.emitted_by_step, cap)
        self.decoding = widen_unset(ahead.decoding, cap)
        self.blocks_needed = widen_unset(ahead.blocks_needed, cap)
        self.finish_step = widen(finish_step, cap, window)
        self.held_at_start = widen(rows.blocks_held[:count], cap)
        # blocks the unfinished columns held
        self.held_alive = int(np.add.reduce(self.held_at_start[:count]))
        self.alive_cols = count
        # blocks the columns may still take, reserved against what is admitted mid-run
        self.reserve = int(np.add.reduce(ahead.blocks_needed[steps - 1])) - self.held_alive
        # finishing steps, each with its columns (highest first, as step by step)
        self._finishes: dict[int, list[int]] = {}
        for s in np.flatnonzero(finish_step < steps)[::-1].tolist():
            self._finishes.setdefault(finish_step.item(s), []).append(s)
        self._finish_steps = sorted(self._finishes)
        self._chunks: list[tuple[Request, int]] = []  # admitted for step cur + 1
        self.finished_rows: list[int] = []
        # Following the run. The instance either waits for boundary ``target`` (a
        # wake-up armed at its end time) or acts at a boundary (``target`` None: from
        # planning to the first wait, and inside ``at_boundary``). An outside change while
        # it waits moves ``dirty`` (the first boundary to act on it) and, if earlier, the
        # target; one while it acts sets ``poked`` (acted on at this boundary if it has
        # not acted yet, else at the next). ``_wakeups`` holds the live wake-up of each
        # armed boundary; re-pricing the steps clears it, voiding those armed for the old
        # end times.
        self.reached = -1  # the last boundary reached
        self.target: int | None = None
        self.dirty = steps
        self.poked = False
        self._wakeups: dict[int, StepEnd] = {}
        # blocks held outside the columns, running requests that are not decoding columns
        # and the queue depths (the step log's last four columns, less the columns' own
        # share): at the start, then (boundary, before acting, after acting) at each
        # boundary reached
        self._state0 = self._state()
        self._snaps: list[tuple[int, tuple[int, int, int, int], tuple[int, int, int, int]]] = []
        self.fault_in = fault_at_s - self.start_s
        self._retime(0)

    # ------------------------------------------------------------ following

    def next_stop(self) -> int:
        """The next boundary the instance must wake at."""
        j = min(self.dirty, self.num_steps - 1)
        fs = self._finish_steps
        i = bisect.bisect_right(fs, self.reached)
        if i < len(fs):
            j = min(j, fs[i])
        return j

    def wait_for(self, j: int) -> None:
        """The instance now waits for boundary ``j``."""
        assert j > self.reached, f"boundary {j} already reached ({self.reached})"
        self.target = j
        if j in self._wakeups:
            return
        env = self.env
        ev = StepEnd(env, max(0.0, self.ends.item(j) - env.now), self.priority)
        ev.callbacks.append(functools.partial(self._fire, j))
        self._wakeups[j] = ev

    def _fire(self, j: int, wakeup: simpy.Event) -> None:
        if self._wakeups.get(j) is not wakeup:
            return  # armed for end times the steps no longer have
        del self._wakeups[j]
        host = self.host
        if host.active_run is not self or self.target != j:
            return
        self.target = None
        if self.at_boundary(j):
            host.end_run()
        else:
            self.wait_for(self.next_stop())

    def poke(self, now: float) -> None:
        """Something outside changed the instance at ``now``: act at the next boundary."""
        if self.target is None:
            self.poked = True  # at a boundary: acted on there, or at the next one
            return
        j = min(bisect.bisect_left(self.ends, now, self.reached + 1), self.num_steps - 1)
        self.dirty = min(self.dirty, j)
        if j < self.target:
            self.wait_for(j)

    def catch_up(self, now: float) -> None:
        """Count the steps that ended by ``now`` as reached (they needed no action: the
        instance wakes at every boundary that does), so a commit includes them."""
        reached = bisect.bisect_right(self.ends, now) - 1
        self.reached = max(self.reached, min(reached, self.next_stop() - 1))

    def at_boundary(self, j: int) -> bool:
        """The instance reached boundary ``j``: apply what step ``j`` finished and act as
        its scheduler would. True when the run ends here."""
        sched = self.sched
        self.reached = j
        joined = self._chunks
        if joined:  # prompts completed by a mixed step come first, as step by step
            self._chunks = []
            now = self.ends.item(j)
            for req, n in joined:
                sched.complete_chunk(req, n, self.first_step + j, now)
        finishing = self._finishes.get(j)
        finished = finishing is not None
        if finishing is not None:
            for s in finishing:
                self._finish_row(s, j)
        out = sched.outcome  # (``take_outcome``, inline: a boundary is a hot path)
        if out is not None:
            sched.outcome = None
            self.host.route(out)
        before = (self.pool.num_used - self.held_alive, len(sched.running) - self.alive_cols,
                  len(sched.waiting), len(sched.receiving))  # ``_state()``, inline
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
            if sched.waiting:
                ok = self._admit(j)
                loads = sched.take_kv_loads()
                if loads:
                    self.host.start_kv_loads(loads)
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
        sched = self.sched
        return (self.pool.num_used - self.held_alive, len(sched.running) - self.alive_cols,
                len(sched.waiting), len(sched.receiving))

    # ------------------------------------------------------------ acting

    def _admit(self, j: int) -> bool:
        """The scheduler's admission (``Scheduler.admit``) at boundary ``j``, as far as the
        run can follow it: hand-overs get their blocks and start loading; a prompt that
        one chunk completes is admitted into step ``j + 1``. False when the scheduler
        would do anything else (the run must end here)."""
        sched = self.sched
        k_next = self.rows_decoding.item(j + 1)
        chunks = self._chunks
        if not sched.admit(sched.max_num_batched_tokens - k_next * self.tokens_per_row,
                           k_next, False, self.env.now, chunks, None, reserve=self.reserve):
            return False
        if chunks:
            prefill, pairs = 0, 0.0  # step j + 1's prefill tokens and attention pairs
            for req, n in chunks:
                prefill += n
                pairs += n * (req.num_computed + (n + 1) / 2)
            self.prefill[j + 1] += prefill
            self.pairs[j + 1] += pairs
            self._price_mixed(j + 1)
            self.dirty = min(self.dirty, j + 1)
        return True

    def _join(self, req: Request, j: int) -> bool:
        """``req`` entered decode at boundary ``j`` (a new row, the instance's last): make
        it a column from step ``j + 1`` and re-price the steps. False if it cannot be one
        (the run must end here)."""
        rows = self.rows
        col = req.slot
        first = j + 1
        if col != self.num_cols or first >= self.max_steps:
            return False
        row = look_ahead_row(rows, self.kv.layout, self.fresh_rows, col, self.window - first)
        if row is None:
            return False
        # its finishing step counted from its first, and the steps it decodes
        finish_in, live = row.finish_step, len(row.context_at_start)
        held = rows.blocks_held.item(col)
        steps_new = min(self.max_steps, max(self.num_steps, first + finish_in + 1))
        grow = row.blocks_needed.item(min(steps_new - 1 - first, live - 1)) - held
        if grow > self.pool.num_free - self.reserve:
            return False
        # the column, from its first step
        if col == self.emitted_by_step.shape[1]:
            self._grow_columns()
        self.num_cols = col + 1
        end = first + live
        # the column was unset (``widen_unset``): write the row's steps and clear what is
        # read of the rest (a commit reads a column's emitted tokens at its last step
        # reached, which may come before its first; its draws only where it decodes)
        if row.accepted is not None:
            assert self.accepted is not None
            self.accepted[first:end, col] = row.accepted[:live]
        self.emitted_by_step[:first, col] = 0
        self.emitted_by_step[first:end, col] = row.emitted_by_step[:live]
        self.decoding[:, col] = False
        self.decoding[first:end, col] = True
        self.blocks_needed[:first, col] = 0
        self.blocks_needed[first:end, col] = row.blocks_needed
        self.blocks_needed[end:, col] = row.blocks_needed[-1]  # kept after it finishes
        self.finish_step[col] = first + finish_in
        self.held_at_start[col] = held
        self.held_alive += held
        self.alive_cols += 1
        self.reserve += grow
        if first + finish_in < steps_new:
            if first + finish_in not in self._finishes:
                bisect.insort(self._finish_steps, first + finish_in)
            self._finishes.setdefault(first + finish_in, []).insert(0, col)
        # the steps it takes part in
        self.rows_decoding[first:end] += 1
        self.context_sum[first:end] += row.context_at_start
        self.repair[first] += row.repair_first
        if row.repair_after is not None:
            self.repair[first + 1:end] += row.repair_after
        self.num_steps = steps_new
        self._retime(first)
        return self.num_steps > first

    def _grow_columns(self) -> None:
        self.columns_grown += 1
        cols = min(self.rows.capacity, 2 * self.emitted_by_step.shape[1])
        if self.accepted is not None:
            self.accepted = widen_unset(self.accepted, cols)
        self.emitted_by_step = widen_unset(self.emitted_by_step, cols)
        self.decoding = widen_unset(self.decoding, cols)
        self.blocks_needed = widen_unset(self.blocks_needed, cols)
        self.finish_step = widen(self.finish_step, cols, self.window)
        self.held_at_start = widen(self.held_at_start, cols)

    def _retime(self, lo: int) -> None:
        """Price the (pure-decode) steps from ``lo`` on again and move their ends."""
        m = self.num_steps
        k_j = self.rows_decoding[lo:m]
        self.dts[lo:m] = decode_step_times_s(self.step_model, k_j, k_j * self.tokens_per_row,
                                             self.context_sum[lo:m], self.repair[lo:m])
        ends = self.ends_rel
        np.add.accumulate(self.dts[lo:m], out=ends[lo:m])  # a cumulative sum
        if lo:
            ends[lo:m] += ends[lo - 1]
        self._moved(lo)

    def _price_mixed(self, j: int) -> None:
        """Step ``j`` now also computes prefill chunks: price it as a mixed step; the
        steps after it move by the difference."""
        kj = self.rows_decoding.item(j)
        dt = self.step_model.step_time_s(StepBatch(
            self.prefill.item(j), self.pairs.item(j), kj, kj * self.tokens_per_row,
            self.context_sum.item(j), self.repair.item(j)))
        self.ends_rel[j:self.num_steps] += dt - self.dts.item(j)
        self.dts[j] = dt
        self._moved(j)

    def _moved(self, lo: int) -> None:
        """Step ends from ``lo`` on changed: no step may end after the next scheduled
        fault (a step in progress then must stay undone until it strikes), and wake-ups
        armed for the old times are void."""
        m = self.num_steps
        ends = self.ends_rel
        if ends.item(m - 1) > self.fault_in:
            self.num_steps = m = max(self.reached + 1, int(ends[:m].searchsorted(
                self.fault_in, side="right")))
        self.ends = ends[:m] + self.start_s
        if lo and self._wakeups:
            for ev in self._wakeups.values():  # void: they wake nothing when they come
                ev.callbacks.clear()
            self._wakeups.clear()

    def _finish_row(self, s: int, j: int) -> None:
        """Column ``s`` emitted its last token in step ``j``: its request finishes now, as
        step by step. The row keeps its slot until the run is committed, which counts its
        steps with everyone else's and then settles it into the request and vacates it."""
        self.rows.finish(s)
        self.held_alive -= self.held_at_start.item(s)
        self.alive_cols -= 1
        self.finished_rows.append(s)
        self.sched.finish_row(s, self.first_step + j, self.ends.item(j), vacate=False,
                                  settle=False)

    # ------------------------------------------------------------- commit

    def commit(self) -> float:
        """Apply the steps up to the last boundary reached to the rows, the pool and the
        step log; settle the finished rows into their requests and vacate them. Returns
        the time the committed steps took (the instance's busy time), in seconds."""
        m = self.reached + 1
        if m <= 0:
            return 0.0
        rows = self.rows
        cols = self.num_cols
        finish_step = self.finish_step[:cols]
        held_at_start = self.held_at_start[:cols]
        decoding = self.decoding[:m, :cols]
        # the last step each column takes part in (if any)
        last = np.minimum(finish_step, m - 1)
        col_index = self.run_rows[:cols]
        emitted = self.emitted_by_step[last, col_index]
        accepted = self.accepted
        rows.apply_run(m, emitted, decoding, accepted,
                       accepted[last, col_index] if accepted is not None else None)
        final_need = self.blocks_needed[last, col_index]
        grow = np.flatnonzero((final_need > held_at_start) & (finish_step >= m))
        if len(grow):
            of_row = rows.request_of_row
            owners = [of_row[s].id for s in grow.tolist()]  # type: ignore[union-attr]
            ok = self.pool.allocate_many(owners,
                                         (final_need[grow] - held_at_start[grow]).tolist())
            assert ok, "a decode run outgrew the free blocks it checked"
            rows.blocks_held[grow] = final_need[grow]
        self._log(m, decoding)
        finished = sorted(self.finished_rows, reverse=True)
        for s in finished:  # their requests finished in the run: settle, then vacate
            req = rows.request_of_row[s]
            assert req is not None
            rows.settle(req, self.first_step + self.finish_step.item(s), self.sched.index)
        rows.vacate_many(finished)
        return float(self.ends_rel[m - 1])

    def _log(self, m: int, decoding: np.ndarray) -> None:
        """Per step: start, end, prefill tokens, decode rows, KV blocks in use, running,
        waiting and receiving after the step, as step by step logs them."""
        cols = self.num_cols
        # still running after step j
        alive = decoding & (self.run_steps[:m] < self.finish_step[:cols])
        log = np.empty((m, 8))
        np.add(self.ends_rel[:m], self.start_s, out=log[:, 1])
        log[0, 0] = self.start_s
        log[1:, 0] = log[:-1, 1]
        log[:, 2] = self.prefill[:m]
        log[:, 3] = self.rows_decoding[:m]
        # each step logs the state after the last boundary acted at before it, or the state
        # before acting if its own boundary was one
        snaps = [sn for sn in self._snaps if sn[0] < m]
        js = np.array([sn[0] for sn in snaps], dtype=np.int64)
        afters = np.array([self._state0, *(sn[2] for sn in snaps)], dtype=np.float64)
        state = log[:, 4:8]
        np.take(afters, np.searchsorted(js, self.run_steps[:m, 0], side="left"), axis=0,
                out=state)
        if snaps:
            state[js] = [sn[1] for sn in snaps]
        state[:, 0] += np.add.reduce(self.blocks_needed[:m, :cols] * alive, axis=1)
        state[:, 1] += np.add.reduce(alive, axis=1)
        self.step_log.add_block(log)


def widen(arr: np.ndarray, cols: int, fill: int = 0) -> np.ndarray:
    """``arr`` (columns, or steps x columns) in an array of ``cols`` columns, the rest
    ``fill``: room for joining columns."""
    shape = (*arr.shape[:-1], cols)
    out = np.empty(shape, dtype=arr.dtype) if fill else np.zeros(shape, dtype=arr.dtype)
    if fill:
        out.fill(fill)
    out[..., : arr.shape[-1]] = arr
    return out


def widen_unset(arr: np.ndarray, cols: int) -> np.ndarray:
    """``widen`` without filling: the columns past ``arr``'s are left unset (whatever the
    allocator gives), for a caller that writes each column whole before reading it. It
    spares zeroing (steps x join room) entries no row may ever take."""
    out = np.empty((*arr.shape[:-1], cols), dtype=arr.dtype)
    out[..., : arr.shape[-1]] = arr
    return out
