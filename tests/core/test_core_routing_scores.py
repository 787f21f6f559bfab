"""The scoring routers (kv_load_aware, prefix_aware): choices on hand-built instance states,
prefix affinity in a simulation, the weights' validation, and properties of every policy."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest
from core_support import make_config
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import Simulation
from pdsim.config_sections import CacheAwareRouting, RouterConfig, RouterWeights
from pdsim.engine.route_view import RoutingState
from pdsim.engine.router import ROUTERS, make_router
from pdsim.errors import ConfigError
from pdsim.invariants import run_checked
from pdsim.loader import load_config


@dataclass
class Target:
    """A hand-built candidate (``RouteTarget``)."""

    index: int
    waiting: int = 0
    running: int = 0
    kv_usage: float = 0.0
    cached: frozenset[int] = field(default_factory=frozenset)
    pending: int = 0

    def load(self) -> tuple[int, int]:
        return self.pending, self.waiting + self.running

    def routing_state(self) -> RoutingState:
        return RoutingState(self.waiting, self.running, self.kv_usage, len(self.cached))

    def cached_prefix_blocks(self, hash_ids: Sequence[int]) -> int:
        n = 0
        for h in hash_ids:
            if h not in self.cached:
                break
            n += 1
        return n


@dataclass
class Req:
    hash_ids: tuple[int, ...] | None = None


def router(policy: str, cache_aware: CacheAwareRouting | None = None,
           **weights: float) -> object:
    cfg = RouterConfig(policy=policy, weights=RouterWeights(**weights),
                       cache_aware=cache_aware or CacheAwareRouting())
    return make_router(policy, np.random.default_rng(0), cfg)


def pick(policy: str, cands: list[Target], req: Req | None = None, **weights: float) -> int:
    r = router(policy, **weights)
    return r.choose(cands, req or Req())  # type: ignore[attr-defined, no-any-return]


# --------------------------------------------------------- choices by hand


# A: long queue, idle, nearly full; B: no queue, busy, half full; C: in between, emptiest
A = Target(0, waiting=4, running=0, kv_usage=0.9)
B = Target(1, waiting=0, running=8, kv_usage=0.5)
C = Target(2, waiting=2, running=2, kv_usage=0.2)


@pytest.mark.parametrize(("weights", "expected"), [
    ({"queue": 1, "kv_usage": 0, "running": 0}, 1),  # shortest queue: B
    ({"queue": 0, "kv_usage": 1, "running": 0}, 2),  # least KV in use: C
    ({"queue": 0, "kv_usage": 0, "running": 1}, 0),  # fewest running: A
    # q: A 0, B 1, C 0.5; kv: A 0.1, B 0.5, C 0.8; running: A 1, B 0, C 0.75
    ({"queue": 1, "kv_usage": 1, "running": 0.5}, 2),  # 0.6, 1.5, 1.675
    ({"queue": 3, "kv_usage": 1, "running": 0.5}, 1),  # 0.6, 3.5, 2.675
    ({"queue": 0, "kv_usage": 0.1, "running": 3}, 0),  # 3.01, 0.05, 2.33
])
def test_kv_load_aware_weighs_the_terms(weights: dict[str, float], expected: int) -> None:
    assert pick("kv_load_aware", [A, B, C], **weights) == expected
    # the choice is the candidate, not its position
    assert pick("kv_load_aware", [C, B, A], **weights) == 2 - expected


def test_default_weights_are_llm_d_default_profile() -> None:
    w = RouterWeights()
    assert (w.queue, w.kv_usage, w.running, w.prefix) == (2.0, 2.0, 0.0, 3.0)
    # defaults: queue 2 x (0, 1, 0.5) + kv 2 x (0.1, 0.5, 0.8) = 0.2, 3.0, 2.6
    assert pick("kv_load_aware", [A, B, C]) == 1


def test_prefix_aware_prefers_the_longest_cached_leading_run() -> None:
    req = Req((10, 11, 12, 13))
    cands = [Target(0, cached=frozenset({10})), Target(1, cached=frozenset({10, 11, 12})),
             Target(2, cached=frozenset({11, 12, 13}))]  # no leading block: 0
    assert pick("prefix_aware", cands, req) == 1
    # load still counts: prefix 3 x (0.25, 0.75), queue 2 x (1, 0) -> 2.75 against 2.25
    busy = [Target(0, cached=frozenset({10})),
            Target(1, waiting=10, cached=frozenset({10, 11, 12}))]
    assert pick("prefix_aware", busy, req) == 0
    assert pick("prefix_aware", busy, req, prefix=10) == 1  # 2.5 + 2 against 7.5
    # without hash ids (or with a prefix weight of 0) load alone decides
    assert pick("prefix_aware", [*cands[1:], Target(3, kv_usage=0.5)], Req(None)) == 0
    assert pick("prefix_aware", cands, req, prefix=0, queue=1) == 0
    # kv_load_aware ignores the caches
    assert pick("kv_load_aware", cands, req) == 0


def test_cache_aware_follows_the_cache_unless_the_load_is_imbalanced() -> None:
    req = Req((10, 11, 12, 13))
    held = frozenset({10, 11, 12})
    cands = [Target(0, cached=frozenset({10, 99, 98, 97, 96})), Target(1, cached=held),
             Target(2, cached=frozenset({50}))]
    ca = router("cache_aware")
    assert ca.choose(cands, req) == 1  # type: ignore[attr-defined]  # 3/4 > 0.5
    # a match of at most half the blocks: the instance with the fewest cached blocks
    assert ca.choose(cands, Req((10, 11, 20, 21))) == 2  # type: ignore[attr-defined]
    assert ca.choose(cands, Req(None)) == 2  # type: ignore[attr-defined]
    # imbalanced (40 - 5 > 32 and 40 > 1.1 x 5): the least loaded, whatever it caches
    busy = [Target(0, waiting=3, running=2), Target(1, running=40, cached=held)]
    assert ca.choose(busy, req) == 0  # type: ignore[attr-defined]
    # not imbalanced by the absolute threshold, or by the relative one
    assert ca.choose([Target(0, running=8), Target(1, running=40, cached=held)],  # type: ignore[attr-defined]
                     req) == 1
    loose = router("cache_aware", CacheAwareRouting(balance_abs_threshold=2,
                                                     balance_rel_threshold=10))
    assert loose.choose([Target(0, running=5), Target(1, running=40, cached=held)],  # type: ignore[attr-defined]
                        req) == 1
    strict = router("cache_aware", CacheAwareRouting(cache_threshold=0.8))
    assert strict.choose(cands, req) == 2  # type: ignore[attr-defined]  # 3/4 <= 0.8


def test_single_candidate_and_ties() -> None:
    for policy in ("kv_load_aware", "prefix_aware", "cache_aware", "least_loaded"):
        assert pick(policy, [Target(7, waiting=9)]) == 0
        same = [Target(5), Target(3), Target(9)]
        assert pick(policy, same, Req((1, 2))) == 1  # a fresh router: the lowest index
    # the scoring policies then take turns over the tied candidates, in index order
    r = router("prefix_aware")
    same = [Target(5), Target(3), Target(9), Target(4, waiting=1)]
    assert [r.choose(same, Req()) for _ in range(7)] == [1, 0, 2, 1, 0, 2, 1]  # type: ignore[attr-defined]
    # only exact ties rotate: a better candidate wins every time
    assert [r.choose([Target(0, kv_usage=0.1), Target(1)], Req())  # type: ignore[attr-defined]
            for _ in range(3)] == [1, 1, 1]


# ---------------------------------------------------------------- properties

policies = st.sampled_from(sorted(ROUTERS))
targets = st.builds(
    Target, index=st.integers(0, 10_000), waiting=st.integers(0, 50),
    running=st.integers(0, 50), kv_usage=st.floats(0, 1),
    cached=st.frozensets(st.integers(0, 8), max_size=9), pending=st.integers(0, 10_000))
weights = st.builds(RouterWeights, queue=st.floats(0, 10), kv_usage=st.floats(0, 10),
                    running=st.floats(0, 10), prefix=st.floats(0, 10))
hashes = st.one_of(st.none(), st.lists(st.integers(0, 8), max_size=10).map(tuple))


@settings(max_examples=200, deadline=None)
@given(policies, st.lists(targets, min_size=1, max_size=12, unique_by=lambda t: t.index),
       weights, hashes, st.integers(0, 2**32 - 1))
def test_every_policy_returns_a_candidate(policy: str, cands: list[Target],
                                          w: RouterWeights, ids: tuple[int, ...] | None,
                                          seed: int) -> None:
    r = make_router(policy, np.random.default_rng(seed), RouterConfig(policy=policy,
                                                                      weights=w))
    for _ in range(3):
        i = r.choose(cands, Req(ids))  # type: ignore[arg-type]
        assert isinstance(i, int) and 0 <= i < len(cands)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["least_loaded", "kv_load_aware", "prefix_aware", "cache_aware"]),
       st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True),
       targets, weights, hashes)
def test_equal_states_break_ties_deterministically(
        policy: str, indices: list[int], state: Target, w: RouterWeights,
        ids: tuple[int, ...] | None) -> None:
    """All candidates alike: the first pick is the lowest index; least_loaded keeps it,
    the other policies take turns in index order; the same for any random stream."""
    cands = [Target(i, state.waiting, state.running, state.kv_usage, state.cached,
                    state.pending) for i in indices]
    by_index = sorted(range(len(indices)), key=lambda i: indices[i])
    turns = 2 * len(cands) + 1
    if policy == "least_loaded":
        expected = [by_index[0]] * turns
    else:
        expected = [by_index[k % len(cands)] for k in range(turns)]
    for seed in (0, 1):
        r = make_router(policy, np.random.default_rng(seed),
                        RouterConfig(policy=policy, weights=w))
        assert [r.choose(cands, Req(ids)) for _ in range(turns)] == expected  # type: ignore[arg-type]


@settings(max_examples=12, deadline=None)
@given(policies, st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_simulated_requests_land_on_instances_of_the_asked_role(
        policy: str, n_p: int, n_d: int, colocated: bool) -> None:
    cfg = make_config(f"router.policy={policy}", f"cluster.prefill.count={n_p}",
                      f"cluster.decode.count={n_d}", f"cluster.colocated.count={n_p}",
                      f"cluster.mode={'colocated' if colocated else 'disaggregated'}",
                      "cluster.prefill.scheduler.enable_prefix_caching=true",
                      "cluster.colocated.scheduler.enable_prefix_caching=true",
                      "workload.num_requests=24", "workload.arrivals.rate_per_s=100",
                      "workload.shared_prefix={num_groups: 3, prefix_tokens: 256, "
                      "hash_block_tokens: 16}",
                      "workload.prompt_tokens={kind: uniform, mean_tokens: 64, "
                      "range_ratio: 0.5}")
    sim = Simulation(cfg)
    res = sim.run()
    for rec in res.records:
        assert rec["status"] == "finished"
        if colocated:
            assert rec["decode_instance"] in {i.name for i in sim.colocated}
        else:
            assert rec["prefill_instance"] in {i.name for i in sim.prefills}
            assert rec["decode_instance"] in {i.name for i in sim.decodes}


# ------------------------------------------------------------ in a simulation


def _affinity_run(policy: str, colocated: bool) -> tuple[dict[int, set[str]], float]:
    """Three instances with prefix caching, three prefix groups at a low rate: each
    group's instances, and the run's prefix hit rate."""
    mode = "colocated" if colocated else "disaggregated"
    cfg = make_config(f"router.policy={policy}", f"cluster.mode={mode}",
                      "cluster.prefill.count=3", "cluster.colocated.count=3",
                      "cluster.prefill.scheduler.enable_prefix_caching=true",
                      "cluster.colocated.scheduler.enable_prefix_caching=true",
                      "workload.num_requests=60", "workload.arrivals.rate_per_s=4",
                      "workload.shared_prefix={num_groups: 3, prefix_tokens: 1024, "
                      "zipf_exponent: 0, hash_block_tokens: 16}",
                      "workload.prompt_tokens={kind: uniform, mean_tokens: 64, "
                      "range_ratio: 0.5}", method="none")
    sim = Simulation(cfg)
    res = sim.run()
    shared = 1024 // 16
    where: dict[int, set[str]] = defaultdict(set)
    for rec in res.records:
        assert rec["status"] == "finished"
        group = sim.specs.hash_ids[rec["request_id"]][0] // shared  # type: ignore[index]
        where[group].add(rec["decode_instance"] if colocated else rec["prefill_instance"])
    return where, res.summary.prefix_cache_hit_rate


@pytest.mark.parametrize("colocated", [False, True])
@pytest.mark.parametrize("policy", ["prefix_aware", "cache_aware"])
def test_prefix_aware_sends_each_prefix_to_the_instance_that_caches_it(
        colocated: bool, policy: str) -> None:
    where, hit_rate = _affinity_run(policy, colocated)
    assert len(where) == 3
    assert all(len(insts) == 1 for insts in where.values()), where
    # round robin spreads every group over the instances and computes each prefix thrice
    spread, rr_hit_rate = _affinity_run("round_robin", colocated)
    assert all(len(insts) == 3 for insts in spread.values()), spread
    assert hit_rate > rr_hit_rate


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(("overrides", "field", "words"), [
    (["router.policy=kv_load_aware", "router.weights.prefix=1"], "router.weights.prefix",
     "does not read it"),
    (["router.weights.queue=1"], "router.weights", "reads no weights"),
    (["router.policy=least_loaded", "router.weights={kv_usage: 1}"], "router.weights",
     "reads no weights"),
    (["router.policy=kv_load_aware", "router.weights={queue: 0, kv_usage: 0}"],
     "router.weights", "is 0"),
    (["router.policy=prefix_aware",
      "router.weights={queue: 0, kv_usage: 0, prefix: 0}"], "router.weights", "is 0"),
    (["router.policy=prefix_aware", "router.weights.queue=-1"], "router.weights.queue",
     "greater than or equal to 0"),
    (["router.policy=prefix_aware", "router.weights.kv_usage=.nan"],
     "router.weights.kv_usage", ""),
    (["router.policy=prefix_aware", "router.weights.prefix=1e9"], "router.weights.prefix",
     ""),
    (["router.policy=prefix_aware", "router.weights.load=1"], "router.weights.load", ""),
    (["router.policy=cache_aware", "router.weights.queue=1"], "router.weights",
     "reads no weights"),
    (["router.policy=prefix_aware", "router.cache_aware.cache_threshold=0.3"],
     "router.cache_aware", "applies to policy cache_aware only"),
    (["router.policy=cache_aware", "router.cache_aware.cache_threshold=1.5"],
     "router.cache_aware.cache_threshold", "less than or equal to 1"),
    (["router.policy=cache_aware", "router.cache_aware.balance_rel_threshold=0.5"],
     "router.cache_aware.balance_rel_threshold", "greater than or equal to 1"),
    (["router.policy=cache_aware", "router.cache_aware.balance_abs_threshold=-1"],
     "router.cache_aware.balance_abs_threshold", "greater than or equal to 0"),
])
def test_bad_weights_are_config_errors_naming_the_field(
        overrides: list[str], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_config(*overrides)
    located = [msg for loc, msg in info.value.issues if loc == field]
    assert located and words in located[0], info.value.issues


@pytest.mark.parametrize("overrides", [
    ["router.policy=round_robin"], ["router.policy=kv_load_aware", "router.weights.running=1"],
    ["router.policy=prefix_aware", "router.weights={queue: 0, kv_usage: 0, prefix: 1}"],
    ["router.policy=cache_aware", "router.cache_aware.balance_abs_threshold=4"]])
def test_a_dumped_config_loads_again(overrides: list[str]) -> None:
    cfg = make_config(*overrides)
    again = load_config(cfg.model_dump(mode="json"))
    assert again.router == cfg.router


def test_good_weights_are_kept() -> None:
    cfg = make_config("router.policy=prefix_aware",
                      "router.weights={queue: 1, kv_usage: 1, running: 0.5, prefix: 4}")
    assert cfg.router.weights == RouterWeights(queue=1, kv_usage=1, running=0.5, prefix=4)
    cfg = make_config("router.policy=kv_load_aware", "router.weights.running=1")
    assert cfg.router.weights.running == 1 and cfg.router.weights.queue == 2


# ------------------------------------------------------- the view on instances


def test_instances_show_routers_their_state_without_changing_it() -> None:
    """``Instance`` is a ``RouteTarget``: KV usage is a fraction of its own pool, waiting
    counts queued and receiving requests, and a prefix lookup keeps the LRU order."""
    cfg = make_config("cluster.prefill.count=2", "cluster.prefill.scheduler.num_blocks=1000",
                      "cluster.prefill.scheduler.enable_prefix_caching=true")
    sim = Simulation(cfg)
    p0, p1 = sim.prefills
    assert p0.routing_state() == RoutingState(0, 0, 0.0)
    assert p0.pool.allocate(10_000, 250)
    assert p1.pool.allocate(10_001, 100)
    assert p0.routing_state().kv_usage == 0.25 and p1.routing_state().kv_usage == 0.1
    r = router("kv_load_aware")
    assert sim.prefills[r.choose(sim.prefills, Req())].name == "P1"  # type: ignore[attr-defined]
    cache = p0.kv.prefix_cache
    assert cache is not None
    for h in (5, 6, 7, 1):
        cache[h] = None
    before = list(cache)
    assert p0.cached_prefix_blocks((5, 6, 7, 8)) == 3
    assert p0.cached_prefix_blocks((6, 7)) == 2 and p0.cached_prefix_blocks((8, 5)) == 0
    assert list(cache) == before  # LRU order untouched
    assert p1.cached_prefix_blocks((5,)) == 0
    assert sim.decodes[0].cached_prefix_blocks((5,)) == 0  # D keeps no prefix cache


@pytest.mark.parametrize("policy", ["kv_load_aware", "prefix_aware", "cache_aware"])
@pytest.mark.parametrize("colocated", [False, True])
def test_engine_invariants_hold_under_the_scoring_routers(policy: str, colocated: bool) -> None:
    """Every engine invariant after every event, with small pools (prefix-cache
    evictions, preemptions) and an outage of the first instance mid-run."""
    first = "C0" if colocated else "P0"
    cfg = make_config(f"router.policy={policy}",
                      f"cluster.mode={'colocated' if colocated else 'disaggregated'}",
                      "cluster.prefill.count=3", "cluster.colocated.count=3",
                      "cluster.prefill.scheduler.num_blocks=200",
                      "cluster.colocated.scheduler.num_blocks=200",
                      "cluster.prefill.scheduler.enable_prefix_caching=true",
                      "cluster.colocated.scheduler.enable_prefix_caching=true",
                      "workload.num_requests=80", "workload.arrivals.rate_per_s=60",
                      "workload.shared_prefix={num_groups: 12, prefix_tokens: 512, "
                      "zipf_exponent: 0.5, hash_block_tokens: 16}",
                      "workload.prompt_tokens={kind: uniform, mean_tokens: 100, "
                      "range_ratio: 0.9}",
                      f"faults.instance_outages=[{{instance: {first}, start_s: 0.3, "
                      f"end_s: 0.8}}]")
    res = run_checked(cfg)
    assert res.summary.completed + res.summary.failed == 80
    assert res.summary.prefix_cache_hit_rate > 0
