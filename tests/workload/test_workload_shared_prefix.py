"""workload.shared_prefix: prefix groups with Zipf popularity and consistent hash ids."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from wl_stats import Z, workload

from pdsim.errors import ConfigError
from pdsim.loader import load_config
from pdsim.rng import RandomStreams
from pdsim.workload import generate_requests
from pdsim.workload.shared_prefix import SharedPrefixConfig


def _specs(shared: dict[str, Any], n: int = 2000, seed: int = 3,
           prompt: dict[str, Any] | None = None) -> Any:
    cfg = workload({"num_requests": n, "shared_prefix": shared,
                    "prompt_tokens": prompt or {"kind": "uniform", "mean_tokens": 200,
                                                "range_ratio": 0.9}})
    return generate_requests(cfg, RandomStreams(seed))


@pytest.mark.parametrize("block", [16, 64, 100])
def test_hash_ids_follow_the_prefix_groups_and_the_block_size(block: int) -> None:
    prefix = 1000
    specs = _specs({"num_groups": 5, "prefix_tokens": prefix, "hash_block_tokens": block})
    shared = prefix // block
    assert specs.hash_block_tokens == block
    seen_fresh: set[int] = set()
    groups = []
    for ids, tokens in zip(specs.hash_ids, specs.prompt_tokens.tolist(), strict=True):
        assert prefix + 1 <= tokens <= prefix + 380  # uniform 20..380 after the prefix
        assert len(ids) == math.ceil(tokens / block)  # one id per started block
        g, k = divmod(ids[0], shared)
        assert k == 0 and 0 <= g < 5
        assert ids[:shared] == tuple(range(g * shared, (g + 1) * shared))
        fresh = ids[shared:]
        assert all(h >= 5 * shared for h in fresh)
        assert seen_fresh.isdisjoint(fresh)  # a block past the shared ones is its own
        seen_fresh.update(fresh)
        groups.append(g)
    assert set(groups) == set(range(5))


def test_zipf_popularity() -> None:
    n, k = 20_000, 8
    cfg = SharedPrefixConfig(num_groups=k, prefix_tokens=64, zipf_exponent=1.2)
    p = cfg.popularity()
    assert p == pytest.approx(np.arange(1, k + 1) ** -1.2 / np.sum(np.arange(1, k + 1) ** -1.2))
    specs = _specs({"num_groups": k, "prefix_tokens": 64, "zipf_exponent": 1.2}, n=n)
    counts = np.bincount([ids[0] for ids in specs.hash_ids], minlength=k)
    se = np.sqrt(n * p * (1 - p))
    assert np.all(np.abs(counts - n * p) <= Z * se), (counts, n * p)
    flat = _specs({"num_groups": k, "prefix_tokens": 64, "zipf_exponent": 0}, n=n)
    counts = np.bincount([ids[0] for ids in flat.hash_ids], minlength=k)
    assert np.all(np.abs(counts - n / k) <= Z * np.sqrt(n / k * (1 - 1 / k)))


def test_prefix_groups_shift_no_other_stream() -> None:
    plain = generate_requests(workload({"num_requests": 300, "prompt_tokens": {
        "kind": "uniform", "mean_tokens": 200, "range_ratio": 0.9}}), RandomStreams(3))
    grouped = _specs({"num_groups": 4, "prefix_tokens": 512}, n=300)
    assert plain.hash_ids is None
    assert np.array_equal(plain.arrival_s, grouped.arrival_s)
    assert np.array_equal(plain.output_tokens, grouped.output_tokens)
    assert np.array_equal(plain.prompt_tokens + 512, grouped.prompt_tokens)
    again = _specs({"num_groups": 4, "prefix_tokens": 512}, n=300)
    assert again.hash_ids == grouped.hash_ids


@pytest.mark.parametrize(("shared", "extra", "message"), [
    ({"num_groups": 0, "prefix_tokens": 512}, {}, "greater than or equal to 1"),
    ({"num_groups": 2}, {}, "prefix_tokens"),
    ({"num_groups": 2, "prefix_tokens": 32}, {}, "shorter than one hash block"),
    ({"num_groups": 2, "prefix_tokens": 512, "zipf_exponent": -1}, {},
     "greater than or equal to 0"),
    ({"num_groups": 2, "prefix_tokens": 512, "zipf_exponent": float("nan")}, {}, "finite"),
    ({"num_groups": 2, "prefix_tokens": 512, "hash_block_tokens": 0}, {},
     "greater than or equal to 1"),
    ({"num_groups": 2, "prefix_tokens": 512, "groups": 3}, {}, "Extra inputs"),
    ({"num_groups": 2, "prefix_tokens": 512},
     {"trace": {"kind": "mooncake", "path": "t"}}, "a trace brings its own hash_ids"),
    ({"num_groups": 2, "prefix_tokens": 131072, "hash_block_tokens": 16},
     {"num_requests": 10_000}, "hash ids (1e+04 requests x 8,256 blocks of 16 tokens)"),
    ({"num_groups": 2, "prefix_tokens": 1024, "hash_block_tokens": 1},
     {"num_requests": None, "duration_s": 10_000},
     "hash ids (4e+04 requests x 2,048 blocks of 1 tokens)"),
])
def test_bad_shared_prefix_is_rejected(shared: dict[str, Any], extra: dict[str, Any],
                                       message: str) -> None:
    with pytest.raises(ValidationError) as info:
        workload({"shared_prefix": shared, **extra})
    assert message in str(info.value)
    # just under the bound is fine: 50M hash ids
    workload({"num_requests": 10_000, "prompt_tokens": {"kind": "fixed", "tokens": 16},
              "shared_prefix": {"num_groups": 1, "prefix_tokens": 79_984,
                                "hash_block_tokens": 16}})
    assert message in str(info.value)


def test_errors_name_the_field_and_the_prefix_counts_toward_capacity() -> None:
    base = {"workload": {"num_requests": 4, "shared_prefix": {
        "num_groups": 2, "prefix_tokens": 32, "hash_block_tokens": 64}}}
    with pytest.raises(ConfigError) as info:
        load_config(base)
    assert any(loc == "workload.shared_prefix" for loc, _ in info.value.issues), \
        info.value.issues
    # the longest prompt is prefix + the longest suffix: a pool that holds the suffix
    # alone but not the whole prompt is refused
    tight = {"workload": {"num_requests": 4, "prompt_tokens": {"kind": "fixed",
                                                               "tokens": 100},
                          "output_tokens": {"kind": "fixed", "tokens": 10},
                          "shared_prefix": {"num_groups": 2, "prefix_tokens": 4096}},
             "cluster": {"prefill": {"scheduler": {"num_blocks": 20, "block_size": 64}}}}
    with pytest.raises(ConfigError) as info:
        load_config(tight)
    assert any("cluster.prefill" in loc for loc, _ in info.value.issues), info.value.issues
    tight["workload"]["shared_prefix"]["prefix_tokens"] = 512  # type: ignore[index]
    assert load_config(tight).workload_max_prompt_tokens == 612
