"""Replay a ``vllm bench serve`` result in pdsim: its requests, in order, under its traffic."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal

import numpy as np

from pdsim.errors import InputFileError
from pdsim.realdata.bench_result import BenchResult
from pdsim.workload.base import RequestSpecs, SpecsOrigin


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
    length 0, output unknown) are left out; ``origin.dropped_failed`` counts them.
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
    origin = SpecsOrigin(model_id=result.model_id, request_rate=result.request_rate,
                         burstiness=result.burstiness, max_concurrency=result.max_concurrency,
                         dropped_failed=int(len(keep) - len(idx)), replay_mode=mode)
    source = f"vllm-bench:{result.source}"
    if mode == "concurrency":
        if result.max_concurrency is None:
            raise InputFileError(result.source, None, "field 'max_concurrency' is null: the "
                                                      "run had no concurrency limit to replay")
        return RequestSpecs(arrival_s=np.full(len(idx), np.nan), prompt_tokens=prompt,
                            output_tokens=output,
                            closed_loop_concurrency=result.max_concurrency,
                            source=source, origin=replace(origin, arrivals="closed loop"))
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
    return RequestSpecs(arrival_s=arrivals[order].astype(np.float64),
                        prompt_tokens=prompt[order], output_tokens=output[order],
                        source=source, origin=replace(origin, arrivals=kind))
