"""Metrics derived from a run's facts, with vLLM's definitions (reference section 6).

Pure functions of the per-request records and the instances' step facts:

- TTFT: arrival to the client's first streamed response (the first output chunk, or
  ``SimConfig.first_response_steps`` of the request's engine steps later:
  ``results.first_response_s``); E2E: arrival to
  the last chunk.
- TPOT: ``(E2E - TTFT) / (output_tokens - 1)`` per request with more than one token.
- ITL: gaps between output chunks (a speculative step's a+1 tokens are one chunk;
  their distribution in ``pdsim.itl``).
- acceptance rate: accepted / draft tokens; acceptance length: 1 + accepted / drafts;
  per-position rate i: accepted_per_pos[i] / drafts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pdsim.facts import InstanceFacts, StepColumns
from pdsim.itl import itl_stats, latency_stats, pairwise_sum
from pdsim.summary import (
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


class _FloatColumns(Mapping[str, np.ndarray]):
    """The records' columns as float64, each converted when read and not kept (a column
    of integers is a float copy: holding all of them at once was the summary's peak)."""

    _KEYS = ("arrival_s", "finish_s", "ttft_s", "tpot_s", "e2e_s", "output_tokens",
             "prompt_tokens", "kv_bytes_transferred", "kv_transfer_s",
             "tokens_recomputed_on_d", "d_local_prefill_tokens", "num_drafts",
             "num_draft_tokens", "num_accepted_tokens", "num_preemptions")

    def __init__(self, records: Sequence[dict[str, Any]]) -> None:
        self._records = records

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._KEYS:
            raise KeyError(key)
        return np.asarray(_column(self._records, key), dtype=np.float64)

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def __len__(self) -> int:
        return len(self._KEYS)


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
    col: Mapping[str, np.ndarray] = _FloatColumns(records) if n else {}
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
        ttft=latency_stats(col["ttft_s"][finished] if n else empty),
        tpot=latency_stats(col["tpot_s"][finished] if n else empty),
        e2e=latency_stats(col["e2e_s"][finished] if n else empty),
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


def _spec_decode(records: Sequence[dict[str, Any]], col: Mapping[str, np.ndarray],
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


def _slo(col: Mapping[str, np.ndarray], finished: np.ndarray, duration: float,
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

    return pairwise_sum(held, len(steps)) / horizon_s


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
