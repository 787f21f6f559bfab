"""Attention-DP engines (``pdsim.engine.dp_group``, ``pdsim.perf.dp_group``): the ranks
step together, a request stays on the rank it was assigned, the group's step time is the
roofline's when every rank carries the same batch, and a one-rank engine runs exactly as
an instance stepping alone."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import Simulation, load_config
from pdsim.engine.dp_group import DPGroup, RoundRobinBalance, TRTLLMBalance, VLLMBalance
from pdsim.errors import ConfigError
from pdsim.invariants.checker import run_checked
from pdsim.loader import read_yaml
from pdsim.perf.base import StepBatch
from pdsim.perf.config import RooflineStepTimeConfig, SimpleStepTimeConfig
from pdsim.perf.dp_group import (
    DP_PADDINGS,
    DUMMY_BATCH,
    DPGroupStepTime,
    mean_batch,
    pad_to_largest,
    vllm_capture_tokens,
)
from pdsim.perf.roofline import RooflineStepTime
from pdsim.perf.simple import SimpleStepTime

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "configs" / "dsv3_attention_dp_ep.yaml"


def _dsv3(ranks: int = 4, requests: int = 40, seed: int = 0, balance: str = "vllm",
          colocated: bool = False) -> dict[str, Any]:
    """The shipped DeepSeek-V3 attention-DP config, smaller: ``ranks`` decode ranks of TP
    8 / ranks, the experts over the engine's 8 GPUs."""
    d = read_yaml(SHIPPED)
    dec = d["cluster"]["decode"]
    dec.update(count=ranks, attention_dp_size=ranks, attention_dp_balance=balance)
    dec["step_time"] = {**dec["step_time"], "tensor_parallel_size": 8 // ranks}
    if colocated:
        d["cluster"] = {"mode": "colocated", "colocated": {
            **dec, "scheduler": {"max_num_seqs": 32, "max_num_batched_tokens": 2048,
                                 "block_size": 64}}}
        d["step_time"] = dec["step_time"]
    d["seed"] = seed
    d["workload"]["num_requests"] = requests
    return d


def _model(ep: int = 8) -> RooflineStepTime:
    cfg = RooflineStepTimeConfig(kind="roofline", model="deepseek-v3", hardware="h200",
                                 tensor_parallel_size=1, expert_parallel_size=ep)
    return RooflineStepTime(cfg, draft_passes_decode=1, draft_modules_prefill=1)


_batches = st.builds(
    lambda p, r, ctx: StepBatch(p, float(p * (p + 1) / 2), r, 2 * r, r * ctx),
    st.integers(0, 512), st.integers(0, 64), st.integers(1, 4096)).filter(
        lambda b: b.prefill_tokens or b.decode_requests)


# ------------------------------------------------------------------- pricing


@settings(max_examples=40, deadline=None)
@given(_batches)
def test_equal_batches_on_every_rank_price_as_one_rank(b: StepBatch) -> None:
    model = _model()
    group = DPGroupStepTime(model, 8)
    assert group.step_time_s([b] * 8) == model.step_time_s(b)
    # and the split itself agrees: the rank part plus the MoE part at the mean batch
    bare = group._bare
    assert bare is not None
    assert bare.step_time_s(b) + (model.step_time_s(mean_batch([b] * 8, 8))
                                  - bare.step_time_s(b)) == pytest.approx(
        model.step_time_s(b), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.none(), _batches), min_size=8, max_size=8).filter(
    lambda bs: any(b is not None for b in bs)))
def test_group_step_is_at_least_every_ranks_own_part(batches: list[StepBatch | None]) -> None:
    """The slowest rank sets the rank part and the MoE part is >= 0, so the group's step
    is no shorter than any rank's step without its MoE (idle: the dummy forward)."""
    model = _model()
    group = DPGroupStepTime(model, 8)
    bare = group._bare
    assert bare is not None
    t = group.step_time_s(batches)
    for b in batches:
        assert t >= bare.step_time_s(b if b is not None else DUMMY_BATCH) * (1 - 1e-12)
    real = [b for b in batches if b is not None]
    mean = mean_batch(real, 8)
    assert model.step_time_s(mean) >= bare.step_time_s(mean)


# ------------------------------------------------------------------- padding

_RULES = sorted(DP_PADDINGS)


@settings(max_examples=40, deadline=None)
@given(_batches, st.sampled_from(_RULES))
def test_padding_leaves_equal_batches_priced_as_before(b: StepBatch, rule: str) -> None:
    model = _model()
    padded = DPGroupStepTime(model, 8, rule, capture_tokens=512)
    assert padded.step_time_s([b] * 8) == DPGroupStepTime(model, 8).step_time_s([b] * 8)
    assert pad_to_largest([b] * 8) == [b] * 8


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.none(), _batches), min_size=8, max_size=8).filter(
    lambda bs: any(b is not None for b in bs)), st.sampled_from(_RULES),
    st.integers(1, 1024))
def test_padding_never_makes_a_step_cheaper(batches: list[StepBatch | None], rule: str,
                                            capture: int) -> None:
    model = _model()
    unpadded = DPGroupStepTime(model, 8).step_time_s(batches)
    padded = DPGroupStepTime(model, 8, rule, capture_tokens=capture).step_time_s(batches)
    assert padded >= unpadded * (1 - 1e-12)


def test_padded_ranks_compute_the_largest_ranks_tokens() -> None:
    """Decode ranks of 1, 4 and 16 requests of 2 query tokens (MTP 1), one idle: each is
    padded to 16 requests / 32 tokens with its own context, so the step costs more than
    unpadded under every CUDA-graph rule, and exactly the unpadded step without one. (The
    batches are small enough that the padded rows touch experts the unpadded step does not
    read: once every rank's busiest expert share is read whole, padded decode rows without
    context cost no more in a weight-bound MoE.)"""
    ctx = 2048
    batches: list[StepBatch | None] = [StepBatch(0, 0.0, r, 2 * r, r * ctx)
                                       for r in (1, 4, 16)] + [None] * 5
    real = [b for b in batches if b is not None]
    assert pad_to_largest([*real, DUMMY_BATCH]) == [
        StepBatch(0, 0.0, 16.0, 32, 1 * ctx), StepBatch(0, 0.0, 16.0, 32, 4 * ctx),
        StepBatch(0, 0.0, 16, 32, 16 * ctx), StepBatch(0, 0.0, 16.5, 32, 1)]
    model = _model()
    base = DPGroupStepTime(model, 8).step_time_s(batches)
    assert DPGroupStepTime(model, 8, "none").step_time_s(batches) == base
    for rule in ("vllm", "sglang", "trtllm"):
        assert DPGroupStepTime(model, 8, rule, capture_tokens=512).step_time_s(batches) > base


def test_which_steps_pad_is_the_backends_rule() -> None:
    """A prefill chunk on one rank: vLLM pads it while it fits the CUDA-graph capture size
    (piecewise graphs run mixed steps), SGLang (SUM_LEN extend) and TensorRT-LLM (eager
    context) never do."""
    model = _model()
    chunk = StepBatch(256, 256 * 257 / 2, 0, 0, 0)
    batches: list[StepBatch | None] = [chunk, StepBatch(0, 0.0, 8, 16, 8 * 4096),
                                       *[None] * 6]
    base = DPGroupStepTime(model, 8).step_time_s(batches)
    for rule in ("sglang", "trtllm"):
        assert DPGroupStepTime(model, 8, rule).step_time_s(batches) == base
    assert DPGroupStepTime(model, 8, "vllm", capture_tokens=512).step_time_s(batches) > base
    assert DPGroupStepTime(model, 8, "vllm", capture_tokens=255).step_time_s(batches) == base


def test_vllm_capture_size_is_its_default() -> None:
    # min(max_num_seqs * (1 + spec) * 2, 512), capped by max_num_batched_tokens
    assert vllm_capture_tokens(64, 1, 8192) == 256
    assert vllm_capture_tokens(256, 0, 8192) == 512
    assert vllm_capture_tokens(256, 3, 384) == 384


def test_imbalance_costs_time_at_equal_total_tokens() -> None:
    """The same 8 x 32 decode requests, spread evenly or all on one rank: the busiest rank
    sets attention and the dense layers, so the lopsided step is longer."""
    model = _model()
    group = DPGroupStepTime(model, 8)
    even = group.step_time_s([StepBatch(0, 0.0, 32, 32, 32 * 2048)] * 8)
    lopsided = group.step_time_s([StepBatch(0, 0.0, 256, 256, 256 * 2048)]
                                 + [None] * 7)
    assert lopsided > even


def test_an_idle_rank_pays_the_dummy_forward() -> None:
    """One rank decoding a tiny batch, the others idle: the step is no shorter than the
    dummy forward the idle ranks run (its weight reads and collective latencies)."""
    model = _model()
    group = DPGroupStepTime(model, 8)
    tiny = StepBatch(0, 0.0, 1, 1, 1)
    bare = group._bare
    assert bare is not None
    assert group.step_time_s([tiny] + [None] * 7) >= bare.step_time_s(DUMMY_BATCH)


def test_models_without_moe_take_the_slowest_rank() -> None:
    model = SimpleStepTime(SimpleStepTimeConfig(kind="simple"), 0, 0)
    group = DPGroupStepTime(model, 3)
    a, b = StepBatch(100, 5050.0, 0, 0, 0), StepBatch(0, 0.0, 4, 4, 400)
    assert group.step_time_s([a, b, None]) == max(
        model.step_time_s(a), model.step_time_s(b), model.step_time_s(DUMMY_BATCH))


def test_group_pricing_refuses_wrong_rank_counts() -> None:
    group = DPGroupStepTime(_model(), 8)
    with pytest.raises(ValueError, match="8 ranks"):
        group.step_time_s([DUMMY_BATCH] * 7)
    with pytest.raises(ValueError, match="idle"):
        group.step_time_s([None] * 8)


# -------------------------------------------------------------------- engine


def _watch(sim: Simulation) -> dict[int, set[str]]:
    """A hook recording, per request, every instance it was seen waiting or running on
    after a step."""
    seen: dict[int, set[str]] = {}

    def step_done(inst: Any, now: float) -> None:
        for req in list(inst.running) + list(inst.waiting):
            seen.setdefault(req.id, set()).add(inst.name)

    sim.hooks.step_completed.append(step_done)
    return seen


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["vllm", "sglang_round_robin", "trtllm"]),
       st.booleans())
def test_ranks_step_together_and_requests_stay_on_their_rank(
        seed: int, balance: str, colocated: bool) -> None:
    cfg = load_config(_dsv3(4, 40, seed, balance, colocated))
    sim = Simulation(cfg)
    seen = _watch(sim)
    res = sim.run()
    assert res.summary["completed"] == 40
    assert len(sim.dp_groups) == 1
    group = sim.dp_groups[0]
    # every rank's steps are steps of the engine: one set of (start, end) intervals that
    # never overlap, each rank stepping in a subset of them
    steps = {}
    for rank in group.ranks:
        cols = rank.steps.columns()
        for s, e in zip(cols.start_s(), cols.end_s, strict=True):
            steps[float(s)] = max(steps.get(float(s), float(e)), float(e))
            assert steps[float(s)] == float(e)
    starts = sorted(steps)
    for a, b in pairwise(starts):
        assert steps[a] <= b
    # a request served by the decode engine is only ever seen on one of its ranks
    names = {r.name for r in group.ranks}
    for rid, where in seen.items():
        on_group = where & names
        assert len(on_group) <= 1, f"request {rid} moved between ranks {on_group}"


def test_a_one_rank_engine_steps_as_an_instance_alone() -> None:
    """The engine loop reproduces the instance's own loop: a DPGroup of one rank gives
    the records of the same instance stepping alone (decode runs off, which the lockstep
    loop does not take)."""
    def records(grouped: bool) -> list[dict[str, Any]]:
        d = _dsv3(4, 30, 3)
        d["engine"] = {"decode_runs": "off"}
        d["cluster"]["decode"].update(count=1, attention_dp_size=1)
        d["cluster"]["decode"]["step_time"]["tensor_parallel_size"] = 8
        sim = Simulation(load_config(d))
        if grouped:
            engine = DPGroup(sim.env, sim.decodes, "vllm")
            sim.dp_groups.append(engine)
            sim.proxy.route_targets = {r: list(v) for r, v in sim.by_role.items()}
            sim.proxy.route_targets[engine.role] = [engine]
        return list(sim.run().records)

    assert records(True) == records(False)


def test_balancers_pick_as_their_engines_do() -> None:
    sim = Simulation(load_config(_dsv3(4, 8)))
    ranks = sim.dp_groups[0].ranks
    req = sim.requests[0]
    # all empty: vLLM and TensorRT-LLM take the first rank, round robin cycles
    assert VLLMBalance().choose(ranks, req) == 0
    assert TRTLLMBalance().choose(ranks, req) == 0
    rr = RoundRobinBalance()
    assert [rr.choose(ranks, req) for _ in range(5)] == [0, 1, 2, 3, 0]
    ranks[0].scheduler.add_request(sim.requests[1])  # a waiting request on rank 0
    assert VLLMBalance().choose(ranks, req) == 1
    assert TRTLLMBalance().choose(ranks, req) == 1


def test_attention_dp_config_errors() -> None:
    d = _dsv3(4)
    d["cluster"]["decode"]["count"] = 6
    with pytest.raises(ConfigError, match="not a multiple of attention_dp_size"):
        load_config(d)
    d = _dsv3(4)
    d["cluster"]["decode"]["step_time"]["tensor_parallel_size"] = 1
    with pytest.raises(ConfigError, match="attention_dp_size"):
        load_config(d)
    d = _dsv3(4)
    d["cluster"]["decode"]["attention_dp_balance"] = "nope"
    with pytest.raises(ConfigError, match="attention_dp_balance"):
        load_config(d)
    d = _dsv3(4)
    d["cluster"]["decode"]["attention_dp_padding"] = "nope"
    with pytest.raises(ConfigError, match="attention_dp_padding"):
        load_config(d)


@pytest.mark.parametrize(("balance", "padding", "rule"), [
    ("vllm", None, "vllm"), ("sglang_round_robin", None, "sglang"),
    ("trtllm", None, "trtllm"), ("trtllm", "none", "none")])
def test_padding_rule_defaults_to_the_balances_backend(balance: str, padding: str | None,
                                                       rule: str) -> None:
    d = _dsv3(4, balance=balance)
    if padding is not None:
        d["cluster"]["decode"]["attention_dp_padding"] = padding
    cfg = load_config(d)
    assert cfg.cluster.decode.dp_padding == rule


@pytest.mark.parametrize("colocated", [False, True])
def test_invariants_hold_after_every_event_with_a_rank_going_down(colocated: bool) -> None:
    """Checked after every event (``run_checked``), with one rank down for a while (the
    whole engine goes down with it): every request ends."""
    d = _dsv3(4, 30, 1, "vllm", colocated)
    rank = "C1" if colocated else "D1"
    d["faults"] = {"instance_outages": [{"instance": rank, "start_s": 1.0, "end_s": 2.0}]}
    res = run_checked(load_config(d))
    s = res.summary
    assert s["completed"] + s["failed"] + s["rejected"] == 30
    assert s["completed"] >= 1  # served again after the outage
    if not colocated:  # D1 held requests when it went down (checked: 2 of 30 here)
        assert s["failure_reasons"].get("instance_down_mid_stream", 0) >= 1


@pytest.mark.parametrize("colocated", [False, True])
def test_a_rank_going_down_takes_its_whole_engine_down(colocated: bool) -> None:
    """vLLM's DP engine cores fail together: after every event the engine's ranks are all
    up or all down, all down through the outage of one of them, no rank steps in it, and
    the engine serves again after it."""
    d = _dsv3(4, 30, 1, "vllm", colocated)
    rank = "C1" if colocated else "D1"
    d["faults"] = {"instance_outages": [{"instance": rank, "start_s": 1.0, "end_s": 2.0}]}
    sim = Simulation(load_config(d))
    sim.start()
    group = sim.dp_groups[0]
    env = sim.env
    while env.peek() != float("inf") and not sim.done:
        sim.step()
        ups = {r.up for r in group.ranks}
        assert len(ups) == 1, f"ranks of one engine split up/down at {env.now}"
        if 1.0 <= env.now < 2.0:
            assert ups == {False}
    assert sim.faults.counts["instance_outages"] == 1  # one outage, however many ranks
    res = sim.results()
    starts = [float(s) for r in group.ranks for s in r.steps.columns().start_s()]
    assert not [s for s in starts if 1.0 < s < 2.0]
    assert any(s >= 2.0 for s in starts)
    s = res.summary
    assert s["completed"] + s["failed"] + s["rejected"] == 30


# ------------------------------------------------------- the context balance


def _balanced(wait_steps: int, requests: int = 40, seed: int = 0) -> dict[str, Any]:
    d = _dsv3(4, requests, seed, "trtllm", colocated=True)
    d["cluster"]["colocated"]["attention_dp_context_wait_steps"] = wait_steps
    return d


def test_context_balance_holds_prompts_until_every_rank_has_one_or_the_timeout() -> None:
    """TensorRT-LLM's ``_balance_adp_requests`` with enable_balance and timeout_iters 3:
    while every rank decodes but not every rank has a prompt waiting, two steps hold the
    prompts back and the third lets them in; a prompt on every rank lets them in at once
    and restarts the count; a rank without decode rows lets them in."""
    sim = Simulation(load_config(_balanced(3)))
    group = sim.dp_groups[0]
    assert group.context_wait_steps == 3
    scheds = [r.scheduler for r in group.ranks]
    for s in scheds:
        s.rows.count = 1  # every rank decodes
    scheds[0].waiting.append(sim.requests[0])  # only rank 0 has a prompt

    def held() -> list[bool]:
        group._balance_contexts()
        return [s.hold_prompts for s in scheds]

    assert [held()[0] for _ in range(6)] == [True, True, False, True, True, False]
    assert all(held()) and group._context_waited == 1
    for k, s in enumerate(scheds[1:], 1):
        s.waiting.append(sim.requests[k])
    assert not any(held()) and group._context_waited == 0
    scheds[3].waiting.clear()
    assert all(held())
    scheds[2].rows.count = 0  # nothing to wait beside on rank 2
    assert not any(held()) and group._context_waited == 0


def test_context_balance_is_off_by_default_and_on_disaggregated_pools() -> None:
    assert Simulation(load_config(_dsv3(4, 8, colocated=True))).dp_groups[0] \
        .context_wait_steps == 0
    d = _dsv3(4, 8, balance="trtllm")
    d["cluster"]["decode"]["attention_dp_context_wait_steps"] = 60
    assert Simulation(load_config(d)).dp_groups[0].context_wait_steps == 0


def test_context_balance_runs_every_request_with_the_invariants_holding() -> None:
    """Checked after every event: with the balance on, every request ends, the balance
    held prompts back in some steps and let them in in others, and on this seed the
    prompts wait longer on average than without it."""
    import numpy as np
    holds: list[bool] = []
    original = DPGroup._balance_contexts

    def watched(self: DPGroup) -> None:
        original(self)
        holds.append(self.ranks[0].scheduler.hold_prompts)

    try:
        DPGroup._balance_contexts = watched  # type: ignore[method-assign]
        res = run_checked(load_config(_balanced(20, 30, 2)))
    finally:
        DPGroup._balance_contexts = original  # type: ignore[method-assign]
    assert res.summary["completed"] == 30
    assert any(holds) and not all(holds)
    plain = Simulation(load_config(_balanced(0, 30, 2))).run()

    def mean_ttft(r: Any) -> float:
        return float(np.mean(np.asarray(r.records.columns["ttft_s"])))

    assert mean_ttft(res) > mean_ttft(plain)


def test_a_context_on_one_rank_makes_every_rank_eager() -> None:
    # TensorRT-LLM's ranks run one CUDA graph or none: with a prefill chunk on one rank the
    # step is eager everywhere, so the slowest decode-only rank pays the host launches too
    cfg = RooflineStepTimeConfig(kind="roofline", model="deepseek-v3", hardware="h200",
                                 tensor_parallel_size=1, expert_parallel_size=8,
                                 cpu_cost_rule="trtllm")
    eager = RooflineStepTime(cfg)
    plain = RooflineStepTime(cfg.model_copy(update={"eager_kernel_s": 0.0}))
    launch = eager._target.kernels * cfg.eager_kernel_s
    heavy = StepBatch(0, 0.0, 256, 256, 256 * 4000)  # the slowest rank: a big decode
    light = StepBatch(16, 16 * 8.5, 4, 4, 4 * 100)  # a short prompt beside a few decodes
    batches = [heavy] * 7 + [light]
    with_ctx = DPGroupStepTime(eager, 8).step_time_s(batches)
    assert with_ctx == pytest.approx(DPGroupStepTime(plain, 8).step_time_s(batches) + launch)
    # without a prefill chunk anywhere no rank pays it
    decodes = [heavy] * 7 + [StepBatch(0, 0.0, 4, 4, 400)]
    assert DPGroupStepTime(eager, 8).step_time_s(decodes) == pytest.approx(
        DPGroupStepTime(plain, 8).step_time_s(decodes))
