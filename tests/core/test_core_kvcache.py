"""The paged KV block pool and the KV layout (blocks per request, transfer bytes)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from core_support import ATTENTION, make_config
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pdsim import Simulation
from pdsim.config import Role
from pdsim.engine.kvcache import BlockPool, KVCacheError

# ------------------------------------------------------------------------ the pool


def test_allocate_free_held() -> None:
    pool = BlockPool(10)
    assert (pool.num_free, pool.num_used) == (10, 0)
    assert pool.allocate(1, 3)
    assert pool.allocate(2, 4)
    assert pool.allocate(1, 2)  # appends to the same table
    assert (pool.held(1), pool.held(2), pool.held(3)) == (5, 4, 0)
    assert (pool.num_free, pool.num_used) == (1, 9)
    assert len(set(pool.tables[1]) | set(pool.tables[2])) == 9
    pool.check()
    assert pool.free(1) == 5
    assert pool.held(1) == 0 and pool.num_free == 6
    assert pool.free(1) == 0  # nothing left to free
    assert pool.free(99) == 0
    pool.check()


def test_allocate_too_many_changes_nothing() -> None:
    pool = BlockPool(4)
    assert pool.allocate(1, 3)
    before = (pool.num_free, dict((k, list(v)) for k, v in pool.tables.items()))
    assert not pool.allocate(2, 2)
    assert not pool.allocate(1, 2)
    assert (pool.num_free, {k: list(v) for k, v in pool.tables.items()}) == before
    assert pool.allocate(2, 1) and pool.num_free == 0
    pool.check()


def test_allocate_zero_registers_owner_without_blocks() -> None:
    pool = BlockPool(2)
    assert pool.allocate(7, 0)
    assert pool.held(7) == 0 and 7 in pool.tables and pool.num_free == 2
    assert pool.free(7) == 0


def test_rejects_empty_pool() -> None:
    with pytest.raises(ValueError, match="at least one block"):
        BlockPool(0)


def test_check_detects_corruption() -> None:
    pool = BlockPool(4)
    pool.allocate(1, 2)
    pool.allocate(2, 1)
    pool.tables[2].append(pool.tables[1][0])  # one block in two tables
    with pytest.raises(KVCacheError):
        pool.check()
    with pytest.raises(KVCacheError, match="freed twice"):
        pool.free(2)
        pool.free(1)


class PoolMachine(RuleBasedStateMachine):
    """Random allocate/free sequences against a model of who holds how many blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = BlockPool(32)
        self.model: dict[int, int] = {}

    @rule(owner=st.integers(0, 5), n=st.integers(0, 12))
    def allocate(self, owner: int, n: int) -> None:
        free = 32 - sum(self.model.values())
        ok = self.pool.allocate(owner, n)
        assert ok == (n <= free)
        if ok:
            self.model[owner] = self.model.get(owner, 0) + n

    @rule(grants=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 8)), max_size=4))
    def allocate_many(self, grants: list[tuple[int, int]]) -> None:
        free = 32 - sum(self.model.values())
        ok = self.pool.allocate_many([o for o, _ in grants], [n for _, n in grants])
        assert ok == (sum(n for _, n in grants) <= free)
        if ok:
            for owner, n in grants:
                self.model[owner] = self.model.get(owner, 0) + n

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        owner = data.draw(st.sampled_from(sorted(self.model)))
        assert self.pool.free(owner) == self.model.pop(owner)

    @invariant()
    def consistent(self) -> None:
        self.pool.check()
        for owner, n in self.model.items():
            assert self.pool.held(owner) == n
        assert self.pool.num_used == sum(self.model.values())
        assert self.pool.num_free == 32 - self.pool.num_used


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)

# ---------------------------------------------------------------------- the layout

BS = 16
ATT_BYTES = 8 * 1024  # ATTENTION: 8 layers x 1024 bytes per token


def test_attention_only_layout() -> None:
    cfg = make_config(method="none")
    lay = cfg.kv_layout(BS)
    assert lay.block_bytes == BS * ATT_BYTES
    assert lay.fixed_blocks == 0 and lay.sliding == ()
    for t, want in [(0, 0), (1, 1), (16, 1), (17, 2), (1000, 63)]:
        assert lay.blocks_for(t) == want
        assert lay.transfer_bytes(t) == want * BS * ATT_BYTES


@pytest.mark.parametrize(("method", "n", "modules"), [
    ("mtp", 3, 3), ("mtp", 8, 8), ("mtp", 1, 1), ("eagle", 3, 1), ("eagle3", 2, 1),
    ("ngram", 3, 0)])
def test_drafter_kv_shares_the_block(method: str, n: int, modules: int) -> None:
    """Multi-module MTP adds N modules' KV per token, other eagle-family drafters one,
    ngram none: a transfer moves target and drafter KV alike."""
    cfg = make_config(method=method, n_spec=n, data=None)
    lay = cfg.kv_layout(BS)
    assert lay.block_bytes == BS * (ATT_BYTES + modules * 1024)
    assert lay.transfer_bytes(100) == 7 * lay.block_bytes


SLIDING = {"kind": "sliding_window", "num_layers": 8, "kv_bytes_per_token_per_layer": 1024,
           "window_tokens": 64}


@pytest.mark.parametrize(("method", "n", "extra"), [
    ("none", 0, 0), ("eagle", 3, 0), ("mtp", 1, 0), ("mtp", 2, 1), ("mtp", 3, 2),
    ("mtp", 8, 7)])
def test_sliding_window_retains_lookahead_minus_one(method: str, n: int, extra: int) -> None:
    window = SLIDING["window_tokens"]
    assert isinstance(window, int)
    cfg = make_config(f"model.layer_groups={[ATTENTION, SLIDING]}".replace("'", '"'),
                      method=method, n_spec=n)
    assert cfg.extra_retained_tokens == extra
    lay = cfg.kv_layout(BS)
    drafter_bytes = cfg.num_drafter_modules * 1024 if method != "none" else 0
    assert lay.block_bytes == BS * (ATT_BYTES + drafter_bytes)  # full-attention layers only
    assert lay.sliding == ((window + extra, 8 * 1024),)
    for t in [0, 1, 50, 64, 65, 71, 72, 1000, 5000]:
        kept = math.ceil(min(t, window + extra) / BS) * BS  # whole blocks of retained tokens
        want = math.ceil(t / BS) + math.ceil(kept * 8 * 1024 / lay.block_bytes)
        assert lay.blocks_for(t) == want, t
    # Far past the window only the full-attention blocks grow.
    assert lay.blocks_for(5000) - lay.blocks_for(4000) == math.ceil(5000 / BS) - 250


def test_mamba_state_is_fixed_blocks() -> None:
    cfg = make_config(method="none", mamba=True)
    lay = cfg.kv_layout(BS)
    state = 24 * 200_000
    assert lay.fixed_blocks == math.ceil(state / (BS * ATT_BYTES)) > 0
    assert lay.blocks_for(0) == lay.fixed_blocks
    for t in [1, 16, 17, 1000]:
        assert lay.blocks_for(t) == math.ceil(t / BS) + lay.fixed_blocks


def _layer_groups(sliding: bool, mamba: bool) -> str:
    """A ``model.layer_groups=`` override: attention, plus a sliding-window and a Mamba
    group on request."""
    groups: list[dict[str, object]] = [ATTENTION]
    if sliding:
        groups.append({"kind": "sliding_window", "num_layers": 4,
                       "kv_bytes_per_token_per_layer": 512, "window_tokens": 100})
    if mamba:
        groups.append({"kind": "mamba", "num_layers": 8, "state_bytes_per_layer": 50_000})
    return f"model.layer_groups={groups}".replace("'", '"')


@settings(max_examples=40, deadline=None)
@given(n_spec=st.sampled_from([0, 1, 3, 8]), mamba=st.booleans(), sliding=st.booleans(),
       block_size=st.sampled_from([1, 16, 64, 128]),
       tokens=st.lists(st.integers(0, 20_000), min_size=1, max_size=20),
       plus=st.integers(0, 300))
def test_blocks_for_array_matches_scalar_and_is_monotone(
        n_spec: int, mamba: bool, sliding: bool, block_size: int, tokens: list[int],
        plus: int) -> None:
    cfg = make_config(_layer_groups(sliding, mamba),
                      method="mtp" if n_spec else "none", n_spec=n_spec)
    lay = cfg.kv_layout(block_size)
    arr = lay.blocks_for_array(np.asarray(tokens, dtype=np.int64))
    assert arr.tolist() == [lay.blocks_for(t) for t in tokens]
    arr = lay.blocks_for_array(np.asarray(tokens, dtype=np.int64), plus)
    assert arr.tolist() == [lay.blocks_for(t + plus) for t in tokens]
    srt = sorted(tokens)
    counts = [lay.blocks_for(t) for t in srt]
    assert counts == sorted(counts)
    for t in tokens:
        # whole blocks: the tokens always fit, and a transfer is whole blocks of bytes
        assert lay.blocks_for(t) * block_size >= t
        assert lay.transfer_bytes(t) == lay.blocks_for(t) * lay.block_bytes


@settings(max_examples=40, deadline=None)
@given(n_spec=st.sampled_from([0, 1, 3, 8]), mamba=st.booleans(), sliding=st.booleans(),
       block_size=st.sampled_from([1, 16, 64]), blocks=st.integers(2_000, 50_000))
def test_max_fit_tokens_is_the_longest_request_the_pool_holds(
        n_spec: int, mamba: bool, sliding: bool, block_size: int, blocks: int) -> None:
    """The router's capacity check reads ``Instance.max_fit_tokens``: a request of that
    many tokens (plus its sampled token and drafts) fits in the whole pool, one more
    does not (or it is max_model_len)."""
    cfg = make_config(_layer_groups(sliding, mamba),
                      f"cluster.decode.scheduler.block_size={block_size}",
                      f"cluster.decode.scheduler.num_blocks={blocks}",
                      method="mtp" if n_spec else "none", n_spec=n_spec)
    d = Simulation(cfg).by_role[Role.DECODE][0]

    def fits(tokens: int) -> bool:
        return d.layout.blocks_for(tokens + 1 + n_spec) <= blocks

    t = d.max_fit_tokens
    assert t == -1 or fits(t)
    # no request is longer than max_model_len: the search stops there (it would never
    # end where every layer slides and block counts stop growing)
    assert t <= cfg.model.max_model_len
    assert t == cfg.model.max_model_len or not fits(t + 1)
