"""Workload config: defaults, every kind accepted, nonsense rejected with a clear message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError
from wl_stats import workload

from pdsim.workload.config import (
    ClosedLoopArrivals,
    EmpiricalLength,
    FixedLength,
    GammaArrivals,
    LognormalLength,
    MooncakeTrace,
    PoissonArrivals,
    UniformLength,
    WorkloadConfig,
)


def test_defaults_and_legacy_shape() -> None:
    cfg = WorkloadConfig()
    assert cfg.num_requests == 200 and cfg.duration_s is None and cfg.trace is None
    assert cfg.arrivals == PoissonArrivals(rate_per_s=4.0)
    assert cfg.prompt_tokens == FixedLength(tokens=1024)
    assert cfg.output_tokens == FixedLength(tokens=256)
    cfg = workload({"arrivals": {"kind": "poisson", "rate_per_s": 2},
                    "prompt_tokens": {"kind": "fixed", "tokens": 100}})
    assert cfg.arrivals.rate_per_s == 2.0 and cfg.prompt_tokens.tokens == 100


GOOD: list[dict[str, Any]] = [
    {"arrivals": {"kind": "gamma", "rate_per_s": 5, "cv": 2.5}},
    {"arrivals": {"kind": "gamma", "rate_per_s": 5, "burstiness": 0.25}},
    {"arrivals": {"kind": "constant", "rate_per_s": 0.5}, "duration_s": 60, "num_requests": None},
    {"arrivals": {"kind": "closed_loop", "concurrency": 16}, "num_requests": 500},
    {"prompt_tokens": {"kind": "uniform", "mean_tokens": 1024, "range_ratio": 0.5}},
    {"prompt_tokens": {"kind": "normal", "mean_tokens": 800, "std_tokens": 200,
                       "max_tokens": 4096}},
    {"output_tokens": {"kind": "lognormal", "mean_tokens": 300, "cv": 1.2}},
    {"output_tokens": {"kind": "empirical", "values": [16, 128, 1024],
                       "weights": [0.2, 0.5, 0.3]}},
    {"output_tokens": {"kind": "empirical", "bin_edges": [1, 64, 512, 4096],
                       "weights": [3, 2, 1]}},
    {"trace": {"kind": "mooncake", "path": "pkg:traces/mooncake_sample.jsonl",
               "time_scale": 0.5, "max_requests": 100, "start_offset_s": 10}},
    {"trace": {"kind": "azure", "path": "traces/azure.csv", "target_rate_per_s": 8,
               "unsorted": "sort"}, "duration_s": 600},
    {"trace": {"kind": "azure", "path": "x.csv"},
     "arrivals": {"kind": "closed_loop", "concurrency": 4}},
]


@pytest.mark.parametrize("data", GOOD)
def test_every_kind_validates_and_round_trips(data: dict[str, Any]) -> None:
    cfg = workload(data)
    again = WorkloadConfig.model_validate_json(cfg.model_dump_json())
    assert again == cfg
    assert workload(json.loads(cfg.model_dump_json())) == cfg


def test_a_trace_is_not_cut_at_the_synthetic_default() -> None:
    cfg = workload({"trace": {"kind": "mooncake", "path": "t.jsonl"}})
    assert cfg.num_requests is None
    assert WorkloadConfig(trace=MooncakeTrace(path="t.jsonl")).num_requests is None


BAD: list[tuple[dict[str, Any], str]] = [
    ({"arrivals": {"kind": "poisson", "rate_per_s": -1}}, "greater than 0"),
    ({"arrivals": {"kind": "poisson", "rate_per_s": 0}}, "greater than 0"),
    ({"arrivals": {"kind": "poisson", "rate_per_s": "4"}}, "valid number"),
    ({"arrivals": {"kind": "poisson", "rate": 4}}, "Extra inputs"),
    ({"arrivals": {"kind": "weibull", "rate_per_s": 4}}, "does not match any"),
    ({"arrivals": {"kind": "gamma", "rate_per_s": 4, "cv": 0}}, "greater than 0"),
    ({"arrivals": {"kind": "gamma", "rate_per_s": 4, "cv": -1}}, "greater than 0"),
    ({"arrivals": {"kind": "gamma", "rate_per_s": 4}}, "exactly one of cv or burstiness"),
    ({"arrivals": {"kind": "gamma", "rate_per_s": 4, "cv": 1, "burstiness": 1}},
     "exactly one of cv or burstiness"),
    ({"arrivals": {"kind": "constant", "rate_per_s": 0}}, "greater than 0"),
    ({"arrivals": {"kind": "closed_loop", "concurrency": 0}}, "greater than or equal to 1"),
    ({"arrivals": {"kind": "closed_loop", "concurrency": 4}, "duration_s": 10},
     "duration_s does not apply"),
    ({"arrivals": {"kind": "closed_loop", "concurrency": 4}, "num_requests": None,
      "duration_s": None}, "num_requests or duration_s"),
    ({"num_requests": None}, "num_requests or duration_s"),
    ({"num_requests": 0}, "greater than or equal to 1"),
    ({"duration_s": -5}, "greater than 0"),
    ({"prompt_tokens": {"kind": "fixed", "tokens": 0}}, "greater than or equal to 1"),
    ({"prompt_tokens": {"kind": "uniform", "mean_tokens": 100, "range_ratio": 1.0}},
     "less than 1"),
    ({"prompt_tokens": {"kind": "uniform", "mean_tokens": 100, "range_ratio": -0.1}},
     "greater than or equal to 0"),
    ({"prompt_tokens": {"kind": "normal", "mean_tokens": 100}}, "exactly one of std_tokens"),
    ({"prompt_tokens": {"kind": "normal", "mean_tokens": 100, "cv": 0.1, "std_tokens": 3}},
     "exactly one of std_tokens"),
    ({"prompt_tokens": {"kind": "lognormal", "mean_tokens": 100, "cv": 0}}, "greater than 0"),
    ({"prompt_tokens": {"kind": "lognormal", "mean_tokens": 0, "cv": 1}}, "greater than 0"),
    ({"prompt_tokens": {"kind": "lognormal", "mean_tokens": 100, "cv": 1, "max_tokens": 50}},
     "below mean_tokens"),
    ({"output_tokens": {"kind": "empirical", "values": [1, 2], "weights": [0, 0]}},
     "sum to more than 0"),
    ({"output_tokens": {"kind": "empirical", "values": [], "weights": []}},
     "sum to more than 0"),
    ({"output_tokens": {"kind": "empirical", "values": [1, 2], "weights": [1, -1]}},
     "greater than or equal to 0"),
    ({"output_tokens": {"kind": "empirical", "values": [1, 2], "weights": [1]}},
     "one weight per value"),
    ({"output_tokens": {"kind": "empirical", "values": [0, 2], "weights": [1, 1]}},
     "greater than or equal to 1"),
    ({"output_tokens": {"kind": "empirical", "weights": [1]}}, "exactly one of values"),
    ({"output_tokens": {"kind": "empirical", "values": [1], "bin_edges": [1, 2],
                        "weights": [1]}}, "exactly one of values"),
    ({"output_tokens": {"kind": "empirical", "bin_edges": [1, 5, 5], "weights": [1, 1]}},
     "strictly increasing"),
    ({"output_tokens": {"kind": "empirical", "bin_edges": [1, 5], "weights": [1, 1]}},
     "one more edge"),
    ({"trace": {"kind": "mooncake", "path": "t", "time_scale": 0.5,
                "target_rate_per_s": 3}}, "not both"),
    ({"trace": {"kind": "mooncake", "path": "t", "time_scale": 0}}, "greater than 0"),
    ({"trace": {"kind": "mooncake", "path": ""}}, "at least 1 character"),
    ({"trace": {"kind": "azure", "path": "t", "hash_block_tokens": 512}}, "Extra inputs"),
    ({"trace": {"kind": "azure", "path": "t", "unsorted": "ignore"}}, "'error' or 'sort'"),
    ({"trace": {"kind": "sharegpt", "path": "t"}}, "does not match any"),
    ({"trace": {"kind": "azure", "path": "t"}, "num_requests": 50}, "trace.max_requests"),
    ({"trace": {"kind": "azure", "path": "t", "time_scale": 2},
      "arrivals": {"kind": "closed_loop", "concurrency": 2}}, "no effect under closed_loop"),
]


@pytest.mark.parametrize(("data", "message"), BAD)
def test_nonsense_is_rejected(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        workload(data)
    assert message in str(info.value)


def test_configs_are_frozen() -> None:
    cfg = WorkloadConfig()
    with pytest.raises(ValidationError):
        cfg.num_requests = 3  # type: ignore[misc]


def test_derived_values() -> None:
    assert GammaArrivals(rate_per_s=2, cv=0.5).shape == 4.0
    assert ClosedLoopArrivals(concurrency=3).kind == "closed_loop"
    assert UniformLength(mean_tokens=10, range_ratio=0.5).expected_tokens == 10.0
    assert LognormalLength(mean_tokens=10, std_tokens=5).sigma_tokens == 5.0
    assert EmpiricalLength(values=(2, 4), weights=(1, 3)).expected_tokens == 3.5
    assert EmpiricalLength(bin_edges=(1, 3, 5), weights=(1, 1)).expected_tokens == 2.5
