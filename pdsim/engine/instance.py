"""One serving instance: the SimPy process that runs a vLLM-v1-style engine's steps.

The parts, each owning its state: the ``Scheduler`` (queues; ``schedule() -> StepPlan``,
``update_from_output``), the ``KVManager`` (block pool, layout, prefix cache) and
``DecodeRows`` (one row per decoding request). The instance takes requests from the
cluster, runs the loop (ask for a plan, price it with the step-time model, wait for the
step's end, apply it; or follow a decode run over many pure-decode steps) and keeps the
step log. It reaches the cluster only through the ``Cluster`` protocol below (the engine
never imports ``pdsim.simulation``; ``Simulation`` implements it), and tests and the
invariant checker watch the engine through ``EngineHooks`` instead of patching methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from pdsim.config import InstanceGroupConfig, Role, SimConfig
from pdsim.engine.decode_advance import DraftParams
from pdsim.engine.decode_rows import DecodeRows
from pdsim.engine.decode_run import DecodeRun
from pdsim.engine.events import LoopResume, StepEnd, step_end_priority
from pdsim.engine.kv_manager import KVManager
from pdsim.engine.look_ahead import FreshRows
from pdsim.engine.request import Phase, Request
from pdsim.engine.route_view import RoutingState
from pdsim.engine.run_plan import plan_run_window, run_may_be_taken, run_window_steps
from pdsim.engine.scheduler import DrawSource, Scheduler, StepOutcome, StepPlan
from pdsim.engine.snapshot import InstanceSnapshot
from pdsim.engine.step_log import StepLog
from pdsim.errors import SimulationStalled
from pdsim.facts import InstanceFacts
from pdsim.perf.build import build_step_time_model

if TYPE_CHECKING:
    from collections.abc import Generator, Sequence

    import simpy

    from pdsim.spec_decode.acceptance import AcceptanceSampler
    from pdsim.workload import RequestSpecs


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


# Engine-loop turns (steps, decode runs, scheduler retries) one engine may take at one
# simulated instant before the run is called a livelock.
MAX_ZERO_TIME_STEPS = 100_000
# Upper bound on the steps without progress (see ``Instance._idle_step_limit``), and the
# mean step time below which such a streak is called a livelock rather than a wait.
MAX_IDLE_STEPS_CAP = 50_000_000
MIN_REAL_STEP_S = 1e-6
# The most steps one decode run plans (a run of many rows plans fewer,
# ``run_plan.run_window_steps``). A run ends where step-by-step scheduling could differ
# or at its planned steps, and the loop plans the next one at once: every run costs a
# plan and a commit, so longer runs mean fewer runs where rows keep joining (light
# load: 0.44 runs a request at 128 steps, 0.20 at 512). Where a run starts and stops
# changes no decision, only the order of the float additions of its step end times (a
# cumulative sum from the run's start).
MAX_RUN_STEPS = 512


class Instance:
    """A P, D or colocated engine. Driven by its SimPy process ``run()``."""

    def __init__(self, cluster: Cluster, env: simpy.Environment, cfg: SimConfig,
                 specs: RequestSpecs, sampler: AcceptanceSampler, hooks: EngineHooks,
                 index: int, name: str, role: Role, group: InstanceGroupConfig,
                 pool_name: str = "") -> None:
        self.cluster = cluster
        self.env = env
        self.hooks = hooks
        self.index = index
        # step ends come after every other event of the same instant, in instance order
        self.step_priority = step_end_priority(index)
        self.name = name
        self.role = role
        self.group = group  # its pool's config: cfg.step_time_of(group) is its step time
        self.pool_name = pool_name  # '' for a role's one unnamed group
        sched = group.scheduler
        self.step_model = build_step_time_model(cfg, role, group)
        self.lookahead = cfg.num_prefill_lookahead_tokens  # the shared contract
        self.n_spec = cfg.speculative.num_speculative_tokens if role is not Role.PREFILL else 0
        hash_block = specs.hash_block_tokens
        self.kv = KVManager(cfg.kv_layout(sched.block_size, group), cfg.num_blocks(group),
                            sched.enable_prefix_caching and role is not Role.DECODE,
                            hash_block if hash_block is not None else sched.block_size,
                            self.lookahead)
        # the manager's pool and layout, read on every step
        self.pool = self.kv.pool
        self.pool.on_free = self._blocks_freed
        self.layout = self.kv.layout
        # the longest request whose KV (plus its sampled token and drafts) fits the pool
        self.max_fit_tokens = self.kv.max_fit_tokens(cfg.admission_room_tokens(role),
                                                 cfg.model.max_model_len)
        self.decodes = role is not Role.PREFILL
        self.multi_module = cfg.use_multi_module_mtp
        self.sampler = sampler
        stale = cfg.speculative.stale_kv
        n = max(1, self.n_spec)
        num_modules = cfg.num_drafter_modules
        q = stale.residual_guess_accuracy
        garbage_modules = np.ones(max(1, num_modules), dtype=np.float64)
        if not stale.garbage_into_every_module:
            garbage_modules[0] = 0.0
        self.draft = DraftParams(
            self.n_spec, self.multi_module, num_modules, cfg.conditional_acceptance,
            stale.sensitivity_per_slot, stale.decay_tokens,
            # draft position i is drafted by module i (multi-module) or the one module
            np.arange(n) if self.multi_module else np.zeros(n, dtype=np.int64),
            # a guess chain is at most backoff + 1 <= lookahead + 1 long
            [q ** (i + 1) for i in range(cfg.num_prefill_lookahead_tokens + 2)],
            sampler.clean_survival.tolist() if self.n_spec else [],
            stale.unverified_draft_slots, stale.reprefill_cache_shortfall, garbage_modules,
            cfg.speculative.pad_first_decode_step, cfg.model.mtp_window_tokens)

        self.lease_timer_armed = False  # the simulation's lease timer for ``pinned``
        self._wake: simpy.Event | None = None

        # decode rows: capacity twice the batch limit, because rows finished inside a
        # decode run keep their rows until it commits while new rows join behind them
        self.rows = DecodeRows(2 * sched.max_num_seqs, self.draft, self.sampler)
        self.up = True
        self.epoch = 0  # bumped when the instance goes down, voiding the step in progress
        # decode runs (``decode_run``): the one being followed, the event that resumes the
        # loop when it ends, and the steps a run plans
        self.active_run: DecodeRun | None = None
        self._run_over: simpy.Event | None = None
        self.max_run_steps = MAX_RUN_STEPS
        # (a receive interval counts every step, and so does TensorRT-LLM's batch waiting:
        # such an instance steps one at a time)
        waits = group.batch_waits(role)
        self.decode_runs = (cfg.engine.decode_runs == "auto"
                            and group.scheduler.recv_interval_steps == 1 and not waits)
        self.join_room = cfg.engine.decode_run_join_room
        # look-aheads of requests entering decode fresh, built for blocks of requests
        self.fresh_rows = FreshRows(
            self.sampler, self.layout, self.n_spec, self.multi_module,
            specs.prompt_tokens, specs.output_tokens) if self.n_spec else None
        self.run_steps = np.arange(self.max_run_steps)[:, None]  # step index column
        self.run_rows = np.arange(self.rows.capacity)
        # facts: the step log, every column or only what the summary needs
        self.steps = StepLog("aggregates" if cfg.engine.record_steps == "aggregates"
                             else "full")
        self.busy_s = 0.0
        self._zero_steps = 0  # loop turns in a row at one simulated instant
        self._last_turn_s = -1.0
        self._idle_steps = 0  # steps in a row that decoded nothing and ended no prefill
        self._idle_since_s = 0.0  # when that streak began
        # Prefilling every seat's longest prompt takes at most this many steps; a margin
        # of many times that without a prefill ending or a token decoded is a livelock.
        self._idle_step_limit = min(MAX_IDLE_STEPS_CAP, MAX_ZERO_TIME_STEPS + 4 * -(
            -sched.max_num_seqs * cfg.model.max_model_len // sched.max_num_batched_tokens))
        # the scheduler owns the queues; the engine's intake and loop use them directly
        self.scheduler = Scheduler(sched, role, self.kv, self.rows, self.draft,
                                   lookahead_tokens=self.lookahead, index=index,
                                   provenance=cluster.provenance_draws, batch_wait=waits)
        self.waiting = self.scheduler.waiting
        self.receiving = self.scheduler.receiving
        self.running = self.scheduler.running
        self.prefilling = self.scheduler.prefilling
        self.pinned = self.scheduler.pinned

    def _blocks_freed(self, owner: int, had_table: bool) -> None:
        for hook in self.hooks.blocks_freed:
            hook(self, owner, had_table)

    # ------------------------------------------------------------------ intake

    def load(self) -> tuple[int, int]:
        """Outstanding work, for routers: (tokens still to prefill, requests held)."""
        pending = self.waiting.tokens_left + self.prefilling.tokens_left
        held = len(self.waiting) + len(self.running) + len(self.receiving)
        return pending, held

    def routing_state(self) -> RoutingState:
        """Waiting (queued or receiving KV) and running requests, KV usage and prefix-cache
        size: what the scoring routers read (``RouteTarget``)."""
        pool, cache = self.pool, self.kv.prefix_cache
        return RoutingState(len(self.waiting) + len(self.receiving), len(self.running),
                            pool.num_used / pool.num_blocks,
                            len(cache) if cache is not None else 0)

    def output_tokens_of(self, req: Request) -> int:
        """The output tokens ``req`` has produced so far, as this instance has them: its
        decode row's count while it decodes in a row here (the row runs ahead of the
        request, which is settled from it when it leaves the row), else the request's own.
        A read for observers (``pdsim serve`` streams it after every step)."""
        rows, slot = self.rows, req.slot
        if (req.phase is Phase.DECODE and 0 <= slot < rows.count
                and rows.request_of_row[slot] is req):
            return int(rows.output_tokens.item(slot))
        return req.num_output

    def cached_prefix_blocks(self, hash_ids: Sequence[int]) -> int:
        """Leading blocks of ``hash_ids`` in this instance's prefix cache (a read)."""
        return self.kv.cached_prefix_blocks(hash_ids)

    def add_request(self, req: Request) -> None:
        """Queue a request (new, or arrived at D with its kv_transfer_params)."""
        self.scheduler.add_request(req)
        self.notify()

    def notify(self) -> None:
        """Something changed the instance from outside: wake the engine loop if it is
        idle, or have the decode run it follows act at its next step boundary."""
        if self.active_run is not None:
            self.active_run.poke(self.env.now)
        elif self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def kv_landed(self, req: Request) -> None:
        """D side: all of ``req``'s remote blocks arrived; it may now be scheduled."""
        self.scheduler.kv_landed(req)
        self.notify()

    def kv_load_failed(self, req: Request, recompute: bool,
                       reason: str = "kv_load_failed") -> None:
        """D side: the transfer failed; recompute the prompt locally or fail the request."""
        fails = self.scheduler.kv_load_failed(req, recompute)
        if fails is None:
            return  # no longer waiting for it here (e.g. the instance went down)
        if fails:
            self.cluster.fail(req, reason)
        self.notify()

    def go_down(self) -> tuple[list[Request], list[Request]]:
        """Take the instance down: drop every request it holds, free all its blocks.

        Returns (requests it was serving, requests pinned here for a D to read). The
        step in progress is voided (``epoch``); the loop idles until ``come_up``.
        """
        self.end_run()
        self.up = False
        self.epoch += 1
        dropped = self.scheduler.drop_all(self.step_count - 1)
        self.notify()
        return dropped

    def come_up(self) -> None:
        """The instance is back (empty: its KV and prefix cache were lost)."""
        self.up = True
        self.notify()

    def release_pinned(self, req: Request) -> int:
        """P side: D has read (or the lease expired): free the request's blocks."""
        n = self.scheduler.release_pinned(req)
        if n is None:
            return 0
        if self.waiting:  # freed blocks matter only to a request waiting for them
            self.notify()
        return n

    # ------------------------------------------------------------------- loop

    def run(self) -> Generator[simpy.Event, object, None]:
        """The engine loop (a SimPy process).

        Pure-decode stretches go as decode runs (``decode_run``): planned in one pass when
        the scheduler has nothing else to do (nothing waits, or it has just planned a
        pure-decode step, the run's first), then followed boundary by boundary.
        """
        env = self.env
        while True:
            if env.now == self._last_turn_s:
                self._stand_still(0.0)
            else:
                self._last_turn_s = env.now
                self._zero_steps = 0
            if self.rows.count and self.up and not self.waiting:
                run = self._plan_run()
                if run is not None:
                    yield from self._follow(run)
                    continue
            plan = (self.scheduler.schedule(env.now, self.steps.count)
                    if self.up and (self.waiting or self.running) else None)
            if plan is not None and plan.kv_loads:
                self.start_kv_loads(plan.kv_loads)
            if plan is not None and plan.batch is None:
                plan = None
            if plan is None and self.up and self.scheduler.unblock_waiting():
                continue
            if plan is None:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            if not plan.chunks:
                run = self._plan_run()
                if run is not None:
                    yield from self._follow(run)
                    continue
            batch = plan.batch
            assert batch is not None
            dt = self.step_model.step_time_s(batch)
            if not dt >= 0:
                self._stand_still(dt)
            if plan.num_decode or any(req.num_computed + n >= req.seq_tokens
                                      for req, n in plan.chunks):
                self._idle_steps = 0
            elif self._idle_steps == 0:
                self._idle_steps, self._idle_since_s = 1, env.now
            else:
                self._no_progress()
            start = env.now
            epoch = self.epoch
            yield StepEnd(env, dt, self.step_priority)
            if epoch != self.epoch:
                continue  # the instance went down during the step: its work is lost
            self.busy_s += dt
            self._complete(plan, start)

    # ----------------------------------------- hooks of an attention-DP engine's loop

    def share_wake(self, wake: simpy.Event | None) -> None:
        """``dp_group``: the engine waits on ``wake``; this rank's ``notify`` fires it."""
        self._wake = wake

    def stand_still(self, dt: float = 0.0) -> None:
        """``dp_group``: another loop turn at this instant (or a bad step time)."""
        self._stand_still(dt)

    def reset_stand_still(self) -> None:
        """``dp_group``: the clock moved since the engine's last loop turn."""
        self._zero_steps = 0

    def note_step(self, plan: StepPlan) -> None:
        """``dp_group``: this rank runs ``plan`` in the engine's next step (the livelock
        guard counts steps that decode nothing and end no prefill, as ``run`` does)."""
        if plan.num_decode or any(req.num_computed + n >= req.seq_tokens
                                  for req, n in plan.chunks):
            self._idle_steps = 0
        elif self._idle_steps == 0:
            self._idle_steps, self._idle_since_s = 1, self.env.now
        else:
            self._no_progress()

    def complete_step(self, plan: StepPlan, start_s: float) -> None:
        """``dp_group``: the engine's step that ran ``plan`` here has ended."""
        self._complete(plan, start_s)

    def _no_progress(self) -> None:
        """Another step that ended no prefill and decoded nothing: work redone after a
        preemption (a request readmitted while it waits for blocks a transfer or a lease
        holds), or a chunk of a long prompt. Fine at any real step cost; with steps of
        under a microsecond the wait takes millions of them (or, at 0 s, forever)."""
        self._idle_steps += 1
        if self._idle_steps <= self._idle_step_limit:
            return
        elapsed = self.env.now - self._idle_since_s
        if elapsed >= self._idle_steps * MIN_REAL_STEP_S:  # real steps: keep going
            self._idle_steps, self._idle_since_s = 1, self.env.now
            return
        raise SimulationStalled(
            f"{self.name}: {self._idle_steps - 1:,} steps in a row up to t = "
            f"{self.env.now:.6g} s ended no prefill and decoded no token while the clock "
            f"moved {elapsed:.3g} s (under {MIN_REAL_STEP_S:g} s a step): requests are "
            f"preempted and readmitted while they wait for KV blocks a transfer or a lease "
            f"holds, and steps this cheap make the wait endless; give step_time costs of "
            f"at least {MIN_REAL_STEP_S:g} s a step")

    def _stand_still(self, dt: float) -> None:
        """Another loop turn at the same instant (``dt`` 0), or a step time that is NaN or
        negative: a few are fine (a measured table may hold a 0, an idle engine wakes at
        an instant something happened), endless ones a livelock; the run stops with a
        clear error."""
        if dt != dt or dt < 0:
            raise SimulationStalled(f"{self.name}: the step time model gave {dt!r} s for a "
                                    f"step at t = {self.env.now:.6g} s; check step_time")
        self._zero_steps += 1
        if self._zero_steps > MAX_ZERO_TIME_STEPS:
            raise SimulationStalled(
                f"{self.name}: {MAX_ZERO_TIME_STEPS:,} engine steps in a row at t = "
                f"{self.env.now:.6g} s (the simulated clock stood still); give step_time "
                f"costs that make every step take some time")

    def _plan_run(self) -> DecodeRun | None:
        """A decode run from here, if one may be taken (``run_plan``)."""
        if not (self.decode_runs and self.decodes
                and run_may_be_taken(self.rows, bool(self.prefilling))):
            return None
        planned = plan_run_window(self.rows, self.layout, self.pool,
                                  run_window_steps(self.rows.count, self.max_run_steps),
                                  self.run_steps, self.fresh_rows)
        if planned is None:
            return None
        run = DecodeRun(self, self.env, self.scheduler, self.step_model, self.steps,
                        self.fresh_rows, planned.steps, planned.max_steps, planned.ahead,
                        priority=self.step_priority,
                        fault_at_s=self.cluster.next_fault_after(self.env.now),
                        join_room=self.join_room, run_steps=self.run_steps,
                        run_rows=self.run_rows)
        if run.num_steps <= 0:
            return None
        for hook in self.hooks.run_planned:
            hook(self, run)
        return run

    def _follow(self, run: DecodeRun) -> Generator[simpy.Event, object, None]:
        """Follow a decode run to its end. The run acts at its boundaries from timer
        callbacks (``DecodeRun.wait_for``); the loop resumes once it has been committed."""
        self.active_run = run
        self._run_over = over = LoopResume(self.env)
        run.wait_for(run.next_stop())
        yield over

    def end_run(self) -> None:
        """Commit the decode run being followed as far as it got (it ended, the results
        are built, or the instance goes down) and let the loop move on."""
        run, over = self.active_run, self._run_over
        if run is None:
            return
        run.catch_up(self.env.now)
        self.active_run = None
        self._run_over = None
        self.busy_s += run.commit()
        if over is not None and not over.triggered:
            over.succeed()  # the loop goes on at once, as after a single step

    def snapshot(self) -> InstanceSnapshot:
        """The instance's facts so far, as copies: a decode run being followed is
        committed as far as it got first (its steps so far are facts)."""
        self.end_run()
        rows = self.rows
        live = {}
        for s in range(rows.count):
            req = rows.request_of_row[s]
            if req is not None:
                live[req.id] = rows.snapshot(s)
        facts = InstanceFacts(self.name, self.role.value, self.pool.num_blocks,
                              self.steps.columns(), self.busy_s, self.scheduler.preemptions,
                              self.pool_name)
        return InstanceSnapshot(self.index, facts, self.kv.prefix_hit_tokens,
                                self.kv.prefix_query_tokens, live)

    # --------------------------------------------------------------- complete

    @property
    def step_count(self) -> int:
        return self.steps.count

    def start_kv_loads(self, reqs: Sequence[Request]) -> None:
        """D: the scheduler gave these hand-overs their blocks: start moving their KV."""
        for req in reqs:
            self.cluster.start_kv_transfer(req, self)

    def route(self, out: StepOutcome) -> None:
        """Send on what a step (or a run's boundary) completed, in the order it did:
        observers hear of requests entering decode, P hands its prompts over, finished
        requests leave."""
        if out.entered_decode:
            for req in out.entered_decode:
                for hook in self.hooks.decode_entered:
                    hook(self, req)
        cluster = self.cluster
        for req in out.handed_over:
            cluster.on_prefill_done(req, self)
        for req, at_s in out.finished:
            cluster.finish(req, at_s)

    def _complete(self, plan: StepPlan, start_s: float) -> None:
        now = self.env.now
        step = self.steps.count
        b = plan.batch
        assert b is not None
        out = self.scheduler.update_from_output(plan, step, now)
        if out is not None:
            self.route(out)
        self.steps.add(start_s, now, b.prefill_tokens, b.decode_requests, self.pool.num_used,
                       len(self.running), len(self.waiting), len(self.receiving))
        for hook in self.hooks.step_completed:
            hook(self, now)
