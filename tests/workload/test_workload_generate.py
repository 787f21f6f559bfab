"""generate_requests: named streams, determinism, paired comparisons, speed."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wl_stats import workload

from pdsim.rng import RandomStreams
from pdsim.workload import RequestSpecs, generate_requests

ARRIVALS = [
    {"kind": "poisson", "rate_per_s": 5.0},
    {"kind": "gamma", "rate_per_s": 5.0, "cv": 3.0},
    {"kind": "constant", "rate_per_s": 5.0},
]
LENGTHS = [
    {"kind": "fixed", "tokens": 64},
    {"kind": "uniform", "mean_tokens": 1024, "range_ratio": 0.5},
    {"kind": "normal", "mean_tokens": 500, "cv": 0.3, "max_tokens": 2000},
    {"kind": "lognormal", "mean_tokens": 2000, "std_tokens": 3000},
    {"kind": "empirical", "bin_edges": [1, 100, 1000], "weights": [1, 1]},
]


def specs_equal(a: RequestSpecs, b: RequestSpecs) -> bool:
    return (np.array_equal(a.arrival_s, b.arrival_s, equal_nan=True)
            and np.array_equal(a.prompt_tokens, b.prompt_tokens)
            and np.array_equal(a.output_tokens, b.output_tokens)
            and a.closed_loop_concurrency == b.closed_loop_concurrency
            and a.hash_ids == b.hash_ids and a.origin == b.origin and a.source == b.source)


def cfg(arrivals: dict[str, Any], prompt: dict[str, Any], output: dict[str, Any],
        n: int = 300) -> Any:
    return workload({"num_requests": n, "arrivals": arrivals, "prompt_tokens": prompt,
                     "output_tokens": output})


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**63), arrivals=st.sampled_from(ARRIVALS),
       prompt=st.sampled_from(LENGTHS), output=st.sampled_from(LENGTHS),
       new_output=st.sampled_from(LENGTHS), new_prompt=st.sampled_from(LENGTHS),
       new_arrivals=st.sampled_from(ARRIVALS))
def test_same_seed_same_specs_and_streams_are_paired(seed, arrivals, prompt, output,
                                                     new_output, new_prompt,
                                                     new_arrivals) -> None:
    base = generate_requests(cfg(arrivals, prompt, output), RandomStreams(seed))
    assert specs_equal(base, generate_requests(cfg(arrivals, prompt, output),
                                               RandomStreams(seed)))
    # Changing one distribution leaves the other two sequences exactly as they were.
    other = generate_requests(cfg(arrivals, prompt, new_output), RandomStreams(seed))
    np.testing.assert_array_equal(other.arrival_s, base.arrival_s)
    np.testing.assert_array_equal(other.prompt_tokens, base.prompt_tokens)
    other = generate_requests(cfg(arrivals, new_prompt, output), RandomStreams(seed))
    np.testing.assert_array_equal(other.arrival_s, base.arrival_s)
    np.testing.assert_array_equal(other.output_tokens, base.output_tokens)
    other = generate_requests(cfg(new_arrivals, prompt, output), RandomStreams(seed))
    np.testing.assert_array_equal(other.prompt_tokens, base.prompt_tokens)
    np.testing.assert_array_equal(other.output_tokens, base.output_tokens)


def test_different_seeds_differ() -> None:
    c = cfg(ARRIVALS[0], LENGTHS[1], LENGTHS[3])
    a, b = (generate_requests(c, RandomStreams(s)) for s in (1, 2))
    assert not np.array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.prompt_tokens, b.prompt_tokens)


def test_streams_are_the_named_ones() -> None:
    c = cfg(ARRIVALS[0], LENGTHS[1], LENGTHS[1])
    specs = generate_requests(c, RandomStreams(5))
    streams = RandomStreams(5)
    np.testing.assert_array_equal(
        specs.arrival_s, np.cumsum(streams.fresh("arrivals").exponential(0.2, size=300)))
    np.testing.assert_array_equal(
        specs.prompt_tokens, streams.fresh("lengths.prompt").integers(512, 1537, size=300))
    np.testing.assert_array_equal(
        specs.output_tokens, streams.fresh("lengths.output").integers(512, 1537, size=300))


def test_duration_bounded_workload() -> None:
    c = workload({"num_requests": None, "duration_s": 100.0,
                  "arrivals": {"kind": "gamma", "rate_per_s": 20, "cv": 2}})
    specs = generate_requests(c, RandomStreams(0))
    assert specs.arrival_s[-1] <= 100.0 and len(specs.prompt_tokens) == len(specs)


def test_closed_loop_workload() -> None:
    c = workload({"num_requests": 64, "arrivals": {"kind": "closed_loop", "concurrency": 8},
                  "prompt_tokens": LENGTHS[1]})
    specs = generate_requests(c, RandomStreams(0))
    assert len(specs) == 64 and np.isnan(specs.arrival_s).all()
    assert specs.closed_loop_concurrency == 8
    # Lengths do not depend on the arrival process.
    open_loop = cfg(ARRIVALS[0], LENGTHS[1], {"kind": "fixed", "tokens": 256}, n=64)
    np.testing.assert_array_equal(specs.prompt_tokens,
                                  generate_requests(open_loop, RandomStreams(0)).prompt_tokens)


def test_trace_workload() -> None:
    c = workload({"trace": {"kind": "mooncake", "path": "pkg:traces/mooncake_sample.jsonl",
                            "max_requests": 50}, "duration_s": 10.0})
    specs = generate_requests(c, RandomStreams(0))
    assert 0 < len(specs) <= 50 and specs.arrival_s[-1] <= 10.0
    assert specs.hash_block_tokens == 512 and specs.hash_ids is not None
    closed = workload({"trace": {"kind": "azure", "path": "pkg:traces/azure_sample.csv"},
                       "arrivals": {"kind": "closed_loop", "concurrency": 4}})
    specs = generate_requests(closed, RandomStreams(0))
    assert len(specs) == 200 and specs.closed_loop_concurrency == 4
    assert np.isnan(specs.arrival_s).all()


@pytest.mark.parametrize("dist", LENGTHS)
def test_100k_requests_generate_fast(dist: dict[str, Any]) -> None:
    c = cfg(ARRIVALS[1], dist, LENGTHS[3], n=100_000)
    generate_requests(c, RandomStreams(0))  # warm up imports
    start = time.perf_counter()
    specs = generate_requests(c, RandomStreams(1))
    assert time.perf_counter() - start < 0.25
    assert len(specs) == 100_000
