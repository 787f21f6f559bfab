"""Staleness physics as vLLM's code makes it (reference pd-mtp-code-path.md).

- M1: before the fix D has one prompt token left; when its step already runs decodes and no
  prefill, the scheduler pads the request to 1 + N tokens with placeholder drafts, all
  rejected, and the repair re-prefills N - 1 positions from the stale re-prefill cache into
  every module, whatever P drafted.
- M2: an unpadded first step (D idle, a prefill in the step, padding off) is repaired at
  D's first verification from a cache with one valid entry: R <= 2 rejections leave the
  state exact, R >= 3 re-prefill R - 2 positions from garbage.
- After the fix D computes N - 1 tokens: nothing is padded; only P's guesses of the prompt
  tokens past its truncated end remain (the residual).

Closed forms pin each path at acceptance 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from core_support import make_config
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import simulate
from pdsim.config import STALE_KV_FIT
from pdsim.engine.decode_advance import DraftParams
from pdsim.engine.decode_rows import DecodeRows
from pdsim.spec_decode.acceptance import AcceptanceSampler
from pdsim.spec_decode.provenance import (
    SlotCause,
    excess_profile,
    leading_right,
    stale_plan,
)

BUSY = ("workload.arrivals={kind: closed_loop, concurrency: 16}", "workload.num_requests=80")
IDLE = ("workload.arrivals={kind: closed_loop, concurrency: 1}", "workload.num_requests=12")
PERFECT = "speculative.acceptance={kind: constant, rate: 1.0}"


def _rows(n: int, shortfall: bool = True) -> DecodeRows:
    cond = np.full(n, 0.8)
    sampler = AcceptanceSampler(cond, stream_key=1)
    draft = DraftParams(n, True, n, cond, 1.0, None, np.arange(n), [1.0], [1.0], False,
                        shortfall, np.ones(n), True, None)
    rows = DecodeRows(4, draft, sampler)
    rows.count = 1
    rows.garbage_room[0] = 100  # positions before the final chunk: a long prompt
    return rows


def test_garbage_lands_only_on_positions_that_exist() -> None:
    rows = _rows(8)
    rows.garbage_room[0] = 2  # a 3-token prompt: two positions before its last
    rows._repair_from_cache(slice(0, 1), np.array([8]))
    assert rows.stale_weight[0].tolist() == [2.0] * 8


# ----------------------------------------------------------------- the repair rule


@pytest.mark.parametrize("rejected", range(0, 9))
def test_first_verification_repairs_two_rejections_exactly(rejected: int) -> None:
    """M2: with one valid cache entry, R <= 2 leaves the state exact and R >= 3 writes
    R - 2 garbage positions into every module."""
    rows = _rows(8)
    rows.reprefill_cache_valid[0] = 1
    added = rows._repair_from_cache(slice(0, 1), np.array([rejected]))
    assert added == (rejected >= 3)
    assert rows.stale_weight[0].tolist() == [max(0, rejected - 2)] * 8


def test_garbage_positions_are_counted_once() -> None:
    """A later repair rewrites the same positions before the first one D computed: only
    positions beyond those already written add stale slots."""
    rows = _rows(8)
    rows.reprefill_cache_valid[0] = 1
    rows._repair_from_cache(slice(0, 1), np.array([6]))  # 4 garbage positions
    rows.reprefill_cache_valid[0] = 2
    assert not rows._repair_from_cache(slice(0, 1), np.array([7]))  # 4 again: nothing new
    rows.reprefill_cache_valid[0] = 0
    assert rows._repair_from_cache(slice(0, 1), np.array([8]))  # 7: three more
    assert rows.stale_weight[0].tolist() == [7.0] * 8


def test_full_cache_never_writes_garbage() -> None:
    rows = _rows(8, shortfall=False)
    rows.reprefill_cache_valid[0] = 7
    assert not rows._repair_from_cache(slice(0, 1), np.array([8]))
    assert not rows.stale_weight.any()


# ------------------------------------------------------------ who is padded, when


def _padded_share(*sets: str) -> float:
    res = simulate(make_config(*sets))
    padded = res.records.columns["padded_first_steps"]
    return float(np.mean(padded))


def test_busy_d_pads_before_the_fix_and_never_after() -> None:
    assert _padded_share(*BUSY, "connector.prefill_backoff=off") > 0.8
    assert _padded_share(*BUSY, "connector.prefill_backoff=auto") == 0.0


def test_idle_d_never_pads() -> None:
    """Concurrency 1: D runs no decode when each request arrives, so its first step is a
    plain one-token prefill (M2 only)."""
    assert _padded_share(*IDLE, "connector.prefill_backoff=off") == 0.0


def test_padding_off_pads_nothing() -> None:
    assert _padded_share(*BUSY, "connector.prefill_backoff=off",
                         "speculative.pad_first_decode_step=false") == 0.0


def test_short_prompts_take_the_padded_path_after_the_fix() -> None:
    """A prompt of at most N - 1 tokens is not truncated: D loads all of it, recomputes one
    token and is padded like before the fix."""
    res = simulate(make_config(*BUSY, "connector.prefill_backoff=auto",
                               "workload.prompt_tokens={kind: fixed, tokens: 2}"))
    cols = res.records.columns
    assert (cols["p_prompt_tokens"] == 2).all()
    assert (cols["tokens_recomputed_on_d"] == 0).all()
    assert np.mean(cols["padded_first_steps"]) > 0.7  # all but the first wave


def test_the_placeholder_round_counts_as_a_rejected_draft_round() -> None:
    """vLLM's metrics count the padded step: one draft round of N drafts, none accepted."""
    n = 3
    res = simulate(make_config(*BUSY, PERFECT, "connector.prefill_backoff=off",
                               "speculative.stale_kv.sensitivity_per_slot=0", n_spec=n))
    cols = res.records.columns
    padded = cols["padded_first_steps"] == 1
    assert padded.any() and (~padded).any()
    out = cols["output_tokens"]
    # at acceptance 1 with no penalty, a request of T output tokens takes (T - 1) / (N + 1)
    # verifications after its first token (the last may be cut), plus its padded round
    real = np.ceil((out - 1) / (n + 1))
    assert (cols["num_drafts"] == real + padded).all()
    assert (cols["num_draft_tokens"] == n * cols["num_drafts"]).all()
    assert (cols["num_accepted_tokens"] >= n * real - n).all()


# ------------------------------------------------------- closed forms at acceptance 1


@settings(max_examples=5, deadline=None)
@given(st.integers(2, 8))
def test_acceptance_one_before_the_fix_padded_requests_follow_m1(n: int) -> None:
    """Padded before the fix: every module holds N - 1 garbage slots for good, so each
    draft is accepted with a = exp(-beta (N - 1)) and a verification emits
    (1 - a^(N+1)) / (1 - a) tokens on average: M1's closed form, whatever P drafted."""
    beta = 0.2
    res = simulate(make_config(*BUSY, PERFECT, "connector.prefill_backoff=off",
                               f"speculative.stale_kv.sensitivity_per_slot={beta}",
                               "workload.num_requests=160",
                               "workload.output_tokens={kind: fixed, tokens: 400}",
                               n_spec=n))
    cols = res.records.columns
    padded = cols["padded_first_steps"] == 1
    assert padded.mean() > 0.8
    a = math.exp(-beta * (n - 1))
    drafts = cols["num_drafts"][padded] - 1  # less the placeholder round
    accepted = cols["num_accepted_tokens"][padded]
    per_step = 1 + accepted.sum() / drafts.sum()
    expected = (1 - a ** (n + 1)) / (1 - a)
    assert per_step == pytest.approx(expected, rel=0.03)


@settings(max_examples=4, deadline=None)
@given(st.integers(2, 8))
def test_acceptance_one_unpadded_before_the_fix_is_clean(n: int) -> None:
    """Not padded (D idle), at acceptance 1 the first verification rejects nothing: no
    garbage, P's drafts were all right: acceptance length N + 1 exactly."""
    res = simulate(make_config(*IDLE, PERFECT, "connector.prefill_backoff=off", n_spec=n))
    assert res.summary["acceptance_length"] == n + 1


def test_acceptance_one_after_the_fix_shows_the_residual_alone() -> None:
    """After the fix at acceptance 1: no padding, no garbage; P's guesses of the prompt
    tokens past its truncated end are not output drafts, so they can be wrong even with a
    perfect drafter: below N + 1 when guesses can be wrong, N + 1 when they cannot."""
    n = 3
    sets = (*BUSY, PERFECT, "connector.prefill_backoff=auto")
    assert simulate(make_config(*sets, "speculative.stale_kv.residual_guess_accuracy=1.0",
                                n_spec=n)).summary["acceptance_length"] == n + 1
    residual = simulate(make_config(*sets, n_spec=n)).summary["acceptance_length"]
    assert 1.0 < residual < n + 1


def test_colocated_acceptance_one_is_n_plus_one() -> None:
    cfg = make_config(PERFECT, "cluster.mode=colocated", "workload.num_requests=40")
    assert simulate(cfg).summary["acceptance_length"] == 4


# --------------------------------------------------------------- consequences


def _al(*sets: str, n: int = 8) -> float:
    return float(simulate(make_config(*sets, "speculative.acceptance={kind: constant, "
                                      "rate: 0.8}", n_spec=n)).summary["acceptance_length"])


def test_before_the_fix_acceptance_falls_with_d_load() -> None:
    """D idle on arrival (M2 only) keeps far more speculation than a busy D (M1)."""
    off = "connector.prefill_backoff=off"
    assert _al(*IDLE, off) > _al(*BUSY, off) + 0.5


def test_padding_off_restores_the_milder_m2_level() -> None:
    off = "connector.prefill_backoff=off"
    assert _al(*BUSY, off, "speculative.pad_first_decode_step=false") > _al(*BUSY, off) + 0.5


def test_after_the_fix_acceptance_does_not_depend_on_d_load() -> None:
    on = "connector.prefill_backoff=auto"
    assert _al(*IDLE, on, "workload.num_requests=60") == pytest.approx(_al(*BUSY, on),
                                                                        rel=0.05)


def test_garbage_into_module_zero_is_what_sinks_every_draft() -> None:
    off = "connector.prefill_backoff=off"
    assert (_al(*BUSY, off, "speculative.stale_kv.garbage_into_every_module=false")
            > _al(*BUSY, off) + 0.5)


def test_a_sliding_window_module_forgets_the_garbage() -> None:
    """Full attention keeps the padded step's garbage for good; a sliding-window module
    stops reading it once it leaves the window."""
    off = "connector.prefill_backoff=off"
    full = _al(*BUSY, off)
    windowed = _al(*BUSY, off, "model.mtp_window_tokens=16")
    clean = _al(*BUSY, "cluster.mode=colocated")
    assert full < windowed < clean + 1e-9


@pytest.mark.parametrize("method", ["eagle", "mtp1"])
def test_single_module_drafters_keep_their_acceptance_under_pd_before_the_fix(
        method: str) -> None:
    """EAGLE and single-module MTP re-prefill from no multi-module cache: under P/D before
    the fix they keep the colocated acceptance, the padded round's metric artefact aside."""
    spec = (("speculative.method=eagle",) if method == "eagle"
            else ("model.num_mtp_modules=1", "speculative.num_speculative_tokens=1"))
    rates = "speculative.acceptance={kind: constant, rate: 0.7}"
    pd = simulate(make_config(*BUSY, rates, *spec, "connector.prefill_backoff=off")).records
    co = simulate(make_config(*BUSY, rates, *spec, "cluster.mode=colocated")).summary
    cols = pd.columns
    real_drafts = cols["num_drafts"].sum() - cols["padded_first_steps"].sum()
    pd_length = 1 + cols["num_accepted_tokens"].sum() / real_drafts
    assert cols["padded_first_steps"].sum() > 0
    assert pd_length == pytest.approx(co["acceptance_length"], rel=0.02)


# ------------------------------------------------------------ slot provenance


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_before_fix_plan_needs_p_drafts_up_to_the_consumed_token(n: int) -> None:
    """Backoff off: every slot P leaves consumed token L + d (d >= 1) through the chain, so
    it is exact iff P's first d drafts were right (used only when P's and D's drafts can
    differ, ``unverified_draft_slots``)."""
    L = 100
    plan = stale_plan(0, 1, n, L, None)
    profile = excess_profile(0, 1, n, L)
    assert len(plan.slots) == len(profile) == sum(max(0, m - 1) for m in range(n))
    for (m, weight, guesses, drafts), (m2, dist, cause, k) in zip(plan.slots, profile,
                                                                  strict=True):
        assert m == m2 and weight == 1.0 and cause is SlotCause.UNVERIFIED_DRAFT
        assert guesses == 0
        assert drafts == (L - dist) + m + 1 - L == k >= 1


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_after_fix_plan_needs_p_guesses_only(n: int) -> None:
    b = n - 1
    plan = stale_plan(b, b, n, 100, None)
    assert plan.slots and plan.max_drafts == 0
    for (_, _, guesses, drafts), (_, _, cause, k) in zip(plan.slots,
                                                         excess_profile(b, b, n, 100),
                                                         strict=True):
        assert cause is SlotCause.GUESS and drafts == 0 and guesses == k + 1


def test_temperature_option_adds_p_draft_slots_only() -> None:
    assert stale_plan(0, 1, 8, 100, None, unverified_drafts=False).slots == ()
    b = 7
    assert (stale_plan(b, b, 8, 100, None, unverified_drafts=False)
            == stale_plan(b, b, 8, 100, None))


def test_p_drafts_that_differ_from_d_lower_acceptance_when_unpadded() -> None:
    off = "connector.prefill_backoff=off"
    assert (_al(*IDLE, off, "speculative.stale_kv.unverified_draft_slots=true")
            < _al(*IDLE, off) - 0.05)


@given(st.floats(0, 1, exclude_max=True),
       st.lists(st.floats(0, 1), min_size=0, max_size=9))
def test_leading_right_inverts_the_survival_function(u: float, probs: list[float]) -> None:
    survival = sorted(probs, reverse=True)
    assert leading_right(u, survival) == sum(u < p for p in survival)


def test_shipped_fit_names_its_source() -> None:
    assert "1.089" in STALE_KV_FIT.source and "30.4" in STALE_KV_FIT.source


@pytest.mark.parametrize(("n", "backoff", "padded"),
                         [(3, "off", True), (3, "auto", False), (8, "auto", False),
                          (2, "auto", True)])
def test_derived_padding_says_what_a_busy_d_does(n: int, backoff: str, padded: bool) -> None:
    """``d_first_step_padded_when_busy`` (show-config) agrees with the engine; MTP-2 after
    the fix has a backoff of one token, so a busy D pads it as before the fix."""
    cfg = make_config(*BUSY, f"connector.prefill_backoff={backoff}", n_spec=n)
    assert cfg.d_first_step_padded_when_busy is padded
    assert cfg.d_first_step_prompt_tokens == (max(1, n - 1) if backoff == "auto" else 1)
    share = float(np.mean(simulate(cfg).records.columns["padded_first_steps"]))
    assert (share > 0.7) if padded else (share == 0.0)

