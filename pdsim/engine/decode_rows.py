"""The per-request decode state of one instance, one row per decoding request.

Rows ``0..count-1`` hold the requests decoding now, kept dense so a step works on array
views, never on gathered copies. ``DecodeRows`` is the only writer of these arrays; its
verbs are the whole interface:

- ``enter``: a request starts decoding (its prefill's last chunk just ended);
- ``apply_step`` / ``apply_run``: one decode step's outcome, or a decode run's steps
  (computed by ``decode_advance``), added to the rows;
- ``settle``: copy a row's counters into its request (it leaves, or results are read);
- ``vacate`` / ``vacate_many``: free rows, moving the last rows into the holes;
- ``snapshot``: a row's counters, read-only, for results of an interrupted run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pdsim.engine.decode_advance import DraftParams, emitted_tokens, rejected_drafts
from pdsim.engine.request import Request

if TYPE_CHECKING:
    from pdsim.spec_decode.acceptance import AcceptanceSampler


@dataclass(frozen=True)
class RowSnapshot:
    """A decoding request's counters not yet settled into it: its output so far, the
    drafts verified and accepted in its current row, and where its open segment began."""

    output_tokens: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_pos: np.ndarray
    segment_first_step: int


_FEW_ROWS = 8  # up to this many rows, a run's per-position counts take one operation
_NO_WINDOW = int(np.iinfo(np.int64).max)  # stale slots never leave a full-attention module


class DecodeRows:
    """Per-row decode arrays of an instance (``capacity`` rows; ``count`` in use)."""

    def __init__(self, capacity: int, draft: DraftParams,
                 sampler: AcceptanceSampler) -> None:
        n = max(1, draft.num_spec_tokens)
        self.draft = draft
        self.sampler = sampler
        self.capacity = capacity
        self.count = 0
        self.request_of_row: list[Request | None] = [None] * capacity
        self.context_tokens = np.zeros(capacity, dtype=np.int64)
        self.output_tokens = np.zeros(capacity, dtype=np.int64)
        self.target_tokens = np.zeros(capacity, dtype=np.int64)
        self.blocks_held = np.zeros(capacity, dtype=np.int64)
        self.segment_first_step = np.zeros(capacity, dtype=np.int64)
        # verifications (steps with drafts) and accepted drafts since the row was entered
        self.drafts = np.zeros(capacity, dtype=np.int64)
        self.accepted_tokens = np.zeros(capacity, dtype=np.int64)
        self.accepted_per_pos = np.zeros((capacity, n), dtype=np.int64)
        # drafts the row's previous step rejected (the drafter repairs all but one)
        self.rejected_last_step = np.zeros(capacity, dtype=np.int64)
        # acceptance draws: the request's key, and its verifications before this row
        self.draw_key = np.zeros(capacity, dtype=np.uint64)
        self.drafts_before = np.zeros(capacity, dtype=np.int64)
        # entries of the multi-module re-prefill cache that hold real tokens, and how many
        # positions before the first of them a repair has re-prefilled from garbage
        self.reprefill_cache_valid = np.zeros(capacity, dtype=np.int64)
        self.garbage_slots = np.zeros(capacity, dtype=np.int64)
        self.garbage_room = np.zeros(capacity, dtype=np.int64)  # positions that exist there
        # the context up to which the row's stale slots stay inside a sliding window
        self.stale_until_context = np.zeros(capacity, dtype=np.int64)
        # per drafter module, the weight of stale KV slots the modules read
        self.stale_weight = np.zeros((capacity, max(1, draft.num_modules)), dtype=np.float64)
        # P(a >= i + 1) per request at its current stale weights (the sampler's input),
        # refreshed whenever ``stale_weight`` changes
        self.survival = np.zeros((capacity, n), dtype=np.float64)
        self._clean_survival = (sampler.clean_survival if draft.num_spec_tokens
                                else np.ones(n, dtype=np.float64))
        self._arrays = (self.context_tokens, self.output_tokens, self.target_tokens,
                        self.blocks_held, self.segment_first_step, self.drafts,
                        self.accepted_tokens, self.accepted_per_pos, self.rejected_last_step,
                        self.reprefill_cache_valid, self.garbage_slots, self.garbage_room,
                        self.stale_until_context, self.stale_weight, self.draw_key,
                        self.drafts_before, self.survival)
        self.draft_positions = np.arange(n)

    def may_run(self, count: int) -> bool:
        """Whether rows ``0..count-1`` may be looked ahead, i.e. a decode run may be
        taken: their acceptance rates stay the same over the coming steps. They change
        while a multi-module re-prefill cache is short of entries (the repair writes
        garbage into the drafter's KV), while stale weights decay and while they may
        leave a sliding window."""
        draft = self.draft
        n = draft.num_spec_tokens
        if draft.multi_module and bool(np.logical_or.reduce(
                self.reprefill_cache_valid[:count] < n - 1)):
            return False
        return not (n and (draft.decay_tokens is not None or draft.window_tokens is not None)
                    and bool(np.logical_or.reduce(self.stale_weight[:count], axis=None)))

    def row_may_run(self, row: int) -> bool:
        """``may_run`` for the single row ``row`` (one joining a run), on Python scalars:
        it is asked once per request."""
        draft = self.draft
        n = draft.num_spec_tokens
        if draft.multi_module and self.reprefill_cache_valid.item(row) < n - 1:
            return False
        return not (n and (draft.decay_tokens is not None or draft.window_tokens is not None)
                    and any(self.stale_weight[row].tolist()))

    # ------------------------------------------------------------------ enter

    def enter(self, req: Request, step: int, blocks_held: int,
              stale_weights: list[float] | None, padded: bool = False) -> int:
        """``req`` starts decoding after step ``step`` (in which its prefill ended),
        holding ``blocks_held`` blocks, with the stale KV weights P left (None: none).
        ``padded``: that step was padded with placeholder drafts (vLLM's first step of a
        request with one token to compute), all rejected: it counts as a draft round with
        nothing accepted, and the repair it triggers reads a re-prefill cache holding
        nothing D computed. Returns its row."""
        s = self.count
        self.count += 1
        draft = self.draft
        n = draft.num_spec_tokens
        req.slot = s
        req.enter_decode()
        self.request_of_row[s] = req
        self.context_tokens[s] = req.seq_tokens
        self.output_tokens[s] = req.num_output
        self.target_tokens[s] = req.output_target
        self.blocks_held[s] = blocks_held
        self.segment_first_step[s] = step
        self.draw_key[s] = self.sampler.request_key(req.id)
        self.drafts_before[s] = req.num_drafts
        self.accepted_tokens[s] = 0
        self.accepted_per_pos[s] = 0
        padded = padded and n > 0
        # the placeholder round rejected every draft (what the multi-module drafter's next
        # repair is sized by); an unpadded prefill step rejects none
        self.drafts[s] = 1 if padded else 0
        self.rejected_last_step[s] = n if padded and draft.multi_module else 0
        self.garbage_slots[s] = 0
        # garbage can land only on positions before the final chunk's first one
        self.garbage_room[s] = req.seq_tokens - req.final_chunk_tokens
        if not draft.multi_module:
            # no multi-module re-prefill cache to run dry
            self.reprefill_cache_valid[s] = n
        elif not draft.reprefill_cache_shortfall:
            self.reprefill_cache_valid[s] = n - 1  # ablation: full
        elif padded:
            self.reprefill_cache_valid[s] = 0  # D has computed nothing before the repair
        else:
            self.reprefill_cache_valid[s] = min(n - 1, req.final_chunk_tokens)
        window = draft.window_tokens
        # the stale slots nearest the front sit at L - 2 at most (the context is L here)
        self.stale_until_context[s] = (req.seq_tokens - 2 + window if window is not None
                                       else _NO_WINDOW)
        rows = slice(s, s + 1)
        self.stale_weight[s] = 0.0 if stale_weights is None else stale_weights
        changed = stale_weights is not None
        if padded and draft.multi_module:
            changed |= self._repair_from_cache(rows, self.rejected_last_step[rows])
            np.minimum(self.reprefill_cache_valid[rows] + 1, n - 1,
                       out=self.reprefill_cache_valid[rows])
        if changed:
            self.refresh_survival(rows)
        else:
            self.survival[s] = self._clean_survival
        return s

    def _repair_from_cache(self, rows: slice, rejected: np.ndarray) -> bool:
        """The multi-module drafter's repair after verifications of ``rows`` that rejected
        ``rejected`` drafts: it re-prefills ``rejected - 1`` positions before the front from
        the re-prefill cache, and those past the cache's valid entries from garbage (the
        previous occupant's inputs), into every module the garbage reaches. The garbage
        positions all lie before the first position D computed, so a later repair adds only
        those beyond the ones already written. True if any stale weight was added."""
        draft = self.draft
        cache = self.reprefill_cache_valid[rows]
        garbage = np.minimum(rejected - 1 - cache, self.garbage_room[rows])
        extent = self.garbage_slots[rows]
        new = garbage - extent
        if not np.logical_or.reduce(new > 0):
            return False
        new = np.maximum(new, 0)
        if draft.decay_tokens is None:
            weight = new.astype(np.float64)
        else:
            # the k-th garbage position before the cache's first valid entry lies about
            # cache + k tokens behind the front: sum r**(cache + k) over the new ones
            r = math.exp(-1.0 / draft.decay_tokens)
            weight = r ** (cache + extent + 1) * (1.0 - r ** new) / (1.0 - r)
        self.stale_weight[rows] += weight[:, None] * draft.garbage_modules
        np.maximum(extent, garbage, out=extent)
        return True

    def refresh_survival(self, rows: slice) -> None:
        """Recompute ``survival`` for ``rows`` from their stale weights."""
        draft = self.draft
        stale = self.stale_weight[rows]
        if not draft.num_spec_tokens or not stale.any():
            self.survival[rows] = self._clean_survival
            return
        self.survival[rows] = self.sampler.survival_of(
            draft.conditional * np.exp(-draft.stale_sensitivity * stale[:, draft.module_of_pos]))

    # ------------------------------------------------------------------ apply

    def apply_step(self, num_rows: int) -> list[int]:
        """One decode step of rows ``0..num_rows-1`` (those the step was planned with; rows that
        entered since sit behind them): draw their accepted drafts, emit, update the
        speculative state. Returns the rows whose requests emitted their last token,
        highest first (release them in that order: moved rows are never revisited)."""
        draft = self.draft
        n = draft.num_spec_tokens
        out = self.output_tokens[:num_rows]
        if n:
            stale = self.stale_weight[:num_rows]
            accepted = self.sampler.draw(self.draw_key[:num_rows],
                                         self.drafts_before[:num_rows] + self.drafts[:num_rows],
                                         self.survival[:num_rows])
            emitted = emitted_tokens(accepted)
            self.drafts[:num_rows] += 1
            self.accepted_tokens[:num_rows] += accepted
            self.accepted_per_pos[:num_rows] += self.draft_positions < accepted[:, None]
            changed = False
            if draft.multi_module:
                rows = slice(0, num_rows)
                rejected = rejected_drafts(n, accepted)
                # the repair this rejection sizes reads the cache as it is now
                changed = self._repair_from_cache(rows, rejected)
                cache = self.reprefill_cache_valid[rows]
                np.minimum(cache + emitted, n - 1, out=cache)
                self.rejected_last_step[rows] = rejected
            if draft.decay_tokens is not None:
                stale *= np.exp(-emitted / draft.decay_tokens)[:, None]
                changed = True
            out += emitted
            self.context_tokens[:num_rows] += emitted
            if draft.window_tokens is not None:
                # stale slots that left the modules' sliding window are no longer read
                gone = self.context_tokens[:num_rows] > self.stale_until_context[:num_rows]
                if np.logical_or.reduce(gone) and stale[gone].any():
                    stale[gone] = 0.0
                    changed = True
            if changed:
                self.refresh_survival(slice(0, num_rows))
        else:
            out += 1
            self.context_tokens[:num_rows] += 1
        target = self.target_tokens[:num_rows]
        done = out >= target
        if not done.any():
            return []
        np.minimum(out, target, out=out)
        return np.flatnonzero(done)[::-1].tolist()  # type: ignore[no-any-return]

    def apply_run(self, steps: int, emitted: np.ndarray, decoding: np.ndarray,
                  accepted: np.ndarray | None, last_accepted: np.ndarray | None) -> None:
        """A decode run's first ``steps`` steps, applied to rows ``0..cols-1`` (``cols`` =
        ``len(emitted)``): ``emitted`` tokens per row over them, ``decoding`` (steps x
        cols) whether each row decoded in each step, ``accepted`` (steps x cols, None
        without drafts) its accepted drafts, ``last_accepted`` those of each row's last
        step in the run (multi-module: what its next step repairs)."""
        cols = len(emitted)
        out = self.output_tokens[:cols]
        np.minimum(out + emitted, self.target_tokens[:cols], out=out)
        self.context_tokens[:cols] += emitted
        if accepted is None:
            return
        n = self.draft.num_spec_tokens
        accepted_then = accepted[:steps, :cols] * decoding
        took = np.add.reduce(decoding, axis=0, dtype=np.int64)
        self.drafts[:cols] += took
        self.accepted_tokens[:cols] += np.add.reduce(accepted_then, axis=0)
        # drafts accepted at position i: the steps with a > i (few rows: every position in
        # one operation; many: one position at a time, contiguous reductions cost less)
        per_pos = self.accepted_per_pos
        if cols <= _FEW_ROWS:
            per_pos[:cols, :n] += np.add.reduce(
                accepted_then[:, :, None] > self.draft_positions, axis=0)
        else:
            for i in range(n):
                per_pos[:cols, i] += np.add.reduce(accepted_then > i, axis=0)
        if self.draft.multi_module:
            assert last_accepted is not None
            np.copyto(self.rejected_last_step[:cols], n - last_accepted, where=took > 0)

    def finish(self, s: int) -> None:
        """Row ``s`` emitted its last token inside a decode run (it keeps the row until
        the run commits)."""
        self.output_tokens[s] = self.target_tokens[s]

    # ----------------------------------------------------------- settle, vacate

    def settle(self, req: Request, last_step: int, instance_index: int) -> None:
        """Copy ``req``'s row counters into it (its last step in the row given)."""
        s = req.slot
        first = self.segment_first_step.item(s)
        if last_step >= first:
            req.segments.append([instance_index, first, last_step])
        req.num_output = self.output_tokens.item(s)
        nd = self.drafts.item(s)
        n = self.draft.num_spec_tokens
        req.num_drafts += nd
        req.num_draft_tokens += nd * n
        req.num_accepted_tokens += self.accepted_tokens.item(s)
        if n:
            req.accepted_per_pos += self.accepted_per_pos[s, :n]

    def vacate(self, s: int) -> None:
        """Free row ``s``, keeping rows dense (the last row moves into it)."""
        req = self.request_of_row[s]
        assert req is not None
        last = self.count - 1
        if s != last:  # keep rows dense: move the last row into the hole
            for arr in self._arrays:
                arr[s] = arr[last]
            moved = self.request_of_row[last]
            assert moved is not None
            moved.slot = s
            self.request_of_row[s] = moved
        self.request_of_row[last] = None
        self.count = last
        req.slot = -1

    def vacate_many(self, rows: list[int]) -> None:
        """``vacate`` of each of ``rows`` (distinct), highest first: the same rows end up
        where, moved in one array operation per array."""
        if len(rows) == 1:  # (the common case: ``vacate`` itself, no index lists)
            self.vacate(rows[0])
            return
        left = self.count
        order = list(range(left))  # order[i]: the row now at i
        for s in sorted(rows, reverse=True):
            left -= 1
            order[s] = order[left]
            order.pop()
        moves = [(i, r) for i, r in enumerate(order) if i != r]
        of_row = self.request_of_row
        vacated = [of_row[s] for s in rows]
        if moves:
            dst = [i for i, _ in moves]
            src = [r for _, r in moves]
            if len(moves) == 1:  # one row moves: plain indexing, no index arrays
                to, fro = moves[0]
                for arr in self._arrays:
                    arr[to] = arr[fro]
            else:
                for arr in self._arrays:
                    arr[dst] = arr[src]
            moved = [of_row[r] for r in src]
            for i, req in zip(dst, moved, strict=True):
                assert req is not None
                req.slot = i
                of_row[i] = req
        for s in range(left, self.count):
            of_row[s] = None
        for req in vacated:
            assert req is not None
            req.slot = -1
        self.count = left

    # --------------------------------------------------------------- snapshot

    def snapshot(self, s: int) -> RowSnapshot:
        """Row ``s``'s counters not yet settled into its request (copies)."""
        n = self.draft.num_spec_tokens
        nd = int(self.drafts[s])
        return RowSnapshot(int(self.output_tokens[s]), nd, nd * n,
                           int(self.accepted_tokens[s]), self.accepted_per_pos[s, :n].copy(),
                           int(self.segment_first_step[s]))
