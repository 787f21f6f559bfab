"""An instance's KV memory: its block pool, its KV layout and its prefix cache.

Plain Python, no event loop (vLLM v1's ``KVCacheManager`` has the same job). The scheduler
asks it how many blocks a request needs and whether they fit; it never decides who runs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from pdsim.engine.kvcache import BlockPool
from pdsim.engine.request import Request
from pdsim.kv_layout import KVLayout


class KVManager:
    """The block pool, the layout that turns tokens into blocks, and the prefix cache.

    The prefix cache holds the block hashes whose KV this instance still has, least
    recently used first, in units of the workload's hash blocks (``hash_block_tokens``
    prompt tokens each); only P and colocated instances with prefix caching keep one.
    """

    def __init__(self, layout: KVLayout, num_blocks: int, prefix_caching: bool,
                 hash_block_tokens: int, lookahead_tokens: int) -> None:
        self.layout = layout
        self.pool = BlockPool(num_blocks)
        self.hash_block_tokens = hash_block_tokens
        self.prefix_cache: OrderedDict[int, None] | None = None
        self.caches_prefixes = prefix_caching
        self.prefix_capacity_blocks = 0
        if prefix_caching:
            self.prefix_cache = OrderedDict()
            self.prefix_capacity_blocks = max(1, num_blocks * layout.block_size
                                              // hash_block_tokens)
        # never cache the last lookahead-1 prompt tokens: the drafter re-prefills them
        self.uncacheable_tail_tokens = max(0, lookahead_tokens - 1)
        self.prefix_hit_tokens = 0
        self.prefix_query_tokens = 0

    def max_fit_tokens(self, room_tokens: int, limit_tokens: int) -> int:
        """The longest request (tokens, before ``room_tokens`` more: its sampled token and
        first drafts) whose KV fits in the whole pool, at most ``limit_tokens``
        (max_model_len); -1 if none. Block counts only grow with tokens, so a binary search
        finds it (they stop growing when every layer slides: hence the limit)."""
        fits_blocks, blocks_for = self.pool.num_blocks, self.layout.blocks_for
        if blocks_for(limit_tokens + room_tokens) <= fits_blocks:
            return limit_tokens
        lo, hi = -1, 1
        while blocks_for(hi + room_tokens) <= fits_blocks:
            lo, hi = hi, 2 * hi
        while hi - lo > 1:  # blocks_for(lo + room) fits (or lo == -1), hi's does not
            mid = (lo + hi) // 2
            if blocks_for(mid + room_tokens) <= fits_blocks:
                lo = mid
            else:
                hi = mid
        return lo

    def extra_blocks(self, owner: int, tokens: int) -> int:
        """Blocks ``owner`` must add to hold the KV of ``tokens`` tokens (0 or less: it
        holds enough). The one place a request's block need is worked out."""
        return self.layout.blocks_for(tokens) - self.pool.held(owner)

    # ------------------------------------------------------------ prefix cache

    def _cacheable_blocks(self, req: Request) -> int:
        tokens = min(req.seq_tokens, req.prompt_tokens) - self.uncacheable_tail_tokens
        return max(0, int(tokens) // self.hash_block_tokens)

    def prefix_hit(self, req: Request) -> int:
        """Prompt tokens already in the prefix cache (leading whole blocks); the blocks hit
        become the most recently used."""
        cache = self.prefix_cache
        assert cache is not None and req.hash_ids is not None
        hits = 0
        for h in req.hash_ids[: self._cacheable_blocks(req)]:
            if h not in cache:
                break
            cache.move_to_end(h)
            hits += 1
        # at least one token is computed to produce logits
        return min(hits * self.hash_block_tokens, int(req.seq_tokens) - 1)

    def cached_prefix_blocks(self, hash_ids: Sequence[int]) -> int:
        """How many leading blocks of ``hash_ids`` the prefix cache holds (0 without
        one). A read for routers: the LRU order does not change."""
        cache = self.prefix_cache
        if cache is None:
            return 0
        n = 0
        for h in hash_ids:
            if h not in cache:
                break
            n += 1
        return n

    def count_lookup(self, req: Request, hit_tokens: int) -> None:
        """``req`` was admitted after a lookup that found ``hit_tokens`` cached."""
        self.prefix_query_tokens += req.seq_tokens
        self.prefix_hit_tokens += hit_tokens
        req.prefix_hit_tokens += hit_tokens

    def prefix_insert(self, req: Request) -> None:
        """``req``'s prompt was computed here: cache its blocks, dropping the least
        recently used beyond capacity."""
        cache = self.prefix_cache
        if cache is None or not req.hash_ids:
            return
        for h in req.hash_ids[: self._cacheable_blocks(req)]:
            cache[h] = None
            cache.move_to_end(h)
        while len(cache) > self.prefix_capacity_blocks:
            cache.popitem(last=False)

    def clear(self) -> None:
        """The instance went down: its prefix cache is lost (the pool is emptied request
        by request by whoever held the blocks)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
