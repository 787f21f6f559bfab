"""Length distributions: moments, bounds, vLLM's uniform definition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wl_stats import assert_mean_and_cv, pmf_moments

from pdsim.workload.config import (
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    NormalLength,
    UniformLength,
)
from pdsim.workload.lengths import sample_lengths

N = 200_000


def draw(dist, n: int = N, seed: int = 11) -> np.ndarray:
    x = sample_lengths(dist, n, np.random.default_rng(seed))
    assert x.dtype == np.int64 and x.shape == (n,) and x.min() >= 1
    return x


def test_fixed() -> None:
    np.testing.assert_array_equal(draw(FixedLength(tokens=77), 10), np.full(10, 77))


@pytest.mark.parametrize(("mean", "ratio", "low", "high"), [
    (1024, 0.1, 921, 1127),   # floor(921.6), ceil(1126.4)
    (100, 0.0, 100, 100),
    (100, 0.1, 90, 111),      # ceil(100 * 1.1) is 111 in floating point, as in vLLM
    (1, 0.5, 1, 2),           # floor(0.5) = 0 is raised to 1
    (256, 0.999, 1, 512),
])
def test_uniform_is_vllm_random_dataset(mean: int, ratio: float, low: int, high: int) -> None:
    dist = UniformLength(mean_tokens=mean, range_ratio=ratio)
    # vLLM: floor(mean * (1 - r)), ceil(mean * (1 + r)), rng.integers(low, high + 1)
    assert (dist.low_tokens, dist.high_tokens) == (low, high)
    assert dist.low_tokens == max(1, math.floor(mean * (1 - ratio)))
    assert dist.high_tokens == max(1, math.ceil(mean * (1 + ratio)))
    x = draw(dist)
    assert x.min() == low and x.max() == high
    support = np.arange(low, high + 1, dtype=np.float64)
    m, cv, kurt = pmf_moments(support, np.full(len(support), 1.0 / len(support)))
    assert m == dist.expected_tokens
    assert_mean_and_cv(x, m, cv, kurt)


@pytest.mark.parametrize("spread", [{"cv": 0.1}, {"std_tokens": 300.0}])
def test_normal_mean_and_cv(spread: dict[str, float]) -> None:
    dist = NormalLength(mean_tokens=2000, **spread)
    x = draw(dist)
    # Rounding to integers adds variance 1/12 (Sheppard); clipping at 1 is 6+ sigma away.
    sigma = math.sqrt(dist.sigma_tokens**2 + 1 / 12)
    assert_mean_and_cv(x, 2000.0, sigma / 2000.0, kurtosis=3.0)


@pytest.mark.parametrize(("mean", "cv"), [(1000.0, 0.5), (4000.0, 0.8)])
def test_lognormal_mean_and_cv(mean: float, cv: float) -> None:
    dist = LognormalLength(mean_tokens=mean, cv=cv)
    x = draw(dist)
    w = 1.0 + cv * cv  # exp(sigma^2)
    kurt = w**4 + 2 * w**3 + 3 * w**2 - 3
    assert_mean_and_cv(x, mean, math.sqrt(cv**2 + 1 / 12 / mean**2), kurt)
    assert math.exp(dist.log_mu + dist.log_sigma**2 / 2) == pytest.approx(mean)


@pytest.mark.parametrize("kind", [NormalLength, LognormalLength])
def test_spread_lengths_are_clipped(kind: type[NormalLength] | type[LognormalLength]) -> None:
    x = draw(kind(mean_tokens=100, cv=2.0, max_tokens=300))
    assert x.min() == 1 and x.max() == 300


def test_empirical_values() -> None:
    dist = EmpiricalLength(values=(10, 100, 1000), weights=(5.0, 3.0, 2.0))
    x = draw(dist)
    assert set(np.unique(x)) == {10, 100, 1000}
    m, cv, kurt = pmf_moments(np.array([10.0, 100.0, 1000.0]), np.array([0.5, 0.3, 0.2]))
    assert dist.expected_tokens == pytest.approx(m)
    assert_mean_and_cv(x, m, cv, kurt)


def test_empirical_bins() -> None:
    edges, weights = (1, 8, 64, 512, 4096), (1.0, 0.0, 4.0, 2.0)
    dist = EmpiricalLength(bin_edges=edges, weights=weights)
    x = draw(dist)
    assert not np.any((x >= 8) & (x < 64))  # the empty bin
    assert x.min() == 1 and x.max() == 4095
    support = np.arange(1, 4096, dtype=np.float64)
    probs = np.zeros(len(support))
    for lo, hi, w in zip(edges, edges[1:], weights, strict=False):
        probs[lo - 1: hi - 1] = w / sum(weights) / (hi - lo)
    m, cv, kurt = pmf_moments(support, probs)
    assert dist.expected_tokens == pytest.approx(m)
    assert_mean_and_cv(x, m, cv, kurt)


dists = st.one_of(
    st.builds(FixedLength, tokens=st.integers(1, 10**6)),
    st.builds(UniformLength, mean_tokens=st.integers(1, 10**6),
              range_ratio=st.floats(0.0, 0.999)),
    st.builds(NormalLength, mean_tokens=st.floats(1.0, 1e5), cv=st.floats(0.01, 5.0),
              max_tokens=st.one_of(st.none(), st.just(10**6))),
    st.builds(LognormalLength, mean_tokens=st.floats(1.0, 1e5), cv=st.floats(0.01, 5.0),
              max_tokens=st.one_of(st.none(), st.just(10**6))),
    st.builds(EmpiricalLength, values=st.just((1, 5, 9)),
              weights=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.just(0.5))),
)


@settings(max_examples=80, deadline=None)
@given(dist=dists, n=st.integers(0, 300), extra=st.integers(0, 300),
       seed=st.integers(0, 2**32 - 1))
def test_lengths_are_positive_bounded_and_prefix_stable(dist, n, extra, seed) -> None:
    short = sample_lengths(dist, n, np.random.default_rng(seed))
    long = sample_lengths(dist, n + extra, np.random.default_rng(seed))
    assert short.dtype == np.int64 and len(short) == n
    np.testing.assert_array_equal(long[:n], short)
    if n:
        assert short.min() >= 1
        if isinstance(dist, UniformLength):
            assert dist.low_tokens <= short.min() and short.max() <= dist.high_tokens
        if getattr(dist, "max_tokens", None) is not None:
            assert short.max() <= dist.max_tokens
        if isinstance(dist, EmpiricalLength):
            assert set(short.tolist()) <= {v for v, w in zip(dist.values, dist.weights,
                                                              strict=True) if w > 0}
