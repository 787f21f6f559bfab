"""Shared-prefix workloads: requests in prefix groups, for prefix caching and routing.

Each request belongs to one of ``num_groups`` groups, drawn with Zipf popularity (group k,
counted from 0, has weight ``1 / (k + 1) ** zipf_exponent``; exponent 0 is uniform). Its
prompt is the group's ``prefix_tokens`` followed by a unique suffix whose length the
workload's ``prompt_tokens`` draws. The prompt is described, like a Mooncake trace, by hash
ids, one per ``hash_block_tokens`` tokens (the last block may be partial): the blocks that
lie wholly inside the prefix carry the group's ids, every other block a fresh id of its
own, so two requests share exactly the leading whole blocks of their common prefix.
"""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
from pydantic import Field, model_validator

from pdsim._model import MAX_TOKENS, StrictModel, at_most

GROUP_STREAM = "workload.prefix_groups"
# Hash ids live in memory as tuples of Python ints, about 36 bytes each
MAX_HASH_IDS = 50_000_000


class SharedPrefixConfig(StrictModel):
    """Prefix groups of a synthetic workload (see the module docstring)."""

    num_groups: Annotated[int, Field(ge=1), at_most(
        1_000_000, "each group keeps its prefix's hash ids in memory")]
    """Prefix groups (distinct shared prefixes, e.g. system prompts or documents)."""
    prefix_tokens: Annotated[int, Field(ge=1), at_most(
        MAX_TOKENS, "pdsim keeps token counts well inside 64-bit arrays")]
    """Tokens of each group's shared prefix; the prompt is this plus the suffix that
    workload.prompt_tokens draws."""
    zipf_exponent: Annotated[float, Field(ge=0, allow_inf_nan=False), at_most(
        20.0, "larger exponents send every request to the first group anyway")] = 1.0
    """Popularity skew: group k (from 0) is drawn with weight 1 / (k + 1) ** zipf_exponent;
    0 is uniform."""
    hash_block_tokens: Annotated[int, Field(ge=1), at_most(
        MAX_TOKENS, "pdsim keeps token counts well inside 64-bit arrays")] = 64
    """Tokens per hash id; the prefix cache counts hits in these blocks (set it to the
    instances' scheduler.block_size for block-exact hits)."""

    @model_validator(mode="after")
    def _check(self) -> SharedPrefixConfig:
        if self.prefix_tokens < self.hash_block_tokens:
            raise ValueError(
                f"prefix_tokens ({self.prefix_tokens}) is shorter than one hash block "
                f"(hash_block_tokens {self.hash_block_tokens}): no block would be shared; "
                f"lengthen the prefix or shorten the blocks")
        return self

    @property
    def shared_blocks(self) -> int:
        """Whole hash blocks inside the prefix: the ones a group's requests share."""
        return self.prefix_tokens // self.hash_block_tokens

    def hash_ids_issue(self, requests: float, mean_suffix_tokens: float) -> str | None:
        """Why ``requests`` requests would hold too many hash ids, or None."""
        blocks = math.ceil((self.prefix_tokens + mean_suffix_tokens) / self.hash_block_tokens)
        total = requests * blocks
        if total <= MAX_HASH_IDS:
            return None
        return (f"shared_prefix: about {total:.3g} hash ids ({requests:.3g} requests x "
                f"{blocks:,} blocks of {self.hash_block_tokens} tokens); at most "
                f"{MAX_HASH_IDS:,} (each about 36 bytes in memory): raise "
                f"hash_block_tokens or run fewer requests")

    def popularity(self) -> np.ndarray:
        """Each group's probability (Zipf over the group index)."""
        w = np.arange(1, self.num_groups + 1, dtype=np.float64) ** -self.zipf_exponent
        out: np.ndarray = w / w.sum()
        return out


def draw_groups(cfg: SharedPrefixConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """The prefix group of each of ``n`` requests (int64)."""
    if cfg.num_groups == 1:
        return np.zeros(n, dtype=np.int64)
    out: np.ndarray = rng.choice(cfg.num_groups, size=n, p=cfg.popularity()).astype(np.int64)
    return out


def prefix_hash_ids(cfg: SharedPrefixConfig, groups: np.ndarray,
                    prompt_tokens: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """Each request's hash ids: its group's shared blocks, then fresh ids for the rest
    of its ``prompt_tokens`` (prefix included), one per started hash block.

    Group g's k-th block is ``g * shared_blocks + k``; fresh ids count up from
    ``num_groups * shared_blocks`` in request order.
    """
    shared, size = cfg.shared_blocks, cfg.hash_block_tokens
    prefixes: dict[int, tuple[int, ...]] = {}
    fresh = cfg.num_groups * shared
    out: list[tuple[int, ...]] = []
    for g, tokens in zip(groups.tolist(), prompt_tokens.tolist(), strict=True):
        head = prefixes.get(g)
        if head is None:
            head = prefixes[g] = tuple(range(g * shared, (g + 1) * shared))
        rest = -(-tokens // size) - shared
        out.append(head + tuple(range(fresh, fresh + rest)))
        fresh += rest
    return tuple(out)
