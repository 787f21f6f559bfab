"""The ITL statistics' sort by ranges of values gives the order a stable sort gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pdsim.itl as itl
from pdsim.summary import PERCENTILES

# gaps drawn from few values (ties, as equal step times give) or from many
_gaps = st.lists(st.one_of(st.sampled_from([0.0, 0.0125, 0.02, 0.5]),
                           st.floats(0.0, 1.0, allow_nan=False)), min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(gaps=_gaps, seed=st.integers(0, 2**32 - 1))
def test_weights_follow_a_stable_sort_of_the_gaps(gaps: list[float], seed: int) -> None:
    v = np.asarray(gaps)
    w = np.random.default_rng(seed).integers(1, 200, len(v)).astype(np.uint8)
    got = itl._in_value_order(v, w, min_size=0, ranges=4)  # the ranges path at any size
    assert got.dtype == w.dtype
    np.testing.assert_array_equal(got, w[np.argsort(v, kind="stable")])


def test_large_input_takes_the_ranges_path() -> None:
    rng = np.random.default_rng(7)
    n = 3 * itl._SORT_RANGE_MIN
    v = np.where(rng.random(n) < 0.5, 0.0125, rng.random(n))  # half of them one value
    w = rng.integers(1, 64, n).astype(np.uint8)
    np.testing.assert_array_equal(itl._in_value_order(v, w),
                                  w[np.argsort(v, kind="stable")])


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 5000), leaf=st.sampled_from([128, 129, 200, 1024]),
       seed=st.integers(0, 2**32 - 1))
def test_pairwise_sum_in_pieces_is_numpys_sum(n: int, leaf: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    v = rng.random(n) * rng.integers(1, 64, n)
    assert itl.pairwise_sum(lambda s: v[s], n, leaf) == float(v.sum())


def test_pairwise_sum_at_a_light_load_runs_size() -> None:
    rng = np.random.default_rng(11)
    n = 4_648_179  # the 100k light-load point's engine steps
    v = rng.random(n) * rng.integers(1, 64, n)
    assert itl.pairwise_sum(lambda s: v[s], n) == float(v.sum())


@settings(max_examples=200, deadline=None)
@given(weights=st.lists(st.integers(1, 255), min_size=1, max_size=300),
       block=st.integers(1, 64), data=st.data())
def test_first_reaching_is_searchsorted_on_the_cumulative_sum(
        weights: list[int], block: int, data: st.DataObject) -> None:
    w = np.asarray(weights, dtype=np.uint8)
    cum = np.cumsum(w, dtype=np.int64)
    targets = data.draw(st.lists(st.integers(0, int(cum[-1]) + 3), max_size=8))
    want = [int(np.searchsorted(cum, t, side="left")) for t in targets]
    assert itl._first_reaching(w, targets, block) == want


def test_weighted_percentiles_are_numpys_on_the_repeated_gaps() -> None:
    """The summary's ITL percentiles are np.percentile's (vLLM's, as bench_result.json
    computes them from each request's gaps), bit for bit, not the lower weighted ones."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        v = np.sort(rng.random(n))
        w = rng.integers(1, 6, n).astype(np.uint8)
        got = itl._weighted_percentiles(v, w, int(w.sum()))
        assert got == np.percentile(np.repeat(v, w), list(PERCENTILES)).tolist()


class _Steps:
    """An instance's facts as the ITL statistics read them: the step end times."""

    def __init__(self, step_end_s: np.ndarray) -> None:
        self.step_end_s = step_end_s


_step_kinds = st.sampled_from(["few", "many", "equal"])


@st.composite
def _runs(draw: st.DrawFn) -> tuple[list[_Steps], dict[int, list[list[int]]]]:
    """Instances of a few hundred steps (step times from few values, many, or one) and
    requests with zero to three segments each, on any instance."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    instances = []
    for _ in range(draw(st.integers(1, 3))):
        n, kind = draw(st.integers(2, 300)), draw(_step_kinds)
        steps = (rng.choice([0.0125, 0.02, 0.5], n) if kind == "few" else
                 rng.random(n) if kind == "many" else np.full(n, 0.01))
        instances.append(_Steps(np.cumsum(steps)))
    segments: dict[int, list[list[int]]] = {}
    for rid in range(draw(st.integers(1, 50))):
        segs = []
        for _ in range(draw(st.integers(0, 3))):
            k = int(rng.integers(0, len(instances)))
            steps_k = len(instances[k].step_end_s)
            a = int(rng.integers(0, steps_k))
            segs.append([k, a, int(rng.integers(a, min(steps_k, a + 150)))])
        segments[rid] = segs
    return instances, segments


@settings(max_examples=150, deadline=None)
@given(run=_runs(), block=st.integers(1, 64), ranges=st.integers(1, 6),
       leaf=st.sampled_from([128, 129, 200]))
def test_streamed_itl_statistics_are_the_sorted_ones_bit_for_bit(
        run: tuple[list[_Steps], dict[int, list[list[int]]]], block: int, ranges: int,
        leaf: int) -> None:
    """Above ``_SORT_RANGE_MIN`` gaps the statistics are taken a range of values at a
    time, never holding every gap; at any size, with blocks, ranges and leaves this small,
    they are the whole-array figures exactly (``repr`` keeps every bit)."""
    instances, segments = run
    gaps = itl._Gaps(instances, segments, block=block)  # type: ignore[arg-type]
    if not gaps.count:
        return
    got = itl._streamed_stats(gaps, ranges=ranges, leaf=leaf)
    want = itl._sorted_stats(*gaps.arrays())
    assert got is not None
    assert repr(got) == repr(want)


@settings(max_examples=150, deadline=None)
@given(run=_runs(), block=st.integers(1, 64))
def test_gap_multiplicities_are_the_cumulative_sum_of_segment_edges(
        run: tuple[list[_Steps], dict[int, list[list[int]]]], block: int) -> None:
    """Step k's gap counts once for each segment holding steps k - 1 and k: the
    block-by-block counts equal a +1 / -1 array over the segments' edges, summed."""
    instances, segments = run
    gaps = itl._Gaps(instances, segments, block=block)  # type: ignore[arg-type]
    for k, f in enumerate(instances):
        want = np.zeros(len(f.step_end_s) + 1, dtype=np.int64)
        for segs in segments.values():
            for i, a, b in segs:
                if i == k and b > a:
                    want[a + 1] += 1
                    want[b + 1] -= 1
        np.testing.assert_array_equal(gaps.mult[k], np.cumsum(want))
        assert gaps.mult[k].dtype.kind == "u"


def test_streamed_itl_statistics_take_the_path_above_the_threshold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``itl_stats`` streams above ``_STREAM_ABOVE`` gaps and gathers at or below it."""
    calls: list[int] = []
    original = itl._streamed_stats

    def spy(gaps: itl._Gaps, *args: object) -> object:
        calls.append(gaps.count)
        return original(gaps)

    monkeypatch.setattr(itl, "_streamed_stats", spy)
    rng = np.random.default_rng(3)
    ends = np.cumsum(rng.choice([0.0125, 0.02], 5000))
    seg = {0: [[0, 0, 4999]]}
    monkeypatch.setattr(itl, "_STREAM_ABOVE", 1000)
    small = itl.itl_stats([_Steps(ends[:900])], {0: [[0, 0, 899]]})  # type: ignore[list-item]
    big = itl.itl_stats([_Steps(ends)], seg)  # type: ignore[list-item]
    assert calls == [4999]
    v, w = itl.itl_distribution([_Steps(ends)], seg)  # type: ignore[list-item]
    assert repr(big) == repr(itl._sorted_stats(v, w))
    assert small.p50_s == pytest.approx(0.0125) or small.p50_s == pytest.approx(0.02)
