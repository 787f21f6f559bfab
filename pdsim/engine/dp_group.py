"""An attention-DP engine: ``attention_dp_size`` ranks that step together.

Each rank is an ``Instance`` with its own scheduler, KV pool and decode rows (what the
transfers, faults, facts and placement see, named as any instance); the engine is what
the router sees (``RouteTarget``: the ranks' loads summed) and what steps them. A
request routed to the engine is assigned to a rank by the pool's
``attention_dp_balance`` policy and never moves. One SimPy process runs the engine's
loop: every rank plans its step; if any has work, the step is priced for all of them
together (``pdsim.perf.dp_group``: the slowest rank's attention and dense parts, the MoE
on every rank's tokens, idle ranks in a dummy forward), and every rank that planned
commits its step at the same end time. Ranks step one step at a time (no decode runs):
a run's many pure-decode steps would have to be planned for all ranks at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from pdsim.config_sections import Role
from pdsim.engine.events import StepEnd
from pdsim.engine.route_view import RoutingState
from pdsim.perf.dp_group import DPGroupStepTime, vllm_capture_tokens
from pdsim.policies import DP_BALANCERS

if TYPE_CHECKING:
    from collections.abc import Generator

    import simpy

    from pdsim.engine.instance import Instance
    from pdsim.engine.request import Request
    from pdsim.engine.scheduler import StepPlan
    from pdsim.perf.base import StepBatch


# ------------------------------------------------------------------ balancers


@DP_BALANCERS.register("vllm")
class VLLMBalance:
    """vLLM's DP load balancer (``DPLBAsyncMPClient.get_core_engine_for_request``,
    vllm/v1/engine/core_client.py): the rank with the least ``4 x waiting + running``,
    ties to the first from the client's start index (0 here). vLLM reads the counts from
    the coordinator's ~100 ms stats and adds each assignment to its local waiting
    count at once; here the counts are the ranks' own at the instant."""

    name: ClassVar[str] = "vllm"

    def choose(self, ranks: Sequence[Instance], request: Request) -> int:
        def score(i: int) -> tuple[int, int]:
            s = ranks[i].scheduler
            return 4 * (len(s.waiting) + len(s.receiving)) + len(s.running), i

        return min(range(len(ranks)), key=score)


@DP_BALANCERS.register("sglang_round_robin")
class RoundRobinBalance:
    """SGLang's data-parallel controller with its default ``load_balance_method``,
    ``round_robin``: ranks in turn, whatever their load."""

    name: ClassVar[str] = "sglang_round_robin"

    def __init__(self) -> None:
        self._next = 0

    def choose(self, ranks: Sequence[Instance], request: Request) -> int:
        i = self._next % len(ranks)
        self._next = i + 1
        return i


@DP_BALANCERS.register("trtllm")
class TRTLLMBalance:
    """TensorRT-LLM's attention-DP scheduling (``balance_requests_across_ranks``,
    tensorrt_llm/_torch/pyexecutor/request_utils.py): new requests fill the ranks below
    the balanced active-request count, each to the rank with the fewest active tokens.
    Here: the rank holding the fewest requests, then the fewest prompt tokens still to
    prefill, then the lowest rank."""

    name: ClassVar[str] = "trtllm"

    def choose(self, ranks: Sequence[Instance], request: Request) -> int:
        return min(range(len(ranks)), key=lambda i: (ranks[i].load()[1],
                                                     ranks[i].load()[0], i))


def make_balancer(name: str) -> VLLMBalance | RoundRobinBalance | TRTLLMBalance:
    """The registered balancer ``name`` (``KeyError`` when there is none)."""
    cls = DP_BALANCERS.lookup(name)
    out: VLLMBalance | RoundRobinBalance | TRTLLMBalance = cls()
    return out


# ------------------------------------------------------------------ the engine


class DPGroup:
    """One attention-DP engine over ``ranks`` (instances of one pool, in order)."""

    def __init__(self, env: simpy.Environment, ranks: Sequence[Instance],
                 balance: str) -> None:
        if not ranks:
            raise ValueError("an attention-DP engine needs ranks")
        self.env = env
        self.ranks = list(ranks)
        self.balancer = make_balancer(balance)
        first = self.ranks[0]
        self.name = first.name  # the engine is addressed by its first rank
        self.role: Role = first.role
        self.max_fit_tokens = first.max_fit_tokens
        sched = first.group.scheduler
        self.pricing = DPGroupStepTime(
            first.step_model, len(self.ranks), first.group.dp_padding,
            vllm_capture_tokens(sched.max_num_seqs, first.n_spec,
                                sched.max_num_batched_tokens))
        self.priority = first.step_priority
        self.context_wait_steps = (first.group.attention_dp_context_wait_steps
                                   if first.role is Role.COLOCATED else 0)
        self._context_waited = 0  # steps the context balance has held prompts back
        self._wake: simpy.Event | None = None
        self._last_turn_s = -1.0
        for rank in self.ranks:
            rank.decode_runs = False  # lockstep: one step at a time

    # ------------------------------------------------------------ RouteTarget

    @property
    def index(self) -> int:
        return self.ranks[0].index

    @property
    def up(self) -> bool:
        return any(r.up for r in self.ranks)

    def load(self) -> tuple[int, int]:
        pending = held = 0
        for r in self.ranks:
            p, h = r.load()
            pending += p
            held += h
        return pending, held

    def routing_state(self) -> RoutingState:
        waiting = running = used = blocks = cached = 0
        for r in self.ranks:
            st = r.routing_state()
            waiting += st.waiting
            running += st.running
            cached += st.cached_blocks
            used += r.pool.num_used
            blocks += r.pool.num_blocks
        return RoutingState(waiting, running, used / blocks, cached)

    def cached_prefix_blocks(self, hash_ids: Sequence[int]) -> int:
        return max(r.cached_prefix_blocks(hash_ids) for r in self.ranks)

    def assign(self, request: Request) -> Instance:
        """The rank (up) that takes ``request``, by the engine's balance policy."""
        up = [r for r in self.ranks if r.up]
        return up[self.balancer.choose(up, request)]

    # ------------------------------------------------------------------ loop

    def _balance_contexts(self) -> None:
        """TensorRT-LLM's attention-DP context balance (``attention_dp_context_wait_steps``,
        PyExecutor ``_balance_adp_requests`` with ``enable_balance``): prompts are let in
        when every rank has one waiting and room for it; otherwise the step counts one
        more and holds every rank's new prompts back, unless the count reached the
        timeout or some rank has no decode rows (nothing to wait beside)."""
        scheds = [r.scheduler for r in self.ranks]
        hold = False
        if all(s.waiting and len(s.running) < s.max_num_seqs for s in scheds):
            self._context_waited = 0
        else:
            self._context_waited += 1
            if (self._context_waited >= self.context_wait_steps
                    or not all(s.rows.count for s in scheds)):
                self._context_waited = 0
            else:
                hold = True
        for s in scheds:
            s.hold_prompts = hold

    def _plan(self, rank: Instance) -> tuple[StepPlan | None, bool]:
        """``rank``'s plan for the next step (None: nothing to run) and whether its
        scheduler freed room for a waiting request (worth planning again at once)."""
        plan = (rank.scheduler.schedule(self.env.now, rank.steps.count)
                if rank.up and (rank.waiting or rank.running) else None)
        if plan is not None and plan.kv_loads:
            rank.start_kv_loads(plan.kv_loads)
        if plan is not None and plan.batch is None:
            plan = None
        retry = plan is None and rank.up and rank.scheduler.unblock_waiting()
        return plan, retry

    def run(self) -> Generator[simpy.Event, object, None]:
        """The engine loop (a SimPy process): plan every rank, price the step for all,
        wait for its end, commit every rank's plan."""
        env = self.env
        ranks = self.ranks
        lead = ranks[0]
        while True:
            if env.now == self._last_turn_s:
                lead.stand_still()
            else:
                self._last_turn_s = env.now
                lead.reset_stand_still()
            if self.context_wait_steps:
                self._balance_contexts()
            plans: list[StepPlan | None] = []
            retry = False
            for rank in ranks:
                plan, again = self._plan(rank)
                plans.append(plan)
                retry = retry or again
            if all(p is None for p in plans):
                if retry:
                    continue
                self._wake = wake = env.event()
                for rank in ranks:
                    rank.share_wake(wake)
                yield wake
                self._wake = None
                for rank in ranks:
                    rank.share_wake(None)
                continue
            batches: list[StepBatch | None] = [p.batch if p is not None else None
                                               for p in plans]
            dt = self.pricing.step_time_s(batches)
            if not dt >= 0:
                lead.stand_still(dt)
            for rank, plan in zip(ranks, plans, strict=True):
                if plan is not None:
                    rank.note_step(plan)
            start = env.now
            epochs = [r.epoch for r in ranks]
            yield StepEnd(env, dt, self.priority)
            for rank, plan, epoch in zip(ranks, plans, epochs, strict=True):
                if plan is None or epoch != rank.epoch:
                    continue  # idle, or the rank went down during the step
                rank.busy_s += dt
                rank.complete_step(plan, start)


__all__ = ["DPGroup", "RoundRobinBalance", "TRTLLMBalance", "VLLMBalance", "make_balancer"]
