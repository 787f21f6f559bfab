"""Slot-level provenance of the drafter KV P hands to D (reference sections 2-4).

The pure functions in ``pdsim.spec_decode.provenance`` are checked against closed forms stated
in the reference and against ``excess_stale_by_token_identity`` (which token each slot
consumed versus the true one). Then the same predictions are checked on D's state in
simulations: the stale-slot row of each request right after its first step on D.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from core_support import (
    ATTENTION,
    MAMBA,
    base_dict,
    excess_stale_by_token_identity,
    make_config,
    reference_backoff,
    stale_counts,
    terminal_problems,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdsim import Simulation
from pdsim.config import Role
from pdsim.spec_decode.provenance import (
    SlotCause,
    StaleSlot,
    d_excess_stale_slots,
    excess_profile,
    p_guessed_slots,
    stale_plan,
)

GUESS, DRAFT = SlotCause.GUESS, SlotCause.UNVERIFIED_DRAFT

# --------------------------------------------------------------- closed forms


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("L", [1, 2, 5, 9, 100, 4096])
def test_before_fix_p_leaves_unverified_drafts(n: int, L: int) -> None:
    """Backoff off: P sees the whole prompt; module m writes positions L-m..L-1 from
    drafts past L (module 0 reads P's sampled token, which D reproduces)."""
    want = {(m, p, p + m + 1) for m in range(n) for p in range(max(0, L - m), L)}
    assert set(p_guessed_slots(L, L, n)) == want
    # D recomputes position L-1 only: module m keeps m-1 stale slots at L-m..L-2.
    excess = d_excess_stale_slots(L, L, L - 1, n)
    assert {(s.module, s.position) for s in excess} == {
        (m, p) for m in range(1, n) for p in range(max(0, L - m), L - 1)}
    for s in excess:
        assert s.cause is DRAFT
        assert s.distance == L - s.position
        assert s.guess_index == s.position + s.module + 1 - L >= 1  # tokens past L
    if n < L:
        for m in range(n):
            assert sum(s.module == m for s in excess) == max(0, m - 1)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("L", [1, 2, 5, 8, 9, 100, 4096])
def test_after_fix_only_the_guess_residual_remains(n: int, L: int) -> None:
    """Backoff N-1: P sees L_seen = L-(N-1); D recomputes L_seen..L-1. Every excess slot
    is a guess of a real token (no unverified draft survives): module m has m+1 of them
    at L_seen-m-1..L_seen-1, clipped at 0."""
    b = n - 1
    if b >= L:
        # P cannot drop the tokens: D loads nothing, so nothing of P's survives on D.
        assert d_excess_stale_slots(L, L, 0, n) == []
        return
    seen = L - b
    excess = d_excess_stale_slots(L, seen, seen, n)
    assert {(s.module, s.position) for s in excess} == {
        (m, p) for m in range(n) for p in range(max(0, seen - m - 1), seen)}
    for s in excess:
        assert s.cause is GUESS
        assert s.guess_index == s.position + s.module + 1 - seen
        assert 0 <= s.guess_index <= s.module
    if seen > n:
        for m in range(n):
            assert sum(s.module == m for s in excess) == m + 1


@pytest.mark.parametrize("L", [2, 3, 50])
def test_mamba_single_module_backoff_one(L: int) -> None:
    """Mamba without MTP lookahead backs off 1: the one drafter module's slot at L-2 was
    written from P's sampled token, a guess of the real token L-1."""
    assert d_excess_stale_slots(L, L - 1, L - 1, 1) == [StaleSlot(0, L - 2, 2, GUESS, 0)]
    assert d_excess_stale_slots(L, L - 1, L - 1, 0) == []  # no drafter, no slot


@pytest.mark.parametrize("n", [2, 3, 8])
def test_mamba_mtp_before_fix(n: int) -> None:
    """Mamba + MTP, backoff off (= 1): module m has m+1 excess slots at L-m-2..L-2 —
    guesses of the real tokens L-1 and L, unverified drafts past L."""
    L = 200
    excess = d_excess_stale_slots(L, L - 1, L - 1, n)
    for m in range(n):
        mine = sorted((s for s in excess if s.module == m), key=lambda s: s.position)
        assert [s.position for s in mine] == list(range(L - m - 2, L - 1))
        assert [s.cause for s in mine] == [GUESS] * min(2, m + 1) + [DRAFT] * max(0, m - 1)


@settings(max_examples=300, deadline=None)
@given(L=st.integers(1, 80), n=st.integers(1, 8), mamba=st.booleans(), auto=st.booleans())
def test_excess_slots_match_token_identity(L: int, n: int, mamba: bool, auto: bool) -> None:
    lookahead = n if n > 1 else 1
    b = reference_backoff(lookahead, mamba, auto)
    seen = L - b if b < L else L
    remote = seen  # D loads what P computed (all of it when P did not truncate)
    d_first = min(remote, L - 1)
    got = {(s.module, s.position): (s.cause, s.guess_index)
           for s in d_excess_stale_slots(L, seen, d_first, n)}
    want = excess_stale_by_token_identity(L, b, n)
    assert got == {k: (GUESS if c == "guess" else DRAFT, g) for k, (c, g) in want.items()}
    for s in d_excess_stale_slots(L, seen, d_first, n):
        assert s.distance == L - s.position >= 1
    # The cached relative profile says the same thing, for any prompt length.
    rows = excess_profile(L - seen, L - d_first, n, L)
    assert sorted((m, d, c, k) for m, d, c, k in rows) == sorted(
        (s.module, s.distance, s.cause, s.guess_index)
        for s in d_excess_stale_slots(L, seen, d_first, n))
    if auto and b < L:  # a prompt P could truncate: only its guesses remain
        assert all(c == "guess" for c, _ in want.values())


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 8), mamba=st.booleans(), auto=st.booleans(),
       L=st.integers(200, 100_000))
def test_excess_profile_is_independent_of_long_prompt_length(
        n: int, mamba: bool, auto: bool, L: int) -> None:
    b = reference_backoff(n if n > 1 else 1, mamba, auto)
    d_local = max(b, 1)
    assert excess_profile(b, d_local, n, L) == excess_profile(b, d_local, n, 10**7)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 8), mamba=st.booleans(), auto=st.booleans(),
       L=st.integers(1, 100_000), decay=st.one_of(st.none(), st.floats(0.5, 50.0)),
       accuracy=st.floats(0.0, 1.0))
def test_stale_plan_weighs_each_excess_slot(n: int, mamba: bool, auto: bool, L: int,
                                            decay: float | None, accuracy: float) -> None:
    """The per-request plan the engine applies: one entry per excess slot, in order, with
    its module, its weight (1, or decayed with its distance) and how many of P's guesses
    of real tokens and of its drafts must have been right for the slot to be exact: the
    slot consumed token L_seen + k through the chain, so guesses 0..min(k, backoff) (when
    P was truncated) and drafts 1..(k - backoff)."""
    b = min(reference_backoff(n if n > 1 else 1, mamba, auto), L - 1)
    d_local = max(b, 1)
    rows = excess_profile(b, d_local, n, L)
    plan = stale_plan(b, d_local, n, L, decay)
    assert len(plan.slots) == len(rows)
    for (m, dist, cause, k), (pm, weight, guesses, drafts) in zip(rows, plan.slots,
                                                                  strict=True):
        assert pm == m
        assert weight == (1.0 if decay is None else pytest.approx(
            2.718281828459045 ** (-(dist - 1) / decay)))
        if cause is GUESS:
            assert (guesses, drafts) == (k + 1, 0)
        else:
            assert drafts == k - b >= 1
            assert guesses == (b + 1 if b else 0)
    assert plan.max_guesses == max((g for _, _, g, _ in plan.slots), default=0)
    assert plan.max_drafts == max((d for *_, d in plan.slots), default=0)



# ------------------------------------------------------- D's state in simulations


def _sim_config(*, L: int, n: int, block_size: int, chunk: int, mamba: bool, push: bool,
                auto: bool, accuracy: float, colocated: bool, p_pressure: bool) -> Any:
    d = base_dict()
    d["model"]["layer_groups"] = [ATTENTION, MAMBA] if mamba else [ATTENTION]
    d["speculative"]["num_speculative_tokens"] = n
    d["speculative"]["stale_kv"] = {"residual_guess_accuracy": accuracy}
    # P's drafts are right exactly as often as its guesses: all or none
    d["speculative"]["acceptance"] = {"kind": "constant", "rate": accuracy}
    seqs = 4
    lookahead = n if n > 1 else 1
    budgets = {"prefill": max(chunk, lookahead), "decode": seqs * (1 + n) + chunk,
               "colocated": seqs * (1 + n) + chunk}
    for role, budget in budgets.items():
        d["cluster"][role]["scheduler"].update(block_size=block_size, max_num_seqs=seqs,
                                               max_num_batched_tokens=budget)
    d["cluster"]["mode"] = "colocated" if colocated else "disaggregated"
    d["connector"] = {"transfer_mode": "push" if push else "pull",
                      "prefill_backoff": "auto" if auto else "off"}
    d["workload"] = {"num_requests": 5, "arrivals": {"kind": "poisson", "rate_per_s": 500.0},
                     "prompt_tokens": {"kind": "fixed", "tokens": L},
                     "output_tokens": {"kind": "fixed", "tokens": 6}}
    # Pools that hold every request at once (no preemption on D), sized from the layout.
    need = make_config(data=copy.deepcopy(d)).kv_layout(block_size).blocks_for(
        L + 8 + n)
    for role in budgets:
        d["cluster"][role]["scheduler"]["num_blocks"] = 6 * need
    if p_pressure and not colocated:
        # room on P for about 1.5 prompts: concurrent prefills preempt each other
        d["cluster"]["prefill"]["scheduler"]["num_blocks"] = need + need // 2
    return make_config(data=d)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(L=st.integers(1, 400), n=st.integers(1, 8), block_size=st.sampled_from([4, 16, 64]),
       chunk=st.integers(8, 512), mamba=st.booleans(), push=st.booleans(),
       auto=st.booleans(), accuracy=st.sampled_from([0.0, 1.0]), colocated=st.booleans(),
       p_pressure=st.booleans())
def test_d_stale_state_after_first_step(decode_entries: list[Any], L: int, n: int,
                                        block_size: int, chunk: int, mamba: bool, push: bool,
                                        auto: bool, accuracy: float, colocated: bool,
                                        p_pressure: bool) -> None:
    decode_entries.clear()
    cfg = _sim_config(L=L, n=n, block_size=block_size, chunk=chunk, mamba=mamba, push=push,
                      auto=auto, accuracy=accuracy, colocated=colocated,
                      p_pressure=p_pressure)
    b = reference_backoff(cfg.num_prefill_lookahead_tokens, mamba, auto)
    sim = decode_entries.attach(Simulation(cfg))
    res = sim.run()
    assert not terminal_problems(res.records)
    assert res.summary["completed"] == 5
    multi = cfg.use_multi_module_mtp
    modules = cfg.num_drafter_modules
    for r in res.records:
        if colocated:
            assert r["tokens_recomputed_on_d"] == 0
            continue
        # tokens P drops are the tokens D recomputes
        if b < L:
            assert r["p_prompt_tokens"] == L - b
            assert r["tokens_recomputed_on_d"] == L - r["p_prompt_tokens"] == b
        else:
            assert r["p_prompt_tokens"] == L
            assert r["tokens_recomputed_on_d"] == 0  # D loads the whole prompt
    # a request preempted on P keeps its single truncation
    for req in sim.requests:
        if req.p_preemptions:
            assert req.p_prompt_tokens == (L - b if b < L else L)
    slots = excess_stale_by_token_identity(L, b, modules)
    # at temperature 0 D drafts what P drafted, so its first repair covers P's draft slots:
    # only P's guesses of real prompt tokens can stay stale
    guesses = {k: v for k, v in slots.items() if v[0] == "guess"}
    want = stale_counts(guesses, modules, guesses_right=accuracy == 1.0)
    # a padded first step re-prefills the N - 1 positions before L - 1 (those that exist)
    # from garbage in every module, over whatever P wrote there
    kept = {k: v for k, v in guesses.items() if k[1] < L - n}
    want_padded = (stale_counts(kept, modules, guesses_right=accuracy == 1.0)
                   + min(n - 1, L - 1))
    residual = stale_counts(guesses, modules, guesses_right=False)
    assert len(decode_entries) == 5  # no request was preempted on D
    for e in decode_entries:
        if colocated:
            assert e.role is Role.COLOCATED and not e.kv_from_remote
            assert not e.stale.any(), "standalone serving leaves no stale slot"
            continue
        assert e.role is Role.DECODE
        if not multi:
            # one drafter module: it never reads past the last prompt token D recomputes
            if accuracy == 1.0 or not mamba:
                assert not e.stale.any()
            continue
        if e.padded:
            assert e.stale.tolist() == want_padded.tolist()
            continue
        assert e.stale.tolist() == want.tolist()
        if auto:
            assert (e.stale <= residual).all()  # nothing beyond the documented residual


def test_mamba_single_module_guess_reaches_d(decode_entries: list[Any]) -> None:
    cfg = _sim_config(L=300, n=1, block_size=16, chunk=512, mamba=True, push=False,
                      auto=True, accuracy=0.0, colocated=False, p_pressure=False)
    assert d_excess_stale_slots(300, 299, 299, 1)  # the function predicts one guess slot
    decode_entries.attach(Simulation(cfg)).run()
    assert decode_entries and all(e.stale[0] == 1.0 for e in decode_entries)


def test_p_preemption_does_not_truncate_twice() -> None:
    cfg = _sim_config(L=300, n=8, block_size=16, chunk=128, mamba=False, push=False,
                      auto=True, accuracy=1.0, colocated=False, p_pressure=True)
    sim = Simulation(cfg)
    res = sim.run()
    assert res.summary["completed"] == 5
    preempted = [r for r in sim.requests if r.p_preemptions]
    assert preempted, "the pressure config must preempt on P"
    for r in preempted:
        assert r.p_prompt_tokens == 300 - 7 and r.tokens_recomputed_on_d == 7
    # P recomputed the preempted requests' prompts: more prefill work than one pass each,
    # always in units of the once-truncated prompt.
    p_tokens = res.instances[0].step_log[:, 2].sum()
    assert p_tokens > 5 * 293
