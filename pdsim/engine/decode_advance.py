"""The rules of decode steps, in one place: what a step emits, when a row finishes, the
context and blocks each step needs and the drafter's repair.

``advance`` applies them to rows over a window of steps; a decode run's look-ahead
(``look_ahead``, all rows), a row joining a run (``look_ahead_row``) and the table of
fresh rows (``FreshRows``) all call it. A single step (``DecodeRows.apply_step``) uses the
same per-step rules (``emitted_tokens``, ``rejected_drafts``, ``repair_positions``) and the
scheduler prices it with ``blocks_needed``. ``DecodeRows.may_run`` states when steps may
be looked ahead at all: while every row's acceptance rates stay constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from pdsim.kv_layout import KVLayout


@dataclass(frozen=True, eq=False)
class DraftParams:
    """An instance's drafter, as the decode rules see it."""

    num_spec_tokens: int  # drafts verified per step (0: no drafter)
    multi_module: bool  # one MTP module per draft position, with a re-prefill cache
    num_modules: int
    conditional: np.ndarray  # clean conditional acceptance rate per draft position
    stale_sensitivity: float  # per stale slot, in the exponent of the rate's penalty
    decay_tokens: float | None  # tokens over which stale weights decay (None: never)
    module_of_pos: np.ndarray  # the module that drafts each position
    # P(P's first i + 1 guesses of real prompt tokens it did not see were right)
    guess_survival: list[float]
    # P(P's first i + 1 drafts of output tokens were right): the clean acceptance
    draft_survival: list[float]
    unverified_draft_slots: bool  # P's wrong draft slots survive D's repair (temperature > 0)
    reprefill_cache_shortfall: bool  # D's re-prefill cache holds only what D computed
    garbage_modules: np.ndarray  # 1 for each module a garbage re-prefill reaches
    pad_first_step: bool  # static speculation: one-token first steps padded to 1 + N
    window_tokens: int | None  # the MTP modules' sliding window (None: full attention)

    @classmethod
    def none(cls) -> DraftParams:
        """No drafter (P, or an instance without speculative decoding)."""
        return cls(0, False, 1, np.zeros(0), 0.0, None, np.zeros(1, dtype=np.int64), [1.0],
                   [], False, False, np.zeros(1), False, None)


# ------------------------------------------------------------------ per step


def emitted_tokens(accepted: np.ndarray) -> np.ndarray:
    """Tokens a verification emits: the accepted drafts and the target's own token."""
    emitted: np.ndarray = accepted + 1
    return emitted


def rejected_drafts(num_spec_tokens: int, accepted: np.ndarray) -> np.ndarray:
    """Drafts a verification rejected."""
    rejected: np.ndarray = num_spec_tokens - accepted
    return rejected


def repair_positions(rejected_last_step: np.ndarray) -> np.ndarray:
    """Multi-module MTP's standalone repair: the drafter re-prefills the positions the
    previous step rejected, bar one."""
    repair: np.ndarray = np.maximum(rejected_last_step - 1, 0)
    return repair


def blocks_needed(layout: KVLayout, context_tokens: np.ndarray,
                  num_spec_tokens: int) -> np.ndarray:
    """Blocks a row needs for a step from ``context_tokens``: its context, the token it
    verifies and its drafts."""
    return layout.blocks_for_array(context_tokens, 1 + num_spec_tokens)


# --------------------------------------------------------------- over steps


class Terms(NamedTuple):
    """Decode rows over a window of steps, one per array row, steps along the columns:
    tokens emitted by the end of each step (``emitted_by_step``), the finishing step
    (``finish_step``, the window's length when a row does not finish in it), the context
    at each step's start, the blocks each step needs (not counting what the row already
    holds) and the drafter's repair in each step (0 in the first: it depends on the step
    before the window)."""

    emitted_by_step: np.ndarray
    finish_step: np.ndarray
    context_at_start: np.ndarray
    blocks_needed: np.ndarray
    repair: np.ndarray


def advance(accepted: np.ndarray | None, steps: int, context_tokens: np.ndarray,
            tokens_left: np.ndarray, num_spec_tokens: int, multi_module: bool,
            layout: KVLayout, dtype: type[np.signedinteger[Any]]) -> Terms:
    """The decode kernel: ``Terms`` of rows with accepted drafts ``accepted`` (rows x
    steps; None without a drafter: one token a step), context ``context_tokens`` and
    output tokens left ``tokens_left`` (one per row), at constant acceptance rates."""
    if accepted is not None:
        emitted = emitted_tokens(accepted)
    else:
        emitted = np.ones((len(context_tokens), steps), dtype=dtype)
    by_step = np.add.accumulate(emitted, axis=1, dtype=dtype)
    # emitted_by_step rises every step: the steps before a row's finishing step are those
    # that leave tokens to emit, so their count is the finishing step
    finish_step = np.add.reduce(by_step < tokens_left[:, None], axis=1)
    context_at_start = by_step - emitted
    context_at_start += context_tokens[:, None]
    need = blocks_needed(layout, context_at_start, num_spec_tokens)  # rises with context
    repair = np.zeros_like(context_at_start)
    if multi_module:
        assert accepted is not None
        np.maximum(num_spec_tokens - 1 - accepted[:, :-1], 0, out=repair[:, 1:])
    return Terms(by_step, finish_step, context_at_start, need, repair)
