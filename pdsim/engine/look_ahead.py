"""Decode rows over the coming steps, for a decode run: all rows at once when a run is
planned (``look_ahead``), one row when it joins a run (``look_ahead_row``), and rows
entering decode fresh from a table built for a block of requests (``FreshRows``). Each is
the decode kernel (``decode_advance.advance``) on the rows' own draws.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from pdsim.engine.decode_advance import (
    Terms,
    advance,
    repair_positions,
)

if TYPE_CHECKING:
    from pdsim.engine.decode_rows import DecodeRows
    from pdsim.kv_layout import KVLayout
    from pdsim.spec_decode.acceptance import AcceptanceSampler


class Ahead(NamedTuple):
    """Decode rows over the next steps, on their own (steps x rows): the accepted drafts,
    tokens emitted by each step's end (``emitted_by_step``), whether the row decodes
    (``decoding``) and the blocks it holds (``blocks_needed``: never less than now, kept
    after it finishes); per row its finishing step (``finish_step``, the step count if
    none); per step the rows decoding (``rows_decoding``), their context (``context_sum``)
    and the drafter's repair."""

    accepted: np.ndarray | None
    emitted_by_step: np.ndarray
    decoding: np.ndarray
    blocks_needed: np.ndarray
    finish_step: np.ndarray
    rows_decoding: np.ndarray
    context_sum: np.ndarray
    repair: np.ndarray


def look_ahead(rows: DecodeRows, layout: KVLayout, count: int, steps: int,
               step_index: np.ndarray, fresh_rows: FreshRows | None = None) -> Ahead:
    """The next ``steps`` decode steps of rows ``0..count-1``, which may be looked ahead
    (``DecodeRows.may_run``). ``step_index`` is the column 0, 1, 2, ... A lone row that
    entered decode fresh is read from ``fresh_rows`` (``lone_fresh_row``)."""
    which = slice(0, count)
    draft = rows.draft
    n = draft.num_spec_tokens
    accepted: np.ndarray | None = None
    if count == 1 and n and fresh_rows is not None:
        lone = lone_fresh_row(rows, fresh_rows, steps, step_index)
        if lone is not None:
            return lone
    if n:
        has_stale = bool(np.logical_or.reduce(rows.stale_weight[which], axis=None))
        accepted = rows.sampler.draw_steps(
            steps, rows.draw_key[which], rows.drafts_before[which] + rows.drafts[which],
            rows.survival[which] if has_stale else None)
    terms = advance(None if accepted is None else accepted.T, steps,
                    rows.context_tokens[which],
                    rows.target_tokens[which] - rows.output_tokens[which], n,
                    draft.multi_module, layout, np.int64)
    # the kernel works rows x steps; a run's columns are rows: views, steps x rows
    finish_step = terms.finish_step
    decoding = step_index[:steps] <= finish_step
    context_at_start = terms.context_at_start.T
    rows_decoding = np.add.reduce(decoding, axis=1)
    context_sum = np.add.reduce(context_at_start * decoding, axis=1)
    repair = np.zeros(steps, dtype=np.int64)
    if draft.multi_module:
        repair[0] = np.add.reduce(repair_positions(rows.rejected_last_step[which]))
        if steps > 1:
            repair[1:] = np.add.reduce(terms.repair.T[1:] * decoding[1:], axis=1)
    need = terms.blocks_needed.T
    np.maximum(need, rows.blocks_held[which], out=need)
    need *= decoding
    np.maximum.accumulate(need, axis=0, out=need)
    return Ahead(accepted, terms.emitted_by_step.T, decoding, need, finish_step,
                 rows_decoding, context_sum, repair)


def lone_fresh_row(rows: DecodeRows, fresh_rows: FreshRows, steps: int,
                   step_index: np.ndarray) -> Ahead | None:
    """``look_ahead`` of row 0 alone when it entered decode fresh (no verification yet, no
    stale KV: ``FreshRows.look_ahead`` vouches for the rest), from the fresh-row table
    instead of its own draws and kernel pass; None when it is not fresh. The same numbers
    as ``look_ahead``'s, in its dtypes: the row's terms up to its finishing step, nothing
    decoding after it and its blocks kept."""
    if rows.drafts_before.item(0) + rows.drafts.item(0) or any(rows.stale_weight[0].tolist()):
        return None
    req = rows.request_of_row[0]
    assert req is not None
    multi = rows.draft.multi_module
    repair_first = max(rows.rejected_last_step.item(0) - 1, 0) if multi else 0
    row = fresh_rows.look_ahead(req.id, steps, rows.context_tokens.item(0),
                                rows.target_tokens.item(0) - rows.output_tokens.item(0),
                                rows.blocks_held.item(0), repair_first)
    if row is None:
        return None
    assert row.accepted is not None
    live = len(row.context_at_start)
    # the table may be shorter than the window when the row finishes inside it: nothing
    # reads a column's draws or emitted tokens after its finishing step (its steps there
    # are not decoding), so they are filled, not drawn
    accepted = np.zeros((steps, 1), dtype=np.int64)
    emitted = np.empty((steps, 1), dtype=np.int64)
    known = min(steps, len(row.accepted))
    accepted[:known, 0] = row.accepted[:known]
    emitted[:known, 0] = row.emitted_by_step[:known]
    emitted[known:, 0] = row.emitted_by_step.item(known - 1)
    decoding = step_index[:steps] < live
    context_sum = np.zeros(steps, dtype=np.int64)
    context_sum[:live] = row.context_at_start
    repair = np.zeros(steps, dtype=np.int64)
    repair[0] = repair_first
    if row.repair_after is not None:
        repair[1:live] = row.repair_after
    need = np.empty((steps, 1), dtype=np.int64)
    need[:live, 0] = row.blocks_needed
    need[live:, 0] = row.blocks_needed.item(live - 1)
    return Ahead(accepted, emitted, decoding, need,
                 np.array([row.finish_step], dtype=np.int64), decoding[:, 0].astype(np.int64),
                 context_sum, repair)


class AheadRow(NamedTuple):
    """One decode row over the next steps (a row joining a run), as 1-D arrays over the
    steps it decodes (``live`` = ``len(context_at_start)``, up to and including its
    finishing step): what ``Ahead`` holds for one column, without the steps after it
    finishes. ``accepted`` and ``emitted_by_step`` span all the steps asked for, or (from
    the fresh-row table, when the row finishes inside it) at least its live steps."""

    accepted: np.ndarray | None
    emitted_by_step: np.ndarray
    finish_step: int  # the step count when it does not finish
    context_at_start: np.ndarray
    blocks_needed: np.ndarray
    repair_first: int
    repair_after: np.ndarray | None  # drafter repair in its steps after the first


def look_ahead_row(rows: DecodeRows, layout: KVLayout, fresh_rows: FreshRows | None,
                   row: int, steps: int) -> AheadRow | None:
    """``look_ahead`` of the single row ``row``, or None as there. A row joins a run once
    per request, so its look-ahead's cost is its number of array operations: a row
    entering decode fresh reads it from a table built for a block of requests
    (``fresh_rows``), any other computes it alone, with 1-D draws."""
    if not rows.row_may_run(row):
        return None
    draft = rows.draft
    n = draft.num_spec_tokens
    multi = draft.multi_module
    context = rows.context_tokens.item(row)
    left = rows.target_tokens.item(row) - rows.output_tokens.item(row)
    held = rows.blocks_held.item(row)
    repair_first = max(rows.rejected_last_step.item(row) - 1, 0) if multi else 0
    accepted: np.ndarray | None = None
    if n:
        has_stale = any(rows.stale_weight[row].tolist())
        counter = rows.drafts_before.item(row) + rows.drafts.item(row)
        if not counter and not has_stale and fresh_rows is not None:
            req = rows.request_of_row[row]
            assert req is not None
            fresh = fresh_rows.look_ahead(req.id, steps, context, left, held, repair_first)
            if fresh is not None:
                return fresh
        accepted = rows.sampler.draw_run(steps, rows.draw_key.item(row), counter,
                                         rows.survival[row] if has_stale else None)[None]
    terms = advance(accepted, steps, np.array([context]), np.array([left]), n, multi,
                    layout, np.int64)
    return cut_row(accepted, terms, 0, steps, held, repair_first, multi)


def cut_row(accepted: np.ndarray | None, t: Terms, r: int, steps: int, held: int,
            repair_first: int, multi: bool) -> AheadRow:
    """Row ``r``'s ``AheadRow`` over ``steps`` steps from its draws and terms (computed
    over those steps or more): cut at its finishing step, never needing fewer blocks than
    it holds."""
    f = min(t.finish_step.item(r), steps)
    live = min(f + 1, steps)
    need = t.blocks_needed[r, :live]
    if held > need.item(0):  # the need rises with the context: else it is never below
        need = np.maximum(need, held)
    return AheadRow(None if accepted is None else accepted[r, :steps],
                    t.emitted_by_step[r, :steps], f, t.context_at_start[r, :live], need,
                    repair_first, t.repair[r, 1:live] if multi and live > 1 else None)


class FreshRows:
    """Look-aheads of requests entering decode fresh, built for a block of requests at
    once: a request's first decode row, before any verification, at the clean rates,
    with its whole prompt as context and all its output but the first token to go.

    Such a row's look-ahead depends on nothing but the request (its counter-based draws,
    its prompt and output lengths) and the instance's layout, so it is computed for
    1,024 requests in one vectorized pass (``advance`` on a block) instead of one request
    at a time when it joins a run. ``look_ahead`` checks the row is indeed fresh and
    returns what ``look_ahead_row`` would compute for it, else None. The last few blocks
    are kept; a dropped one is rebuilt alike if asked again.
    """

    block = 1024  # requests per block
    blocks_kept = 4

    def __init__(self, sampler: AcceptanceSampler, layout: KVLayout, num_spec_tokens: int,
                 multi_module: bool, prompt_tokens: np.ndarray,
                 output_tokens: np.ndarray) -> None:
        """A block's table covers at most the sampler's ``first_draws_width`` steps (128:
        a light-load row of 256 output tokens finishes in about 100); a window longer than
        the table is answered for the rows that finish inside it, the others are computed
        alone."""
        self._sampler = sampler
        self._layout = layout
        self._n = num_spec_tokens
        self._multi = multi_module
        self.width = sampler.first_draws_width
        self._prompt = prompt_tokens
        self._output = output_tokens
        self._blocks: dict[int, tuple[np.ndarray, Terms, np.ndarray, np.ndarray]] = {}

    def requests_added(self, prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> None:
        """The simulation took more requests (live intake): every request's lengths are
        now in these arrays. The last block, built short of the new requests, is built
        again when asked (a block built before a request's output target changed fails
        ``look_ahead``'s check for that request, which is then computed alone)."""
        if len(self._prompt):
            self._blocks.pop((len(self._prompt) - 1) // self.block, None)
        self._prompt = prompt_tokens
        self._output = output_tokens

    def look_ahead(self, request_id: int, steps: int, context: int, left: int, held: int,
                   repair_first: int) -> AheadRow | None:
        """``look_ahead_row`` of request ``request_id``'s row over ``steps`` steps, given
        the row's context, output tokens left, blocks held and first step's repair; None
        when the row is not fresh, or the window is longer than the table and the row
        does not finish inside it."""
        b, r = divmod(request_id, self.block)
        tab = self._blocks.get(b)
        if tab is None:
            if len(self._blocks) >= self.blocks_kept:
                del self._blocks[next(iter(self._blocks))]
            tab = self._blocks[b] = self._build(b)
        accepted, t, prompt, left_fresh = tab
        if context != prompt.item(r) or left != left_fresh.item(r):
            return None
        if steps > accepted.shape[1] and t.finish_step.item(r) >= accepted.shape[1]:
            return None
        return cut_row(accepted, t, r, steps, held, repair_first, self._multi)

    def _build(self, b: int) -> tuple[np.ndarray, Terms, np.ndarray, np.ndarray]:
        """The block's draws and terms over ``width`` steps, or fewer: a row emits at
        least a token a step, so every row of the block finishes within its most output
        tokens left (the table then answers any window); its prompts and output left."""
        lo = b * self.block
        hi = min(lo + self.block, len(self._prompt))
        prompt = self._prompt[lo:hi]
        left = self._output[lo:hi] - 1  # the first token came with the prefill
        most_left = int(left.max())
        width = min(self.width, max(1, most_left + 1))
        # 32-bit arithmetic when every value fits (half the memory traffic)
        small = max(int(prompt.max()), most_left) + (width + 2) * (self._n + 1) \
            + 2 * self._layout.block_size < 2**31
        dtype = np.int32 if small else np.int64
        accepted = self._sampler.first_draws_table(lo, hi - lo, width).astype(dtype)
        prompt, left = prompt.astype(dtype), left.astype(dtype)
        terms = advance(accepted, width, prompt, left, self._n, self._multi,
                        self._layout, dtype)
        return accepted, terms, prompt, left
