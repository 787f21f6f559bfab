"""How a request's tokens map to KV blocks and bytes: pure arithmetic on the layout.

Below the config layer: ``SimConfig.kv_layout(block_size)`` builds one from the model, and
the engine's block pool and the connector's transfer sizes read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def block_bytes_per_token(full_bytes_per_token: float,
                          sliding_bytes_per_token: float) -> float:
    """Bytes per token of the KV pool's block, the one rule pool sizing and ``KVLayout``
    share: the full-attention layers' and drafter modules' KV; when a model has none (every
    layer slides), its sliding-window layers' KV, so a block is ``block_size`` tokens of
    what the model does store (at least 1 byte)."""
    if full_bytes_per_token > 0 or sliding_bytes_per_token <= 0:
        return max(1, full_bytes_per_token)
    return sliding_bytes_per_token


@dataclass(frozen=True)
class KVLayout:
    """How many blocks a request of n tokens needs, and how many bytes a transfer moves.

    The pool's block is ``block_size`` tokens of ``block_bytes_per_token`` (the rule the
    pool's sizing and this layout share). Sliding-window layers keep only
    ``window + extra_retained_tokens`` tokens (``extra_retained_tokens = max(0, lookahead -
    1)``, vLLM's retention for the drafter's re-prefill targets) and Mamba layers a fixed
    state; both are charged to the pool in block-equivalents of the same bytes. A model
    whose every layer slides (Mistral-7B-v0.1) has no full-attention blocks (``full``
    false): its requests hold only their windows' blocks.
    """

    block_size: int
    block_bytes: int
    sliding: tuple[tuple[int, int], ...]  # (retained tokens, bytes per token) per group
    fixed_blocks: int  # Mamba state, in block-equivalents
    full: bool = True  # full-attention (or drafter) KV grows with every token

    def blocks_for(self, tokens: int) -> int:
        """Blocks a request with ``tokens`` tokens of KV holds."""
        bs = self.block_size
        n = (-(-tokens // bs) if self.full else 0) + self.fixed_blocks
        for retained, bpt in self.sliding:
            kept = -(-min(tokens, retained) // bs) * bs
            n += -(-(kept * bpt) // self.block_bytes)
        return n

    def blocks_for_array(self, tokens: np.ndarray, plus: int = 0) -> np.ndarray:
        """``blocks_for(t + plus)`` for each ``t`` of an int array (two array operations
        when the layout has no sliding-window groups)."""
        bs = self.block_size
        if not self.sliding:
            n: np.ndarray = tokens + (plus + bs - 1)
            if bs & (bs - 1):
                n //= bs  # a ceiling division
            else:
                n >>= bs.bit_length() - 1  # the same, by a shift (block sizes are powers of 2)
            if self.fixed_blocks:
                n += self.fixed_blocks
            return n
        if plus:
            tokens = tokens + plus
        n = (-(-tokens // bs) if self.full else np.zeros_like(tokens)) + self.fixed_blocks
        for retained, bpt in self.sliding:
            kept = -(-np.minimum(tokens, retained) // bs) * bs
            n = n + (-(-(kept * bpt) // self.block_bytes))
        return n

    def transfer_bytes(self, tokens: int) -> int:
        """Bytes a connector moves for the first ``tokens`` tokens: whole blocks."""
        return self.blocks_for(tokens) * self.block_bytes
