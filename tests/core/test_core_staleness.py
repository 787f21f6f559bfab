"""Staleness physics: a slot P wrote from a guess is stale only when a guess it was
computed through was wrong (reference section 3), drawn from the acceptance model.

Closed forms: at acceptance 1 nothing is polluted, so P/D before the fix gives the clean
acceptance length N + 1; the plan's slot requirements follow the MTP chain (module m at
position p consumes tokens p + 1 .. p + m + 1).
"""

from __future__ import annotations

import pytest
from core_support import make_config
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import simulate
from pdsim.spec_decode.provenance import (
    SlotCause,
    excess_profile,
    leading_right,
    stale_plan,
)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_before_fix_plan_needs_p_drafts_up_to_the_consumed_token(n: int) -> None:
    """Backoff off: every excess slot consumed token L + d (d >= 1) through the chain, so
    it is exact iff P's first d drafts were right; no guess of a prompt token is involved."""
    L = 100
    plan = stale_plan(0, 1, n, L, None)
    profile = excess_profile(0, 1, n, L)
    assert len(plan.slots) == len(profile) == sum(max(0, m - 1) for m in range(n))
    for (m, weight, guesses, drafts), (m2, dist, cause, k) in zip(plan.slots, profile,
                                                                  strict=True):
        assert m == m2 and weight == 1.0 and cause is SlotCause.UNVERIFIED_DRAFT
        assert guesses == 0
        assert drafts == (L - dist) + m + 1 - L == k >= 1
    assert plan.max_drafts == max(0, n - 2)
    assert plan.num_draws == (1 if n > 2 else 0)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_after_fix_plan_needs_p_guesses_only(n: int) -> None:
    """Backoff N-1: the slots consumed P's guesses of real prompt tokens, guess k needing
    guesses 0..k right; no draft of an output token survives on D."""
    b = n - 1
    plan = stale_plan(b, b, n, 100, None)
    assert plan.slots and plan.max_drafts == 0
    for (_, _, guesses, drafts), (_, _, cause, k) in zip(plan.slots,
                                                         excess_profile(b, b, n, 100),
                                                         strict=True):
        assert cause is SlotCause.GUESS and drafts == 0 and guesses == k + 1


def test_unverified_draft_switch_drops_only_draft_slots() -> None:
    assert stale_plan(0, 1, 8, 100, None, unverified_drafts=False).slots == ()
    b = 7
    assert (stale_plan(b, b, 8, 100, None, unverified_drafts=False)
            == stale_plan(b, b, 8, 100, None))


@given(st.floats(0, 1, exclude_max=True),
       st.lists(st.floats(0, 1), min_size=0, max_size=9))
def test_leading_right_inverts_the_survival_function(u: float, probs: list[float]) -> None:
    survival = sorted(probs, reverse=True)
    assert leading_right(u, survival) == sum(u < p for p in survival)


def _before_fix(n: int, *sets: str) -> float:
    cfg = make_config(*sets, "connector.prefill_backoff=off", "workload.num_requests=60",
                      n_spec=n)
    return float(simulate(cfg).summary["acceptance_length"])


@settings(max_examples=6, deadline=None)
@given(st.integers(2, 8))
def test_acceptance_one_leaves_nothing_stale_before_the_fix(n: int) -> None:
    """Every P draft equals the real token, so no slot is polluted and no rejection ever
    re-prefills garbage: acceptance length N + 1 exactly."""
    assert _before_fix(n, "speculative.acceptance={kind: constant, rate: 1.0}") == n + 1


@pytest.mark.parametrize("rule", ["unverified_draft_slots", "reprefill_cache_shortfall",
                                  "garbage_into_every_module"])
def test_each_rule_contributes_to_the_collapse(rule: str) -> None:
    """Switching any one pollution rule off raises the acceptance length before the fix
    (the same requests and draws otherwise)."""
    rates = "speculative.acceptance={kind: constant, rate: 0.8}"
    all_on = _before_fix(8, rates)
    assert _before_fix(8, rates, f"speculative.stale_kv.{rule}=false") > all_on + 0.05
