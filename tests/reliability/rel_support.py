"""Small configs and helpers shared by the reliability tests.

Every config here is tiny (tens of requests, prompts of ~100 tokens, KV pools of a few
hundred 16-token blocks) so that checking every invariant after every SimPy event stays
fast.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml

from pdsim.config import SimConfig
from pdsim.loader import load_config

# A 1P1D cluster serving a small MTP-3 model: the base every test derives from.
SMALL: dict[str, Any] = {
    "name": "small",
    "seed": 7,
    "model": {
        "layer_groups": [{"kind": "attention", "num_layers": 4,
                          "kv_bytes_per_token_per_layer": 256}],
        "num_mtp_modules": 8,
        "mtp_kv_bytes_per_token_per_module": 256,
        "max_model_len": 2048,
    },
    "speculative": {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "acceptance": {"kind": "per_position", "rates": [0.8, 0.6, 0.45]},
    },
    "cluster": {
        "mode": "disaggregated",
        "prefill": {"count": 1, "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 512,
                                              "block_size": 16, "num_blocks": 512}},
        "decode": {"count": 1, "scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 256,
                                             "block_size": 16, "num_blocks": 512}},
        "colocated": {"count": 1, "scheduler": {"max_num_seqs": 16,
                                                "max_num_batched_tokens": 256,
                                                "block_size": 16, "num_blocks": 512}},
    },
    "connector": {"transfer_mode": "pull", "link_bandwidth_gb_per_s": 7.0},
    "workload": {
        "num_requests": 30,
        "arrivals": {"kind": "poisson", "rate_per_s": 20.0},
        "prompt_tokens": {"kind": "uniform", "mean_tokens": 120, "range_ratio": 0.5},
        "output_tokens": {"kind": "uniform", "mean_tokens": 40, "range_ratio": 0.5},
    },
}


def examples(n: int) -> int:
    """Hypothesis example count: ``n`` scaled by ``PDSIM_REL_SCALE`` (e.g. 10 for a deep
    search before a release; the default keeps the suite fast)."""
    return max(1, round(n * float(os.environ.get("PDSIM_REL_SCALE", "1"))))


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` merged in recursively (a copy); ``None`` deletes a key and a
    mapping with a ``kind`` (a union member) replaces the whole section."""
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict) and "kind" not in v:
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def small(patch: dict[str, Any] | None = None, **sets: Any) -> dict[str, Any]:
    """The ``SMALL`` mapping with ``patch`` merged and ``dotted__key=value`` applied."""
    out = merge(SMALL, patch or {})
    for key, value in sets.items():
        node = out
        *parents, leaf = key.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def small_cfg(patch: dict[str, Any] | None = None, **sets: Any) -> SimConfig:
    return load_config(small(patch, **sets))


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def assert_cli_error(args: list[str], *phrases: str) -> str:
    """Run the CLI in-process: exit 2, no traceback, each phrase in the (unwrapped) output."""
    from typer.testing import CliRunner

    from pdsim.cli import app

    res = CliRunner().invoke(app, list(args))
    text = " ".join((res.stdout + res.stderr).split())
    assert res.exit_code == 2, (res.exit_code, text)
    assert "Traceback" not in text
    for phrase in phrases:
        assert phrase in text, (phrase, text)
    return text
