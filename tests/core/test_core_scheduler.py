"""Scheduler: batching limits in every step, chunked prefill, the lookahead chunk rule,
preemption by recompute, blocks freed on finish."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from core_support import make_config, terminal_problems
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import SimConfig, Simulation, load_config
from pdsim.config import Role
from pdsim.config_sections import RESPONSE_RULE_PROFILES, RESPONSE_RULES, RouterConfig

# step_log columns (Results.instances[i].step_log)
START, END, PREFILL, DECODE_REQS, KV_USED, RUNNING, WAITING, RECEIVING = range(8)


def allowed_chunks(remaining: int, budget: int, lookahead: int, chunked: bool = True,
                   threshold: int | None = None) -> list[int]:
    """Every chunk size the rules allow: within budget (and threshold), never leaving
    0 < remaining < lookahead, and only the whole rest when chunking is off."""
    cap = min(remaining, budget, threshold if threshold is not None else remaining)
    ok = []
    for n in range(1, cap + 1):
        left = remaining - n
        if left and not chunked:
            continue
        if 0 < left < lookahead:
            continue
        ok.append(n)
    return ok


# ------------------------------------------------------------------ the chunk rule


@settings(max_examples=150, deadline=None)
@given(n_spec=st.sampled_from([0, 1, 2, 3, 5, 8]), role=st.sampled_from(list(Role)),
       prompt=st.integers(1, 600), computed_frac=st.floats(0, 0.999),
       budget=st.integers(1, 700))
def test_chunk_is_the_largest_allowed(chunk_of: Callable[..., int], n_spec: int, role: Role,
                                      prompt: int, computed_frac: float, budget: int) -> None:
    mode = "colocated" if role is Role.COLOCATED else "disaggregated"
    cfg = _chunk_cfg(n_spec, mode)
    computed = int(prompt * computed_frac)
    la = cfg.num_prefill_lookahead_tokens
    n = chunk_of(cfg, role, prompt, computed, budget)
    allowed = allowed_chunks(prompt - computed, budget, la)
    assert n == (max(allowed) if allowed else 0)
    left = prompt - computed - n
    assert not 0 < left < la or n == 0


_CFGS: dict[tuple[int, str], SimConfig] = {}


def _chunk_cfg(n_spec: int, mode: str, *extra: str) -> SimConfig:
    key = (n_spec, mode + "|".join(extra))
    if key not in _CFGS:
        _CFGS[key] = make_config(f"cluster.mode={mode}", *extra,
                                 method="mtp" if n_spec else "none", n_spec=n_spec)
    return _CFGS[key]


@pytest.mark.parametrize(("remaining", "budget", "want"), [
    (20, 16, 12),  # 16 would leave 4 < 8: stop 8 short of the end
    (20, 12, 12),  # leaves 8 = lookahead: fine
    (9, 8, 1),     # leaves exactly the lookahead
    (8, 8, 8),     # the whole rest is always fine
    (8, 7, 0),     # cannot split 8 tokens without leaving 0 < rest < 8
    (1000, 512, 512),
])
def test_chunk_rule_examples_n8(chunk_of: Callable[..., int], remaining: int, budget: int,
                                want: int) -> None:
    cfg = _chunk_cfg(8, "disaggregated")
    assert chunk_of(cfg, Role.PREFILL, remaining + 100, 100, budget) == want


def test_long_prefill_threshold_and_no_chunking(chunk_of: Callable[..., int]) -> None:
    cfg = _chunk_cfg(3, "disaggregated",
                     "cluster.prefill.scheduler.long_prefill_token_threshold=100")
    for remaining, budget in [(1000, 512), (102, 512), (50, 512), (1000, 60)]:
        want = max(allowed_chunks(remaining, budget, 3, threshold=100), default=0)
        assert chunk_of(cfg, Role.PREFILL, remaining, 0, budget) == want
    cfg = _chunk_cfg(3, "disaggregated", "model.max_model_len=4096",
                     "cluster.prefill.scheduler.enable_chunked_prefill=false",
                     "cluster.prefill.scheduler.max_num_batched_tokens=4096")
    assert chunk_of(cfg, Role.PREFILL, 1000, 0, 4096) == 1000
    assert chunk_of(cfg, Role.PREFILL, 1000, 0, 999) == 0  # whole prompt or nothing


# ------------------------------------------------------------ chunking in a run


def _single_request_run(n_spec: int, prompt: int, budget: int) -> Any:
    cfg = make_config("workload.num_requests=1", f"workload.prompt_tokens.tokens={prompt}",
                      f"cluster.prefill.scheduler.max_num_batched_tokens={budget}",
                      method="mtp" if n_spec else "none", n_spec=n_spec)
    res = Simulation(cfg).run()
    p, d = res.instances
    return res, p.step_log[:, PREFILL].astype(int).tolist(), d.step_log


@pytest.mark.parametrize(("n_spec", "prompt", "budget", "p_chunks", "d_first"), [
    # N=8: P sees 1034 - 7 = 1027; 512 + 512 would leave 3 < 8, so the second chunk is
    # 507 and the last 8; D recomputes the 7 backed-off tokens.
    (8, 1034, 512, [512, 507, 8], 7),
    (8, 1031, 512, [512, 512], 7),
    # N=3: P sees 1025; 512 + 512 would leave 1 < 3.
    (3, 1027, 512, [512, 510, 3], 2),
    # no speculation: plain budget-sized chunks; D recomputes the last prompt token.
    (0, 1025, 512, [512, 512, 1], 1),
])
def test_prefill_chunks_in_a_run(n_spec: int, prompt: int, budget: int, p_chunks: list[int],
                                 d_first: int) -> None:
    res, chunks, d_log = _single_request_run(n_spec, prompt, budget)
    assert chunks == p_chunks
    assert d_log[0, PREFILL] == d_first
    rec = res.records[0]
    assert rec["status"] == "finished"
    assert sum(chunks) == rec["p_prompt_tokens"]
    assert d_log[:, PREFILL].sum() == rec["d_local_prefill_tokens"] == d_first


@pytest.mark.parametrize("n_spec", [0, 3, 8])
@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
def test_batch_limits_hold_in_every_step(n_spec: int, mode: str) -> None:
    seqs, p_budget, d_budget = 6, 700, 6 * (1 + n_spec) + 200
    cfg = make_config(
        f"cluster.mode={mode}", "workload.num_requests=40",
        "workload.arrivals.rate_per_s=400",
        "workload.prompt_tokens={kind: uniform, mean_tokens: 900, range_ratio: 0.9}",
        "workload.output_tokens={kind: uniform, mean_tokens: 40, range_ratio: 0.9}",
        f"cluster.prefill.scheduler.max_num_batched_tokens={p_budget}",
        f"cluster.decode.scheduler.max_num_seqs={seqs}",
        f"cluster.decode.scheduler.max_num_batched_tokens={d_budget}",
        f"cluster.colocated.scheduler.max_num_seqs={seqs}",
        f"cluster.colocated.scheduler.max_num_batched_tokens={d_budget}",
        method="mtp" if n_spec else "none", n_spec=n_spec)
    sim = Simulation(cfg)
    res = sim.run()
    assert not terminal_problems(res.records)
    saw_chunked = False
    for inst, facts in zip(sim.instances, res.instances, strict=True):
        log = facts.step_log
        np.testing.assert_array_equal(
            log, inst.steps.columns().matrix())
        q = 1 + (n_spec if inst.role is not Role.PREFILL else 0)
        tokens = log[:, PREFILL] + log[:, DECODE_REQS] * q
        assert (tokens <= inst.scheduler.max_num_batched_tokens).all()
        assert (log[:, DECODE_REQS] <= inst.scheduler.max_num_seqs).all()
        assert (log[:, RUNNING] <= inst.scheduler.max_num_seqs).all()
        assert (log[:, KV_USED] <= facts.num_blocks).all()
        assert (log[:, END] > log[:, START]).all()
        assert (log[1:, START] >= log[:-1, END]).all()  # one step at a time
        if inst.role is Role.PREFILL:
            assert (log[:, DECODE_REQS] == 0).all()  # P only prefills
            saw_chunked |= bool((log[:, PREFILL] == inst.scheduler.max_num_batched_tokens).any())
        else:
            assert (log[:, DECODE_REQS] > 0).any()
        if inst.role is Role.DECODE:
            assert (log[:, RECEIVING] >= 0).all()
    assert saw_chunked or mode == "colocated"


# -------------------------------------------------------------- preemption


def _pressure_cfg(mode: str, role: str, blocks: int, *extra: str) -> SimConfig:
    return make_config(
        f"cluster.mode={mode}", f"cluster.{role}.scheduler.num_blocks={blocks}",
        f"cluster.{role}.scheduler.max_num_batched_tokens=256",
        "workload.num_requests=16", "workload.arrivals.rate_per_s=1000",
        "workload.prompt_tokens.tokens=200", "workload.output_tokens.tokens=150", *extra)


@pytest.mark.parametrize(("mode", "role", "blocks"), [
    ("colocated", "colocated", 60), ("disaggregated", "decode", 60),
    ("disaggregated", "prefill", 30)])
def test_preemption_by_recompute(checked_run: Callable[[Simulation], Any], mode: str,
                                 role: str, blocks: int) -> None:
    """A pool too small for the batch preempts (recompute) instead of failing; the
    preempted requests still finish with all their tokens and every block comes back."""
    sim = Simulation(_pressure_cfg(mode, role, blocks))
    res = checked_run(sim)
    assert not terminal_problems(res.records)
    assert res.summary["completed"] == 16
    inst = next(i for i in sim.instances if i.role.value == role)
    assert inst.scheduler.preemptions > 0
    assert res.summary["preemptions"] == sum(i.scheduler.preemptions for i in sim.instances) > 0
    for i in sim.instances:
        assert i.pool.num_used == 0 and not i.pool.tables
    assert any(r["num_preemptions"] for r in res.records)
    facts = next(f for f in res.instances if f.role == role)
    assert facts.step_log[:, KV_USED].max() <= blocks


def test_blocks_freed_on_finish() -> None:
    """Colocated, one request at a time: the pool is empty between requests."""
    cfg = make_config("cluster.mode=colocated", "workload.num_requests=4",
                      "workload.arrivals={kind: closed_loop, concurrency: 1}")
    sim = Simulation(cfg)
    res = sim.run()
    log = res.instances[0].step_log
    # Each request's last step frees its blocks: a step with nothing running after it
    # logs an empty pool.
    idle = log[:, RUNNING] == 0
    assert idle.sum() == 4
    assert (log[idle, KV_USED] == 0).all()
    assert (log[~idle, KV_USED] > 0).all()


# ------------------------------------------------------------ known problems


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
def test_no_empty_engine_steps(mode: str) -> None:
    cfg = make_config(f"cluster.mode={mode}", "workload.num_requests=3",
                      "workload.arrivals.rate_per_s=400")
    res = Simulation(cfg).run()
    last_finish = max(r["finish_s"] for r in res.records)
    for f in res.instances:
        log = f.step_log
        assert ((log[:, PREFILL] + log[:, DECODE_REQS]) > 0).all(), f"{f.name} ran empty steps"
        assert f.busy_s <= last_finish
    assert max(f.step_end_s[-1] for f in res.instances) == pytest.approx(last_finish)


@pytest.mark.parametrize("limit", [
    "cluster.prefill.scheduler.max_num_batched_tokens=2",
    "cluster.prefill.scheduler.long_prefill_token_threshold=2"])
def test_prefill_budget_below_lookahead_is_rejected_or_completes(limit: str) -> None:
    from pdsim import ConfigError

    try:
        cfg = make_config(limit, "workload.num_requests=2", "workload.prompt_tokens.tokens=20")
    except ConfigError:
        return  # rejecting the config is a fine answer
    res = Simulation(cfg).run()
    assert res.summary["completed"] == 2


# ------------------------------------------------------------ prefill policy


def _wave_cfg(policy: str, method: str = "none") -> SimConfig:
    return make_config("cluster.mode=colocated", "workload.num_requests=24",
                       "workload.arrivals={kind: closed_loop, concurrency: 8}",
                       "cluster.colocated.scheduler.max_num_batched_tokens=700",
                       f"cluster.colocated.scheduler.prefill_policy={policy}",
                       method=method)


@pytest.mark.parametrize("method", ["none", "mtp"])
def test_prefill_first_never_mixes(method: str) -> None:
    """prefill_first (SGLang's default): no step runs prompt tokens and decode rows
    together, every request finishes; mixed (vLLM) does mix on the same workload."""
    res = Simulation(_wave_cfg("prefill_first", method)).run()
    assert not terminal_problems(res.records)
    assert res.summary["completed"] == 24
    log = res.instances[0].step_log
    prompt_steps = log[:, PREFILL] > 0
    if method == "none":
        assert (log[prompt_steps, DECODE_REQS] == 0).all()
    assert (log[~prompt_steps, DECODE_REQS] > 0).all()
    mixed = Simulation(_wave_cfg("mixed", method)).run().instances[0].step_log
    assert ((mixed[:, PREFILL] > 0) & (mixed[:, DECODE_REQS] > 0)).any()


def test_prefill_first_keeps_closed_loop_waves() -> None:
    """Fixed lengths in a closed loop: with prefill_first every round is a burst of C
    prompts (the later rounds' TTFT equals the first's); mixed steps stagger them."""
    def round_ttft(policy: str) -> tuple[float, float]:
        recs = sorted(Simulation(_wave_cfg(policy)).run().records, key=lambda r: r["request_id"])
        ttft = np.array([r["ttft_s"] for r in recs])
        return float(ttft[:8].mean()), float(ttft[8:].mean())
    first, rest = round_ttft("prefill_first")
    assert rest == pytest.approx(first, rel=1e-6)
    first_m, rest_m = round_ttft("mixed")
    assert rest_m < 0.8 * first_m


def test_frontend_latency_adds_to_ttft_only() -> None:
    """router.frontend_latency_s: every request reaches the engine that much later, so its
    TTFT (and end-to-end) grows by it; TPOT does not move. One request at a time, so
    nothing else changes."""
    def run(latency: float) -> Any:
        return Simulation(make_config(
            "cluster.mode=colocated", "workload.num_requests=6",
            "workload.arrivals={kind: closed_loop, concurrency: 1}",
            f"router.frontend_latency_s={latency}", method="none")).run().records
    base, late = run(0.0), run(0.25)
    for a, b in zip(base, late, strict=True):
        assert b["ttft_s"] == pytest.approx(a["ttft_s"] + 0.25, abs=1e-9)
        assert b["e2e_s"] == pytest.approx(a["e2e_s"] + 0.25, abs=1e-9)
        assert b["tpot_s"] == pytest.approx(a["tpot_s"], abs=1e-12)


def test_frontend_latency_per_prompt_token_adds_with_the_prompt() -> None:
    """router.frontend_latency_per_prompt_token_s: each request reaches the engine its
    prompt tokens x the cost later (on top of frontend_latency_s), so TTFT and end-to-end
    grow by that; TPOT does not move. One request at a time, prompts of drawn lengths."""
    def run(*extra: str) -> Any:
        return Simulation(make_config(
            "cluster.mode=colocated", "workload.num_requests=6",
            "workload.arrivals={kind: closed_loop, concurrency: 1}",
            "workload.prompt_tokens={kind: uniform, mean_tokens: 250, range_ratio: 0.6}", *extra,
            method="none")).run().records
    base = run()
    late = run("router.frontend_latency_s=0.01",
               "router.frontend_latency_per_prompt_token_s=0.0005")
    prompts = {int(a["prompt_tokens"]) for a in base}
    assert len(prompts) > 1  # the cost differs between requests
    for a, b in zip(base, late, strict=True):
        assert b["prompt_tokens"] == a["prompt_tokens"]
        extra_s = 0.01 + 0.0005 * a["prompt_tokens"]
        assert b["ttft_s"] == pytest.approx(a["ttft_s"] + extra_s, abs=1e-9)
        assert b["e2e_s"] == pytest.approx(a["e2e_s"] + extra_s, abs=1e-9)
        assert b["tpot_s"] == pytest.approx(a["tpot_s"], abs=1e-12)


def test_first_response_delay_moves_ttft_not_the_run() -> None:
    """router.first_response_delay_steps: the client's first response arrives that many
    engine steps after the engine's first token (at the request's own time between output
    steps; without speculation one step a token),
    so TTFT grows by that many inter-token times and TPOT, (e2e - TTFT) / (n - 1), shrinks
    to match; the engine's facts (first token, finish) and the end-to-end do not move."""
    def run(extra: str) -> Any:
        return Simulation(make_config(
            "cluster.mode=colocated", "workload.num_requests=12",
            "workload.arrivals={kind: closed_loop, concurrency: 3}",
            "workload.output_tokens={kind: fixed, tokens: 20}", extra,
            method="none")).run().records
    base, late = run("router.response_rule=pdsim"), run("router.first_response_delay_steps=5")
    for a, b in zip(base, late, strict=True):
        assert b["first_token_s"] == a["first_token_s"] and b["finish_s"] == a["finish_s"]
        per_token = (a["finish_s"] - a["first_token_s"]) / (a["output_tokens"] - 1)
        assert per_token > 0
        assert b["ttft_s"] == pytest.approx(a["ttft_s"] + 5 * per_token, rel=1e-12)
        assert b["e2e_s"] == a["e2e_s"]
        assert b["tpot_s"] == pytest.approx(
            (a["e2e_s"] - b["ttft_s"]) / (a["output_tokens"] - 1), rel=1e-12)
        assert b["tpot_s"] < a["tpot_s"]
    # never past the last token: a delay longer than the output ends at the request's end
    for a, r in zip(base, run("router.first_response_delay_steps=50"), strict=True):
        assert r["ttft_s"] == pytest.approx(a["e2e_s"], rel=1e-12)
        assert r["tpot_s"] == pytest.approx(0.0, abs=1e-12)


def test_first_response_delay_counts_engine_steps_under_speculation() -> None:
    """With MTP a step emits several tokens, and the delay counts the request's own
    engine steps (its output chunks), not tokens: k steps after the first token at the
    request's mean time between output steps, ending no later than its last step."""
    def run(extra: str) -> Any:
        return Simulation(make_config(
            "cluster.mode=colocated", "workload.num_requests=12",
            "workload.arrivals={kind: closed_loop, concurrency: 3}",
            "workload.output_tokens={kind: fixed, tokens: 40}", extra,
            method="mtp", n_spec=2)).run().records
    base, late = run("router.response_rule=pdsim"), run("router.first_response_delay_steps=4")
    fewer_steps = 0
    for a, b in zip(base, late, strict=True):
        assert b["first_token_s"] == a["first_token_s"] and b["finish_s"] == a["finish_s"]
        steps = a["num_chunks"]
        fewer_steps += steps < a["output_tokens"]
        per_step = (a["finish_s"] - a["first_token_s"]) / (steps - 1)
        assert b["ttft_s"] == pytest.approx(a["ttft_s"] + min(4, steps - 1) * per_step,
                                            rel=1e-12)
    assert fewer_steps > 0  # some steps emitted more than one token


def test_first_response_rule_defaults() -> None:
    """The default config streams as the engine does; each rule's delay is its table's."""
    assert RouterConfig().first_response_steps_for(None) == 0
    for rule, steps in RESPONSE_RULES.items():
        router = RouterConfig(response_rule=rule)  # type: ignore[arg-type]
        assert router.first_response_steps_for(None) == steps
        assert router.first_response_steps_for("no-such-profile") == steps
        assert RouterConfig(response_rule=rule,  # type: ignore[arg-type]
                            first_response_delay_steps=2).first_response_steps_for(None) == 2
    for (rule, profile), steps in RESPONSE_RULE_PROFILES.items():
        router = RouterConfig(response_rule=rule)  # type: ignore[arg-type]
        assert router.first_response_steps_for(profile) == steps
        assert RouterConfig(response_rule=rule,  # type: ignore[arg-type]
                            first_response_delay_steps=0).first_response_steps_for(profile) == 0


def test_the_served_profile_picks_the_response_delay() -> None:
    """A config's delay is its rule's for the model it serves: a profile the table lists
    takes the profile's, any other model the stack's."""
    for profile in ("deepseek-v3", "llama-3.1-70b"):
        cfg = load_config({"name": "r", "model": {"profile": profile},
                           "router": {"response_rule": "trtllm"}})
        assert cfg.first_response_steps == RESPONSE_RULE_PROFILES[("trtllm", profile)]
    assert (load_config({"name": "r", "router": {"response_rule": "trtllm"}})
            .first_response_steps == RESPONSE_RULES["trtllm"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 50), st.integers(1, 300)),
                min_size=1, max_size=20),
       st.integers(0, 400), st.integers(0, 400))
def test_first_response_lies_between_first_token_and_finish(
        reqs: list[tuple[float, float, int]], k1: int, k2: int) -> None:
    """Whatever the delay, the first response is no earlier than the engine's first token
    and no later than the last; a longer delay never brings it earlier; a request that
    did not finish keeps its engine first token."""
    from pdsim.results import first_response_s
    first = np.array([f for f, _, _ in reqs])
    finish = first + np.array([d for _, d, _ in reqs])
    out = np.array([n for _, _, n in reqs])
    lo, hi = sorted((k1, k2))
    a, b = (first_response_s(first, finish, out, k) for k in (lo, hi))
    assert (first <= a).all() and (a <= b).all() and (b <= finish + 1e-9 * (1 + finish)).all()
    unfinished = first_response_s(first, np.full_like(first, np.nan), out, hi)
    assert (unfinished == first).all()


def test_show_config_names_the_first_response_delay_only_when_set() -> None:
    from pdsim.loader import derived_values
    assert "first_response_steps" not in derived_values(make_config(method="none"))
    cfg = make_config("router.response_rule=trtllm", method="none")
    assert derived_values(cfg)["first_response_steps"] == cfg.first_response_steps > 0
