"""The proxy's two hops (P gets the truncated prompt, D the original request) and the
routing policies."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from core_support import make_config, reference_backoff, terminal_problems

from pdsim import Simulation
from pdsim.config import Role
from pdsim.engine.router import ROUTERS, make_router

# ----------------------------------------------------------------- the two hops


@pytest.mark.parametrize(("method", "n", "mamba", "backoff"), [
    ("none", 0, False, "auto"), ("eagle3", 3, False, "auto"), ("mtp", 3, False, "auto"),
    ("mtp", 8, False, "auto"), ("mtp", 8, False, "off"), ("none", 0, True, "off"),
    ("mtp", 3, True, "auto"), ("mtp", 3, True, "off")])
@pytest.mark.parametrize("transfer", ["pull", "push"])
def test_two_hops(method: str, n: int, mamba: bool, backoff: str, transfer: str) -> None:
    cfg = make_config(f"connector.prefill_backoff={backoff}",
                      f"connector.transfer_mode={transfer}",
                      "workload.prompt_tokens={kind: uniform, mean_tokens: 300, "
                      "range_ratio: 0.9}",
                      method=method, n_spec=n, mamba=mamba)
    b = reference_backoff(cfg.num_prefill_lookahead_tokens, mamba, backoff == "auto")
    sim = Simulation(cfg)
    res = sim.run()
    assert not terminal_problems(res.records)
    for r in res.records:
        L = r["prompt_tokens"]
        assert b < L  # the workload's shortest prompt is 30 tokens
        assert r["p_prompt_tokens"] == L - b  # P computed the truncated prompt
        assert r["tokens_recomputed_on_d"] == b == L - r["p_prompt_tokens"]
        # D recomputes the backed-off tokens, or at least the last one for its logits
        assert r["d_local_prefill_tokens"] == max(b, 1)
        assert (r["prefill_instance"], r["decode_instance"]) == ("P0", "D0")
        assert r["output_tokens"] == r["target_output_tokens"]  # D produced them all
        # whole blocks of the P-computed prefix move, target and drafter KV alike
        block_bytes = 16 * cfg.kv_bytes_per_token
        fixed = math.ceil(cfg.model.mamba_state_bytes / block_bytes) if mamba else 0
        assert r["kv_bytes_transferred"] == (math.ceil((L - b) / 16) + fixed) * block_bytes
        assert r["p_start_s"] <= r["p_end_s"] <= r["transfer_start_s"] \
            <= r["transfer_end_s"] <= r["first_token_s"] <= r["finish_s"]
    # max_tokens = 1 on P: it only prefills, exactly the truncated prompts
    p_log, d_log = res.instances[0].step_log, res.instances[1].step_log
    assert (p_log[:, 3] == 0).all()
    assert p_log[:, 2].sum() == sum(r["p_prompt_tokens"] for r in res.records)
    # a padded first step computes its last prompt token in a decode-shaped row (1 + N
    # query tokens), so the log counts it with the decodes
    padded = sum(r["padded_first_steps"] for r in res.records)
    assert d_log[:, 2].sum() + padded == sum(r["d_local_prefill_tokens"] for r in res.records)
    assert res.summary["tokens_recomputed_on_d"] == b * len(res.records)


def test_prompt_not_longer_than_backoff_is_loaded_whole() -> None:
    """L <= backoff: P cannot drop the tokens (it computes all L), so D loads all of them
    and recomputes only the last one, as before the fix (reference: such prompts take the
    padded path again)."""
    cfg = make_config("workload.prompt_tokens.tokens=5", method="mtp", n_spec=8)
    res = Simulation(cfg).run()
    for r in res.records:
        assert r["status"] == "finished"
        assert r["p_prompt_tokens"] == 5
        assert r["tokens_recomputed_on_d"] == 0
        assert r["d_local_prefill_tokens"] == 1
        assert r["kv_bytes_transferred"] > 0


@pytest.mark.parametrize("policy", sorted(ROUTERS))
def test_policies_spread_2p2d(policy: str) -> None:
    cfg = make_config("cluster.prefill.count=2", "cluster.decode.count=2",
                      f"router.policy={policy}", "workload.num_requests=40",
                      "workload.arrivals.rate_per_s=200")
    res = Simulation(cfg).run()
    assert not terminal_problems(res.records)
    p = Counter(r["prefill_instance"] for r in res.records)
    d = Counter(r["decode_instance"] for r in res.records)
    assert set(p) == {"P0", "P1"} and set(d) == {"D0", "D1"}
    if policy == "round_robin":
        assert p["P0"] == p["P1"] == d["D0"] == d["D1"] == 20
        assert [r["prefill_instance"] for r in res.records[:6]] == ["P0", "P1"] * 3
    elif policy == "least_loaded":
        assert abs(p["P0"] - p["P1"]) <= 4 and abs(d["D0"] - d["D1"]) <= 4
    # every record's transfer moved over the P->D pair it names
    names = {f"{r['prefill_instance']}->{r['decode_instance']}" for r in res.records}
    assert names <= set(res.links)


def test_router_choice_does_not_shift_other_streams() -> None:
    """Paired comparisons: arrivals and lengths are the same whatever the policy."""
    runs = {}
    for policy in ("round_robin", "random"):
        cfg = make_config("cluster.prefill.count=2", "cluster.decode.count=2",
                          f"router.policy={policy}",
                          "workload.prompt_tokens={kind: uniform, mean_tokens: 300, "
                          "range_ratio: 0.5}")
        runs[policy] = Simulation(cfg).run().records
    for a, b in zip(runs["round_robin"], runs["random"], strict=True):
        assert (a["arrival_s"], a["prompt_tokens"], a["target_output_tokens"]) == \
            (b["arrival_s"], b["prompt_tokens"], b["target_output_tokens"])
    again = Simulation(make_config(
        "cluster.prefill.count=2", "cluster.decode.count=2", "router.policy=random",
        "workload.prompt_tokens={kind: uniform, mean_tokens: 300, range_ratio: 0.5}")
    ).run().records
    assert [r["prefill_instance"] for r in again] == \
        [r["prefill_instance"] for r in runs["random"]]


# ------------------------------------------------------------- policies alone


@dataclass
class FakeInstance:
    index: int
    pending: int
    held: int

    def load(self) -> tuple[int, int]:
        return self.pending, self.held


def test_policies_alone() -> None:
    rng = np.random.default_rng(0)
    cands = [FakeInstance(3, 50, 2), FakeInstance(5, 10, 9), FakeInstance(7, 10, 1)]
    rr = make_router("round_robin", rng)
    assert [rr.choose(cands, None) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]  # type: ignore[arg-type]
    # a different candidate set keeps its own cycle
    assert rr.choose(cands[:2], None) == 0  # type: ignore[arg-type]
    ll = make_router("least_loaded", rng)
    assert ll.choose(cands, None) == 2  # type: ignore[arg-type]  # fewest tokens, then requests
    tie = [FakeInstance(4, 0, 0), FakeInstance(2, 0, 0)]
    assert ll.choose(tie, None) == 1  # type: ignore[arg-type]  # then the lower index
    rnd = make_router("random", np.random.default_rng(1))
    picks = Counter(rnd.choose(cands, None) for _ in range(3000))  # type: ignore[arg-type]
    assert set(picks) == {0, 1, 2} and min(picks.values()) > 850
    with pytest.raises(KeyError):
        make_router("no_such_policy", rng)


def test_roles_are_routed_separately() -> None:
    cfg = make_config("cluster.prefill.count=3", "cluster.decode.count=2",
                      "workload.num_requests=12")
    sim = Simulation(cfg)
    assert [i.role for i in sim.instances] == [Role.PREFILL] * 3 + [Role.DECODE] * 2
    res = sim.run()
    assert Counter(r["prefill_instance"] for r in res.records) == {"P0": 4, "P1": 4, "P2": 4}
    assert Counter(r["decode_instance"] for r in res.records) == {"D0": 6, "D1": 6}
