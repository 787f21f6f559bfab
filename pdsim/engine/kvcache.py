"""Paged KV cache: the block pool, per-request block tables, and the KV layout.

Plain Python, no event loop: the pool can be exercised (and property-tested) alone.
"""

from __future__ import annotations

from collections.abc import Callable


class KVCacheError(RuntimeError):
    """A block-accounting invariant broke (a bug in pdsim, never a user error)."""


class BlockPool:
    """A fixed pool of ``num_blocks`` KV blocks handed out by id.

    Each owner (a request id) holds an ordered block table. Invariants (checked in full
    by ``check()``, which the invariant checker runs after every event): used + free ==
    total; every block is owned by at most one table and never both owned and free.
    The hot paths keep only a count of owned blocks next to the free stack, so
    ``free`` catches a double free whenever it would return more blocks than are owned;
    ``check()`` catches every one.
    """

    __slots__ = ("_free", "_fresh", "_owned", "num_blocks", "on_free", "tables")

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        # The free blocks are a stack of freed ids (``_free``, allocation pops from the
        # end) on top of the never-used ids ``_fresh .. num_blocks - 1``, handed out in
        # ascending order: the pool costs memory per block in use, never per block owned,
        # so a pool of a billion blocks is as cheap to build as one of ten.
        self._free: list[int] = []
        self._fresh = 0  # ids below this have been handed out at least once
        self._owned = 0  # blocks in tables, as counted by allocate and free
        self.tables: dict[int, list[int]] = {}
        # an observer told of every ``free`` (owner, whether it held a table), or None
        self.on_free: Callable[[int, bool], None] | None = None

    @property
    def num_free(self) -> int:
        return len(self._free) + self.num_blocks - self._fresh

    @property
    def num_used(self) -> int:
        return self._fresh - len(self._free)

    def _take(self, n: int) -> list[int]:
        """Pop ``n`` free ids (``n <= num_free``), in the order a stack holding the fresh
        ids in descending order under the freed ones would give its top ``n``."""
        free = self._free
        if n <= len(free):
            got = free[len(free) - n:]
            del free[len(free) - n:]
            return got
        fresh = n - len(free)
        start = self._fresh
        got = list(range(start + fresh - 1, start - 1, -1))
        got.extend(free)
        free.clear()
        self._fresh = start + fresh
        return got

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
        if n > self.num_free:
            return False
        got = self._take(n)
        self._owned += n
        table = self.tables.get(owner)
        if table is None:
            self.tables[owner] = got
        else:
            table.extend(got)
        return True

    def allocate_many(self, owners: list[int], counts: list[int]) -> bool:
        """``allocate(owner, n)`` for each pair, all or nothing (False: no change).

        One pass over the free stack for a batch of growing requests."""
        total = sum(n for n in counts if n > 0)
        if total > self.num_free:
            return False
        got = self._take(total)
        self._owned += total
        tables = self.tables
        i = 0
        for owner, n in zip(owners, counts, strict=True):
            table = tables.get(owner)
            if n <= 0:
                if table is None:
                    tables[owner] = []
                continue
            if table is None:
                tables[owner] = got[i:i + n]
            else:
                table.extend(got[i:i + n])
            i += n
        return True

    def free(self, owner: int) -> int:
        """Return all of ``owner``'s blocks to the pool; the number freed."""
        table = self.tables.pop(owner, None)
        if self.on_free is not None:
            self.on_free(owner, table is not None)
        if table is None:
            return 0
        n = len(table)
        if n > self._owned:
            twice = sorted(set(self._free).intersection(table))
            self.tables[owner] = table
            raise KVCacheError(f"blocks {twice[:8]} freed twice (owner {owner})")
        self._owned -= n
        # Freed blocks go back on top of the stack: the most recently freed are reused
        # first (the table is no longer anyone's: reversed in place).
        table.reverse()
        self._free.extend(table)
        return n

    def check(self) -> None:
        """Raise ``KVCacheError`` if an invariant does not hold."""
        owned = [b for t in self.tables.values() for b in t]
        if len(owned) != len(set(owned)):
            raise KVCacheError("a block is in two block tables")
        free = set(self._free)
        if len(free) != len(self._free):
            raise KVCacheError("free list holds a block twice")
        if set(owned) & free:
            raise KVCacheError("a block is both owned and free")
        if any(b >= self._fresh for b in owned) or any(b >= self._fresh for b in free):
            raise KVCacheError("a never-allocated block is owned or on the free stack")
        if len(owned) + len(self._free) != self._fresh:
            raise KVCacheError(f"used {len(owned)} + free {self.num_free} != "
                               f"total {self.num_blocks}")
        if len(owned) != self._owned:
            raise KVCacheError(f"tables hold {len(owned)} blocks, the pool counted "
                               f"{self._owned}")
