"""pdsim runs as ``vllm bench serve --save-result --save-detailed`` documents.

The one place a bench result is written: ``make_bench_result`` from records and totals,
``run_bench_result`` from a pdsim ``Results`` (what ``bench_result.json`` in ``--out`` holds
and what validation compares against a real result).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from pdsim.realdata.bench_metrics import per_request_latencies, stat_block
from pdsim.realdata.bench_result import PERCENTILE_METRICS, RAMP_UP_FIELDS
from pdsim.realdata.prometheus import AcceptanceStats

if TYPE_CHECKING:
    from pdsim.results import Results


def _json_number(x: float) -> float | str:
    return "inf" if math.isinf(x) else float(x)


def _peaks(starts: np.ndarray, ttfts: np.ndarray, e2es: np.ndarray,
           itls: Sequence[Sequence[float]]) -> tuple[float, int]:
    """vLLM's peak output chunks per one-second bucket and peak concurrent requests."""
    if len(starts) == 0:
        return 0.0, 0
    t0 = float(starts.min())
    ends = starts + e2es
    buckets = int(np.ceil(float(ends.max()) - t0)) + 1
    counts = np.zeros(buckets)
    for s, ttft, gaps in zip(starts, ttfts, itls, strict=True):
        times = s + ttft + np.concatenate(([0.0], np.cumsum(np.asarray(gaps, dtype=float))))
        b = (times - t0).astype(np.int64)
        b = b[(b >= 0) & (b < buckets)]
        np.add.at(counts, b, 1)
    # Half-open [start, end): a departure at t precedes an arrival at t.
    events = sorted([(float(s), 1) for s in starts] + [(float(e), -1) for e in ends])
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return float(counts.max()), peak


def make_bench_result(
    records: Sequence[Mapping[str, Any]],
    summary: Mapping[str, Any],
    *,
    percentiles: Sequence[float] = (50, 90, 99),
    meta: Mapping[str, Any] | None = None,
    goodput_slo_ms: Mapping[str, float] | None = None,
    spec_decode: AcceptanceStats | None = None,
) -> dict[str, Any]:
    """A pdsim run as a ``vllm bench serve --save-result --save-detailed`` dict.

    ``records`` are pdsim's per-request records (``request_id``, ``status``,
    ``arrival_s``, ``prompt_tokens``, ``output_tokens``, ``ttft_s``, ``e2e_s``,
    ``itls_s``); ``summary`` gives ``duration_s`` (the makespan), ``num_requests`` and
    ``completed``. Requests are listed in ``request_id`` order; only ``status ==
    "finished"`` counts as completed, as in vLLM. Statistics are emitted for ttft, tpot,
    itl and e2el at ``percentiles``.

    ``meta`` fills the header: ``date`` (default now), ``backend`` (default ``"pdsim"``),
    ``endpoint_type``, ``label``, ``model_id``, ``tokenizer_id``, ``num_prompts``,
    ``request_rate`` (number or ``"inf"``), ``burstiness``, ``max_concurrency``,
    ``ramp_up_*``; other keys are written like ``--metadata`` entries.
    ``burstiness`` stays a float (``inf`` for constant gaps, which ``vllm bench serve``
    json.dumps as ``Infinity``).
    ``goodput_slo_ms`` (keys ``ttft``, ``tpot``, ``e2el``) gives ``request_goodput``;
    ``spec_decode`` adds the ``spec_decode_*`` fields.
    """
    meta = dict(meta or {})
    duration = float(summary["duration_s"])
    if not duration > 0:
        raise ValueError(f"summary duration_s must be > 0, got {duration}")
    recs = sorted(records, key=lambda r: int(r["request_id"]))
    ok = np.array([r["status"] == "finished" for r in recs], dtype=bool)
    prompt = np.array([int(r["prompt_tokens"]) for r in recs], dtype=np.int64)
    out_lens = np.where(ok, [int(r["output_tokens"]) for r in recs], 0).astype(np.int64)
    ttft = np.array([float(r["ttft_s"]) if k else 0.0 for r, k in zip(recs, ok, strict=True)])
    e2e = np.array([float(r["e2e_s"]) if k else 0.0 for r, k in zip(recs, ok, strict=True)])
    itls = [[float(x) for x in r["itls_s"]] if k else [] for r, k in zip(recs, ok, strict=True)]
    starts = np.array([float(r["arrival_s"]) if math.isfinite(float(r["arrival_s"])) else 0.0
                       for r in recs])
    idx = np.flatnonzero(ok)
    per = per_request_latencies(ttft[idx], e2e[idx], out_lens[idx], [
        np.asarray(itls[i], dtype=np.float64) for i in idx])
    completed = len(idx)
    total_in = int(prompt[idx].sum())
    total_out = int(out_lens.sum())

    good: float | None = None
    if goodput_slo_ms:
        unknown = set(goodput_slo_ms) - {"ttft", "tpot", "e2el"}
        if unknown:
            raise ValueError(f"goodput SLOs are ttft, tpot, e2el; got {sorted(unknown)}")
        # vLLM judges TPOT of a one-token request as 0.
        tpot_all = np.where(out_lens[idx] > 1, (e2e[idx] - ttft[idx])
                            / np.maximum(out_lens[idx] - 1, 1), 0.0)
        by_metric = {"ttft": ttft[idx], "tpot": tpot_all, "e2el": e2e[idx]}
        good_mask = np.ones(completed, dtype=bool)
        for key, slo in goodput_slo_ms.items():
            good_mask &= by_metric[key] <= slo / 1000.0
        good = int(good_mask.sum()) / duration

    rate = meta.pop("request_rate", "inf")
    rate_num = math.inf if rate in ("inf", None) else float(rate)
    max_conc = meta.pop("max_concurrency", None)
    backend = meta.pop("backend", "pdsim")
    model_id = meta.pop("model_id", None)
    result: dict[str, Any] = {
        "date": meta.pop("date", None) or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": meta.pop("endpoint_type", backend),
        "backend": backend,
        "label": meta.pop("label", None),
        "model_id": model_id,
        "tokenizer_id": meta.pop("tokenizer_id", model_id),
        "num_prompts": int(meta.pop("num_prompts", summary.get("num_requests", len(recs)))),
    }
    ramp = {k: meta.pop(k) for k in RAMP_UP_FIELDS if k in meta}
    burstiness = float(meta.pop("burstiness", 1.0))
    result.update({str(k): v for k, v in meta.items()})
    result["request_rate"] = _json_number(rate_num)
    result["burstiness"] = burstiness  # vLLM keeps the float: inf for constant gaps
    result["max_concurrency"] = None if max_conc is None else int(max_conc)
    result.update(ramp)

    # vLLM's client waits on its semaphore before sending: with everything sent at 0 under
    # a concurrency limit, the wait is the send time. pdsim's open loop never waits.
    closed = max_conc is not None and math.isinf(rate_num)
    queue = starts.copy() if closed else np.zeros(len(recs))
    peak_tps, peak_conc = _peaks(starts[idx], ttft[idx], e2e[idx], [itls[i] for i in idx])
    result.update({
        "duration": duration,
        "completed": completed,
        "failed": len(recs) - completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": completed / duration,
        "request_goodput": good,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
        "input_lens": [int(x) for x in prompt],
        "output_lens": [int(x) for x in out_lens],
        "ttfts": [float(x) for x in ttft],
        "itls": itls,
        "latencies": [float(x) for x in e2e],
        "start_times": [float(x) for x in starts],
        "queue_times": [float(x) for x in queue],
        "generated_texts": ["" for _ in recs],
        "errors": ["" if k else f"pdsim: request {r['status']}"
                   for r, k in zip(recs, ok, strict=True)],
        "max_output_tokens_per_s": peak_tps,
        "max_concurrent_requests": peak_conc,
        "rtfx": 0.0,
    })
    if spec_decode is not None and spec_decode.num_draft_tokens > 0:
        result["spec_decode_acceptance_rate"] = spec_decode.acceptance_rate * 100.0
        result["spec_decode_acceptance_length"] = spec_decode.acceptance_length
        result["spec_decode_num_drafts"] = spec_decode.num_drafts
        result["spec_decode_draft_tokens"] = spec_decode.num_draft_tokens
        result["spec_decode_accepted_tokens"] = spec_decode.num_accepted_tokens
        result["spec_decode_per_position_acceptance_rates"] = list(
            spec_decode.per_position_rates)
    for metric in PERCENTILE_METRICS:
        result.update(stat_block(per[metric], metric, percentiles))
    return result


def run_bench_result(res: Results) -> dict[str, object]:
    """A pdsim run as a ``vllm bench serve --save-result`` document; ``{}`` when it has no
    duration (nothing finished)."""
    records = []
    for r in res.records:
        row = dict(r)
        row["itls_s"] = res.request_itls_s(r["request_id"]).tolist()
        records.append(row)
    s = res.summary
    sd = s.spec_decode
    spec = None
    if sd.num_drafts:
        spec = AcceptanceStats(sd.num_drafts, sd.num_draft_tokens, sd.num_accepted_tokens,
                               sd.num_accepted_tokens_per_pos, source="pdsim")
    if not s.duration_s > 0:
        return {}
    summary = {"duration_s": s.duration_s, "num_requests": s.num_requests,
               "completed": s.completed}
    meta: dict[str, object] = {"backend": "pdsim", "model_id": res.config.model.name,
                               "num_prompts": s.num_requests}
    wl = res.config.workload
    arr = wl.arrivals
    if wl.trace is None or arr.kind == "closed_loop":
        if arr.kind == "closed_loop":
            meta.update(request_rate="inf", burstiness=1.0, max_concurrency=arr.concurrency)
        elif arr.kind == "gamma":
            meta.update(request_rate=arr.rate_per_s, burstiness=arr.shape)
        elif arr.kind == "poisson":
            meta.update(request_rate=arr.rate_per_s, burstiness=1.0)
        else:  # constant gaps: vLLM's gamma gaps as burstiness -> infinity
            meta.update(request_rate=arr.rate_per_s, burstiness=math.inf)
    slo = res.config.slo
    goodput = {k: v * 1000.0 for k, v in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s))
               if v is not None}
    return make_bench_result(records, summary, meta=meta, spec_decode=spec,
                             goodput_slo_ms=goodput or None)
