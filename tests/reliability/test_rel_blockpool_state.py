"""A stateful hypothesis test of the KV block pool against a plain model of it.

The model is a dict ``owner -> number of blocks``. Rules allocate (possibly more than is
free), free (owners that hold blocks, and owners that do not), and look; after every rule
the invariants hold: used + free = total, tables are disjoint and cover exactly the used
blocks, and every owner holds what the model says. A block is never freed twice: the pool
raises ``KVCacheError`` when it is asked to (tested by corrupting a table on purpose).
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)
from rel_support import examples

from pdsim.engine.kvcache import BlockPool, KVCacheError


class BlockPoolMachine(RuleBasedStateMachine):
    owners = Bundle("owners")

    def __init__(self) -> None:
        super().__init__()
        self.pool = BlockPool(1)
        self.model: dict[int, int] = {}
        self.next_owner = 0
        self.freed_ids: set[int] = set()

    @initialize(num_blocks=st.integers(1, 64))
    def make_pool(self, num_blocks: int) -> None:
        self.pool = BlockPool(num_blocks)

    @property
    def model_used(self) -> int:
        return sum(self.model.values())

    @rule(target=owners, n=st.integers(-2, 70))
    def allocate_new(self, n: int) -> int:
        owner = self.next_owner
        self.next_owner += 1
        self._allocate(owner, n)
        return owner

    @rule(owner=owners, n=st.integers(-1, 20))
    def allocate_more(self, owner: int, n: int) -> None:
        self._allocate(owner, n)

    def _allocate(self, owner: int, n: int) -> None:
        free_before = self.pool.num_free
        table_before = list(self.pool.tables.get(owner, []))
        ok = self.pool.allocate(owner, n)
        if n <= 0:
            assert ok and self.pool.num_free == free_before
            self.model.setdefault(owner, 0)
            assert self.pool.tables[owner] == table_before
        elif n > free_before:
            # all or nothing: a failed allocation changes nothing
            assert not ok and self.pool.num_free == free_before
            assert list(self.pool.tables.get(owner, [])) == table_before
        else:
            assert ok and self.pool.num_free == free_before - n
            self.model[owner] = self.model.get(owner, 0) + n
            # existing blocks keep their place; new ones are appended
            assert self.pool.tables[owner][: len(table_before)] == table_before

    @rule(owner=consumes(owners))
    def free(self, owner: int) -> None:
        table = list(self.pool.tables.get(owner, []))
        n = self.pool.free(owner)
        assert n == self.model.pop(owner, 0) == len(table)
        assert owner not in self.pool.tables

    @rule(owner=st.integers(10_000, 10_010))
    def free_unknown_owner(self, owner: int) -> None:
        before = (self.pool.num_free, dict(self.pool.tables))
        assert self.pool.free(owner) == 0
        assert (self.pool.num_free, dict(self.pool.tables)) == before

    @precondition(lambda self: self.pool.num_free > 0)
    @rule()
    def freed_blocks_are_reusable(self) -> None:
        """A block comes from the free ones, never from a table."""
        owner = self.next_owner
        self.next_owner += 1
        owned = {b for t in self.pool.tables.values() for b in t}
        assert self.pool.allocate(owner, 1)
        (block,) = self.pool.tables[owner]
        assert block not in owned
        assert self.pool.free(owner) == 1

    @invariant()
    def accounting(self) -> None:
        pool = self.pool
        pool.check()
        owned = [b for t in pool.tables.values() for b in t]
        assert len(owned) == len(set(owned))
        assert all(0 <= b < pool.num_blocks for b in owned)
        assert pool.num_used + pool.num_free == pool.num_blocks
        assert pool.num_used == len(owned) == self.model_used
        for owner, n in self.model.items():
            assert pool.held(owner) == n


BlockPoolMachine.TestCase.settings = settings(max_examples=examples(150),
                                              stateful_step_count=40, deadline=None)
TestBlockPool = BlockPoolMachine.TestCase


def test_a_block_freed_twice_is_an_error() -> None:
    pool = BlockPool(8)
    assert pool.allocate(1, 3)
    stale = list(pool.tables[1])
    assert pool.free(1) == 3
    pool.tables[2] = stale  # a table that still names freed blocks (an engine bug)
    with pytest.raises(KVCacheError, match="freed twice"):
        pool.free(2)


def test_check_catches_a_block_in_two_tables() -> None:
    pool = BlockPool(8)
    assert pool.allocate(1, 2) and pool.allocate(2, 2)
    pool.tables[2].append(pool.tables[1][0])
    with pytest.raises(KVCacheError):
        pool.check()


def test_a_pool_needs_a_block() -> None:
    with pytest.raises(ValueError):
        BlockPool(0)
