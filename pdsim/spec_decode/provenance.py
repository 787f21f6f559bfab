"""Slot-level provenance of the drafter modules' KV near the end of a prompt.

Positions are 0-based; the prompt has ``L`` tokens (0..L-1) and token ``L`` is the first
output token. Drafter module ``m`` (0-based) at position ``p`` consumes token ``p + m + 1``
(reference section 2). A prefill that sees a prompt of ``L_seen`` tokens computes the
modules' KV for positions ``< L_seen``; for the slots near its end the consumed token lies
past ``L_seen`` and is a guess:

- token ``< L_seen``: a known prompt token, the slot is exact;
- token ``== L_seen == L``: P's own sampled first output token; under greedy decoding D
  samples the same token, so the slot is exact (an assumption, stated in the README);
- ``L_seen <= token <= L`` otherwise: P's guess (its sampled token or a draft) of a real
  token it did not see because it was truncated: wrong with some probability (the
  *residual* after the fix);
- token ``> L``: an unverified draft of a later output token: stale unless P's drafts up
  to it equal the tokens D will generate (drawn from the drafter's clean acceptance).

D overwrites every position from ``d_first_local`` on with its own final chunk, so the
excess stale slots on D are P's guessed slots at positions ``< d_first_local``. Plain
functions, cached on the relative offsets: the engine calls them once per request.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple


class SlotCause(enum.Enum):
    """Why a slot may hold a wrong token's KV."""

    UNVERIFIED_DRAFT = "unverified_draft"  # stale unless P's drafts up to it were right
    GUESS = "guess"  # stale unless P guessed the real tokens up to it


class StaleSlot(NamedTuple):
    """One drafter KV slot on D that P wrote from a guessed token.

    ``distance`` = L - position (1 is the slot just before the decode front at L);
    ``guess_index`` = token - L_seen (0 is P's sampled token).
    """

    module: int
    position: int
    distance: int
    cause: SlotCause
    guess_index: int


def p_guessed_slots(prompt_tokens: int, p_prompt_tokens: int,
                    num_modules: int) -> list[tuple[int, int, int]]:
    """(module, position, token) of every slot P's final chunk wrote from a guess."""
    slots = []
    for m in range(num_modules):
        first = max(0, p_prompt_tokens - m - 1)
        for p in range(first, p_prompt_tokens):
            tok = p + m + 1
            if tok < p_prompt_tokens:
                continue
            if tok == p_prompt_tokens == prompt_tokens:
                continue  # P's greedy sample of the real first output token
            slots.append((m, p, tok))
    return slots


def d_excess_stale_slots(prompt_tokens: int, p_prompt_tokens: int, d_first_local: int,
                         num_modules: int) -> list[StaleSlot]:
    """Slots P left wrong (or possibly wrong) that D's own final chunk does not rewrite."""
    rel = _relative(prompt_tokens - p_prompt_tokens, prompt_tokens - d_first_local,
                    num_modules, prompt_tokens)
    return [StaleSlot(m, prompt_tokens - d, d, cause, k) for m, d, cause, k in rel]


@lru_cache(maxsize=4096)
def _relative(backoff: int, d_local: int, num_modules: int,
              prompt_tokens: int) -> tuple[tuple[int, int, SlotCause, int], ...]:
    p_seen = prompt_tokens - backoff
    d_first = prompt_tokens - d_local
    out = []
    for m, p, tok in p_guessed_slots(prompt_tokens, p_seen, num_modules):
        if p >= d_first:
            continue
        cause = SlotCause.UNVERIFIED_DRAFT if tok > prompt_tokens else SlotCause.GUESS
        out.append((m, prompt_tokens - p, cause, tok - p_seen))
    return tuple(out)


def excess_profile(backoff: int, d_local: int, num_modules: int, prompt_tokens: int
                   ) -> tuple[tuple[int, int, SlotCause, int], ...]:
    """(module, distance, cause, guess_index) rows of D's excess stale slots, cached.

    Only the offsets matter once the prompt is longer than a few drafter windows, so the
    cache key clips the prompt length there.
    """
    return _relative(backoff, d_local, num_modules,
                     _clipped(backoff, d_local, num_modules, prompt_tokens))


def _clipped(backoff: int, d_local: int, num_modules: int, prompt_tokens: int) -> int:
    """The prompt length a profile's cache key uses: only the offsets matter once the
    prompt is longer than a few drafter windows."""
    return min(prompt_tokens, 4 * (num_modules + backoff + d_local + 2))


class StalePlan(NamedTuple):
    """How D's excess slots of one profile turn into stale weight per drafter module.

    A slot is computed through the MTP chain from every token between its position and
    the token it consumes, so it is exact only when all of them are right: the first
    ``guesses`` of P's guesses of real tokens (P's sampled token is guess 0) and the first
    ``drafts`` of P's drafts of output tokens. Per slot (in ``excess_profile`` order):
    its module, its stale weight, ``guesses`` and ``drafts``. ``max_guesses`` and
    ``max_drafts`` are the largest of each over the slots (0: no draw needed).
    """

    slots: tuple[tuple[int, float, int, int], ...]
    max_guesses: int
    max_drafts: int

    @property
    def num_draws(self) -> int:
        """Provenance draws a request of this profile takes: one for how many of P's
        guesses were right, one for how many of its drafts were (each when needed)."""
        return (self.max_guesses > 0) + (self.max_drafts > 0)


def stale_plan(backoff: int, d_local: int, num_modules: int, prompt_tokens: int,
               decay_tokens: float | None, unverified_drafts: bool = True) -> StalePlan:
    """The ``StalePlan`` of a request's excess slots, cached like ``excess_profile``.

    A slot's weight is 1, or ``exp(-(distance - 1) / decay_tokens)`` when stale KV
    decays with distance. ``unverified_drafts`` False leaves out the slots that consumed
    one of P's drafts of an output token (an ablation: the mechanism PR #55055 fixed).
    """
    return _stale_plan(backoff, d_local, num_modules,
                       _clipped(backoff, d_local, num_modules, prompt_tokens), decay_tokens,
                       unverified_drafts)


@lru_cache(maxsize=4096)
def _stale_plan(backoff: int, d_local: int, num_modules: int, prompt_tokens: int,
                decay_tokens: float | None, unverified_drafts: bool) -> StalePlan:
    slots = []
    for m, dist, cause, k in _relative(backoff, d_local, num_modules, prompt_tokens):
        weight = 1.0 if decay_tokens is None else math.exp(-(dist - 1) / decay_tokens)
        if cause is SlotCause.GUESS:
            slots.append((m, weight, k + 1, 0))
            continue
        if not unverified_drafts:
            continue
        # token L + d (d >= 1) is P's d-th draft; when P was truncated (backoff > 0) its
        # guesses of the backoff prompt tokens and of token L come first in the chain
        drafts = k - backoff
        slots.append((m, weight, backoff + 1 if backoff else 0, drafts))
    return StalePlan(tuple(slots), max((g for _, _, g, _ in slots), default=0),
                     max((d for *_, d in slots), default=0))


def leading_right(u: float, survival: Sequence[float]) -> int:
    """How many leading guesses (or drafts) were right, drawn by inversion from one
    uniform ``u``: ``#{i : u < survival[i]}`` with ``survival[i]`` = P(the first i + 1
    are right), non-increasing."""
    right = 0
    for p in survival:
        if u >= p:
            break
        right += 1
    return right
