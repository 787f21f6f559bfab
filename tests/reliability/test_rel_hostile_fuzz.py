"""Property fuzz of hostile numbers (issue 17): extreme values in random numeric fields of
a small config. Loading either refuses with ``ConfigError`` (a located line) or gives a
config that simulates to the end: every request finished, failed or rejected, and every
finished request with finite, ordered times. Never another exception, a hang (each run
is bounded in time) or an infinite latency."""

from __future__ import annotations

import math
import signal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_support import examples, small

from pdsim.errors import ConfigError, PdsimError
from pdsim.loader import apply_overrides, load_config
from pdsim.simulation import simulate

FIELDS = [
    "workload.arrivals.rate_per_s", "workload.prompt_tokens.mean_tokens",
    "workload.output_tokens.mean_tokens", "workload.duration_s",
    "cluster.prefill.scheduler.max_num_seqs", "cluster.decode.scheduler.max_num_seqs",
    "cluster.prefill.scheduler.max_num_batched_tokens",
    "cluster.decode.scheduler.max_num_batched_tokens",
    "cluster.prefill.scheduler.block_size", "cluster.decode.scheduler.block_size",
    "cluster.prefill.scheduler.num_blocks", "cluster.decode.scheduler.num_blocks",
    "cluster.decode.kv_cache_gib", "cluster.prefill.count", "cluster.decode.count",
    "connector.link_bandwidth_gb_per_s", "connector.setup_latency_s", "connector.kv_lease_s",
    "model.max_model_len", "model.layer_groups.0.kv_bytes_per_token_per_layer",
    "model.layer_groups.0.num_layers", "speculative.num_speculative_tokens",
]
EXTREMES = ["0", "-1", "1", "2", "1e-310", "1e-9", "1e300", "1e308", "9223372036854775807",
            "9223372036854775808", "4294967296", "16777216", "5000000", "0.5", ".nan",
            ".inf", "-.inf", "3000000000000"]


class _Budget(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Budget


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(FIELDS), st.sampled_from(EXTREMES)),
                min_size=1, max_size=3))
def test_extreme_numbers_are_refused_or_simulated_soundly(sets: list[tuple[str, str]]) -> None:
    overrides = [f"{k}={v}" for k, v in sets]
    try:
        cfg = load_config(small(), overrides)
    except ConfigError as exc:
        assert exc.issues and all(m for _, m in exc.issues)
        return
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        result = simulate(cfg)
    except _Budget:
        pytest.fail(f"no result within 20 s: {overrides}")
    except PdsimError:
        return  # a clear error the engine raises (e.g. a stalled clock)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    for key, value in result.summary.as_dict().items():
        assert not (isinstance(value, float) and math.isinf(value)), (overrides, key)
    for r in result.records:
        assert r["status"] in ("finished", "failed", "rejected"), (overrides, r["status"])
        if r["status"] == "finished":
            times = [r["arrival_s"], r["first_token_s"], r["finish_s"]]
            assert all(math.isfinite(t) for t in times), (overrides, times)
            assert times == sorted(times), (overrides, times)


def test_the_fuzz_fields_exist() -> None:
    """Every fuzzed path is a real field of the small config (a typo would fuzz nothing)."""
    data: Any = apply_overrides(small(), [f"{f}=1" for f in FIELDS])
    for f in FIELDS:
        node = data
        for part in f.split("."):
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert node == 1
