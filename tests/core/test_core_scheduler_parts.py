"""The scheduler and a decode run built from their parts, without a Simulation: plans,
outcomes, intake, a run's boundaries and its commit.

Each test builds a ``Scheduler`` from a scheduler config, a role, a ``KVManager``, the
``DecodeRows`` and the drafter's settings, drives it by hand (``schedule`` then
``update_from_output``, the intake verbs) and checks what it returns and what it holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from pdsim.config import Role
from pdsim.config_sections import SchedulerConfig
from pdsim.engine.connector import KVTransferParams
from pdsim.engine.decode_advance import DraftParams
from pdsim.engine.decode_rows import DecodeRows
from pdsim.engine.decode_run import DecodeRun
from pdsim.engine.events import EngineEnvironment, step_end_priority
from pdsim.engine.kv_manager import KVManager
from pdsim.engine.request import Phase, Request
from pdsim.engine.run_plan import plan_run_window, run_may_be_taken
from pdsim.engine.scheduler import Scheduler, StepOutcome, StepPlan
from pdsim.engine.step_log import StepLog
from pdsim.kv_layout import KVLayout
from pdsim.perf.base import StepBatch
from pdsim.spec_decode.acceptance import AcceptanceSampler

BLOCK = 16


def make_scheduler(role: Role, num_blocks: int = 64, max_num_seqs: int = 4,
                   max_num_batched_tokens: int = 256, **sched: object) -> Scheduler:
    """A scheduler of ``role`` over a pool of ``num_blocks`` 16-token blocks, no drafter."""
    cfg = SchedulerConfig(max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=max_num_batched_tokens,
                          block_size=BLOCK, **sched)  # type: ignore[arg-type]
    layout = KVLayout(block_size=BLOCK, block_bytes=BLOCK, sliding=(), fixed_blocks=0)
    kv = KVManager(layout, num_blocks, False, BLOCK, 0)
    draft = DraftParams.none()
    rows = DecodeRows(2 * max_num_seqs, draft, AcceptanceSampler(np.zeros(0), 7))
    return Scheduler(cfg, role, kv, rows, draft)


def request(rid: int, prompt: int, output: int) -> Request:
    return Request(rid, 0.0, prompt, output, 0)


def step(sched: Scheduler, now: float, index: int) -> tuple[StepPlan, StepOutcome | None]:
    plan = sched.schedule(now, index)
    assert not plan.empty
    return plan, sched.update_from_output(plan, index, now + 0.01)


def test_prefill_plans_chunks_within_the_budget_and_hands_over() -> None:
    p = make_scheduler(Role.PREFILL, max_num_batched_tokens=100)
    a, b = request(0, 150, 5), request(1, 30, 5)
    p.add_request(a)
    p.add_request(b)
    plan, out = step(p, 0.0, 0)
    assert [(r.id, n) for r, n in plan.chunks] == [(0, 100)]  # FCFS, budget-bound
    assert plan.num_decode == 0 and plan.kv_loads == ()
    assert plan.batch is not None and plan.batch.prefill_tokens == 100
    assert out is None  # nothing completed: a's prompt is 50 tokens short
    assert a.phase is Phase.PREFILL and a.p_start_s == 0.0
    plan, out = step(p, 1.0, 1)
    assert [(r.id, n) for r, n in plan.chunks] == [(0, 50), (1, 30)]
    assert out is not None
    assert out.handed_over == [a, b] and out.finished == [] and out.entered_decode == []
    assert a.phase is b.phase is Phase.PINNED and a.p_end_s == pytest.approx(1.01)
    assert list(p.pinned) == [0, 1] and not p.running
    # the pinned blocks stay until D has read them
    assert p.pool.held(0) == -(-150 // BLOCK)
    assert p.release_pinned(a) == -(-150 // BLOCK)
    assert p.release_pinned(a) is None
    assert p.schedule(2.0, 2).empty


def test_colocated_request_decodes_to_its_end() -> None:
    c = make_scheduler(Role.COLOCATED)
    req = request(0, 40, 3)
    c.add_request(req)
    plan, out = step(c, 0.0, 0)
    assert out is not None and out.entered_decode == [req]
    assert req.phase is Phase.DECODE and req.num_output == 1 and c.rows.count == 1
    plan, out = step(c, 1.0, 1)
    assert plan.num_decode == 1 and out is None
    plan, out = step(c, 2.0, 2)
    assert out is not None and out.finished == [(req, pytest.approx(2.01))]
    assert req.phase is Phase.DONE and req.num_output == 3
    assert c.rows.count == 0 and c.pool.num_used == 0 and not c.running
    assert req.segments == [[0, 0, 2]]  # emitted in steps 0 (the first token) to 2


def handed_over(rid: int, prompt: int, output: int, remote: int) -> Request:
    """A request as D receives it from P: remote KV of ``remote`` tokens to load."""
    req = request(rid, prompt, output)
    req.kv_params = KVTransferParams(do_remote_prefill=True)
    req.remote_tokens = remote
    return req


def test_decode_lists_kv_loads_and_recomputes_the_last_prompt_token() -> None:
    d = make_scheduler(Role.DECODE)
    req = handed_over(0, 64, 2, 64)
    d.add_request(req)
    plan = d.schedule(0.0, 0)
    # nothing to run yet, but the load to start is in the plan
    assert plan.empty and plan.kv_loads == (req,)
    assert req.phase is Phase.WAITING_FOR_REMOTE_KVS and d.receiving == {0: req}
    assert d.pool.held(0) == 64 // BLOCK
    d.kv_landed(req)
    assert req.phase is Phase.WAITING and req.num_computed == 63 and req.kv_from_remote
    plan, out = step(d, 1.0, 0)
    assert [(r.id, n) for r, n in plan.chunks] == [(0, 1)]
    assert out is not None and out.entered_decode == [req]
    plan, out = step(d, 2.0, 1)
    assert out is not None and [r for r, _ in out.finished] == [req]
    assert d.pool.num_used == 0


@pytest.mark.parametrize("recompute", [True, False])
def test_kv_load_failure_requeues_or_fails(recompute: bool) -> None:
    d = make_scheduler(Role.DECODE)
    req = handed_over(0, 64, 2, 64)
    d.add_request(req)
    d.schedule(0.0, 0)
    assert d.kv_load_failed(req, recompute) is (not recompute)
    assert d.pool.num_used == 0 and not d.receiving
    if recompute:
        assert list(d.waiting) == [req] and req.phase is Phase.WAITING
        assert req.remote_tokens == 0 and req.tokens_recomputed_on_d == 64
        assert d.waiting.tokens_left == 64
    else:
        assert not d.waiting
    assert d.kv_load_failed(req, recompute) is None  # no longer waiting for it here


def test_decode_growth_preempts_the_tail() -> None:
    # two requests that fill 4 of 5 blocks each need a fifth block at the same step
    c = make_scheduler(Role.COLOCATED, num_blocks=5)
    a, b = request(0, 31, 40), request(1, 31, 40)
    for r in (a, b):
        c.add_request(r)
    step(c, 0.0, 0)
    assert c.rows.count == 2 and c.pool.num_used == 4
    index = 1
    while not b.num_preemptions:
        step(c, float(index), index)
        index += 1
        assert index < 100
    assert c.preemptions == 1 and b.phase is Phase.WAITING and list(c.waiting) == [b]
    assert b.seq_tokens == b.prompt_tokens + b.num_output  # recomputes its output too
    assert c.pool.held(1) == 0 and a.phase is Phase.DECODE
    assert b.segments and b.segments[-1][2] == index - 2  # its row closed a step back


def test_drop_all_returns_every_request_and_empties_the_pool() -> None:
    d = make_scheduler(Role.DECODE)
    waiting, loading, decoding = (handed_over(i, 64, 5, 64) for i in range(3))
    d.add_request(decoding)
    d.schedule(0.0, 0)
    d.kv_landed(decoding)
    step(d, 1.0, 0)
    d.add_request(loading)
    d.schedule(2.0, 1)
    d.add_request(waiting)
    assert d.pool.num_used > 0
    served, pinned = d.drop_all(1)
    assert {r.id for r in served} == {0, 1, 2} and pinned == []
    assert d.pool.num_used == 0 and d.rows.count == 0
    assert not (d.waiting or d.running or d.receiving or d.prefilling)


# ------------------------------------------------------------ a decode run, by hand


class FixedSteps:
    """A step-time model: ``base_s`` a step plus ``per_row_s`` per decode row."""

    def __init__(self, base_s: float = 0.01, per_row_s: float = 0.001) -> None:
        self.base_s, self.per_row_s = base_s, per_row_s

    def step_time_s(self, batch: StepBatch) -> float:
        return self.base_s + self.per_row_s * batch.decode_requests


class Host:
    """The instance as a decode run sees it (``RunHost``): it records what it is told."""

    def __init__(self) -> None:
        self.active_run: DecodeRun | None = None
        self.routed: list[StepOutcome] = []
        self.loads: list[Request] = []
        self.busy_s = 0.0
        self.ended = 0

    def end_run(self) -> None:
        run, self.active_run = self.active_run, None
        assert run is not None
        self.busy_s += run.commit()
        self.ended += 1

    def route(self, out: StepOutcome) -> None:
        self.routed.append(out)

    def start_kv_loads(self, reqs: Sequence[Request]) -> None:
        self.loads.extend(reqs)


def test_decode_run_from_its_parts() -> None:
    c = make_scheduler(Role.COLOCATED)
    short, long_ = request(0, 20, 3), request(1, 20, 6)
    for r in (short, long_):
        c.add_request(r)
    step(c, 0.0, 0)  # both prompts in one step: they enter decode with 1 token out
    log = StepLog("full")
    log.add(0.0, 0.01, 40, 0, c.pool.num_used, 2, 0, 0)
    assert run_may_be_taken(c.rows, prefilling=False)
    window = plan_run_window(c.rows, c.layout, c.pool, 16, np.arange(16)[:, None])
    assert window is not None
    assert window.steps == 5  # the longer one needs 5 more steps; no empty step after it
    env = EngineEnvironment()
    host = Host()
    model = FixedSteps()
    run = DecodeRun(host, env, c, model, log, None, window.steps, window.max_steps,
                    window.ahead, priority=step_end_priority(0), fault_at_s=math.inf,
                    join_room=1, run_steps=np.arange(16)[:, None],
                    run_rows=np.arange(c.rows.capacity))
    host.active_run = run
    run.wait_for(run.next_stop())
    env.run()
    assert host.ended == 1
    # the short one finished at the end of the run's second step, the long one at its last
    finished = [f for out in host.routed for f in out.finished]
    assert [r.id for r, _ in finished] == [0, 1]
    two_rows, one_row = model.base_s + 2 * model.per_row_s, model.base_s + model.per_row_s
    assert finished[0][1] == pytest.approx(2 * two_rows)
    assert finished[1][1] == pytest.approx(2 * two_rows + 3 * one_row)
    # busy time is returned by the commit, and the step log holds every step of the run
    assert host.busy_s == pytest.approx(2 * two_rows + 3 * one_row)
    assert log.count == 1 + 5
    cols = log.columns()
    assert cols.counts["decode_requests"].tolist() == [0, 2, 2, 1, 1, 1]
    assert short.num_output == 3 and long_.num_output == 6
    assert short.phase is long_.phase is Phase.DONE
    assert c.rows.count == 0 and c.pool.num_used == 0 and not c.running
    assert short.segments == [[0, 0, 2]] and long_.segments == [[0, 0, 5]]
