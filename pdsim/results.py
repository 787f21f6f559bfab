"""Facts recorded by a run, and the metrics derived from them.

A run leaves one flat record per request (timestamps, token counts, draft counters) and,
per instance, the end time of every engine step. Metrics are pure functions of those
facts (``summarize``), with vLLM's definitions (reference section 6):

- TTFT: arrival to the first output chunk; E2E: arrival to the last.
- TPOT: ``(E2E - TTFT) / (output_tokens - 1)`` per request with more than one token.
- ITL: gaps between output chunks (a speculative step's a+1 tokens are one chunk).
- acceptance rate: accepted / draft tokens; acceptance length: 1 + accepted / drafts;
  per-position rate i: accepted_per_pos[i] / drafts.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from pdsim.engine.request import Status
from pdsim.summary import (
    PERCENTILES,
    InstanceSummary,
    LatencyStats,
    RunSummary,
    SloSummary,
    SpecDecodeSummary,
)

if TYPE_CHECKING:
    import pandas as pd

    from pdsim.config import SimConfig
    from pdsim.engine.decode_rows import RowSnapshot
    from pdsim.engine.snapshot import InstanceSnapshot
    from pdsim.simulation import Simulation

NAN = math.nan

RECORD_FIELDS = (
    "request_id", "status", "fail_reason", "arrival_s", "prompt_tokens", "output_tokens",
    "target_output_tokens", "prefill_instance", "decode_instance", "p_queued_s", "p_start_s",
    "p_end_s", "transfer_start_s", "transfer_end_s", "d_queued_s", "first_token_s",
    "finish_s", "ttft_s", "tpot_s", "e2e_s", "num_chunks", "p_prompt_tokens",
    "kv_bytes_transferred", "kv_transfer_s", "tokens_recomputed_on_d",
    "d_local_prefill_tokens", "num_preemptions", "num_drafts", "num_draft_tokens",
    "num_accepted_tokens", "accepted_per_pos", "prefix_hit_tokens",
)


class RecordTable(Sequence[dict[str, Any]]):
    """Per-request records stored by column; reads like a list of flat dicts.

    Indexing or iterating builds each row's dict on demand, so 100k requests cost their
    columns' arrays, not 100k dicts. ``columns`` gives the arrays themselves.
    """

    __slots__ = ("_n", "columns")

    def __init__(self, columns: dict[str, Any]) -> None:
        self.columns = columns
        self._n = len(columns["request_id"]) if columns else 0

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        row: dict[str, Any] = {}
        for k, c in self.columns.items():
            v = c[i]
            row[k] = v.tolist() if hasattr(v, "tolist") else v
        return row

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(self._n):
            yield self[i]

    def column(self, key: str) -> Any:
        return self.columns[key]


def _column(records: Sequence[dict[str, Any]], key: str) -> Any:
    """One column of records, as stored when they are a ``RecordTable``."""
    if isinstance(records, RecordTable):
        return records.columns[key]
    return [r[key] for r in records]


@dataclass
class InstanceFacts:
    """What one instance did: its step end times and per-step log."""

    name: str
    role: str
    num_blocks: int
    step_end_s: np.ndarray
    # columns: start_s, end_s, prefill_tokens, decode_requests, kv_used_blocks, running,
    # waiting, receiving
    step_log: np.ndarray
    busy_s: float
    preemptions: int


@dataclass
class Results:
    """Everything a run produced: config, per-request records, instance facts, summary."""

    config: SimConfig
    records: Sequence[dict[str, Any]]
    instances: list[InstanceFacts]
    summary: RunSummary
    links: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    segments: dict[int, list[list[int]]] = field(default_factory=dict)
    partial: bool = False

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per request (a copy)."""
        return [dict(r) for r in self.records]

    @property
    def num_requests(self) -> int:
        return len(self.records)

    def to_pandas(self) -> pd.DataFrame:
        """The records as a DataFrame (needs pandas: ``pip install 'pdsim[pandas]'``)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("to_pandas() needs pandas: pip install 'pdsim[pandas]'") \
                from exc
        if isinstance(self.records, RecordTable):
            cols = {k: (list(map(list, v)) if k == "accepted_per_pos" else v)
                    for k, v in self.records.columns.items()}
            return pd.DataFrame(cols, columns=list(RECORD_FIELDS))
        return pd.DataFrame.from_records(list(self.records), columns=list(RECORD_FIELDS))

    def request_itls_s(self, request_id: int) -> np.ndarray:
        """Gaps between one request's output chunks, in seconds."""
        times = chunk_times(self.instances, self.segments.get(request_id, []))
        return np.diff(times)

    def __repr__(self) -> str:
        s = self.summary
        return (f"Results({s.completed}/{s.num_requests} finished, "
                f"output {s.output_throughput_tok_s:.1f} tok/s, "
                f"TTFT p50 {s.ttft.p50_s * 1e3:.1f} ms, "
                f"TPOT p50 {s.tpot.p50_s * 1e3:.2f} ms, "
                f"acceptance length {s.spec_decode.acceptance_length:.3f})")


def chunk_times(instances: list[InstanceFacts], segments: list[list[int]]) -> np.ndarray:
    """End times of the steps in which a request emitted chunks, in order."""
    if not segments:
        return np.empty(0)
    parts = [instances[i].step_end_s[a:b + 1] for i, a, b in segments]
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def build_results(sim: Simulation) -> Results:
    """The results of a finished (or interrupted) simulation: ``sim.finalize()``."""
    return sim.finalize()


def results_from(sim: Simulation, snapshots: list[InstanceSnapshot]) -> Results:
    """Collect the facts of a finished (or interrupted) simulation from its requests and
    its instances' ``snapshots`` (read only)."""
    inst_facts = [InstanceFacts(
        name=snap.name, role=snap.role, num_blocks=snap.num_blocks,
        step_end_s=snap.step_end_s, step_log=snap.step_log, busy_s=snap.busy_s,
        preemptions=snap.preemptions) for snap in snapshots]
    segments: dict[int, list[list[int]]] = {}
    reqs = sim.requests
    n = len(reqs)

    def col(get: Any, dtype: Any = np.float64) -> np.ndarray:
        """One value per request: ``get`` is an attribute name or a function."""
        if isinstance(get, str):
            get = operator.attrgetter(get)
        return np.fromiter(map(get, reqs), dtype=dtype, count=n)

    # requests still decoding when the run stopped (an interrupted run): their counters
    # and their open output segment are in their instance's decode rows
    live: dict[int, tuple[InstanceSnapshot, RowSnapshot]] = {}
    for snap in snapshots:
        for rid, row in snap.live_rows.items():
            live[rid] = (snap, row)
    for r in reqs:
        segments[r.id] = list(r.segments)
        if r.id in live:
            snap, row = live[r.id]
            last = len(snap.step_end_s) - 1
            if last >= row.segment_first_step:
                segments[r.id].append([snap.index, row.segment_first_step, last])
    finished = np.fromiter((r.status is Status.FINISHED for r in reqs), dtype=bool, count=n)
    arrival = col("arrival_s")
    first = col("first_token_s")
    finish = col("finish_s")
    out_tok = col("num_output", np.int64)
    ttft = first - arrival
    e2e = np.where(finished, finish - arrival, NAN)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(finished & (out_tok > 1), (e2e - ttft) / (out_tok - 1), NAN)
    t_start = col("transfer_start_s")
    t_end = col("transfer_end_s")
    nspec = sim.config.speculative.num_speculative_tokens
    columns: dict[str, Any] = {
        "request_id": col("id", np.int64),
        "status": [r.status.value for r in reqs],
        "fail_reason": [r.fail_reason for r in reqs],
        "arrival_s": arrival,
        "prompt_tokens": col("prompt_tokens", np.int64),
        "output_tokens": out_tok,
        "target_output_tokens": col("output_target", np.int64),
        "prefill_instance": [r.p_instance for r in reqs],
        "decode_instance": [r.d_instance for r in reqs],
        "p_queued_s": col("p_queued_s"), "p_start_s": col("p_start_s"),
        "p_end_s": col("p_end_s"),
        "transfer_start_s": t_start, "transfer_end_s": t_end,
        "d_queued_s": col("d_queued_s"), "first_token_s": first,
        "finish_s": finish, "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e,
        "num_chunks": col(lambda r: sum(b - a + 1 for _, a, b in segments[r.id]), np.int64),
        "p_prompt_tokens": col("p_prompt_tokens", np.int64),
        "kv_bytes_transferred": col("kv_bytes", np.int64),
        "kv_transfer_s": t_end - t_start,
        "tokens_recomputed_on_d": col("tokens_recomputed_on_d", np.int64),
        "d_local_prefill_tokens": col("d_local_prefill_tokens", np.int64),
        "num_preemptions": col("num_preemptions", np.int64),
        "num_drafts": col("num_drafts", np.int64),
        "num_draft_tokens": col("num_draft_tokens", np.int64),
        "num_accepted_tokens": col("num_accepted_tokens", np.int64),
        "accepted_per_pos": (np.stack([r.accepted_per_pos for r in reqs]) if n
                             else np.zeros((0, nspec), dtype=np.int64)),
        "prefix_hit_tokens": col("prefix_hit_tokens", np.int64),
    }
    for rid, (_, row) in live.items():
        i = rid  # requests are numbered in the order they are stored
        assert reqs[i].id == rid
        columns["output_tokens"][i] = row.output_tokens
        columns["num_drafts"][i] += row.drafts
        columns["num_draft_tokens"][i] += row.draft_tokens
        columns["num_accepted_tokens"][i] += row.accepted_tokens
        if nspec:
            columns["accepted_per_pos"][i] += row.accepted_per_pos
    records = RecordTable(columns)
    links = {link.name: link.samples for link in sim.links.values()}
    queried = sum(snap.prefix_query_tokens for snap in snapshots)
    summary = replace(
        summarize(records, inst_facts, segments, sim.config),
        kv_lease_expired=sim.lease_expired, faults=dict(sim.faults.counts),
        prefix_cache_hit_rate=(sum(snap.prefix_hit_tokens for snap in snapshots) / queried
                               if queried else math.nan))
    return Results(sim.config, records, inst_facts, summary, links, segments)


def _stats(values: np.ndarray, weights: np.ndarray | None = None) -> LatencyStats:
    """Mean, std and ``PERCENTILES`` of ``values`` (NaNs dropped), or of a weighted sample
    (``weights`` are multiplicities; the lower weighted percentile); all NaN when empty."""
    v = values[~np.isnan(values)] if weights is None else values
    if weights is not None and len(v):
        order = np.argsort(v, kind="stable")
        v, w = v[order], weights[order].astype(np.float64)
        keep = w > 0
        v, w = v[keep], w[keep]
    if not len(v):
        return LatencyStats(NAN, NAN, *(NAN for _ in PERCENTILES))
    if weights is None:
        return LatencyStats(float(np.mean(v)), float(np.std(v)),
                            *(float(np.percentile(v, p)) for p in PERCENTILES))
    total = w.sum()
    mean = float((v * w).sum() / total)
    std = float(math.sqrt(max(0.0, (w * (v - mean) ** 2).sum() / total)))
    cum = np.cumsum(w)
    # the lower weighted percentile (the value at or above p% of the mass)
    pcts = [float(v[min(int(np.searchsorted(cum, p / 100.0 * total, side="left")), len(v) - 1)])
            for p in PERCENTILES]
    return LatencyStats(mean, std, *pcts)


def itl_distribution(instances: list[InstanceFacts], segments: dict[int, list[list[int]]]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """All inter-chunk gaps as (gap values, multiplicities), without per-chunk lists.

    Within a segment a request emits a chunk every step, so step k's gap counts once for
    each segment containing both k-1 and k; gaps across a preemption are added singly.
    """
    counts = [np.zeros(len(f.step_end_s) + 1, dtype=np.int64) for f in instances]
    extra: list[float] = []
    for segs in segments.values():
        prev_end = None
        for i, a, b in segs:
            if b > a:
                counts[i][a + 1] += 1
                counts[i][b + 1] -= 1
            t0 = instances[i].step_end_s[a]
            if prev_end is not None:
                extra.append(t0 - prev_end)
            prev_end = instances[i].step_end_s[b]
    vals, wts = [], []
    for f, c in zip(instances, counts, strict=True):
        if len(f.step_end_s) < 2:
            continue
        mult = np.cumsum(c)[1:len(f.step_end_s)]
        gaps = np.diff(f.step_end_s)
        vals.append(gaps)
        wts.append(mult)
    if extra:
        vals.append(np.asarray(extra))
        wts.append(np.ones(len(extra), dtype=np.int64))
    if not vals:
        return np.empty(0), np.empty(0, dtype=np.int64)
    return np.concatenate(vals), np.concatenate(wts)


def time_weighted_mean(times_start: np.ndarray, times_end: np.ndarray, values: np.ndarray,
                       horizon_s: float) -> float:
    """Mean of a step-wise series over [0, horizon]: each value holds for its step."""
    if horizon_s <= 0 or not len(values):
        return 0.0
    return float((values * (times_end - times_start)).sum() / horizon_s)


def summarize(records: Sequence[dict[str, Any]], instances: list[InstanceFacts],
              segments: dict[int, list[list[int]]], config: SimConfig) -> RunSummary:
    """The run's metrics, from its facts alone (the cluster-level counters, such as
    ``kv_lease_expired``, are left at their defaults for ``build_results`` to fill)."""
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
    gaps, mult = itl_distribution(instances, segments)

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
        itl=_stats(gaps, mult),
        spec_decode=_spec_decode(records, col, config),
        kv_bytes_transferred=int(col["kv_bytes_transferred"].sum()) if n else 0,
        kv_transfer_time_s=float(kt.sum()) if len(kt) else 0.0,
        mean_kv_transfer_s=float(kt.mean()) if len(kt) else NAN,
        tokens_recomputed_on_d=int(col["tokens_recomputed_on_d"].sum()) if n else 0,
        d_local_prefill_tokens=int(col["d_local_prefill_tokens"].sum()) if n else 0,
        preemptions=int(col["num_preemptions"].sum()) if n else 0,
        slo=_slo(col, finished, duration, config),
        instances=_instances(instances),
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


def _instances(instances: list[InstanceFacts]) -> dict[str, InstanceSummary]:
    """Per instance, time-weighted over the run's horizon (the last step end)."""
    horizon = max((float(f.step_end_s[-1]) for f in instances if len(f.step_end_s)),
                  default=0.0)
    per_inst = {}
    for f in instances:
        log = f.step_log
        kv = (time_weighted_mean(log[:, 0], log[:, 1], log[:, 4] / f.num_blocks, horizon)
              if len(log) else 0.0)
        running = time_weighted_mean(log[:, 0], log[:, 1], log[:, 5], horizon) if len(log) \
            else 0.0
        per_inst[f.name] = InstanceSummary(
            role=f.role, steps=len(f.step_end_s),
            busy_fraction=f.busy_s / horizon if horizon > 0 else 0.0,
            mean_kv_usage=kv, mean_running=running, preemptions=f.preemptions)
    return per_inst
