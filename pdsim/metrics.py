"""Metrics derived from a run's facts, with vLLM's definitions (reference section 6).

Pure functions of the per-request records and the instances' step facts:

- TTFT: arrival to the first output chunk; E2E: arrival to the last.
- TPOT: ``(E2E - TTFT) / (output_tokens - 1)`` per request with more than one token.
- ITL: gaps between output chunks (a speculative step's a+1 tokens are one chunk).
- acceptance rate: accepted / draft tokens; acceptance length: 1 + accepted / drafts;
  per-position rate i: accepted_per_pos[i] / drafts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pdsim.facts import InstanceFacts, SegmentTable, StepColumns
from pdsim.summary import (
    PERCENTILES,
    InstanceSummary,
    LatencyStats,
    RunSummary,
    SloSummary,
    SpecDecodeSummary,
)

if TYPE_CHECKING:
    from pdsim.config import SimConfig

NAN = math.nan


def chunk_times(instances: list[InstanceFacts], segments: list[list[int]]) -> np.ndarray:
    """End times of the steps in which a request emitted chunks, in order."""
    if not segments:
        return np.empty(0)
    parts = [instances[i].step_end_s[a:b + 1] for i, a, b in segments]
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _column(records: Sequence[dict[str, Any]], key: str) -> Any:
    """One column of records, as stored when they are columnar (``RecordTable``)."""
    columns = getattr(records, "columns", None)
    if columns is not None:
        return columns[key]
    return [r[key] for r in records]


def _stats(values: np.ndarray) -> LatencyStats:
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
# the ITL mean and std: terms summed a piece of this many gaps at a time
_SUM_LEAF = 1 << 16


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
    table = SegmentTable.from_dict(segments)
    rows = table.rows
    inst, first, last = rows[:, 1], rows[:, 2], rows[:, 3]
    # the gap from each segment's predecessor of the same request: its first step's end
    # less the predecessor's last step's end
    t_first = np.empty(len(rows))
    t_last = np.empty(len(rows))
    counts = []
    for k, f in enumerate(instances):
        on = np.flatnonzero(inst == k)
        t_first[on] = f.step_end_s[first[on]]
        t_last[on] = f.step_end_s[last[on]]
        spans = on[last[on] > first[on]]
        c = np.zeros(len(f.step_end_s) + 1, dtype=np.int32)
        np.add.at(c, first[spans] + 1, 1)
        np.add.at(c, last[spans] + 1, -1)
        del on, spans
        np.cumsum(c, out=c)  # c[k]: the segments step k - 1's gap counts for
        counts.append(c.astype(np.min_scalar_type(int(c.max()) if len(c) else 0)))  # >= 0
        del c
    rid = table.request_ids()
    follows = np.flatnonzero(rid[1:] == rid[:-1])
    extra = t_first[follows + 1] - t_last[follows]
    del rid, follows, t_first, t_last
    total = len(extra) + sum(int(np.count_nonzero(c[1:len(f.step_end_s)]))
                             for f, c in zip(instances, counts, strict=True))
    vals = np.empty(total)
    # the multiplicities in the narrowest unsigned type that holds them (one byte, mostly)
    most = max([1, *(int(c.max()) for c in counts if len(c))])
    wts = np.empty(total, dtype=np.min_scalar_type(most))
    pos = 0
    for k, f in enumerate(instances):
        ends, mult = f.step_end_s, counts[k]
        for lo in range(1, len(ends), _GAP_BLOCK_STEPS):
            hi = min(lo + _GAP_BLOCK_STEPS, len(ends))
            seen = mult[lo:hi] > 0
            gaps = ends[lo:hi] - ends[lo - 1:hi - 1]
            n = int(np.count_nonzero(seen))
            vals[pos:pos + n] = gaps[seen]
            wts[pos:pos + n] = mult[lo:hi][seen]
            pos += n
        counts[k] = mult = np.empty(0, dtype=np.int32)  # freed as it goes
    vals[pos:] = extra
    wts[pos:] = 1
    return vals, wts


def _pairwise_sum(term: Callable[[slice], np.ndarray], n: int, leaf: int = _SUM_LEAF
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
    gives them) of the gaps of ``itl_distribution``, sorted with one copy of them alive
    at a time (a light-load run has millions of steps)."""
    v, w = itl_distribution(instances, segments)
    if not len(v):
        return LatencyStats(NAN, NAN, *(NAN for _ in PERCENTILES))
    w = _in_value_order(v, w)
    v.sort()  # the same values a stable sort gives, sorted in place
    # weights are whole numbers: their sums are exact in doubles and in integers alike
    total = float(w.sum())
    mean = float(_pairwise_sum(lambda s: v[s] * w[s], len(v)) / total)
    std = float(math.sqrt(max(0.0, _pairwise_sum(lambda s: w[s] * (v[s] - mean) ** 2,
                                                  len(v)) / total)))
    return LatencyStats(mean, std, *_weighted_percentiles(v, w, int(total)))


def _weighted_percentiles(v: np.ndarray, w: np.ndarray, n: int) -> list[float]:
    """``np.percentile(np.repeat(v, w), PERCENTILES)`` (linear interpolation, vLLM's
    ``vllm bench serve`` definition, so summary.json and bench_result.json give one p99
    ITL), without the repeated array: ``v`` sorted, ``w`` its whole-number weights
    summing to ``n``. Element k (0-based) of the repeated array is ``v[i]`` for the first
    ``i`` whose cumulative weight reaches k + 1."""
    ranks = [p / 100.0 * (n - 1) for p in PERCENTILES]
    lows = [math.floor(r) for r in ranks]
    idx = _first_reaching(w, [k + 1 for k in lows] + [min(k + 1, n - 1) + 1 for k in lows])
    out = []
    for j, (r, k) in enumerate(zip(ranks, lows, strict=True)):
        a = float(v[min(idx[j], len(v) - 1)])
        b = float(v[min(idx[j + len(lows)], len(v) - 1)])
        t = r - k
        # numpy's lerp, which interpolates from the nearer end
        out.append(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)
    return out


def time_weighted_mean(times_start: np.ndarray, times_end: np.ndarray, values: np.ndarray,
                       horizon_s: float) -> float:
    """Mean of a step-wise series over [0, horizon]: each value holds for its step."""
    if horizon_s <= 0 or not len(values):
        return 0.0
    return float((values * (times_end - times_start)).sum() / horizon_s)


def summarize(records: Sequence[dict[str, Any]], instances: list[InstanceFacts],
              segments: Mapping[int, list[list[int]]], config: SimConfig,
              itl: LatencyStats | None = None) -> RunSummary:
    """The run's metrics, from its facts alone (the cluster-level counters, such as
    ``kv_lease_expired``, are left at their defaults for ``results_from`` to fill).
    ``itl``: ``itl_stats(instances, segments)`` if already computed."""
    n = len(records)
    col = {k: np.asarray(_column(records, k), dtype=np.float64)
           for k in ("arrival_s", "finish_s", "ttft_s", "tpot_s", "e2e_s", "output_tokens",
                     "prompt_tokens", "kv_bytes_transferred", "kv_transfer_s",
                     "tokens_recomputed_on_d", "d_local_prefill_tokens", "num_drafts",
                     "num_draft_tokens", "num_accepted_tokens", "num_preemptions")} \
        if n else {}
    status = list(_column(records, "status"))
    finished = np.asarray([s == "finished" for s in status], dtype=bool)
    completed = int(finished.sum())
    reasons: dict[str, int] = {}
    for why in _column(records, "fail_reason"):
        if why:
            reasons[why] = reasons.get(why, 0) + 1
    if n:
        start = float(np.nanmin(col["arrival_s"]))
        ends = col["finish_s"][finished]
        end = float(ends.max()) if len(ends) else start
    else:
        start = end = 0.0
    duration = max(end - start, 0.0)
    out_tok = float(col["output_tokens"][finished].sum()) if n else 0.0
    in_tok = float(col["prompt_tokens"][finished].sum()) if n else 0.0
    empty = np.empty(0)
    if itl is None:
        itl = itl_stats(instances, segments)

    kt = col["kv_transfer_s"] if n else empty
    kt = kt[~np.isnan(kt)]
    return RunSummary(
        num_requests=n,
        completed=completed,
        failed=status.count("failed"),
        rejected=status.count("rejected"),
        in_flight=status.count("in_flight"),
        failure_reasons=dict(sorted(reasons.items())),
        duration_s=duration,
        total_input_tokens=int(in_tok),
        total_output_tokens=int(out_tok),
        request_throughput_req_s=completed / duration if duration > 0 else NAN,
        output_throughput_tok_s=out_tok / duration if duration > 0 else NAN,
        total_token_throughput_tok_s=(in_tok + out_tok) / duration if duration > 0 else NAN,
        ttft=_stats(col["ttft_s"][finished] if n else empty),
        tpot=_stats(col["tpot_s"][finished] if n else empty),
        e2e=_stats(col["e2e_s"][finished] if n else empty),
        itl=itl,
        spec_decode=_spec_decode(records, col, config),
        kv_bytes_transferred=int(col["kv_bytes_transferred"].sum()) if n else 0,
        kv_transfer_time_s=float(kt.sum()) if len(kt) else 0.0,
        mean_kv_transfer_s=float(kt.mean()) if len(kt) else NAN,
        tokens_recomputed_on_d=int(col["tokens_recomputed_on_d"].sum()) if n else 0,
        d_local_prefill_tokens=int(col["d_local_prefill_tokens"].sum()) if n else 0,
        preemptions=int(col["num_preemptions"].sum()) if n else 0,
        slo=_slo(col, finished, duration, config),
        instances=_instances(instances, records),
    )


def _spec_decode(records: Sequence[dict[str, Any]], col: dict[str, np.ndarray],
                 config: SimConfig) -> SpecDecodeSummary:
    """Speculative decoding, vLLM's counters and definitions."""
    n = len(records)
    nspec = config.speculative.num_speculative_tokens
    drafts = int(col["num_drafts"].sum()) if n else 0
    draft_tokens = int(col["num_draft_tokens"].sum()) if n else 0
    accepted = int(col["num_accepted_tokens"].sum()) if n else 0
    per_pos = (np.asarray(_column(records, "accepted_per_pos"), dtype=np.int64)
               .reshape(n, -1).sum(axis=0) if n and nspec else np.zeros(nspec, dtype=np.int64))
    return SpecDecodeSummary(
        num_drafts=drafts,
        num_draft_tokens=draft_tokens,
        num_accepted_tokens=accepted,
        num_accepted_tokens_per_pos=tuple(per_pos.tolist()),
        acceptance_rate=accepted / draft_tokens if draft_tokens else NAN,
        acceptance_length=1.0 + accepted / drafts if drafts else NAN,
        per_position_acceptance_rates=tuple((per_pos / drafts).tolist()) if drafts else (),
    )


def _slo(col: dict[str, np.ndarray], finished: np.ndarray, duration: float,
         config: SimConfig) -> SloSummary | None:
    """SLO attainment and goodput; None when the config sets no TTFT or TPOT target."""
    slo = config.slo
    if slo.ttft_s is None and slo.tpot_s is None:
        return None
    n = len(finished)
    ok = finished.copy()
    if slo.ttft_s is not None:
        ok &= np.nan_to_num(col["ttft_s"], nan=np.inf) <= slo.ttft_s
    if slo.tpot_s is not None:
        tp = col["tpot_s"]
        ok &= np.where(np.isnan(tp), True, tp <= slo.tpot_s)
    pct = slo.percentile
    ttft_p = (float(np.percentile(col["ttft_s"][finished], pct))
              if finished.any() else NAN)
    tp_f = col["tpot_s"][finished]
    tp_f = tp_f[~np.isnan(tp_f)]
    tpot_p = float(np.percentile(tp_f, pct)) if len(tp_f) else NAN
    meets = int(finished.sum()) == n
    if slo.ttft_s is not None:
        meets = meets and ttft_p <= slo.ttft_s
    if slo.tpot_s is not None:
        meets = meets and (math.isnan(tpot_p) or tpot_p <= slo.tpot_s)
    return SloSummary(
        attainment=float(ok.sum() / n) if n else NAN,
        goodput_req_s=float(ok.sum() / duration) if duration > 0 else NAN,
        ttft_percentile_s=ttft_p,
        tpot_percentile_s=tpot_p,
        met=bool(meets),
    )


def _step_weighted_mean(steps: StepColumns, name: str, horizon_s: float,
                        divisor: int | None = None) -> float:
    """``time_weighted_mean`` of step column ``name`` (divided by ``divisor``) bit for
    bit, its terms built and summed a piece at a time: a light-load run has millions of
    steps, and the whole-run arrays of starts, lengths and terms would be its peak."""
    values, end = steps.column(name), steps.end_s

    def held(s: slice) -> np.ndarray:
        v = values[s] if divisor is None else values[s] / divisor
        out: np.ndarray = v * (end[s] - steps.start_s(s.start, s.stop))
        return out

    return _pairwise_sum(held, len(steps)) / horizon_s


def record_values(records: Sequence[Mapping[str, Any]], key: str) -> list[Any]:
    """Column ``key`` of ``records`` as a list: a column store's own column when it has
    one (``RecordTable.column``: no row dicts built), else each record's value."""
    column = getattr(records, "column", None)
    if column is not None:
        values = column(key)
        return values.tolist() if hasattr(values, "tolist") else list(values)
    return [r.get(key) for r in records]


def record_floats(records: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    """Column ``key`` as float64, None as NaN."""
    return np.asarray([np.nan if v is None else v for v in record_values(records, key)],
                      dtype=np.float64)


def prefill_slot_intervals_by_instance(records: Sequence[Mapping[str, Any]]
                                       ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``prefill_slot_intervals`` of every prefill instance, in one pass over the records
    (one call per instance would scan them once per instance)."""
    names = record_values(records, "prefill_instance")
    start, end = record_floats(records, "p_start_s"), record_floats(records, "p_end_s")
    rows: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        if name is not None:
            rows.setdefault(name, []).append(i)
    out = {}
    for name, idx in rows.items():
        s, e = start[idx], end[idx]
        keep = np.isfinite(s) & np.isfinite(e)
        out[name] = (s[keep], e[keep])
    return out


def prefill_slot_intervals(records: Sequence[Mapping[str, Any]], instance: str
                           ) -> tuple[np.ndarray, np.ndarray]:
    """``[p_start_s, p_end_s)`` of every request prefilled on ``instance``: the time each
    held a prefill slot there. What "running" means on a prefill instance, in every output
    (summary, timeseries.csv, plots, report): P's step log counts its batch at step ends,
    after the step's finished prefills have left it, so it reads near 0 however busy P
    is. A request whose prefill has not ended (an interrupted run) is not counted."""
    empty = np.zeros(0, dtype=np.float64)
    return prefill_slot_intervals_by_instance(records).get(instance, (empty, empty))


def _instances(instances: list[InstanceFacts], records: Sequence[Mapping[str, Any]] = ()
               ) -> dict[str, InstanceSummary]:
    """Per instance, time-weighted over the run's horizon (the last step end). Running
    requests on a prefill instance: ``prefill_slot_intervals``; elsewhere the step log's
    batch at each step end, held for the step."""
    horizon = max((float(f.step_end_s[-1]) for f in instances if len(f.step_end_s)),
                  default=0.0)
    per_inst = {}
    empty = np.zeros(0, dtype=np.float64)
    slots = (prefill_slot_intervals_by_instance(records)
             if any(f.role == "prefill" for f in instances) else {})
    for f in instances:
        steps = f.steps
        kv = running = 0.0
        if len(steps) and horizon > 0:
            kv = _step_weighted_mean(steps, "kv_used_blocks", horizon, f.num_blocks)
            if f.role == "prefill":
                start, end = slots.get(f.name, (empty, empty))
                held = np.clip(end, 0.0, horizon) - np.clip(start, 0.0, horizon)
                running = float(held.sum()) / horizon
            else:
                running = _step_weighted_mean(steps, "running", horizon)
        per_inst[f.name] = InstanceSummary(
            role=f.role, steps=len(f.step_end_s),
            busy_fraction=f.busy_s / horizon if horizon > 0 else 0.0,
            mean_kv_usage=kv, mean_running=running, preemptions=f.preemptions, pool=f.pool)
    return per_inst
