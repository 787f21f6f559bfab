"""Config builders and independent re-derivations shared by the core tests.

Nothing here reaches into engine internals (those helpers live in ``conftest.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pdsim import SimConfig, load_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))

# Sampling-error tolerance in standard errors (two-sided p ~ 6e-5 per comparison).
Z = 4.0

ATTENTION = {"kind": "attention", "num_layers": 8, "kv_bytes_per_token_per_layer": 1024}
MAMBA = {"kind": "mamba", "num_layers": 24, "state_bytes_per_layer": 200_000}


def _sched(seqs: int, budget: int, blocks: int = 4096) -> dict[str, Any]:
    return {"max_num_seqs": seqs, "max_num_batched_tokens": budget, "block_size": 16,
            "num_blocks": blocks}


def base_dict() -> dict[str, Any]:
    """A small P/D deployment with 8 MTP modules (N = 3 drafts), simple step times."""
    return {
        "name": "core-test",
        "seed": 0,
        "model": {"name": "test-mtp", "layer_groups": [ATTENTION], "num_mtp_modules": 8,
                  "mtp_kv_bytes_per_token_per_module": 1024},
        "speculative": {"method": "mtp", "num_speculative_tokens": 3,
                        "acceptance": {"kind": "constant", "rate": 0.7}},
        "cluster": {
            "mode": "disaggregated",
            "prefill": {"count": 1, "scheduler": _sched(16, 2048)},
            "decode": {"count": 1, "scheduler": _sched(16, 512)},
            "colocated": {"count": 1, "scheduler": _sched(16, 2048)},
        },
        "connector": {"transfer_mode": "pull", "prefill_backoff": "auto"},
        "workload": {"num_requests": 8, "arrivals": {"kind": "poisson", "rate_per_s": 20.0},
                     "prompt_tokens": {"kind": "fixed", "tokens": 300},
                     "output_tokens": {"kind": "fixed", "tokens": 32}},
    }


def make_config(*overrides: str, method: str | None = None, n_spec: int | None = None,
                mamba: bool = False, data: dict[str, Any] | None = None) -> SimConfig:
    """``base_dict()`` (or ``data``) with ``dotted.key=value`` overrides, validated.

    ``method``/``n_spec`` set the drafter (``none`` clears the acceptance model);
    ``mamba`` adds a Mamba layer group next to the attention layers.
    """
    d = base_dict() if data is None else data
    spec = d["speculative"]
    if method is not None:
        spec["method"] = method
        if method == "none":
            spec.pop("acceptance", None)
            spec["num_speculative_tokens"] = 0
    if n_spec is not None:
        spec["num_speculative_tokens"] = n_spec
    if mamba:
        d["model"]["layer_groups"] = [ATTENTION, MAMBA]
    return load_config(d, overrides=list(overrides))


# ------------------------------------------------------------------ reference rules


def reference_backoff(lookahead: int, mamba: bool, auto: bool) -> int:
    """Reference section 4: auto max(1 if mamba else 0, lookahead - 1); off 1 if mamba."""
    m = 1 if mamba else 0
    return max(m, lookahead - 1) if auto else m


def reference_lookahead(method: str, modules: int, n: int) -> int:
    """Reference section 4: N for multi-module MTP, 1 other eagle-family, 0 otherwise."""
    if method == "mtp" and min(modules, n) > 1:
        return n
    return 1 if method in ("eagle", "eagle3", "mtp") else 0


def excess_stale_by_token_identity(prompt_tokens: int, backoff: int, num_modules: int
                                   ) -> dict[tuple[int, int], tuple[str, int]]:
    """D's excess stale drafter slots, derived from which token each slot consumed.

    Builds the token P's final chunk fed each module (a real prompt token, P's greedy
    sample, a guess of a real token P did not see, or a draft of a later output token) and
    compares it with the true token; slots D rewrites itself are not excess. Returns
    ``{(module, position): (cause, guess_index)}`` with cause ``guess`` or ``draft``.
    """
    L = prompt_tokens
    seen = L - backoff if backoff < L else L  # P drops `backoff` tokens only when L > backoff
    remote = seen  # D loads what P computed
    d_first = min(remote, L - 1)  # D recomputes at least the last prompt token

    def p_view(tok: int) -> tuple[str, int]:
        if tok < seen:
            return ("real", tok)
        if tok == seen == L:
            return ("real", tok)  # greedy: P samples the token D samples
        return ("p-made", tok)

    out = {}
    for m in range(num_modules):
        for pos in range(d_first):
            tok = pos + m + 1  # module m at position p consumes token p + m + 1
            if p_view(tok) == ("real", tok):
                continue
            out[(m, pos)] = ("guess" if tok <= L else "draft", tok - seen)
    return out


def stale_counts(slots: dict[tuple[int, int], tuple[str, int]], num_modules: int,
                 guesses_right: bool, drafts_right: bool = False) -> np.ndarray:
    """Stale-slot count per module when every guess (of a real prompt token) and every
    draft (of an output token) P made is right, or every one is wrong. A slot computed
    through a wrong token is stale; P's guesses of prompt tokens come before its drafts
    in the chain, so a draft slot of a truncated P is also stale when its guesses were."""
    out = np.zeros(max(1, num_modules))
    for (m, _pos), (cause, _k) in slots.items():
        right = guesses_right if cause == "guess" else drafts_right and guesses_right
        if not right:
            out[m] += 1
    return out


# --------------------------------------------------------------------- statistics


def prefix_distribution(per_pos: Sequence[int], drafts: int) -> np.ndarray:
    """Counts of steps that accepted exactly a = 0..N drafts, from vLLM's per-position
    counters (``accepted_per_pos[i]`` counts steps with a > i)."""
    ge = np.concatenate(([drafts], np.asarray(per_pos, dtype=np.int64), [0]))
    return ge[:-1] - ge[1:]


def emitted_mean_and_se(per_pos: Sequence[int], drafts: int) -> tuple[float, float]:
    """Mean emitted tokens per step (a + 1) and its standard error, from the counters."""
    counts = prefix_distribution(per_pos, drafts)
    a = np.arange(len(counts))
    mean = float((counts * a).sum() / drafts)
    var = float((counts * (a - mean) ** 2).sum() / (drafts - 1))
    return 1.0 + mean, math.sqrt(var / drafts)


def closed_form_tokens_per_step(rate: float, n: int) -> float:
    """Constant acceptance ``rate`` with N drafts: (1 - a^(N+1)) / (1 - a)."""
    return float(n + 1) if rate == 1.0 else (1 - rate ** (n + 1)) / (1 - rate)


def terminal_problems(records: Iterable[dict[str, Any]]) -> list[str]:
    """Requests that did not end finished, or ended otherwise without a stated reason."""
    bad = []
    for r in records:
        st = r["status"]
        if st == "finished":
            if r["fail_reason"] or r["output_tokens"] != r["target_output_tokens"]:
                bad.append(f"{r['request_id']}: finished but {r}")
        elif st in ("failed", "rejected"):
            if not r["fail_reason"]:
                bad.append(f"{r['request_id']}: {st} without a reason")
        else:
            bad.append(f"{r['request_id']}: status {st}")
    return bad
