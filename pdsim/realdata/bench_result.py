"""``vllm bench serve --save-result`` JSON: the format, and reading it into a ``BenchResult``.

Replaying its requests is ``bench_replay``, its statistics ``bench_metrics``, writing pdsim's
runs in this form ``bench_synthesis``.

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

vLLM's definitions, which ``bench_synthesis.make_bench_result`` reproduces: TPOT of a request is
``(latency - ttft) / (output_len - 1)``, only for requests with more than one output
token; ITL pools every chunk gap of every successful request; throughputs divide by the
run's ``duration``; failed requests count as not completed and contribute 0 output
tokens; a statistic over an empty set is 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pdsim._model import MAX_REQUESTS, MAX_TOKENS
from pdsim.errors import InputFileError, read_text_file
from pdsim.realdata.prometheus import AcceptanceStats

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

    def integer(self, key: str, *, required: bool = False, low: int | None = None
                ) -> int | None:
        value = self.number(key, required=required)
        if value is None:
            return None
        if not math.isfinite(value) or value != int(value):
            raise self.fail(key, f"expected a whole number, got {self.data.get(key)!r}")
        if low is not None and not low <= value <= MAX_REQUESTS:
            raise self.fail(key, f"must be in {low}..{MAX_REQUESTS:,} (got {int(value)})")
        return int(value)

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        return None if value is None else str(value)

    def array(self, key: str, n: int | None, *, integer: bool = False,
              low_tokens: int = 0) -> np.ndarray | None:
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
            bad = np.flatnonzero((arr < low_tokens) | (arr > MAX_TOKENS))
            if len(bad):
                raise self.fail(key, f"entry {bad[0]} is {value[bad[0]]!r}; token counts "
                                f"must be in {low_tokens}..{MAX_TOKENS:,}")
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
    input_lens = f.array("input_lens", None, integer=True, low_tokens=1)
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
        max_concurrency=f.integer("max_concurrency", low=1),
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
