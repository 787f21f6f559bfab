"""Acceptance: the sampler, the closed form, vLLM's per-position rates, and the run-level
effect of the fix (P/D after the fix speculates like standalone serving; before it,
multi-module MTP is inert)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from core_support import (
    Z,
    closed_form_tokens_per_step,
    emitted_mean_and_se,
    make_config,
    prefix_distribution,
    terminal_problems,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import SimConfig, simulate
from pdsim.rng import counter_key, counter_uniforms
from pdsim.spec_decode.acceptance import AcceptanceSampler, expected_tokens_per_step

INKLING_RATES = [0.7568, 0.6011, 0.4976, 0.4113, 0.3538, 0.2980, 0.2608, 0.2229]

# ------------------------------------------------------------------- the sampler


@pytest.mark.parametrize(("rate", "n"), [(0.0, 3), (0.3, 1), (0.6, 3), (0.8, 8), (1.0, 4)])
def test_closed_form_expected_tokens(rate: float, n: int) -> None:
    got = expected_tokens_per_step(np.full(n, rate))
    assert got == pytest.approx(closed_form_tokens_per_step(rate, n), rel=1e-12)
    assert got == pytest.approx(sum(rate**i for i in range(n + 1)), rel=1e-12)


def test_expected_tokens_from_conditional_rates() -> None:
    c = np.array([0.9, 0.5, 0.2])
    assert expected_tokens_per_step(c) == pytest.approx(1 + 0.9 + 0.45 + 0.09)
    assert expected_tokens_per_step(np.empty(0)) == 1.0


def _sampler(cond: Any, stream: int = 7) -> AcceptanceSampler:
    return AcceptanceSampler(np.asarray(cond, dtype=np.float64), stream_key=stream)


def _keys(sampler: AcceptanceSampler, ids: Any) -> np.ndarray:
    return np.array([sampler.request_key(int(i)) for i in ids], dtype=np.uint64)


@pytest.mark.parametrize(("rate", "n"), [(0.3, 1), (0.6, 3), (0.85, 8), (0.5, 5)])
def test_sampler_matches_the_closed_form(rate: float, n: int) -> None:
    """200 requests x 1000 verifications each: the pooled draws follow the truncated
    geometric law of a constant conditional rate."""
    s = _sampler(np.full(n, rate))
    a = s.draw_steps(1000, _keys(s, range(200)), np.zeros(200, dtype=np.int64)).ravel()
    k = len(a)
    assert a.dtype.kind == "i" and a.min() >= 0 and a.max() <= n
    emitted = a + 1
    se = emitted.std(ddof=1) / math.sqrt(k)
    assert abs(emitted.mean() - closed_form_tokens_per_step(rate, n)) < Z * se
    # P(a = j) for a constant rate: geometric, truncated at N
    for j in range(n + 1):
        p = rate**j * (1 - rate) if j < n else rate**n
        assert abs((a == j).mean() - p) < Z * math.sqrt(p * (1 - p) / k) + 1e-12


def test_sampler_edges_and_rate_matrix() -> None:
    s = _sampler([1.0, 1.0, 1.0])
    assert s.num_drafts == 3
    keys, zero = _keys(s, range(5)), np.zeros(5, dtype=np.int64)
    assert s.draw(keys, zero).tolist() == [3] * 5
    # per-request rates override the clean ones: first row never accepts, second always
    rates = np.array([[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    assert s.draw(keys[:2], zero[:2], s.survival_of(rates)).tolist() == [0, 3]
    # a prefix: once a draft is rejected, later ones cannot count
    rates = np.array([[1.0, 0.0, 1.0]])
    assert s.draw(keys[:1], zero[:1], s.survival_of(rates)).tolist() == [1]
    none = _sampler(np.zeros(4))
    assert none.draw(_keys(none, range(10)), np.zeros(10, dtype=np.int64)).tolist() == [0] * 10


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, 10**6), min_size=1, max_size=20, unique=True),
       counters=st.lists(st.integers(0, 10**5), min_size=20, max_size=20),
       seed=st.integers(0, 2**16))
def test_a_draw_depends_only_on_request_and_counter(ids: list[int], counters: list[int],
                                                    seed: int) -> None:
    """Counter-based draws: batching, order and batch company never change a request's
    draw (a decode run and single steps, or two configurations, see the same luck)."""
    s = _sampler([0.7, 0.6, 0.5], stream=seed)
    keys = _keys(s, ids)
    ctr = np.array(counters[: len(ids)], dtype=np.int64)
    together = s.draw(keys, ctr)
    alone = [int(s.draw(keys[i:i + 1], ctr[i:i + 1])[0]) for i in range(len(ids))]
    assert together.tolist() == alone
    order = np.argsort(-np.asarray(ids))
    np.testing.assert_array_equal(s.draw(keys[order], ctr[order]), together[order])
    # another stream (seed) gives other draws
    other = _sampler([0.7, 0.6, 0.5], stream=seed + 1)
    u = counter_uniforms(keys, ctr)
    u_other = counter_uniforms(_keys(other, ids), ctr)
    assert not np.array_equal(u, u_other)


def test_counter_uniforms_are_uniform_and_uncorrelated() -> None:
    """One key's successive counters and neighbouring keys' same counter: uniform (KS)
    and uncorrelated (lag-1 and cross-key correlation within sampling error)."""
    from scipy import stats

    s = _sampler([0.5])
    keys = _keys(s, range(400))
    u = counter_uniforms(keys[None, :], np.arange(500, dtype=np.int64)[:, None])
    assert u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u.ravel(), "uniform").pvalue > 1e-3
    n = u.size
    for x, y in ((u[:-1].ravel(), u[1:].ravel()), (u[:, :-1].ravel(), u[:, 1:].ravel())):
        assert abs(np.corrcoef(x, y)[0, 1]) < Z / math.sqrt(n)


def test_per_request_rates_follow_their_own_distribution() -> None:
    """A (k, N) rate matrix: each row's accepted prefix has P(a >= i+1) = c_0...c_i of
    its own rates (the inversion draw agrees with accepting draft by draft)."""
    rows = np.array([[0.9, 0.5, 0.8], [0.3, 0.9, 0.9], [0.95, 0.95, 0.1]])
    s = _sampler(np.full(3, 0.5), stream=3)
    trials = 60_000
    a = s.draw_steps(trials, _keys(s, range(3)), np.zeros(3, dtype=np.int64),
                     s.survival_of(rows))
    assert a.shape == (trials, 3)
    for r, rates in enumerate(rows):
        survival = np.cumprod(rates)
        for i in range(3):
            p = survival[i]
            got = (a[:, r] >= i + 1).mean()
            assert abs(got - p) < Z * math.sqrt(p * (1 - p) / trials) + 1e-12


@settings(max_examples=40, deadline=None)
@given(steps=st.integers(1, 12), k=st.integers(1, 9), seed=st.integers(0, 2**16),
       stale=st.booleans())
def test_window_of_steps_equals_steps_one_by_one(steps: int, k: int, seed: int,
                                                 stale: bool) -> None:
    s = _sampler([0.8, 0.6, 0.4], stream=seed)
    rates = np.random.default_rng(seed + 1).random((k, 3))
    surv = s.survival_of(rates) if stale else None
    keys = _keys(s, range(k))
    start = np.random.default_rng(seed).integers(0, 1000, k)
    np.testing.assert_array_equal(
        s.draw_steps(steps, keys, start, surv),
        np.stack([s.draw(keys, start + j, surv) for j in range(steps)]))


@settings(max_examples=40, deadline=None)
@given(steps=st.integers(1, 300), seed=st.integers(0, 2**16), stale=st.booleans(),
       start=st.integers(0, 10**6))
def test_one_request_run_equals_its_column_of_steps(steps: int, seed: int, stale: bool,
                                                    start: int) -> None:
    """``draw_run`` (one request, 1-D) is ``draw_steps``'s column for that request, past
    the precomputed Weyl increments (256 steps) too."""
    s = _sampler([0.8, 0.6, 0.4], stream=seed)
    surv = s.survival_of(np.random.default_rng(seed).random((1, 3))) if stale else None
    keys = _keys(s, [seed])
    np.testing.assert_array_equal(
        s.draw_run(steps, int(keys[0]), start, None if surv is None else surv[0]),
        s.draw_steps(steps, keys, np.array([start]), surv)[:, 0])



@settings(max_examples=30, deadline=None)
@given(first=st.integers(0, 10**6), count=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_first_draws_table_rows_are_each_requests_own_run(first: int, count: int,
                                                          seed: int) -> None:
    """Row i of the table is ``draw_run`` of request ``first + i`` from counter 0 at the
    clean rates: the same draws, computed for a block of requests at once."""
    s = _sampler([0.8, 0.6, 0.4], stream=seed)
    table = s.first_draws_table(first, count)
    assert table.shape == (count, s.first_draws_width)
    for i in (0, count // 2, count - 1):
        np.testing.assert_array_equal(
            table[i], s.draw_run(s.first_draws_width, s.request_key(first + i), 0))


# ------------------------------------------------------------ runs vs theory


def _run(*overrides: str, n: int, requests: int = 60, output: int = 160) -> Any:
    cfg: SimConfig = make_config(
        f"workload.num_requests={requests}", f"workload.output_tokens.tokens={output}",
        "workload.arrivals.rate_per_s=40", *overrides, n_spec=n)
    res = simulate(cfg)
    assert not terminal_problems(res.records)
    return res


def _emitted(res: Any) -> tuple[float, float]:
    s = res.summary
    return emitted_mean_and_se(s["num_accepted_tokens_per_pos"], s["num_drafts"])


CLEAN = ("cluster.mode=colocated",
         "speculative.stale_kv.residual_guess_accuracy=1.0")  # the P/D variants add theirs


@pytest.mark.parametrize(("rate", "n"), [(0.4, 1), (0.75, 3), (0.9, 8)])
@pytest.mark.parametrize("variant", ["colocated", "pd_auto_exact_guess"])
def test_constant_acceptance_closed_form(rate: float, n: int, variant: str) -> None:
    """No pollution: (1 - a^(N+1)) / (1 - a) tokens per step, within sampling error."""
    extra = ["cluster.mode=colocated"] if variant == "colocated" else [
        "connector.prefill_backoff=auto", "speculative.stale_kv.residual_guess_accuracy=1.0"]
    res = _run(f"speculative.acceptance={{kind: constant, rate: {rate}}}", *extra, n=n)
    s = res.summary
    mean, se = _emitted(res)
    assert mean == pytest.approx(s["acceptance_length"], rel=1e-12)
    assert s["num_drafts"] > 1000
    assert abs(s["acceptance_length"] - closed_form_tokens_per_step(rate, n)) < Z * se
    assert s["num_draft_tokens"] == n * s["num_drafts"]
    assert s["acceptance_rate"] == pytest.approx(
        s["num_accepted_tokens"] / s["num_draft_tokens"])


@pytest.mark.parametrize("variant", ["colocated", "pd_auto_exact_guess"])
def test_per_position_rates_reproduce_the_config(variant: str) -> None:
    """vLLM's definitions: rate i = accepted_per_pos[i] / num_drafts reproduces the
    configured P(first i+1 accepted); the rates sum to acceptance_length - 1."""
    extra = ["cluster.mode=colocated"] if variant == "colocated" else [
        "speculative.stale_kv.residual_guess_accuracy=1.0"]
    res = _run(f"speculative.acceptance={{kind: per_position, rates: {INKLING_RATES}}}",
               *extra, n=8, requests=100)
    s = res.summary
    drafts = s["num_drafts"]
    rates = s["per_position_acceptance_rates"]
    assert len(rates) == 8
    assert rates == pytest.approx([c / drafts for c in s["num_accepted_tokens_per_pos"]])
    assert sum(rates) == pytest.approx(s["acceptance_length"] - 1, rel=1e-12)
    for got, want in zip(rates, INKLING_RATES, strict=True):
        assert abs(got - want) < Z * math.sqrt(want * (1 - want) / drafts)
    # per-request counters add up to the summary's
    per_pos = np.sum([r["accepted_per_pos"] for r in res.records], axis=0)
    assert per_pos.tolist() == s["num_accepted_tokens_per_pos"]
    counts = prefix_distribution(per_pos, drafts)
    assert (counts >= 0).all() and counts.sum() == drafts


def test_conditional_acceptance_kind() -> None:
    cond = [0.9, 0.5, 0.4]
    res = _run(f"speculative.acceptance={{kind: conditional, rates: {cond}}}",
               "cluster.mode=colocated", n=3)
    mean, se = _emitted(res)
    assert abs(mean - expected_tokens_per_step(np.array(cond))) < Z * se


# --------------------------------------------------- the fix, at the run level


def _pd_vs_colocated(backoff: str, accuracy: float, n: int = 8) -> dict[str, Any]:
    acc = f"speculative.acceptance={{kind: per_position, rates: {INKLING_RATES[:n]}}}"
    common = (acc, f"speculative.stale_kv.residual_guess_accuracy={accuracy}")
    return {
        "pd": _run(*common, f"connector.prefill_backoff={backoff}", n=n, requests=100),
        "colocated": _run(*common, "cluster.mode=colocated", n=n, requests=100),
    }


def test_after_fix_pd_acceptance_equals_colocated() -> None:
    runs = _pd_vs_colocated("auto", 1.0)
    (m1, se1), (m2, se2) = _emitted(runs["pd"]), _emitted(runs["colocated"])
    assert abs(m1 - m2) < Z * math.hypot(se1, se2)
    clean = expected_tokens_per_step(make_config(
        f"speculative.acceptance={{kind: per_position, rates: {INKLING_RATES}}}",
        n_spec=8).conditional_acceptance)
    assert abs(m1 - clean) < Z * se1


def test_before_fix_multi_module_mtp_collapses() -> None:
    """Inkling's rates, N = 8: the padded first step's garbage re-prefill into every module
    sinks acceptance far below standalone's (docs/mtp-model.md)."""
    runs = _pd_vs_colocated("off", 1.0)
    before = runs["pd"].summary["acceptance_length"]
    assert before < 1.5
    assert before < runs["colocated"].summary["acceptance_length"] / 3
    # the residual guesses are irrelevant before the fix: P saw the whole prompt
    assert _pd_vs_colocated("off", 0.0)["pd"].summary["acceptance_length"] == before


def test_residual_guess_accuracy_orders_acceptance_after_fix() -> None:
    """After the fix only P's guesses can be wrong: acceptance falls as fewer are right.
    Every guess wrong is still milder than the bug: module m then holds m + 1 stale slots
    (module 0 one), where the padded step before the fix leaves N - 1 in every module."""
    means = [_emitted(_pd_vs_colocated("auto", q)["pd"]) for q in (0.0, 0.9, 1.0)]
    for (lo, se_lo), (hi, se_hi) in itertools.pairwise(means):
        assert lo < hi - Z * math.hypot(se_lo, se_hi)
    assert means[0][0] > _emitted(_pd_vs_colocated("off", 1.0)["pd"])[0]


@pytest.mark.parametrize("n", [1, 3])
def test_no_multi_module_no_collapse(n: int) -> None:
    """Single-module MTP (N=1, no lookahead backoff) and N=3 before the fix: only the
    multi-module case pollutes."""
    rates = f"speculative.acceptance={{kind: per_position, rates: {INKLING_RATES[:n]}}}"
    off = _run(rates, "connector.prefill_backoff=off",
               "speculative.stale_kv.residual_guess_accuracy=1.0", n=n)
    co = _run(rates, "cluster.mode=colocated", n=n)
    (m1, se1), (m2, se2) = _emitted(off), _emitted(co)
    if n == 1:
        assert abs(m1 - m2) < Z * math.hypot(se1, se2)
    else:
        assert m1 < m2 - Z * math.hypot(se1, se2)


def test_counter_uniforms_are_splitmix64_streams() -> None:
    """Draw t of a key is SplitMix64's t-th output from that key (a published generator,
    checked against a plain-integer implementation)."""
    from pdsim.rng import counter_key, splitmix64

    key = counter_key(12345, 678)
    gamma = 0x9E3779B97F4A7C15
    want = [splitmix64(key + (t + 1) * gamma) >> 11 for t in range(6)]
    got = counter_uniforms(np.array([key], dtype=np.uint64), np.arange(6)) * 2.0**53
    assert got.astype(np.int64).tolist() == want
    # the finalizer itself, on SplitMix64's first output for seed 0 (Vigna's reference)
    assert splitmix64(gamma) == 0xE220A8397B1DCDAF


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=30), st.integers(0, 2**64 - 1),
       st.one_of(st.integers(-5, -1), st.integers(AcceptanceSampler.keys_cached_below, 2**40)))
def test_request_keys_from_the_table_equal_the_scalar_key(ids: list[int], stream: int,
                                                          far: int) -> None:
    """``request_key`` and ``request_keys`` read keys from a table grown in blocks; each
    equals ``counter_key`` of the stream, whatever order the ids come in, and so do ids
    outside the table's range."""
    s = _sampler([0.8, 0.6], stream)
    for i in [*ids, far]:
        assert s.request_key(i) == counter_key(stream, i)
        assert s.request_keys(i, 3).tolist() == [counter_key(stream, i + j) for j in range(3)]
