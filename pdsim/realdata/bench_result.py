"""``vllm bench serve --save-result`` JSON: read it, replay its requests, write pdsim's runs as it.

The field names follow ``vllm/benchmarks/serve.py``. A result holds a header (``date``,
``endpoint_type``, ``backend``, ``label``, ``model_id``, ``tokenizer_id``, ``num_prompts``,
``--metadata`` keys, ``request_rate`` (a number, or the string ``"inf"``), ``burstiness``,
``max_concurrency``, optionally ``ramp_up_*``), run totals (``duration`` s, ``completed``,
``failed``, ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
``request_goodput``, ``output_throughput``, ``total_token_throughput``,
``max_output_tokens_per_s``, ``max_concurrent_requests``), latency statistics in ms
(``mean_/median_/std_/p<P>_`` x ``ttft``/``tpot``/``itl``/``e2el``, for the metrics and
percentiles the run selected) and, with ``--save-detailed``, one entry per request in
submission order: ``input_lens``, ``output_lens`` (0 for a failed request), ``ttfts`` (s),
``itls`` (list of chunk gaps, s), ``generated_texts``, ``errors`` ("" on success); newer
versions also keep ``latencies``, ``start_times`` and ``queue_times`` (s). Runs against a
server with speculative decoding add ``spec_decode_*`` fields.

vLLM's definitions, which ``make_bench_result`` reproduces: TPOT of a request is
``(latency - ttft) / (output_len - 1)``, only for requests with more than one output
token; ITL pools every chunk gap of every successful request; throughputs divide by the
run's ``duration``; failed requests count as not completed and contribute 0 output
tokens; a statistic over an empty set is 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pdsim.errors import InputFileError, read_text_file
from pdsim.realdata.prometheus import AcceptanceStats
from pdsim.workload.base import RequestSpecs

PERCENTILE_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
HEADER_FIELDS: tuple[str, ...] = (
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts")
TRAFFIC_FIELDS: tuple[str, ...] = ("request_rate", "burstiness", "max_concurrency")
RAMP_UP_FIELDS: tuple[str, ...] = ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")
TOTALS_FIELDS: tuple[str, ...] = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput")
PER_REQUEST_FIELDS: tuple[str, ...] = (
    "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
    "generated_texts", "errors")
PEAK_FIELDS: tuple[str, ...] = ("max_output_tokens_per_s", "max_concurrent_requests", "rtfx")
SPEC_DECODE_FIELDS: tuple[str, ...] = (
    "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts",
    "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
    "spec_decode_per_position_acceptance_rates")
REQUIRED_FIELDS: tuple[str, ...] = (
    "duration", "completed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "output_throughput")


def percentile_key(p: float, metric: str) -> str:
    """vLLM's key of a percentile statistic: ``p99_ttft_ms``, ``p99.9_itl_ms``."""
    word = str(int(p)) if int(p) == p else str(p)
    return f"p{word}_{metric}_ms"


@dataclass(frozen=True, eq=False)
class BenchResult:
    """One ``vllm bench serve`` result. Times of single requests are in seconds, as vLLM
    stores them; the latency statistics in ``latency_stats_ms`` are in ms.

    Per-request arrays are None when the run was saved without ``--save-detailed`` (or
    the vLLM version did not record that field); they are in submission order.
    """

    source: str
    duration_s: float
    completed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    request_rate: float = math.inf  # requests/s; inf means all sent at once
    burstiness: float = 1.0
    max_concurrency: int | None = None
    failed: int | None = None
    request_goodput: float | None = None
    num_prompts: int | None = None
    model_id: str | None = None
    backend: str | None = None
    date: str | None = None
    ramp_up: tuple[str, float, float] | None = None  # (strategy, start rps, end rps)
    latency_stats_ms: dict[str, float] = field(default_factory=dict)
    input_lens: np.ndarray | None = None  # int64
    output_lens: np.ndarray | None = None  # int64
    ttfts_s: np.ndarray | None = None
    itls_s: tuple[np.ndarray, ...] | None = None
    latencies_s: np.ndarray | None = None
    start_times_s: np.ndarray | None = None
    queue_times_s: np.ndarray | None = None
    errors: tuple[str, ...] | None = None
    spec_decode: AcceptanceStats | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def num_requests(self) -> int | None:
        """Requests with per-request data, or None without ``--save-detailed``."""
        return None if self.input_lens is None else len(self.input_lens)

    @property
    def succeeded(self) -> np.ndarray | None:
        """Boolean mask of successful requests (empty error; else output_len > 0)."""
        if self.errors is not None:
            return np.array([not e for e in self.errors], dtype=bool)
        if self.output_lens is not None:
            return np.asarray(self.output_lens > 0)
        return None


# --------------------------------------------------------------------------- reading


class _Fields:
    """Typed access to a result dict; every problem is an InputFileError naming the field."""

    def __init__(self, data: Mapping[str, Any], file: str) -> None:
        self.data = data
        self.file = file

    def fail(self, key: str, message: str) -> InputFileError:
        return InputFileError(self.file, None, f"field {key!r}: {message}")

    def number(self, key: str, *, required: bool = False, default: float | None = None
               ) -> float | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise InputFileError(self.file, None, f"missing field {key!r}: not a "
                                                      "vllm bench serve --save-result file?")
            return default
        if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
            return math.inf
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"expected a number, got {value!r}")
        return float(value)

    def integer(self, key: str, *, required: bool = False) -> int | None:
        value = self.number(key, required=required)
        if value is None:
            return None
        if not math.isfinite(value) or value != int(value):
            raise self.fail(key, f"expected a whole number, got {self.data.get(key)!r}")
        return int(value)

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        return None if value is None else str(value)

    def array(self, key: str, n: int | None, *, integer: bool = False) -> np.ndarray | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list, got {type(value).__name__}")
        if n is not None and len(value) != n:
            raise self.fail(key, f"has {len(value)} entries; input_lens has {n}")
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise self.fail(key, f"entry {i} is {v!r}, not a number")
        arr = np.asarray(value, dtype=np.float64)
        if integer:
            if not np.all(arr == np.round(arr)):
                raise self.fail(key, "entries must be whole numbers of tokens")
            return arr.astype(np.int64)
        return arr

    def lists(self, key: str, n: int | None) -> tuple[np.ndarray, ...] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or (n is not None and len(value) != n):
            raise self.fail(key, f"expected a list of {n} lists of numbers")
        out = []
        for i, row in enumerate(value):
            if not isinstance(row, list) or any(
                    isinstance(v, bool) or not isinstance(v, int | float) for v in row):
                raise self.fail(key, f"entry {i} is not a list of numbers")
            out.append(np.asarray(row, dtype=np.float64))
        return tuple(out)


def _is_stat_key(key: str) -> bool:
    """``mean_/median_/std_<metric>_ms`` or ``p<P>_<metric>_ms``."""
    if not key.endswith("_ms"):
        return False
    head = key.split("_", 1)[0]
    return head in ("mean", "median", "std") or (head[:1] == "p" and head[1:2].isdigit())


def _spec_decode(f: _Fields) -> AcceptanceStats | None:
    drafts = f.integer("spec_decode_num_drafts")
    if not drafts:
        return None
    draft_tokens = f.integer("spec_decode_draft_tokens") or 0
    accepted = f.integer("spec_decode_accepted_tokens") or 0
    rates = f.array("spec_decode_per_position_acceptance_rates", None)
    per_pos = () if rates is None else tuple(round(float(r) * drafts) for r in rates)
    return AcceptanceStats(num_drafts=drafts, num_draft_tokens=draft_tokens,
                           num_accepted_tokens=accepted, accepted_per_pos=per_pos,
                           source=f.file)


def bench_result_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> BenchResult:
    """A ``BenchResult`` from an already-decoded result dict (e.g. ``make_bench_result``'s)."""
    if not isinstance(data, Mapping):
        raise InputFileError(source, None, "expected a JSON object (a vllm bench result)")
    f = _Fields(data, source)
    for key in REQUIRED_FIELDS:
        f.number(key, required=True)
    input_lens = f.array("input_lens", None, integer=True)
    n = None if input_lens is None else len(input_lens)
    output_lens = f.array("output_lens", n, integer=True)
    if (input_lens is None) != (output_lens is None):
        missing = "output_lens" if output_lens is None else "input_lens"
        raise InputFileError(source, None, f"missing field {missing!r} (the other per-request "
                                           "length list is present)")
    errors_raw = data.get("errors")
    errors: tuple[str, ...] | None = None
    if errors_raw is not None:
        if not isinstance(errors_raw, list) or (n is not None and len(errors_raw) != n):
            raise f.fail("errors", f"expected a list of {n} strings")
        errors = tuple("" if e is None else str(e) for e in errors_raw)
    stats: dict[str, float] = {}
    for key in data:
        if _is_stat_key(key):
            v = f.number(key)
            if v is not None:
                stats[key] = v
    ramp = None
    if data.get("ramp_up_strategy") is not None:
        start = f.number("ramp_up_start_rps", required=True)
        end = f.number("ramp_up_end_rps", required=True)
        assert start is not None and end is not None
        ramp = (str(data["ramp_up_strategy"]), start, end)
    duration = f.number("duration", required=True)
    assert duration is not None
    if not duration > 0:
        raise f.fail("duration", f"must be > 0 seconds, got {duration}")
    rate = f.number("request_rate", default=math.inf)
    burstiness = f.number("burstiness", default=1.0)
    assert rate is not None and burstiness is not None
    if not rate > 0:
        raise f.fail("request_rate", f"must be > 0 (or \"inf\"), got {rate}")
    if not burstiness > 0:
        raise f.fail("burstiness", f"must be > 0, got {burstiness}")
    return BenchResult(
        source=source,
        duration_s=duration,
        completed=f.integer("completed", required=True) or 0,
        total_input_tokens=f.integer("total_input_tokens", required=True) or 0,
        total_output_tokens=f.integer("total_output_tokens", required=True) or 0,
        request_throughput=f.number("request_throughput", required=True) or 0.0,
        output_throughput=f.number("output_throughput", required=True) or 0.0,
        total_token_throughput=f.number("total_token_throughput", default=math.nan)
        or math.nan,
        request_rate=rate,
        burstiness=burstiness,
        max_concurrency=f.integer("max_concurrency"),
        failed=f.integer("failed"),
        request_goodput=f.number("request_goodput"),
        num_prompts=f.integer("num_prompts"),
        model_id=f.text("model_id"),
        backend=f.text("backend"),
        date=f.text("date"),
        ramp_up=ramp,
        latency_stats_ms=stats,
        input_lens=input_lens,
        output_lens=output_lens,
        ttfts_s=f.array("ttfts", n),
        itls_s=f.lists("itls", n),
        latencies_s=f.array("latencies", n),
        start_times_s=f.array("start_times", n),
        queue_times_s=f.array("queue_times", n),
        errors=errors,
        spec_decode=_spec_decode(f),
        raw=dict(data),
    )


def _decode_all(text: str, file: str) -> list[Any]:
    """Every JSON value in ``text``: one, or several from ``--append-result``."""
    decoder = json.JSONDecoder()
    values = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise InputFileError(file, exc.lineno, f"not valid JSON: {exc.msg}",
                                 column=exc.colno) from None
        values.append(value)
    if not values:
        raise InputFileError(file, None, "empty file")
    return values


def read_bench_result(path: str | Path, index: int = -1) -> BenchResult:
    """Read a ``vllm bench serve --save-result`` JSON file.

    A file written with ``--append-result`` holds several results; ``index`` picks one
    (the last by default). Errors are ``InputFileError`` naming the file and the missing
    or malformed field.
    """
    p = Path(path)
    text = read_text_file(p, "a JSON file")
    values = _decode_all(text, str(p))
    try:
        data = values[index]
    except IndexError:
        raise InputFileError(str(p), None, f"holds {len(values)} results; index {index} "
                                           "is out of range") from None
    return bench_result_from_dict(data, str(p))


# --------------------------------------------------------------------------- replaying


def _vllm_arrivals(n: int, rate: float, burstiness: float, rng: np.random.Generator,
                   ramp_up: tuple[str, float, float] | None) -> tuple[np.ndarray, str]:
    """Send offsets drawn the way ``vllm bench serve`` draws them.

    Gaps are gamma(shape=burstiness, scale=1/(rate*burstiness)) (exponential when
    burstiness is 1, constant 1/rate when it is infinite); without ramp-up the offsets are
    rescaled so the last one falls at n / rate, as vLLM does to steady the throughput.
    """
    if ramp_up is not None:
        strategy, start, end = ramp_up
        progress = np.arange(n) / max(n - 1, 1)
        if strategy == "linear":
            rates = start + (end - start) * progress
        elif strategy == "exponential":
            rates = start * (end / start) ** progress
        else:
            raise ValueError(f"unknown ramp-up strategy {strategy!r}")
        kind = f"ramp-up {strategy}"
    else:
        rates = np.full(n, rate)
        if math.isinf(rate):
            return np.zeros(n), "all at once"
        kind = "poisson" if burstiness == 1.0 else "gamma"
    if math.isinf(burstiness):
        gaps = 1.0 / rates
        kind = "constant" if ramp_up is None else kind
    elif burstiness == 1.0:
        gaps = rng.exponential(1.0 / rates)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rates * burstiness))
    offsets = np.cumsum(gaps)
    if ramp_up is None and offsets[-1] > 0:
        offsets *= (n / rate) / offsets[-1]
    return offsets, kind


def bench_result_to_requests(
    result: BenchResult,
    mode: Literal["auto", "rate", "concurrency"] = "auto",
    rng: np.random.Generator | None = None,
) -> RequestSpecs:
    """The result's requests, to replay in pdsim: same lengths, same order, same traffic.

    ``mode="rate"`` is an open loop: the recorded arrival offsets when the result has
    ``start_times`` (minus ``queue_times``, the client-side wait), else offsets drawn like
    vLLM's (Poisson when burstiness is 1, gamma otherwise, ramp-up if recorded) from
    ``rng``; a rate of ``inf`` sends everything at 0. ``mode="concurrency"`` is a closed
    loop at the recorded ``max_concurrency`` (arrival_s NaN). ``"auto"`` picks
    concurrency when ``max_concurrency`` was set, else rate. Failed requests (output
    length 0, output unknown) are left out; ``meta["dropped_failed"]`` counts them.
    """
    if result.input_lens is None or result.output_lens is None:
        raise InputFileError(result.source, None, "no per-request lengths (input_lens, "
                                                  "output_lens): rerun vllm bench serve with "
                                                  "--save-detailed to replay its requests")
    if mode == "auto":
        mode = "concurrency" if result.max_concurrency is not None else "rate"
    ok = result.succeeded
    assert ok is not None
    keep = ok & (result.output_lens > 0)
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        raise InputFileError(result.source, None, "no successful request to replay")
    prompt = result.input_lens[idx].astype(np.int64)
    output = result.output_lens[idx].astype(np.int64)
    meta: dict[str, object] = {
        "model_id": result.model_id, "request_rate": result.request_rate,
        "burstiness": result.burstiness, "max_concurrency": result.max_concurrency,
        "dropped_failed": int(len(keep) - len(idx)), "mode": mode,
    }
    source = f"vllm-bench:{result.source}"
    if mode == "concurrency":
        if result.max_concurrency is None:
            raise InputFileError(result.source, None, "field 'max_concurrency' is null: the "
                                                      "run had no concurrency limit to replay")
        meta["arrivals"] = "closed loop"
        return RequestSpecs(arrival_s=np.full(len(idx), np.nan), prompt_tokens=prompt,
                            output_tokens=output,
                            closed_loop_concurrency=result.max_concurrency,
                            source=source, meta=meta)
    if mode != "rate":
        raise ValueError(f"mode must be 'auto', 'rate' or 'concurrency', not {mode!r}")
    if result.start_times_s is not None:
        arrivals = result.start_times_s[idx].copy()
        if result.queue_times_s is not None:
            arrivals -= result.queue_times_s[idx]
        arrivals -= arrivals.min()
        kind = "recorded"
    else:
        if rng is None and not (math.isinf(result.request_rate) and result.ramp_up is None):
            raise ValueError("replaying a rate without recorded start_times needs rng "
                             "(a numpy Generator) to draw the arrivals")
        arrivals, kind = _vllm_arrivals(len(idx), result.request_rate, result.burstiness,
                                        rng if rng is not None else np.random.default_rng(0),
                                        result.ramp_up)
    order = np.argsort(arrivals, kind="stable")
    meta["arrivals"] = kind
    return RequestSpecs(arrival_s=arrivals[order].astype(np.float64),
                        prompt_tokens=prompt[order], output_tokens=output[order],
                        source=source, meta=meta)


# --------------------------------------------------------------------------- statistics


def _stat_block(values: Sequence[float] | np.ndarray, metric: str,
                percentiles: Iterable[float]) -> dict[str, float]:
    """vLLM's mean/median/std/percentiles in ms of ``values`` (s); 0 for an empty set."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        arr = np.zeros(1)
    out = {
        f"mean_{metric}_ms": float(np.mean(arr)) * 1000.0,
        f"median_{metric}_ms": float(np.median(arr)) * 1000.0,
        f"std_{metric}_ms": float(np.std(arr)) * 1000.0,
    }
    for p in percentiles:
        out[percentile_key(p, metric)] = float(np.percentile(arr, p)) * 1000.0
    return out


def _per_request_latencies(ttft: np.ndarray, e2e: np.ndarray, out_lens: np.ndarray,
                           itls: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    multi = out_lens > 1
    tpot = (e2e[multi] - ttft[multi]) / (out_lens[multi] - 1)
    itl = np.concatenate(list(itls)) if len(itls) else np.zeros(0)
    return {"ttft": ttft, "tpot": tpot, "itl": itl, "e2el": e2e}


def summary_metrics(result: BenchResult, percentiles: Sequence[float] = (90, 99)
                    ) -> dict[str, float]:
    """Flat metrics of a result: ``mean_/median_/p90_/p99_`` x ttft, tpot, itl, e2el (ms),
    plus ``request_throughput``, ``output_throughput``, ``total_token_throughput``,
    ``duration_s``, ``completed``.

    Computed from the per-request data when present (so they compare with pdsim's
    numbers whatever percentiles the run saved), else taken from the stored fields; a
    statistic neither can give is NaN. Without ``latencies`` a request's E2E is its TTFT
    plus its chunk gaps.
    """
    out: dict[str, float] = {}
    ok = result.succeeded
    have = (ok is not None and result.ttfts_s is not None and result.itls_s is not None
            and result.output_lens is not None)
    if have:
        assert ok is not None and result.ttfts_s is not None and result.itls_s is not None
        assert result.output_lens is not None
        idx = np.flatnonzero(ok)
        ttft = result.ttfts_s[idx]
        itls = [result.itls_s[i] for i in idx]
        if result.latencies_s is not None:
            e2e = result.latencies_s[idx]
        else:
            e2e = ttft + np.array([float(x.sum()) for x in itls])
        per = _per_request_latencies(ttft, e2e, result.output_lens[idx], itls)
        for metric in PERCENTILE_METRICS:
            block = _stat_block(per[metric], metric, percentiles)
            out.update({k: v for k, v in block.items() if not k.startswith("std_")})
        n_out = float(result.output_lens[idx].sum())
        n_in = float(result.input_lens[idx].sum()) if result.input_lens is not None else math.nan
        out["request_throughput"] = len(idx) / result.duration_s
        out["output_throughput"] = n_out / result.duration_s
        out["total_token_throughput"] = (n_in + n_out) / result.duration_s
        out["completed"] = float(len(idx))
    else:
        for metric in PERCENTILE_METRICS:
            for key in (f"mean_{metric}_ms", f"median_{metric}_ms",
                        *(percentile_key(p, metric) for p in percentiles)):
                out[key] = result.latency_stats_ms.get(key, math.nan)
        out["request_throughput"] = result.request_throughput
        out["output_throughput"] = result.output_throughput
        out["total_token_throughput"] = result.total_token_throughput
        out["completed"] = float(result.completed)
    out["duration_s"] = result.duration_s
    return out


# --------------------------------------------------------------------------- writing


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
    per = _per_request_latencies(ttft[idx], e2e[idx], out_lens[idx], [
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
    result["burstiness"] = _json_number(burstiness)
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
        result.update(_stat_block(per[metric], metric, percentiles))
    return result
