"""The ITL statistics' sort by ranges of values gives the order a stable sort gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import pdsim.metrics as metrics
from pdsim.summary import PERCENTILES

# gaps drawn from few values (ties, as equal step times give) or from many
_gaps = st.lists(st.one_of(st.sampled_from([0.0, 0.0125, 0.02, 0.5]),
                           st.floats(0.0, 1.0, allow_nan=False)), min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(gaps=_gaps, seed=st.integers(0, 2**32 - 1))
def test_weights_follow_a_stable_sort_of_the_gaps(gaps: list[float], seed: int) -> None:
    v = np.asarray(gaps)
    w = np.random.default_rng(seed).integers(1, 200, len(v)).astype(np.uint8)
    got = metrics._in_value_order(v, w, min_size=0, ranges=4)  # the ranges path at any size
    assert got.dtype == w.dtype
    np.testing.assert_array_equal(got, w[np.argsort(v, kind="stable")])


def test_large_input_takes_the_ranges_path() -> None:
    rng = np.random.default_rng(7)
    n = 3 * metrics._SORT_RANGE_MIN
    v = np.where(rng.random(n) < 0.5, 0.0125, rng.random(n))  # half of them one value
    w = rng.integers(1, 64, n).astype(np.uint8)
    np.testing.assert_array_equal(metrics._in_value_order(v, w),
                                  w[np.argsort(v, kind="stable")])


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 5000), leaf=st.sampled_from([128, 129, 200, 1024]),
       seed=st.integers(0, 2**32 - 1))
def test_pairwise_sum_in_pieces_is_numpys_sum(n: int, leaf: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    v = rng.random(n) * rng.integers(1, 64, n)
    assert metrics._pairwise_sum(lambda s: v[s], n, leaf) == float(v.sum())


def test_pairwise_sum_at_a_light_load_runs_size() -> None:
    rng = np.random.default_rng(11)
    n = 4_648_179  # the 100k light-load point's engine steps
    v = rng.random(n) * rng.integers(1, 64, n)
    assert metrics._pairwise_sum(lambda s: v[s], n) == float(v.sum())


@settings(max_examples=200, deadline=None)
@given(weights=st.lists(st.integers(1, 255), min_size=1, max_size=300),
       block=st.integers(1, 64), data=st.data())
def test_first_reaching_is_searchsorted_on_the_cumulative_sum(
        weights: list[int], block: int, data: st.DataObject) -> None:
    w = np.asarray(weights, dtype=np.uint8)
    cum = np.cumsum(w, dtype=np.int64)
    targets = data.draw(st.lists(st.integers(0, int(cum[-1]) + 3), max_size=8))
    want = [int(np.searchsorted(cum, t, side="left")) for t in targets]
    assert metrics._first_reaching(w, targets, block) == want


def test_weighted_percentiles_are_numpys_on_the_repeated_gaps() -> None:
    """The summary's ITL percentiles are np.percentile's (vLLM's, as bench_result.json
    computes them from each request's gaps), bit for bit, not the lower weighted ones."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        v = np.sort(rng.random(n))
        w = rng.integers(1, 6, n).astype(np.uint8)
        got = metrics._weighted_percentiles(v, w, int(w.sum()))
        assert got == np.percentile(np.repeat(v, w), list(PERCENTILES)).tolist()
