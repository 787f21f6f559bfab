"""Arrival processes: moments, horizons, and closed loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wl_stats import Z, assert_mean_and_cv

from pdsim.workload.arrivals import _renewal, arrival_times
from pdsim.workload.config import (
    ClosedLoopArrivals,
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
)

N = 200_000


def rng(seed: int = 1) -> np.random.Generator:
    return np.random.default_rng(seed)


def gaps(t: np.ndarray) -> np.ndarray:
    return np.diff(np.concatenate(([0.0], t)))


@pytest.mark.parametrize("rate", [0.5, 4.0, 250.0])
def test_poisson_gaps_are_exponential(rate: float) -> None:
    g = gaps(arrival_times(PoissonArrivals(rate_per_s=rate), N, None, rng()))
    assert_mean_and_cv(g, 1.0 / rate, 1.0, kurtosis=9.0)


@pytest.mark.parametrize(("rate", "cv"), [(2.0, 0.5), (10.0, 1.0), (10.0, 2.0), (1.0, 3.0)])
def test_gamma_gaps_match_rate_and_cv(rate: float, cv: float) -> None:
    k = 1.0 / cv**2
    g = gaps(arrival_times(GammaArrivals(rate_per_s=rate, cv=cv), N, None, rng()))
    assert_mean_and_cv(g, 1.0 / rate, cv, kurtosis=3.0 + 6.0 / k)


def test_gamma_burstiness_is_vllm_shape() -> None:
    by_cv = arrival_times(GammaArrivals(rate_per_s=3.0, cv=0.5), 1000, None, rng(7))
    by_shape = arrival_times(GammaArrivals(rate_per_s=3.0, burstiness=4.0), 1000, None, rng(7))
    np.testing.assert_array_equal(by_cv, by_shape)
    assert GammaArrivals(rate_per_s=1.0, burstiness=4.0).gap_cv == pytest.approx(0.5)


def test_constant_arrivals_are_exact() -> None:
    t = arrival_times(ConstantArrivals(rate_per_s=4.0), 1000, None, rng())
    np.testing.assert_array_equal(t, np.arange(1, 1001) / 4.0)
    assert len(arrival_times(ConstantArrivals(rate_per_s=3.0), None, 100.0, rng())) == 300
    assert len(arrival_times(ConstantArrivals(rate_per_s=3.0), 10, 100.0, rng())) == 10


@pytest.mark.parametrize("process", [PoissonArrivals(rate_per_s=100.0),
                                     GammaArrivals(rate_per_s=100.0, cv=2.0)])
def test_duration_bounds_the_run(process: PoissonArrivals | GammaArrivals) -> None:
    duration_s = 1000.0
    t = arrival_times(process, None, duration_s, rng())
    assert t[-1] <= duration_s and np.all(np.diff(t) >= 0)
    # The count of a renewal process over [0, D] has mean ~ rate*D and variance
    # ~ rate*D*cv^2 (asymptotically).
    expect = process.rate_per_s * duration_s
    assert abs(len(t) - expect) <= Z * np.sqrt(expect * process.gap_cv**2)
    # Duration-only is the same process as a long request count cut at D.
    capped = arrival_times(process, 10 * int(expect), duration_s, rng())
    assert len(capped) == len(t)
    np.testing.assert_allclose(capped, t, rtol=1e-9)


def test_duration_only_draws_blocks_until_the_horizon() -> None:
    g = rng(3)
    t = _renewal(lambda k: g.exponential(0.1, size=k), 0.1, None, 50.0, block=3)
    ref = np.cumsum(np.random.default_rng(3).exponential(0.1, size=len(t) + 1))
    np.testing.assert_allclose(t, ref[: len(t)], rtol=1e-9)
    assert ref[len(t)] > 50.0


def test_count_and_duration_whichever_first() -> None:
    p = PoissonArrivals(rate_per_s=10.0)
    assert len(arrival_times(p, 5, 1e6, rng())) == 5
    t = arrival_times(p, 10_000, 10.0, rng())
    assert len(t) < 10_000 and t[-1] <= 10.0


def test_closed_loop_has_no_arrival_times() -> None:
    t = arrival_times(ClosedLoopArrivals(concurrency=8), 50, None, rng())
    assert t.shape == (50,) and np.isnan(t).all()
    with pytest.raises(ValueError, match="num_requests"):
        arrival_times(ClosedLoopArrivals(concurrency=8), None, 10.0, rng())


def test_needs_a_bound() -> None:
    with pytest.raises(ValueError, match="num_requests or duration_s"):
        arrival_times(PoissonArrivals(rate_per_s=1.0), None, None, rng())


processes = st.one_of(
    st.builds(PoissonArrivals, rate_per_s=st.floats(0.01, 1e4)),
    st.builds(GammaArrivals, rate_per_s=st.floats(0.01, 1e4), cv=st.floats(0.05, 10.0)),
    st.builds(ConstantArrivals, rate_per_s=st.floats(0.01, 1e4)),
)


@settings(max_examples=60, deadline=None)
@given(process=processes, n=st.integers(1, 500), extra=st.integers(0, 500),
       seed=st.integers(0, 2**32 - 1))
def test_arrivals_are_sorted_positive_and_prefix_stable(process, n, extra, seed) -> None:
    short = arrival_times(process, n, None, rng(seed))
    long = arrival_times(process, n + extra, None, rng(seed))
    assert short.dtype == np.float64 and len(short) == n
    assert np.all(short > 0) and np.all(np.diff(short) >= 0)
    np.testing.assert_array_equal(long[:n], short)
