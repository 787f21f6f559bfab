"""Speculation cost and MoE routing in the roofline: sequential drafter passes, per-pass
fixed costs, verification at N + 1 tokens, experts touched under skewed, correlated routing."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdsim.perf.architecture import (
    ModelArchitecture,
)
from pdsim.perf.base import StepBatch
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.perf.profiles import load_model_architecture
from pdsim.perf.roofline import RooflineStepTime
from pdsim.perf.routing import (
    ExpertRouting,
    effective_tokens,
    expected_max_standard_normal,
    log_miss_per_token,
    popularity_weights,
    straggler_factor,
    touched_fraction,
)


def decode(batch: int, drafts: int = 0, ctx: int = 1100) -> StepBatch:
    return StepBatch(0, 0.0, batch, batch * (1 + drafts), batch * ctx, 0)


def inkling(n: int, **kw: float) -> RooflineStepTime:
    cfg = RooflineStepTimeConfig(model="inkling-small", hardware="b200",
                                 tensor_parallel_size=4, **kw)
    return RooflineStepTime(cfg, n, n)


@pytest.mark.parametrize("batch", [1, 8, 64, 256])
def test_more_mtp_modules_cost_more_per_step(batch: int) -> None:
    times = [inkling(n).step_time_s(decode(batch, n)) for n in range(9)]
    assert times == sorted(times) and len(set(times)) == 9
    # every further module is a dependent forward: it costs at least its CPU pass cost
    cfg = RooflineStepTimeConfig(model="inkling-small", hardware="b200",
                                 tensor_parallel_size=4)
    steps = [b - a for a, b in itertools.pairwise(times)]
    assert min(steps) > cfg.drafter_pass_overhead_s


def test_pass_overhead_is_paid_once_per_forward() -> None:
    """Raising the per-pass cost by d raises an N-pass step by exactly N x d."""
    d = 1e-4
    default = RooflineStepTimeConfig(model="inkling-small", hardware="b200",
                                     tensor_parallel_size=4).drafter_pass_overhead_s
    for n in (1, 3, 8):
        base = inkling(n).step_time_s(decode(32, n))
        more = inkling(n, drafter_pass_overhead_s=default + d).step_time_s(decode(32, n))
        assert more - base == pytest.approx(n * d, rel=1e-6)


def test_cpu_cost_grows_with_the_batch() -> None:
    m = inkling(0)
    cfg = RooflineStepTimeConfig(model="inkling-small", hardware="b200",
                                 tensor_parallel_size=4)
    slow = inkling(0, overhead_per_request_s=cfg.overhead_per_request_s + 1e-5)
    for b in (1, 16, 128):
        assert slow.step_time_s(decode(b)) - m.step_time_s(decode(b)) == \
            pytest.approx(b * 1e-5, rel=1e-6)


def test_verification_prices_n_plus_one_tokens() -> None:
    """The target's part of an N-draft step is a forward over N + 1 tokens per request:
    more than one token, less than N + 1 separate steps."""
    plain = inkling(0)
    for n in (1, 4, 8):
        verify = plain.step_time_s(decode(32, n))
        assert plain.step_time_s(decode(32)) < verify < (n + 1) * plain.step_time_s(decode(32))


# ------------------------------------------------------------------ routing


def test_uniform_independent_routing_is_the_closed_form() -> None:
    e, k = 256, 8
    lm = log_miss_per_token(e, k, 0.0)
    for t in (1, 7, 64, 1000):
        assert touched_fraction(t, lm) == pytest.approx(1 - (1 - k / e) ** t, rel=1e-12)


@given(st.floats(0.0, 3.0))
def test_popularity_has_mean_one_and_is_sorted(cv: float) -> None:
    w = popularity_weights(cv)
    assert sum(w) / len(w) == pytest.approx(1.0, rel=1e-9)
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(w)) and min(w) > 0


@given(st.floats(0.0, 3.0), st.floats(0.0, 1e5), st.floats(0.0, 1e5))
def test_touched_fraction_is_bounded_and_monotone(cv: float, a: float, b: float) -> None:
    lm = log_miss_per_token(256, 8, cv)
    lo, hi = sorted((a, b))
    f_lo, f_hi = touched_fraction(lo, lm), touched_fraction(hi, lm)
    assert 0.0 <= f_lo <= f_hi <= 1.0 + 1e-12


@given(st.integers(1, 4096))
def test_skew_touches_fewer_experts(tokens: int) -> None:
    uniform = touched_fraction(tokens, log_miss_per_token(256, 8, 0.0))
    skewed = touched_fraction(tokens, log_miss_per_token(256, 8, 1.0))
    assert skewed <= uniform + 1e-12


@given(st.integers(1, 256), st.integers(0, 8), st.floats(0.0, 0.99))
def test_verification_tokens_of_one_request_are_correlated(r: int, n: int,
                                                           reuse: float) -> None:
    q = r * (n + 1)
    eff = effective_tokens(q, r, q, reuse)
    assert r <= eff <= q
    assert eff == pytest.approx(r * (1 + n * (1 - reuse)))


def test_correlated_routing_lowers_the_cost_of_verification() -> None:
    """An MoE model verifying N + 1 tokens per request reads fewer expert weights when the
    request's tokens share experts (DeepSeek-V3, single MTP, batch 8)."""
    base = load_model_architecture("deepseek-v3")

    def step(routing: ExpertRouting) -> float:
        arch = ModelArchitecture.model_validate({**base.model_dump(), "routing":
                                                 routing.model_dump()})
        cfg = RooflineStepTimeConfig(model=arch, hardware="h200", tensor_parallel_size=8)
        return RooflineStepTime(cfg).step_time_s(decode(8, 1))

    independent = step(ExpertRouting(load_cv=0.0, token_reuse=0.0))
    correlated = step(ExpertRouting(load_cv=0.0, token_reuse=0.5))
    skewed = step(ExpertRouting(load_cv=1.0, token_reuse=0.5))
    assert skewed < correlated < independent
    assert math.isfinite(skewed)


def test_expert_parallel_pays_for_its_busiest_rank() -> None:
    """Sharding experts over EP ranks makes every MoE layer wait for the busiest rank: the
    excess shrinks as each rank sees more tokens, and vanishes without skew or sampling."""
    z = expected_max_standard_normal(8)
    assert expected_max_standard_normal(1) == 0.0
    assert 0 < expected_max_standard_normal(2) < z < expected_max_standard_normal(64)
    factors = [straggler_factor(z, 0.25 * 8 / 256, pairs, 8) for pairs in (1, 8, 64, 4096)]
    assert factors == sorted(factors, reverse=True) and factors[-1] > 1.0
    assert straggler_factor(z, 0.0, 1e12, 8) == pytest.approx(1.0, abs=1e-5)
    assert straggler_factor(0.0, 0.5, 1.0, 1) == 1.0
    base = load_model_architecture("deepseek-v3")

    def step(routing: ExpertRouting) -> float:
        arch = ModelArchitecture.model_validate({**base.model_dump(), "routing":
                                                 routing.model_dump()})
        cfg = RooflineStepTimeConfig(model=arch, hardware="h200", tensor_parallel_size=8,
                                     expert_parallel_size=8)
        # a long prefill touches every expert whatever the skew: only the busiest rank moves
        return RooflineStepTime(cfg).step_time_s(StepBatch(8192, 8192 * 4096.5, 0, 0, 0, 0))

    assert step(ExpertRouting(load_cv=1.0)) > step(ExpertRouting(load_cv=0.0))
