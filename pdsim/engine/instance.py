"""One serving instance: a vLLM-v1-style engine loop over a paged KV cache.

Each engine step the scheduler builds a batch (running decodes first, then running
prefill chunks, then FCFS admission from the waiting queue under ``max_num_seqs`` and
``max_num_batched_tokens``), the step-time model prices it, and after that much simulated
time the step's results are applied. Decode-phase state lives in numpy arrays indexed by
slot, so a step costs a fixed number of vectorized operations however large the batch.
"""

from __future__ import annotations

import bisect
import math
from array import array
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from pdsim.config import InstanceGroupConfig, Role, SimConfig
from pdsim.engine.decode_advance import DraftParams, blocks_needed, repair_positions
from pdsim.engine.decode_rows import DecodeRows
from pdsim.engine.decode_run import DecodeRun, plan_decode_run
from pdsim.engine.events import LoopResume, StepEnd, step_end_priority
from pdsim.engine.kv_manager import KVManager
from pdsim.engine.kvcache import KVLayout
from pdsim.engine.look_ahead import FreshRows
from pdsim.engine.request import Phase, PrefillingList, Request, WaitingQueue, tokens_left
from pdsim.engine.snapshot import InstanceSnapshot
from pdsim.perf.base import StepBatch
from pdsim.perf.build import build_step_time_model
from pdsim.spec_decode.provenance import stale_plan

if TYPE_CHECKING:
    from collections.abc import Generator

    import simpy

    from pdsim.engine.cluster import Cluster, EngineHooks
    from pdsim.spec_decode.acceptance import AcceptanceSampler
    from pdsim.workload import RequestSpecs


def _reached_d(req: Request) -> tuple[float, int]:
    """A request's place in D's queue: when it reached D, then its id."""
    return req.d_queued_s, req.id


class StepPlan(NamedTuple):
    """What one step computes: prefill chunks and the decode slots."""

    chunks: list[tuple[Request, int]]
    num_decode: int  # decode rows 0..num_decode-1 at schedule time
    batch: StepBatch


class Instance:
    """A P, D or colocated engine. Driven by its SimPy process ``run()``."""

    def __init__(self, cluster: Cluster, env: simpy.Environment, cfg: SimConfig,
                 specs: RequestSpecs, sampler: AcceptanceSampler, hooks: EngineHooks,
                 index: int, name: str, role: Role, group: InstanceGroupConfig) -> None:
        self.cluster = cluster
        self.env = env
        self.hooks = hooks
        self.index = index
        # step ends come after every other event of the same instant, in instance order
        self.step_priority = step_end_priority(index)
        self.name = name
        self.role = role
        sched = group.scheduler
        self.max_num_seqs = sched.max_num_seqs
        self.max_batched_tokens = sched.max_num_batched_tokens
        self.chunked = sched.enable_chunked_prefill
        self.long_prefill_threshold = sched.long_prefill_token_threshold
        self.step_model = build_step_time_model(cfg, role)
        self.lookahead = cfg.num_prefill_lookahead_tokens  # the shared contract
        self.n_spec = cfg.speculative.num_speculative_tokens if role is not Role.PREFILL else 0
        hash_block = specs.hash_block_tokens
        self.kv = KVManager(KVLayout.from_config(cfg, sched.block_size), cfg.num_blocks(role),
                            sched.enable_prefix_caching and role is not Role.DECODE,
                            hash_block if hash_block is not None else sched.block_size,
                            self.lookahead)
        # the manager's pool and layout, read on every step
        self.pool = self.kv.pool
        self.pool.on_free = self._blocks_freed
        self.layout = self.kv.layout
        # the longest request whose KV (plus its sampled token and drafts) fits the pool
        self.max_fit_tokens = self.kv.max_fit_tokens(1 + self.n_spec)
        self.decodes = role is not Role.PREFILL
        self.multi_module = cfg.use_multi_module_mtp
        self.sampler = sampler
        stale = cfg.speculative.stale_kv
        self.decay_tokens = stale.decay_tokens
        self.guess_accuracy = stale.residual_guess_accuracy
        n = max(1, self.n_spec)
        num_modules = cfg.num_drafter_modules
        self.draft = DraftParams(
            self.n_spec, self.multi_module, num_modules, cfg.conditional_acceptance,
            stale.sensitivity_per_slot, stale.decay_tokens,
            # draft position i is drafted by module i (multi-module) or the one module
            np.arange(n) if self.multi_module else np.zeros(n, dtype=np.int64))

        # queues
        self.waiting = WaitingQueue()
        self.receiving: dict[int, Request] = {}
        self.running: list[Request] = []
        self.prefilling = PrefillingList()
        self.pinned: dict[int, Request] = {}  # in the order they were pinned
        self.lease_timer_armed = False  # the simulation's lease timer for ``pinned``
        self._wake: simpy.Event | None = None

        # decode rows: capacity twice the batch limit, because rows finished inside a
        # decode run keep their rows until it commits while new rows join behind them
        self.rows = DecodeRows(2 * self.max_num_seqs, self.draft, self.sampler)
        self.up = True
        self.epoch = 0  # bumped when the instance goes down, voiding the step in progress
        # decode runs (``decode_run``): the one being followed, the event that resumes the
        # loop when it ends, and the steps a run plans
        self.active_run: DecodeRun | None = None
        self._run_over: simpy.Event | None = None
        self.max_run_steps = 128
        self.decode_runs = cfg.engine.decode_runs == "auto"
        # look-aheads of requests entering decode fresh, built for blocks of requests
        self.fresh_rows = FreshRows(
            self.sampler, self.layout, self.n_spec, self.multi_module,
            specs.prompt_tokens, specs.output_tokens) if self.n_spec else None
        self.run_steps = np.arange(self.max_run_steps)[:, None]  # step index column
        self.run_rows = np.arange(self.rows.capacity)
        # facts
        # per step: end time, and (start, end, prefill tokens, decode requests, KV blocks
        # used, running, waiting, receiving) as 8 flat doubles: compact at 100k+ steps
        self.step_end_s = array("d")
        self.step_log = array("d")
        self.busy_s = 0.0
        self.preemptions = 0

    def _blocks_freed(self, owner: int, had_table: bool) -> None:
        for hook in self.hooks.blocks_freed:
            hook(self, owner, had_table)

    # ------------------------------------------------------------------ intake

    def load(self) -> tuple[int, int]:
        """Outstanding work, for routers: (tokens still to prefill, requests held)."""
        pending = self.waiting.tokens_left + self.prefilling.tokens_left
        held = len(self.waiting) + len(self.running) + len(self.receiving)
        return pending, held

    def add_request(self, req: Request) -> None:
        """Queue a request (new, or arrived at D with its kv_transfer_params)."""
        req.phase = Phase.WAITING
        req.num_computed = 0
        self.waiting.append(req)
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
        self.receiving.pop(req.id, None)
        req.phase = Phase.WAITING
        req.kv_from_remote = True
        # D still recomputes the last prompt token to get logits (num_computed -= 1).
        req.num_computed = min(req.remote_tokens, req.prompt_tokens - 1)
        req.d_first_local = req.num_computed
        req.tokens_recomputed_on_d = req.prompt_tokens - req.remote_tokens
        req.d_local_prefill_tokens = req.prompt_tokens - req.num_computed
        # back in the queue in the order the requests reached D (usually last)
        waiting, key = self.waiting, _reached_d(req)
        if not waiting or _reached_d(waiting[-1]) <= key:
            waiting.append(req)
        else:
            waiting.insert(bisect.bisect(waiting, key, key=_reached_d), req)
        self.notify()

    def kv_load_failed(self, req: Request, recompute: bool,
                       reason: str = "kv_load_failed") -> None:
        """D side: the transfer failed; recompute the prompt locally or fail the request."""
        if self.receiving.pop(req.id, None) is None:
            return  # no longer waiting for it here (e.g. the instance went down)
        self.pool.free(req.id)
        if not recompute:
            self.cluster.fail(req, reason)
            self.notify()
            return
        req.phase = Phase.WAITING
        req.recompute_prompt_on_d()
        self.waiting.appendleft(req)
        self.notify()

    def go_down(self) -> tuple[list[Request], list[Request]]:
        """Take the instance down: drop every request it holds, free all its blocks.

        Returns (requests it was serving, requests pinned here for a D to read). The
        step in progress is voided (``epoch``); the loop idles until ``come_up``.
        """
        self.end_run()
        self.up = False
        self.epoch += 1
        last = self.step_count - 1
        served: list[Request] = []
        rows = self.rows
        while rows.count:
            req = rows.request_of_row[rows.count - 1]
            assert req is not None
            self._release_slot(req, last)
            served.append(req)
        served += [r for r in self.running if r.phase is not Phase.DECODE]
        served += list(self.receiving.values())
        served += [r for r in self.waiting]
        pinned = list(self.pinned.values())
        for req in served + pinned:
            self.pool.free(req.id)
        self.running.clear()
        self.prefilling.clear()
        self.receiving.clear()
        self.waiting.clear()
        self.pinned.clear()
        self.kv.clear()
        self.notify()
        return served, pinned

    def come_up(self) -> None:
        """The instance is back (empty: its KV and prefix cache were lost)."""
        self.up = True
        self.notify()

    def release_pinned(self, req: Request) -> int:
        """P side: D has read (or the lease expired): free the request's blocks."""
        if self.pinned.pop(req.id, None) is None:
            return 0
        n = self.pool.free(req.id)
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
            if self.rows.count and self.up and not self.waiting:
                run = self._plan_run()
                if run is not None:
                    yield from self._follow(run)
                    continue
            plan = (self._schedule() if self.up and (self.waiting or self.running)
                    else None)
            if plan is None and self._unblock_waiting():
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
            dt = self.step_model.step_time_s(plan.batch)
            start = env.now
            epoch = self.epoch
            yield StepEnd(env, dt, self.step_priority)
            if epoch != self.epoch:
                continue  # the instance went down during the step: its work is lost
            self.busy_s += dt
            self._complete(plan, start)

    def _plan_run(self) -> DecodeRun | None:
        """A decode run from here, if runs are on and one may be taken
        (``plan_decode_run``)."""
        if not self.decode_runs:
            return None
        run = plan_decode_run(self)
        if run is not None:
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
        run.commit()
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
        return InstanceSnapshot(
            self.index, self.name, self.role.value, self.pool.num_blocks,
            np.frombuffer(self.step_end_s, dtype=np.float64).copy(),
            np.frombuffer(self.step_log, dtype=np.float64).reshape(-1, 8).copy(),
            self.busy_s, self.preemptions, self.kv.prefix_hit_tokens,
            self.kv.prefix_query_tokens, live)

    # --------------------------------------------------------------- schedule

    def _unblock_waiting(self) -> bool:
        """Break a wait that no event would end; True if something was freed.

        On D, waiting requests hold the blocks of their landed KV. When nothing runs and
        nothing is in flight, no event will free a block, so if the head cannot be
        admitted the most recently queued holder gives its blocks back and will recompute
        its prompt locally (as after a preemption).
        """
        if self.running or self.receiving or not self.waiting:
            return False
        return self._reclaim_waiting_kv(keep=self.waiting[0])

    def _reclaim_waiting_kv(self, keep: Request | None = None) -> bool:
        """D: take the landed KV of the most recently queued waiting request (not ``keep``)
        back into the pool; that request will recompute its prompt locally. Running
        requests come first: without this, requests waiting for a batch slot could hold
        the blocks a running request needs to grow, and it would preempt itself forever.
        """
        if self.role is not Role.DECODE or not self.up:
            return False
        for req in reversed(self.waiting):
            if req.kv_from_remote and req is not keep and self.pool.held(req.id):
                self.pool.free(req.id)
                before = tokens_left(req)
                req.recompute_prompt_on_d()
                self.waiting.adjust(tokens_left(req) - before)
                req.num_preemptions += 1
                self.preemptions += 1
                return True
        return False

    def chunk_tokens(self, req: Request, budget: int) -> int:
        """Prompt tokens of ``req`` the next step may compute within ``budget``."""
        remaining = req.seq_tokens - req.num_computed
        n = min(remaining, budget)
        if self.long_prefill_threshold is not None:
            n = min(n, self.long_prefill_threshold)
        if n < remaining:
            if not self.chunked:
                return 0
            la = self.lookahead
            # Never leave 0 < remaining < lookahead for the last chunk: the trailing
            # drafter modules would read drafts instead of prompt tokens.
            if la and remaining - n < la:
                n = remaining - la
        return max(n, 0)

    def prefill_target_tokens(self, req: Request, n: int) -> int:
        """Tokens ``req`` holds KV for once a chunk of ``n`` is computed (plus room for the
        sampled token and the first drafts when it then decodes here)."""
        end = req.num_computed + n
        if end >= req.seq_tokens and self.decodes:
            end += 1 + self.n_spec  # room for the sampled token and the first drafts
        return end

    def _schedule(self) -> StepPlan | None:
        budget = self.max_batched_tokens
        q = 1 + self.n_spec
        layout, pool = self.layout, self.pool
        rows = self.rows
        k = rows.count
        if k:
            while True:
                need = (blocks_needed(layout, rows.context_tokens[:k], self.n_spec)
                        - rows.blocks_held[:k])
                total = int(need.sum()) if need.any() else 0
                if total <= pool.num_free:
                    break
                if not self._reclaim_waiting_kv() and not self._preempt_tail():
                    break
                k = rows.count
            if total:
                for s in np.flatnonzero(need > 0).tolist():
                    extra = int(need[s])
                    req = rows.request_of_row[s]
                    assert req is not None
                    if pool.allocate(req.id, extra):
                        rows.blocks_held[s] += extra
            budget -= k * q

        chunks: list[tuple[Request, int]] = []
        for req in list(self.prefilling):
            if budget <= 0:
                break
            if req.phase is not Phase.PREFILL:
                continue
            n = self.chunk_tokens(req, budget)
            if n <= 0:
                continue
            extra = layout.blocks_for(self.prefill_target_tokens(req, n)) - pool.held(req.id)
            while extra > pool.num_free:
                if self._reclaim_waiting_kv():
                    continue
                victim_was_self = self.running and self.running[-1] is req
                if not self._preempt_tail() or victim_was_self:
                    break
            if req.phase is not Phase.PREFILL:
                continue
            if extra > pool.num_free:
                continue
            pool.allocate(req.id, extra)
            chunks.append((req, n))
            budget -= n
        k = rows.count

        skipped: list[Request] = []
        waiting = self.waiting
        caches_prefixes = self.kv.caches_prefixes
        while waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = waiting.popleft()
            if self.awaits_remote_kv(req):
                if not self.load_remote_kv(req):
                    waiting.appendleft(req)
                    break
                continue
            hit = 0
            if caches_prefixes and req.num_computed == 0 and req.hash_ids:
                hit = self.kv.prefix_hit(req)
                req.num_computed = hit
            n = self.chunk_tokens(req, budget)
            if n <= 0:
                req.num_computed -= hit
                skipped.append(req)
                break
            extra = layout.blocks_for(self.prefill_target_tokens(req, n)) - pool.held(req.id)
            if not pool.allocate(req.id, extra):
                req.num_computed -= hit
                waiting.appendleft(req)
                break
            if caches_prefixes:
                self.kv.count_lookup(req, hit)
            self.start_prefill(req)
            chunks.append((req, n))
            budget -= n
        for req in reversed(skipped):
            waiting.appendleft(req)

        if not chunks and not k:
            return None
        prefill_tokens = 0
        pairs = 0.0
        for req, n in chunks:
            prefill_tokens += n
            pairs += n * (req.num_computed + (n + 1) / 2)
        if k:
            ctx_sum = int(rows.context_tokens[:k].sum())
            repair = (int(repair_positions(rows.rejected_last_step[:k]).sum()) if self.n_spec
                      else 0)
        else:
            ctx_sum = repair = 0
        batch = StepBatch(prefill_tokens, pairs, k, k * q, ctx_sum, repair)
        return StepPlan(chunks, k, batch)

    def start_prefill(self, req: Request) -> None:
        """``req`` was admitted with its first chunk (its blocks allocated)."""
        req.phase = Phase.PREFILL
        self.running.append(req)
        self.prefilling.append(req)
        if self.role is Role.PREFILL and math.isnan(req.p_start_s):
            req.p_start_s = self.env.now

    @staticmethod
    def awaits_remote_kv(req: Request) -> bool:
        """D: ``req`` was handed over and its KV has not been loaded yet."""
        params = req.kv_params
        return params is not None and params.do_remote_prefill and not req.kv_from_remote

    def load_remote_kv(self, req: Request, reserve: int = 0) -> bool:
        """D: allocate blocks for ``req``'s remote tokens and start loading them; False
        (and no change) unless ``reserve`` blocks would still be free afterwards."""
        pool = self.pool
        extra = self.layout.blocks_for(req.remote_tokens) - pool.held(req.id)
        if extra > pool.num_free - reserve or not pool.allocate(req.id, extra):
            return False
        req.phase = Phase.WAITING_FOR_REMOTE_KVS
        self.receiving[req.id] = req
        self.cluster.start_kv_transfer(req, self)
        return True

    def _preempt_tail(self) -> bool:
        """Preempt the lowest-priority running request (recompute); False if none."""
        if not self.running:
            return False
        req = self.running.pop()
        self.preemptions += 1
        req.num_preemptions += 1
        if req.phase is Phase.DECODE:
            self._release_slot(req, self.step_count - 1)
        else:
            self.prefilling.remove(req)
        self.pool.free(req.id)
        req.num_computed = 0
        req.phase = Phase.WAITING
        if self.role is Role.PREFILL:
            req.p_preemptions += 1
        else:
            # Recompute prompt and generated tokens locally: fresh, exact drafter KV. P's
            # blocks are gone by now, so the request never asks for remote KV again.
            req.seq_tokens = req.prompt_tokens + req.num_output
            req.kv_from_remote = False
            req.kv_params = None
        self.waiting.appendleft(req)
        return True

    # --------------------------------------------------------------- complete

    @property
    def step_count(self) -> int:
        return len(self.step_end_s)

    def _complete(self, plan: StepPlan, start_s: float) -> None:
        now = self.env.now
        step = len(self.step_end_s)
        self.step_end_s.append(now)
        b = plan.batch
        for req, n in plan.chunks:
            self.complete_chunk(req, n, step, now)
        if plan.num_decode:
            self._decode_step(plan.num_decode, step, now)
        self.step_log.extend((start_s, now, b.prefill_tokens, b.decode_requests,
                              self.pool.num_used, len(self.running), len(self.waiting),
                              len(self.receiving)))

    def complete_chunk(self, req: Request, n: int, step: int, now: float) -> None:
        """Step ``step`` computed ``n`` more prompt tokens of ``req``."""
        if req.phase is not Phase.PREFILL:
            return
        req.num_computed += n
        self.prefilling.adjust(-n)
        if req.num_computed >= req.seq_tokens:
            req.final_chunk_tokens = n
            self._prefill_done(req, step, now)

    def _prefill_done(self, req: Request, step: int, now: float) -> None:
        self.prefilling.remove(req)
        self.kv.prefix_insert(req)
        if self.role is Role.PREFILL:
            self.running.remove(req)
            req.phase = Phase.PINNED
            req.p_end_s = now
            self.pinned[req.id] = req
            self.cluster.on_prefill_done(req, self)
            return
        req.num_output += 1
        if math.isnan(req.first_token_s):
            req.first_token_s = now
        if req.num_output >= req.output_target:
            req.segments.append([self.index, step, step])
            self.running.remove(req)
            self.pool.free(req.id)
            req.phase = Phase.DONE
            self.cluster.finish(req)
            return
        self._enter_decode(req, step)

    def _enter_decode(self, req: Request, step: int) -> None:
        stale = (self._remote_stale_weights(req) if self.n_spec and req.kv_from_remote
                 else None)
        self.rows.enter(req, step, self.pool.held(req.id), stale)
        for hook in self.hooks.decode_entered:
            hook(self, req)

    def _remote_stale_weights(self, req: Request) -> list[float] | None:
        """Per drafter module, the stale weight of the slots P left in ``req``'s KV that D
        does not rewrite (None when there are none): certain for unverified drafts, and
        for each of P's guesses unless it guessed the real token (one provenance draw
        per guessed slot, in slot order)."""
        plan = stale_plan(req.prompt_tokens - req.p_prompt_tokens,
                          req.prompt_tokens - req.d_first_local, self.draft.num_modules,
                          req.prompt_tokens, self.decay_tokens, self.guess_accuracy)
        if not plan.slots:
            return None
        draws = iter(self.cluster.provenance_draws.take(plan.num_guesses))
        weights = [0.0] * self.rows.stale_weight.shape[1]
        added = False
        for m, weight, right_p in plan.slots:
            if right_p is not None and next(draws) < right_p:
                continue  # P guessed the real token: the slot is exact
            weights[m] += weight
            added = True
        return weights if added else None

    def _release_slot(self, req: Request, last_step: int) -> None:
        self.rows.settle(req, last_step, self.index)
        self.rows.vacate(req.slot)

    def _decode_step(self, num_rows: int, step: int, now: float) -> None:
        # release from the highest row down so moved rows are never revisited
        for s in self.rows.apply_step(num_rows):
            self.finish_row(s, step, now)

    def finish_row(self, s: int, step: int, at_s: float, vacate: bool = True,
                   settle: bool = True) -> None:
        """Decode row ``s`` emitted its last token in step ``step``: settle the row into its
        request, free its blocks and finish it at ``at_s``. A decode run keeps the row
        (neither settled nor vacated) until it commits."""
        rows = self.rows
        req = rows.request_of_row[s]
        assert req is not None
        if settle:
            rows.settle(req, step, self.index)
        if vacate:
            rows.vacate(s)
        self.running.remove(req)
        self.pool.free(req.id)
        req.phase = Phase.DONE
        self.cluster.finish(req, at_s)
