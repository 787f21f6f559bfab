"""An instance's scheduler: it turns the queues into a step plan and applies the step's
outcome (vLLM v1's ``Scheduler`` has the same two jobs).

``schedule()`` builds the next step's batch: running decodes first (growing their blocks,
preempting from the tail when the pool runs short), then running prefill chunks, then
FCFS admission from the waiting queue under ``max_num_seqs`` and
``max_num_batched_tokens``. ``update_from_output()`` applies a step that ended: prefill
chunks computed (a prompt done hands over on P, emits its first token elsewhere) and the
decode rows advanced (``DecodeRows.apply_step``). The scheduler never yields to SimPy; the
engine loop (``Instance.run``) prices and times the steps.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from pdsim.config import Role
from pdsim.engine.decode_advance import blocks_needed, repair_positions
from pdsim.engine.request import Phase, PrefillingList, Request, WaitingQueue, tokens_left
from pdsim.perf.base import StepBatch
from pdsim.spec_decode.provenance import leading_right, stale_plan

if TYPE_CHECKING:
    from pdsim.config import SchedulerConfig
    from pdsim.engine.decode_advance import DraftParams
    from pdsim.engine.decode_rows import DecodeRows
    from pdsim.engine.kv_manager import KVManager


class DrawSource(Protocol):
    """A buffered stream of uniform draws in [0, 1)."""

    def take(self, n: int) -> list[float]: ...


def _reached_d(req: Request) -> tuple[float, int]:
    """A request's place in D's queue: when it reached D, then its id."""
    return req.d_queued_s, req.id


class StepPlan(NamedTuple):
    """What one step computes (prefill chunks and the decode rows) and the KV loads the
    scheduler asks the instance to start (D: hand-overs given their blocks). A plan with
    neither chunks nor decode rows (``empty``) runs no step; its loads still start."""

    chunks: list[tuple[Request, int]]
    num_decode: int  # decode rows 0..num_decode-1 at schedule time
    batch: StepBatch | None  # None when the plan is empty
    padded: tuple[Request, ...] = ()  # chunks padded with placeholder drafts
    kv_loads: tuple[Request, ...] = ()  # D: requests whose remote KV to start loading

    @property
    def empty(self) -> bool:
        return self.batch is None


class StepOutcome:
    """What a step (or a boundary of a decode run) finished, for the instance to route
    once the scheduler has returned: prompts done on P to hand over, requests that
    emitted their last token (with when), requests that entered decode (for observers)."""

    __slots__ = ("entered_decode", "finished", "handed_over")

    def __init__(self) -> None:
        self.handed_over: list[Request] = []
        self.finished: list[tuple[Request, float]] = []
        self.entered_decode: list[Request] = []


class Scheduler:
    """The queues of one instance and the rules that batch them.

    Built from its parts: its config slice (``SchedulerConfig``), its role, the KV
    manager, the decode rows and the drafter's settings, plus the instance's index (the
    request segments name it), the prefill lookahead and the draws of P's guesses. It
    never yields to SimPy and never calls the cluster: ``schedule()`` returns the KV
    loads to start with its plan, ``update_from_output()`` and the intake return what
    the instance must route.
    """

    def __init__(self, sched: SchedulerConfig, role: Role, kv: KVManager, rows: DecodeRows,
                 draft: DraftParams, *, lookahead_tokens: int = 0, index: int = 0,
                 provenance: DrawSource | None = None, batch_wait: bool = False) -> None:
        self.index = index
        self.role = role
        self.kv = kv
        self.pool = kv.pool
        self.layout = kv.layout
        self.rows = rows
        self.draft = draft
        self.n_spec = draft.num_spec_tokens
        self.decodes = role is not Role.PREFILL
        self.provenance = provenance
        self.max_num_seqs = sched.max_num_seqs
        self.max_num_batched_tokens = sched.max_num_batched_tokens
        self.chunked = sched.enable_chunked_prefill
        self.long_prefill_threshold = sched.long_prefill_token_threshold
        self.prefill_first = sched.prefill_policy == "prefill_first"
        self.hold_prompts = False  # an attention-DP engine's context balance (dp_group)
        self.recv_interval = sched.recv_interval_steps
        self._recv_weight = self.recv_interval  # SGLang's receive counter: take at once
        # TensorRT-LLM's batch waiting (``batch_wait``: a colocated engine without
        # attention DP that sets both limits): the steps it has held prompts back so far
        self.batch_wait_steps = sched.batch_wait_steps if batch_wait else 0
        self.batch_wait_tokens = sched.batch_wait_max_tokens_ratio * self.max_num_batched_tokens
        self._batch_waited = 0
        self.lookahead = lookahead_tokens  # the shared contract
        # queues
        self.waiting = WaitingQueue()
        self.receiving: dict[int, Request] = {}
        self.running: list[Request] = []
        self.prefilling = PrefillingList()
        self.pinned: dict[int, Request] = {}  # in the order they were pinned
        self.preemptions = 0
        # what the step being applied completed so far (``take_outcome`` hands it over)
        self.outcome: StepOutcome | None = None
        self._loads: list[Request] = []  # KV loads started while planning

    def _out(self) -> StepOutcome:
        out = self.outcome
        if out is None:
            out = self.outcome = StepOutcome()
        return out

    def take_outcome(self) -> StepOutcome | None:
        """What was finished since the last call (None: nothing to route)."""
        out, self.outcome = self.outcome, None
        return out

    def take_kv_loads(self) -> list[Request]:
        """The KV loads asked for since the last call (D), in order."""
        loads = self._loads
        if loads:
            self._loads = []
        return loads

    # ------------------------------------------------------------------ intake

    def add_request(self, req: Request) -> None:
        """Queue a request (new, or arrived at D with its kv_transfer_params)."""
        req.queue()
        self.waiting.append(req)

    def kv_landed(self, req: Request) -> None:
        """D: all of ``req``'s remote blocks arrived; it may now be scheduled."""
        self.receiving.pop(req.id, None)
        req.kv_landed()
        # back in the queue in the order the requests reached D (usually last)
        waiting, key = self.waiting, _reached_d(req)
        if not waiting or _reached_d(waiting[-1]) <= key:
            waiting.append(req)
        else:
            waiting.insert(bisect.bisect(waiting, key, key=_reached_d), req)

    def kv_load_failed(self, req: Request, recompute: bool) -> bool | None:
        """D: ``req``'s transfer failed. None when it no longer waits for it here (the
        instance went down); else its blocks are freed and it is queued to recompute
        its prompt locally (False) or must fail (True)."""
        if self.receiving.pop(req.id, None) is None:
            return None
        self.pool.free(req.id)
        if not recompute:
            return True
        req.requeue_to_recompute()
        self.waiting.appendleft(req)
        return False

    def release_pinned(self, req: Request) -> int | None:
        """P: D has read ``req``'s blocks (or the lease expired): free them; the blocks
        freed (None when it was not pinned here)."""
        if self.pinned.pop(req.id, None) is None:
            return None
        return self.pool.free(req.id)

    def drop_all(self, last_step: int) -> tuple[list[Request], list[Request]]:
        """The instance went down after step ``last_step``: drop every request, free all
        blocks and the prefix cache. Returns (requests it was serving, requests pinned
        here for a D to read)."""
        served: list[Request] = []
        rows = self.rows
        while rows.count:
            req = rows.request_of_row[rows.count - 1]
            assert req is not None
            self.release_row(req, last_step)
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
        return served, pinned

    # ------------------------------------------------------------ scheduling

    def unblock_waiting(self) -> bool:
        """Break a wait that no event would end; True if something was freed.

        On D, waiting requests hold the blocks of their landed KV. When nothing runs and
        nothing is in flight, no event will free a block, so if the head cannot be
        admitted the most recently queued holder gives its blocks back and will recompute
        its prompt locally (as after a preemption).
        """
        if self.running or self.receiving or not self.waiting:
            return False
        return self.reclaim_waiting_kv(keep=self.waiting[0])

    def reclaim_waiting_kv(self, keep: Request | None = None) -> bool:
        """D: take the landed KV of the most recently queued waiting request (not ``keep``)
        back into the pool; that request will recompute its prompt locally. Running
        requests come first: without this, requests waiting for a batch slot could hold
        the blocks a running request needs to grow, and it would preempt itself forever.
        """
        if self.role is not Role.DECODE:
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

    def schedule(self, now_s: float, step: int) -> StepPlan:
        """The plan of step ``step`` (the instance's step count), starting at ``now_s``."""
        budget = self.max_num_batched_tokens
        tokens_per_row = 1 + self.n_spec
        kv, layout, pool = self.kv, self.layout, self.pool
        rows = self.rows
        num_rows = rows.count
        if num_rows:
            while True:
                need = (blocks_needed(layout, rows.context_tokens[:num_rows], self.n_spec)
                        - rows.blocks_held[:num_rows])
                total = int(np.add.reduce(need)) if np.logical_or.reduce(need) else 0
                if total <= pool.num_free:
                    break
                if not self.reclaim_waiting_kv() and not self.preempt_tail(step - 1):
                    break
                num_rows = rows.count
            if total:
                for s in np.flatnonzero(need > 0).tolist():
                    extra = int(need[s])
                    req = rows.request_of_row[s]
                    assert req is not None
                    if pool.allocate(req.id, extra):  # the rows' own arithmetic
                        rows.blocks_held[s] += extra
            if not (self.prefill_first and (self.prefilling or self.waiting)):
                budget -= num_rows * tokens_per_row

        chunks: list[tuple[Request, int]] = []
        for req in list(self.prefilling):
            if budget <= 0:
                break
            if req.phase is not Phase.PREFILL:
                continue
            n = self.chunk_tokens(req, budget)
            if n <= 0:
                continue
            extra = kv.extra_blocks(req.id, self.prefill_target_tokens(req, n))
            while extra > pool.num_free:
                if self.reclaim_waiting_kv():
                    continue
                victim_was_self = self.running and self.running[-1] is req
                if not self.preempt_tail(step - 1) or victim_was_self:
                    break
            if req.phase is not Phase.PREFILL:
                continue
            if extra > pool.num_free:
                continue
            pool.allocate(req.id, extra)
            chunks.append((req, n))
            budget -= n
        num_rows = rows.count

        padded: list[Request] = []
        if self.recv_interval > 1:
            # (with nothing to run the engine idles, and an idle turn takes at once)
            if self._recv_weight >= self.recv_interval or not (num_rows or chunks):
                self._recv_weight = 0
                if not (self.hold_prompts or self.waits_for_batch(budget, num_rows, chunks)):
                    self.admit(budget, num_rows, bool(chunks), now_s, chunks, padded)
            # the step planned here weighs 1 when it only decodes, else past the interval
            self._recv_weight += 1 if num_rows and not chunks else self.recv_interval
        elif not (self.hold_prompts or self.waits_for_batch(budget, num_rows, chunks)):
            self.admit(budget, num_rows, bool(chunks), now_s, chunks, padded)
        if self.prefill_first and chunks:
            num_rows = 0  # SGLang: a prefill batch runs alone; the decode rows wait

        loads = self._loads
        kv_loads: tuple[Request, ...] = ()
        if loads:
            kv_loads = tuple(loads)
            loads.clear()
        if not chunks and not num_rows:
            return StepPlan(chunks, 0, None, (), kv_loads)
        prefill_tokens = 0
        pairs = 0.0
        context_sum = repair = 0
        for req, n in chunks:
            if req in padded:
                # verified like a decode row: its last prompt token and N placeholders
                context_sum += req.num_computed
                continue
            prefill_tokens += n
            pairs += n * (req.num_computed + (n + 1) / 2)
        if num_rows:
            context_sum += int(np.add.reduce(rows.context_tokens[:num_rows]))
            if self.n_spec:
                repair = int(np.add.reduce(repair_positions(rows.rejected_last_step[:num_rows])))
        decode_rows = num_rows + len(padded)
        batch = StepBatch(prefill_tokens, pairs, decode_rows, decode_rows * tokens_per_row,
                          context_sum, repair)
        return StepPlan(chunks, num_rows, batch, tuple(padded), kv_loads)

    def waits_for_batch(self, budget: int, num_rows: int,
                        chunks: list[tuple[Request, int]]) -> bool:
        """TensorRT-LLM's batch waiting (``batch_wait_steps``, PyExecutor
        ``_waiting_requests``): whether the step being planned (``num_rows`` decode rows,
        ``budget`` tokens left, ``chunks`` of prompts already in it) holds the waiting
        prompts back. Only a step with decode rows and prompts it would take waits: while
        the held steps are fewer than ``batch_wait_steps`` and the step's tokens (each such
        prompt's tokens and 1 + N per decode row) stay under ``batch_wait_tokens``; a
        step that lets them in restarts the count. The prompts counted are those ``admit``
        would take, first come first served: under the seats, the step's tokens (a whole
        prompt unless prefill is chunked) and the free KV blocks (prefix-cache hits not
        credited), as TensorRT-LLM counts the context requests its schedulers took."""
        if not (self.batch_wait_steps and num_rows and self.waiting):
            return False
        prompt_tokens = sum(req.seq_tokens for req, _ in chunks)
        room = self.max_num_seqs - len(self.running)
        free_blocks = self.pool.num_free
        taken = 0
        for req in self.waiting:
            if taken >= room or budget <= 0:
                break
            n = self.chunk_tokens(req, budget)
            if n <= 0:
                break
            need = self.kv.extra_blocks(req.id, self.prefill_target_tokens(req, n))
            if need > free_blocks:
                break
            free_blocks -= max(need, 0)
            prompt_tokens += req.seq_tokens
            budget -= n
            taken += 1
        if not taken:
            return False  # no prompt fits the step: nothing to hold back
        tokens = prompt_tokens + num_rows * (1 + self.n_spec)
        if self._batch_waited >= self.batch_wait_steps or tokens >= self.batch_wait_tokens:
            self._batch_waited = 0
            return False
        self._batch_waited += 1
        return True

    def admit(self, budget: int, num_rows: int, prefill_in_step: bool, now_s: float,
              chunks: list[tuple[Request, int]], padded: list[Request] | None,
              reserve: int | None = None) -> bool:
        """FCFS admission from the waiting queue into the step being planned (at
        ``now_s``, with ``num_rows`` decode rows, ``budget`` tokens left, a prefill chunk
        already in it if ``prefill_in_step``), under ``max_num_seqs``: hand-overs get
        their blocks and their KV load is asked for; the others start their prefill with
        their first chunk, appended to ``chunks`` (``padded``: the padded first steps).

        The one admission loop, for the scheduler's own steps and for a decode run's
        boundaries. With ``reserve`` (a decode run) it admits only what the run can
        follow, keeping ``reserve`` blocks free: KV loads and prompts that one final
        chunk completes; at the first request that needs anything else (a prefix-cache
        lookup, a padded first step, several chunks, a full set of rows, blocks) it stops
        with the request at the head and returns False (the run ends there). True
        otherwise."""
        waiting = self.waiting
        kv, pool = self.kv, self.pool
        in_run = reserve is not None
        caches_prefixes = kv.caches_prefixes
        while waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = waiting.popleft()
            if self.awaits_remote_kv(req):
                if not self.load_remote_kv(req, reserve or 0):
                    waiting.appendleft(req)
                    return not in_run  # it might fit step by step: the scheduler decides
                continue
            if in_run:
                if (caches_prefixes or self.rows.count + len(chunks) >= self.rows.capacity
                        or self.pads_first_step(req, num_rows, prefill_in_step)):
                    waiting.appendleft(req)  # (a padded first step goes to the scheduler)
                    return False
            elif self.pads_first_step(req, num_rows, prefill_in_step):
                assert padded is not None
                extra = kv.extra_blocks(req.id, self.prefill_target_tokens(req, 1))
                # without room for 1 + N it waits rather than run unpadded, as in vLLM; in
                # pdsim only blocks can run short here (the config keeps
                # max_num_batched_tokens >= max_num_seqs * (1 + N))
                if budget < 1 + self.n_spec or not pool.allocate(req.id, extra):
                    waiting.appendleft(req)
                    return True
                self.start_prefill(req, now_s)
                chunks.append((req, 1))
                padded.append(req)
                budget -= 1 + self.n_spec
                continue
            hit = 0
            if caches_prefixes and req.num_computed == 0 and req.hash_ids:
                hit = kv.prefix_hit(req)
                req.num_computed = hit
            n = self.chunk_tokens(req, budget)
            if n <= 0 or (in_run and req.num_computed + n < req.seq_tokens):
                req.num_computed -= hit
                waiting.appendleft(req)
                return not in_run  # (a run follows only one final chunk)
            extra = kv.extra_blocks(req.id, self.prefill_target_tokens(req, n))
            if reserve is not None:
                if extra > pool.num_free - reserve:
                    waiting.appendleft(req)
                    return False
                pool.allocate(req.id, extra)
            elif not pool.allocate(req.id, extra):
                req.num_computed -= hit
                waiting.appendleft(req)
                return True
            if caches_prefixes:
                kv.count_lookup(req, hit)
            self.start_prefill(req, now_s)
            chunks.append((req, n))
            budget -= n
            prefill_in_step = True
        return True

    def pads_first_step(self, req: Request, num_rows: int, prefill_in_step: bool) -> bool:
        """Whether vLLM pads ``req``'s step to 1 + N tokens with placeholder drafts (PR
        #45237, for full CUDA graphs): speculation is static, ``req`` has exactly one token
        to compute (D's recompute of the last prompt token before the fix), the step
        already runs ``num_rows`` decodes and no prefill chunk."""
        return (self.draft.pad_first_step and self.n_spec > 0 and self.decodes
                and num_rows > 0 and not prefill_in_step and tokens_left(req) == 1)

    def start_prefill(self, req: Request, now_s: float) -> None:
        """``req`` was admitted with its first chunk (its blocks allocated) at ``now_s``."""
        req.start_prefill()
        self.running.append(req)
        self.prefilling.append(req)
        if self.role is Role.PREFILL and math.isnan(req.p_start_s):
            req.p_start_s = now_s

    @staticmethod
    def awaits_remote_kv(req: Request) -> bool:
        """D: ``req`` was handed over and its KV has not been loaded yet."""
        params = req.kv_params
        return params is not None and params.do_remote_prefill and not req.kv_from_remote

    def load_remote_kv(self, req: Request, reserve: int = 0) -> bool:
        """D: allocate blocks for ``req``'s remote tokens and ask for their load (the
        plan's ``kv_loads``, or ``take_kv_loads``); False (and no change) unless
        ``reserve`` blocks would still be free afterwards."""
        pool = self.pool
        extra = self.kv.extra_blocks(req.id, req.remote_tokens)
        if extra > pool.num_free - reserve or not pool.allocate(req.id, extra):
            return False
        req.await_remote_kv()
        self.receiving[req.id] = req
        self._loads.append(req)
        return True

    def preempt_tail(self, last_step: int) -> bool:
        """Preempt the lowest-priority running request (recompute; a decoding one's row
        closes after step ``last_step``); False if none."""
        if not self.running:
            return False
        req = self.running.pop()
        self.preemptions += 1
        req.num_preemptions += 1
        if req.phase is Phase.DECODE:
            self.release_row(req, last_step)
        else:
            self.prefilling.remove(req)
        self.pool.free(req.id)
        req.preempted(on_prefill=self.role is Role.PREFILL)
        self.waiting.appendleft(req)
        return True

    # ----------------------------------------------------------- outputs

    def update_from_output(self, plan: StepPlan, step: int, now: float) -> StepOutcome | None:
        """Step ``step`` (planned as ``plan``) ended at ``now``: its prefill chunks are
        computed and its decode rows advanced. Returns what completed, for the instance
        to route (None: nothing did)."""
        for req, n in plan.chunks:
            self.complete_chunk(req, n, step, now, req in plan.padded)
        if plan.num_decode:
            # release from the highest row down so moved rows are never revisited
            for s in self.rows.apply_step(plan.num_decode):
                self.finish_row(s, step, now)
        out = self.outcome
        if out is not None:
            self.outcome = None
        return out

    def complete_chunk(self, req: Request, n: int, step: int, now: float,
                       padded: bool = False) -> None:
        """Step ``step`` computed ``n`` more prompt tokens of ``req`` (``padded``: with
        placeholder drafts)."""
        if req.phase is not Phase.PREFILL:
            return
        req.num_computed += n
        self.prefilling.adjust(-n)
        if req.num_computed >= req.seq_tokens:
            req.final_chunk_tokens = n
            self._prefill_done(req, step, now, padded)

    def _prefill_done(self, req: Request, step: int, now: float, padded: bool = False) -> None:
        self.prefilling.remove(req)
        self.kv.prefix_insert(req)
        if self.role is Role.PREFILL:
            self.running.remove(req)
            req.pin(now)
            self.pinned[req.id] = req
            self._out().handed_over.append(req)
            return
        req.num_output += 1
        if math.isnan(req.first_token_s):
            req.first_token_s = now
        if padded:
            req.padded_first_steps += 1
        if req.num_output >= req.output_target:
            if padded:  # the placeholder round, counted as vLLM counts it
                req.num_drafts += 1
                req.num_draft_tokens += self.n_spec
            req.segments.append([self.index, step, step])
            self.running.remove(req)
            self.pool.free(req.id)
            req.end()
            self._out().finished.append((req, now))
            return
        self._enter_decode(req, step, padded)

    def _enter_decode(self, req: Request, step: int, padded: bool) -> None:
        stale = (self._remote_stale_weights(req, padded) if self.n_spec and req.kv_from_remote
                 else None)
        self.rows.enter(req, step, self.pool.held(req.id), stale, padded)
        self._out().entered_decode.append(req)

    def _remote_stale_weights(self, req: Request, padded: bool) -> list[float] | None:
        """Per drafter module, the stale weight of the slots P left in ``req``'s KV that D
        does not rewrite (None when there are none). A slot is stale unless every token it
        was computed through was right: one provenance draw says how many of P's guesses
        of real prompt tokens were right in a row, one how many of P's drafts (at the
        drafter's clean acceptance). After a padded first step the repair rewrote the N - 1
        positions before L - 1 too (with garbage, which ``DecodeRows.enter`` adds)."""
        draft = self.draft
        d_local = req.prompt_tokens - req.d_first_local
        if padded and draft.multi_module:
            d_local = max(d_local, min(req.prompt_tokens, draft.num_spec_tokens))
        plan = stale_plan(req.prompt_tokens - req.p_prompt_tokens, d_local,
                          draft.num_modules, req.prompt_tokens, draft.decay_tokens,
                          draft.unverified_draft_slots)
        if not plan.slots:
            return None
        assert self.provenance is not None, "a D with a drafter needs the provenance draws"
        draws = iter(self.provenance.take(plan.num_draws))
        right_guesses = (leading_right(next(draws), draft.guess_survival[:plan.max_guesses])
                         if plan.max_guesses else 0)
        right_drafts = (leading_right(next(draws), draft.draft_survival[:plan.max_drafts])
                        if plan.max_drafts else 0)
        weights = [0.0] * self.rows.stale_weight.shape[1]
        added = False
        for m, weight, guesses, drafts in plan.slots:
            if guesses <= right_guesses and drafts <= right_drafts:
                continue  # every token the slot was computed through was right
            weights[m] += weight
            added = True
        return weights if added else None

    def release_row(self, req: Request, last_step: int) -> None:
        self.rows.settle(req, last_step, self.index)
        self.rows.vacate(req.slot)

    def finish_row(self, s: int, step: int, at_s: float, vacate: bool = True,
                   settle: bool = True) -> None:
        """Decode row ``s`` emitted its last token in step ``step``: settle the row into its
        request, free its blocks and finish it at ``at_s`` (the outcome's ``finished``). A
        decode run keeps the row (neither settled nor vacated) until it commits."""
        rows = self.rows
        req = rows.request_of_row[s]
        assert req is not None
        if settle:
            rows.settle(req, step, self.index)
        if vacate:
            rows.vacate(s)
        self.running.remove(req)
        self.pool.free(req.id)
        req.end()
        self._out().finished.append((req, at_s))
