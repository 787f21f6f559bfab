"""The inter-token-latency (ITL) distribution of a run: the gaps between each request's
output chunks, weighted by how many requests share a step's gap, and their mean, std and
percentiles (``pdsim.summary.PERCENTILES``).

Up to a bound the gaps are sorted in one array; above it they are streamed in blocks of
steps and their statistics come out bit for bit the same (numpy's pairwise summation
replayed over leaves, percentiles by value ranges), so a long run never holds every gap.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from pdsim.facts import InstanceFacts, SegmentTable
from pdsim.summary import PERCENTILES, LatencyStats

NAN = math.nan

def latency_stats(values: np.ndarray) -> LatencyStats:
    """Mean, std and ``PERCENTILES`` of ``values`` (NaNs dropped); all NaN when empty."""
    v = values[~np.isnan(values)]
    if not len(v):
        return LatencyStats(NAN, NAN, *(NAN for _ in PERCENTILES))
    return LatencyStats(float(np.mean(v)), float(np.std(v)),
                        *(float(np.percentile(v, p)) for p in PERCENTILES))


# steps whose gaps are taken at a time (bounds the temporary arrays at any run length)
_GAP_BLOCK_STEPS = 1 << 18
# the ITL sort: gaps below this many sorted at once, above it a range of values at a time
_SORT_RANGE_MIN = 1 << 16
_SORT_RANGES = 16
# ITL statistics: up to this many gaps gathered and sorted at once (about 21 bytes a gap
# at the peak, 22 MiB here), above it streamed (``_streamed_stats``: bounded memory, but
# two passes over every gap per range of values, which costs more than the sort below
# this size: 138,779 gaps of a 3,072-request light-load run take 0.16 s streamed and
# 0.03 s gathered, CPU time, the same figures)
_STREAM_ABOVE = 1 << 20
# the ITL mean and std: terms summed a piece of this many gaps at a time
_SUM_LEAF = 1 << 16


class _Gaps:
    """A run's inter-chunk gaps with their multiplicities, never all held at once: each
    instance's step gaps that some request saw (a positive multiplicity), in instance and
    step order, then the gaps across a preemption (in request-id order), made a block of
    steps at a time from the step end times (``blocks``). Within a segment a request
    emits a chunk every step, so step k's gap counts once for each segment containing
    both k-1 and k; gaps across a preemption count once each."""

    def __init__(self, instances: list[InstanceFacts], segments: Mapping[int, list[list[int]]],
                 block: int = _GAP_BLOCK_STEPS) -> None:
        table = SegmentTable.from_dict(segments)
        rows = table.rows
        inst, first, last = rows[:, 1], rows[:, 2], rows[:, 3]
        # the gap from each segment's predecessor of the same request: its first step's
        # end less the predecessor's last step's end
        t_first = np.empty(len(rows))
        t_last = np.empty(len(rows))
        self.ends = [f.step_end_s for f in instances]
        self.mult: list[np.ndarray] = []
        for k, ends in enumerate(self.ends):
            on = np.flatnonzero(inst == k)
            t_first[on] = ends[first[on]]
            t_last[on] = ends[last[on]]
            spans = on[last[on] > first[on]]
            self.mult.append(_multiplicities(len(ends) + 1, np.sort(first[spans] + 1),
                                             np.sort(last[spans] + 1), block))
            del on, spans
        rid = table.request_ids()
        follows = np.flatnonzero(rid[1:] == rid[:-1])
        self.extra = t_first[follows + 1] - t_last[follows]
        self.block = block
        self.count = len(self.extra) + sum(
            int(np.count_nonzero(m[1:len(e)])) for e, m in zip(self.ends, self.mult, strict=True))
        # weights are whole numbers: their sum is exact
        self.total = len(self.extra) + sum(int(np.add.reduce(m[1:len(e)], dtype=np.int64))
                                           for e, m in zip(self.ends, self.mult, strict=True))
        # the multiplicities in the narrowest unsigned type that holds them (one byte,
        # mostly)
        most = max([1, *(int(m.max()) for m in self.mult if len(m))])
        self.weight_dtype = np.min_scalar_type(most)

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(gaps, multiplicities) a block of steps at a time, in order."""
        for ends, mult in zip(self.ends, self.mult, strict=True):
            for lo in range(1, len(ends), self.block):
                hi = min(lo + self.block, len(ends))
                seen = mult[lo:hi] > 0
                yield (ends[lo:hi] - ends[lo - 1:hi - 1])[seen], mult[lo:hi][seen]
        if len(self.extra):
            yield self.extra, np.ones(len(self.extra), dtype=self.weight_dtype)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap and its multiplicity, in order (two arrays of ``count``)."""
        vals = np.empty(self.count)
        wts = np.empty(self.count, dtype=self.weight_dtype)
        pos = 0
        for v, w in self.blocks():
            vals[pos:pos + len(v)] = v
            wts[pos:pos + len(v)] = w
            pos += len(v)
        assert pos == self.count
        return vals, wts

    def gathered(self, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """The gaps strictly between ``lo`` and ``hi`` (equal to ``lo`` if ``lo == hi``)
        and their multiplicities, in order."""
        vs, ws = [], []
        for v, w in self.blocks():
            inside = v == lo if lo == hi else (v > lo) & (v < hi)
            vs.append(v[inside])
            ws.append(w[inside])
        if not vs:
            return np.empty(0), np.empty(0, dtype=self.weight_dtype)
        return np.concatenate(vs), np.concatenate(ws)

    def sample(self, per_block: int) -> tuple[np.ndarray, bool]:
        """About ``per_block`` gaps of each block, sorted, and whether any gap is NaN."""
        parts, nan = [], False
        for v, _ in self.blocks():
            if len(v):
                parts.append(v[::max(1, len(v) // per_block)].copy())  # not a view
                nan = nan or bool(np.isnan(v).any())
        return (np.sort(np.concatenate(parts)) if parts else np.empty(0)), nan


def _multiplicities(n: int, opens: np.ndarray, closes: np.ndarray, block: int
                    ) -> np.ndarray:
    """``c[j]`` = opens at or before ``j`` less closes at or before ``j``, for ``j < n``
    (the cumulative sum of +1 at each open and -1 at each close; ``opens`` and
    ``closes`` sorted), in the narrowest unsigned type that holds them (every count is
    >= 0), made a block at a time: no whole-run array wider than that type."""
    def part(lo: int) -> np.ndarray:
        at = np.arange(lo, min(lo + block, n))
        out: np.ndarray = (np.searchsorted(opens, at, side="right")
                           - np.searchsorted(closes, at, side="right"))
        return out

    most = max((int(part(lo).max()) for lo in range(0, n, block)), default=0)
    c = np.empty(n, dtype=np.min_scalar_type(most))
    for lo in range(0, n, block):
        c[lo:lo + block] = part(lo)
    return c


def itl_distribution(instances: list[InstanceFacts],
                     segments: Mapping[int, list[list[int]]]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The inter-chunk gaps as (gap values, multiplicities), without per-chunk lists: each
    instance's step gaps that some request saw (a positive multiplicity, unsigned), in
    instance and step order, then the gaps across a preemption (in request-id order).

    Within a segment a request emits a chunk every step, so step k's gap counts once for
    each segment containing both k-1 and k; gaps across a preemption are added singly.
    ``segments``: a ``SegmentTable`` (a dict of lists is converted).
    """
    return _Gaps(instances, segments).arrays()


def pairwise_sum(term: Callable[[slice], np.ndarray], n: int, leaf: int = _SUM_LEAF
                  ) -> float:
    """``term(slice(0, n)).sum()`` bit for bit, a piece of at most ``leaf`` at a time:
    numpy sums a contiguous array of doubles pairwise (two halves, the first a multiple
    of 8 long, down to blocks of 128), so summing the same halves gives the same rounding
    without the whole array of terms (a test checks it against numpy's own sum). Below
    128 numpy's blocks are not halves: ``leaf`` is at least that."""
    assert leaf >= 128
    if n <= leaf:
        return float(np.add.reduce(term(slice(0, n)), initial=0.0))

    def part(lo: int, hi: int) -> float:
        if hi - lo <= leaf:
            return float(np.add.reduce(term(slice(lo, hi)), initial=0.0))
        half = (hi - lo) // 2
        half -= half % 8
        return part(lo, lo + half) + part(lo + half, hi)

    return part(0, n)


def _in_value_order(v: np.ndarray, w: np.ndarray, min_size: int = _SORT_RANGE_MIN,
                    ranges: int = _SORT_RANGES) -> np.ndarray:
    """``w`` ordered as a stable sort orders ``v`` (``w[np.argsort(v, kind="stable")]``),
    a range of values at a time, so no index over all of ``v`` (8 bytes a gap) is held:
    the ranges lie between values sampled from ``v``, each sampled value a range of its
    own (its gaps in their order, no sort)."""
    n = len(v)
    if n <= min_size or math.isnan(float(v.min())):  # NaN: the plain way
        return w[np.argsort(v, kind="stable")]
    sample = np.sort(v[::max(1, n // (64 * ranges))])
    cuts = np.unique(sample[np.linspace(0, len(sample) - 1, ranges + 1,
                                        dtype=np.intp)])
    out = np.empty_like(w)
    pos = 0

    def put(part: np.ndarray) -> None:
        nonlocal pos
        out[pos:pos + len(part)] = part
        pos += len(part)

    lo = -math.inf
    for cut in [*cuts.tolist(), math.inf]:
        idx = _positions(v, lo, cut)
        put(w[idx[np.argsort(v[idx], kind="stable")]])
        del idx
        if cut != math.inf:
            put(w[_positions(v, cut, cut)])
        lo = cut
    assert pos == n
    return out


def _first_reaching(w: np.ndarray, targets: list[int], block: int = _GAP_BLOCK_STEPS
                    ) -> list[int]:
    """For each target, the first index whose cumulative weight (``np.cumsum(w)``)
    reaches it (``len(w)`` if none does): ``np.searchsorted(np.cumsum(w), target)``,
    without the whole array of cumulative weights (a block's at a time)."""
    starts = range(0, len(w), block)
    ends = np.cumsum([int(w[a:a + block].sum()) for a in starts], dtype=np.int64)
    out = []
    for t in targets:
        b = int(np.searchsorted(ends, t, side="left"))
        if b == len(ends):
            out.append(len(w))
            continue
        before = int(ends[b - 1]) if b else 0
        inner = np.cumsum(w[starts[b]:starts[b] + block], dtype=np.int64)
        out.append(starts[b] + int(np.searchsorted(inner, t - before, side="left")))
    return out


def _positions(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The indices, in order, of the ``v`` strictly between ``lo`` and ``hi`` (equal to
    ``lo`` if ``lo == hi``), tested a block at a time (no mask over all of ``v``)."""
    parts = []
    for at in range(0, len(v), _GAP_BLOCK_STEPS):
        block = v[at:at + _GAP_BLOCK_STEPS]
        inside = block == lo if lo == hi else (block > lo) & (block < hi)
        parts.append(np.flatnonzero(inside) + at)
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.intp)


def itl_stats(instances: list[InstanceFacts], segments: Mapping[int, list[list[int]]]
              ) -> LatencyStats:
    """ITL statistics: the mean, std and weighted ``PERCENTILES`` (as ``np.percentile``
    gives them) of the gaps of ``itl_distribution``. Up to ``_STREAM_ABOVE`` gaps they
    are gathered and sorted at once; above it (a light-load run has millions of steps)
    they are never all held: ``_streamed_stats`` takes them in value order a range of
    values at a time, twice, with the same figures bit for bit."""
    gaps = _Gaps(instances, segments)
    if not gaps.count:
        return LatencyStats(NAN, NAN, *(NAN for _ in PERCENTILES))
    if gaps.count > _STREAM_ABOVE:
        stats = _streamed_stats(gaps)
        if stats is not None:
            return stats
    v, w = gaps.arrays()
    del gaps
    return _sorted_stats(v, w)


def _sorted_stats(v: np.ndarray, w: np.ndarray) -> LatencyStats:
    """The statistics of gaps ``v`` with multiplicities ``w`` (both consumed), sorted."""
    # (a stable argsort at once: this path takes up to ``_STREAM_ABOVE`` gaps, or gaps
    # with a NaN, which ``_in_value_order`` argsorts at any size)
    w = _in_value_order(v, w, min_size=_STREAM_ABOVE)
    v.sort()  # the same values a stable sort gives, sorted in place
    # weights are whole numbers: their sums are exact in doubles and in integers alike
    total = float(w.sum())
    mean = float(pairwise_sum(lambda s: v[s] * w[s], len(v)) / total)
    std = float(math.sqrt(max(0.0, pairwise_sum(lambda s: w[s] * (v[s] - mean) ** 2,
                                                  len(v)) / total)))
    return LatencyStats(mean, std, *_weighted_percentiles(v, w, int(total)))


def _value_ranges(gaps: _Gaps, ranges: int) -> list[tuple[float, float]] | None:
    """Ranges of values that split the gaps in value order: open ranges between values
    sampled from them, each sampled value a range of its own (``lo == hi``); None when a
    gap is NaN (the sort's order of NaNs is left to the whole-array path)."""
    sample, nan = gaps.sample(max(1, 64 * ranges * gaps.block // max(1, gaps.count)))
    if nan or not len(sample):
        return None
    cuts = np.unique(sample[np.linspace(0, len(sample) - 1, ranges + 1, dtype=np.intp)])
    out: list[tuple[float, float]] = []
    lo = -math.inf
    for cut in [*cuts.tolist(), math.inf]:
        out.append((lo, cut))
        if cut != math.inf:
            out.append((cut, cut))
        lo = cut
    return out


def _in_order(gaps: _Gaps, spans: list[tuple[float, float]], size: int
              ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The gaps and their multiplicities in the order a stable sort by value gives, one
    range of values at a time (``_value_ranges``), in pieces of at most ``size`` (copies:
    a range's arrays are gone before the next range is gathered)."""
    for lo, hi in spans:
        v, w = gaps.gathered(lo, hi)
        if len(v) and lo != hi:
            order = np.argsort(v, kind="stable")
            v = v[order]
            w = w[order]
            del order
        for at in range(0, len(v), size):
            yield v[at:at + size].copy(), w[at:at + size].copy()
        del v, w


class _LeafSums:
    """The leaf sums of ``pairwise_sum``'s split of ``n`` terms, fed the terms in order
    a piece at a time (pieces of any length): each leaf is reduced by numpy as the
    whole-array path reduces it, so ``_combine`` gives the same sum bit for bit."""

    def __init__(self, n: int, leaf: int) -> None:
        self.n, self.leaf = n, leaf
        self._sizes = deque(hi - lo for lo, hi in _leaves(n, leaf))
        self._buf: list[np.ndarray] = []
        self._have = 0
        self.sums: list[float] = []

    def feed(self, terms: np.ndarray) -> None:
        pos = 0
        while self._sizes:
            need = self._sizes[0] - self._have
            if len(terms) - pos < need:
                break
            part = terms[pos:pos + need]
            leaf = np.concatenate([*self._buf, part]) if self._buf else part
            self.sums.append(float(np.add.reduce(leaf, initial=0.0)))
            self._sizes.popleft()
            self._buf, self._have = [], 0
            pos += need
        if pos < len(terms):
            self._buf.append(terms[pos:])
            self._have += len(terms) - pos

    def total(self) -> float:
        assert not self._sizes and not self._buf, "fed fewer terms than planned"
        return _combine(self.n, self.leaf, iter(self.sums))


def _leaves(n: int, leaf: int) -> list[tuple[int, int]]:
    """The leaves ``pairwise_sum`` reduces, in order."""
    if n <= leaf:
        return [(0, n)]
    out: list[tuple[int, int]] = []

    def part(lo: int, hi: int) -> None:
        if hi - lo <= leaf:
            out.append((lo, hi))
            return
        half = (hi - lo) // 2
        half -= half % 8
        part(lo, lo + half)
        part(lo + half, hi)

    part(0, n)
    return out


def _combine(n: int, leaf: int, sums: Iterator[float]) -> float:
    """``pairwise_sum``'s additions over its leaves' sums, in its order."""
    if n <= leaf:
        return next(sums)

    def part(lo: int, hi: int) -> float:
        if hi - lo <= leaf:
            return next(sums)
        half = (hi - lo) // 2
        half -= half % 8
        return part(lo, lo + half) + part(lo + half, hi)

    return part(0, n)


def _streamed_stats(gaps: _Gaps, ranges: int = _SORT_RANGES, leaf: int = _SUM_LEAF
                    ) -> LatencyStats | None:
    """``_sorted_stats`` of every gap, bit for bit, with one range of values held at a
    time: a pass in value order sums the mean's terms leaf by leaf (``_LeafSums``) and
    finds the percentiles' elements from the cumulative weights; a second pass sums the
    std's terms. None when a gap is NaN (the caller takes the whole-array path)."""
    spans = _value_ranges(gaps, ranges)
    if spans is None:
        return None
    n, total = gaps.count, gaps.total
    ranks, lows, targets = _percentile_targets(total)
    found: list[float | None] = [None] * len(targets)
    mean_terms = _LeafSums(n, leaf)
    before, last = 0, math.nan
    for v, w in _in_order(gaps, spans, gaps.block):
        mean_terms.feed(v * w)
        cum = np.cumsum(w, dtype=np.int64)
        cum += before
        for j, t in enumerate(targets):
            if found[j] is None and t <= cum[-1]:
                found[j] = float(v[int(np.searchsorted(cum, t, side="left"))])
        before, last = int(cum[-1]), float(v[-1])
    mean = float(mean_terms.total() / float(total))
    std_terms = _LeafSums(n, leaf)
    for v, w in _in_order(gaps, spans, gaps.block):
        std_terms.feed(w * (v - mean) ** 2)
    std = float(math.sqrt(max(0.0, std_terms.total() / float(total))))
    values = [last if x is None else x for x in found]  # unreached: the last gap
    return LatencyStats(mean, std, *_lerp(ranks, lows, values))


def _percentile_targets(n: int) -> tuple[list[float], list[int], list[int]]:
    """The ranks of ``PERCENTILES`` in ``n`` weighted gaps, their floors, and the
    cumulative weights whose first reaching gives each rank's two neighbours."""
    ranks = [p / 100.0 * (n - 1) for p in PERCENTILES]
    lows = [math.floor(r) for r in ranks]
    return ranks, lows, [k + 1 for k in lows] + [min(k + 1, n - 1) + 1 for k in lows]


def _lerp(ranks: list[float], lows: list[int], values: list[float]) -> list[float]:
    """Each percentile from its two neighbours (``values``: the lower ones, then the
    upper ones), by numpy's lerp, which interpolates from the nearer end."""
    out = []
    for j, (r, k) in enumerate(zip(ranks, lows, strict=True)):
        a, b = values[j], values[j + len(lows)]
        t = r - k
        out.append(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)
    return out


def _weighted_percentiles(v: np.ndarray, w: np.ndarray, n: int) -> list[float]:
    """``np.percentile(np.repeat(v, w), PERCENTILES)`` (linear interpolation, vLLM's
    ``vllm bench serve`` definition, so summary.json and bench_result.json give one p99
    ITL), without the repeated array: ``v`` sorted, ``w`` its whole-number weights
    summing to ``n``. Element k (0-based) of the repeated array is ``v[i]`` for the first
    ``i`` whose cumulative weight reaches k + 1."""
    ranks, lows, targets = _percentile_targets(n)
    idx = _first_reaching(w, targets)
    return _lerp(ranks, lows, [float(v[min(i, len(v) - 1)]) for i in idx])
