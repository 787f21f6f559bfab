"""Paged KV cache: the block pool, per-request block tables, and the KV layout.

Plain Python, no event loop: the pool can be exercised (and property-tested) alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pdsim.config import SimConfig


class KVCacheError(RuntimeError):
    """A block-accounting invariant broke (a bug in pdsim, never a user error)."""


class BlockPool:
    """A fixed pool of ``num_blocks`` KV blocks handed out by id.

    Each owner (a request id) holds an ordered block table. Invariants (checked by
    ``check()``): used + free == total; every block is owned by at most one table; a block
    is never freed twice.
    """

    __slots__ = ("_free", "_free_set", "num_blocks", "tables")

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        # Stack of free ids: allocation pops from the end (ids in ascending order at first).
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._free_set: set[int] = set(self._free)
        self.tables: dict[int, list[int]] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def held(self, owner: int) -> int:
        """Blocks ``owner`` holds."""
        table = self.tables.get(owner)
        return len(table) if table is not None else 0

    def allocate(self, owner: int, n: int) -> bool:
        """Append ``n`` blocks to ``owner``'s table; False (and no change) if too few free."""
        if n <= 0:
            if owner not in self.tables:
                self.tables[owner] = []
            return True
        if n > len(self._free):
            return False
        free = self._free
        got = free[-n:]
        del free[-n:]
        self._free_set.difference_update(got)
        table = self.tables.get(owner)
        if table is None:
            self.tables[owner] = got
        else:
            table.extend(got)
        return True

    def free(self, owner: int) -> int:
        """Return all of ``owner``'s blocks to the pool; the number freed."""
        table = self.tables.pop(owner, None)
        if table is None:
            return 0
        if not self._free_set.isdisjoint(table):
            twice = sorted(self._free_set.intersection(table))
            raise KVCacheError(f"blocks {twice[:8]} freed twice (owner {owner})")
        self._free_set.update(table)
        # Freed blocks go back on top of the stack: the most recently freed are reused
        # first.
        self._free.extend(reversed(table))
        return len(table)

    def check(self) -> None:
        """Raise ``KVCacheError`` if an invariant does not hold."""
        owned = [b for t in self.tables.values() for b in t]
        if len(owned) != len(set(owned)):
            raise KVCacheError("a block is in two block tables")
        if set(owned) & self._free_set:
            raise KVCacheError("a block is both owned and free")
        if len(owned) + len(self._free) != self.num_blocks:
            raise KVCacheError(f"used {len(owned)} + free {len(self._free)} != "
                               f"total {self.num_blocks}")
        if len(self._free) != len(self._free_set):
            raise KVCacheError("free list holds a block twice")


@dataclass(frozen=True)
class KVLayout:
    """How many blocks a request of n tokens needs, and how many bytes a transfer moves.

    The pool's block is ``block_size`` tokens of the full-attention layers plus the
    drafter modules' KV. Sliding-window layers keep only ``window + extra_retained_tokens``
    tokens (``extra_retained_tokens = max(0, lookahead - 1)``, vLLM's retention for the
    drafter's re-prefill targets) and Mamba layers a fixed state; both are charged to the
    pool in block-equivalents of the same bytes.
    """

    block_size: int
    block_bytes: int
    sliding: tuple[tuple[int, int], ...]  # (retained tokens, bytes per token) per group
    fixed_blocks: int  # Mamba state, in block-equivalents

    @classmethod
    def from_config(cls, cfg: SimConfig, block_size: int) -> KVLayout:
        full = cfg.kv_bytes_per_token - sum(
            g.num_layers * g.kv_bytes_per_token_per_layer
            for g in cfg.model.layer_groups if g.kind == "sliding_window")
        block_bytes = max(1, block_size * max(1, full))
        extra = cfg.extra_retained_tokens
        sliding = tuple(
            (int(g.window_tokens or 0) + extra, g.num_layers * g.kv_bytes_per_token_per_layer)
            for g in cfg.model.layer_groups if g.kind == "sliding_window")
        fixed = math.ceil(cfg.model.mamba_state_bytes / block_bytes) if cfg.model.has_mamba \
            else 0
        return cls(block_size=block_size, block_bytes=block_bytes, sliding=sliding,
                   fixed_blocks=fixed)

    def blocks_for(self, tokens: int) -> int:
        """Blocks a request with ``tokens`` tokens of KV holds."""
        bs = self.block_size
        n = -(-tokens // bs) + self.fixed_blocks
        for retained, bpt in self.sliding:
            kept = -(-min(tokens, retained) // bs) * bs
            n += -(-(kept * bpt) // self.block_bytes)
        return n

    def blocks_for_array(self, tokens: np.ndarray) -> np.ndarray:
        """``blocks_for`` over an int array."""
        bs = self.block_size
        n = -(-tokens // bs) + self.fixed_blocks
        for retained, bpt in self.sliding:
            kept = -(-np.minimum(tokens, retained) // bs) * bs
            n = n + (-(-(kept * bpt) // self.block_bytes))
        return n

    def transfer_bytes(self, tokens: int) -> int:
        """Bytes a connector moves for the first ``tokens`` tokens: whole blocks."""
        return self.blocks_for(tokens) * self.block_bytes
