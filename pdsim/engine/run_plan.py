"""When a decode run may be taken, and how many steps to plan.

A run replaces step-by-step decoding only where both give the same numbers: the
predicate ``run_may_be_taken`` states the conditions in one place, and
``engine.decode_runs: off`` switches runs off altogether (every decode step its own event;
``tests/reliability/test_rel_decode_runs.py`` checks the two agree on every shipped config).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from pdsim.engine.look_ahead import Ahead, look_ahead

if TYPE_CHECKING:
    from pdsim.engine.decode_rows import DecodeRows
    from pdsim.engine.kvcache import BlockPool
    from pdsim.engine.look_ahead import FreshRows
    from pdsim.kv_layout import KVLayout


class RunWindow(NamedTuple):
    """The steps a decode run plans: ``steps`` now, up to ``max_steps`` once rows join,
    looked ahead as ``ahead``."""

    steps: int
    max_steps: int
    ahead: Ahead


# A plan's look-ahead is (steps x rows) arrays, and a run often ends before its last
# planned step (a row joins that it cannot follow, a prefill arrives), so few rows plan
# long runs and many rows short ones: at most this many (steps x rows) entries, but
# never fewer steps than ``MIN_RUN_STEPS``.
RUN_PLAN_ENTRIES = 4096
MIN_RUN_STEPS = 128


def run_window_steps(num_rows: int, max_steps: int) -> int:
    """The steps a run of ``num_rows`` rows plans (and rows joining it may extend it to):
    ``max_steps`` for a few rows, down to ``MIN_RUN_STEPS`` (or ``max_steps`` if less) for
    many."""
    return min(max_steps, max(MIN_RUN_STEPS, RUN_PLAN_ENTRIES // max(1, num_rows)))


def run_may_be_taken(rows: DecodeRows, prefilling: bool) -> bool:
    """Whether the next decode steps of a decoding instance (with decode runs on) may go
    as a decode run: it has decode rows, no prefill is in progress (its chunks would
    change the steps) and every row's acceptance rates stay constant
    (``DecodeRows.may_run``)."""
    count = rows.count
    return count > 0 and not prefilling and rows.may_run(count)


def plan_run_window(rows: DecodeRows, layout: KVLayout, pool: BlockPool, window: int,
                    step_index: np.ndarray, fresh_rows: FreshRows | None = None
                    ) -> RunWindow | None:
    """The steps of a decode run from here over at most ``window`` steps, or None when
    not even one step fits the free blocks.

    Call it only where ``run_may_be_taken`` and the scheduler would take a pure-decode
    step now (it has just planned one, or nothing waits). Never past the step in which
    the last row finishes (no empty steps) unless rows join; never past a block shortage.
    A lone fresh row's look-ahead is read from ``fresh_rows``.
    """
    count = rows.count
    ahead = look_ahead(rows, layout, count, window, step_index, fresh_rows)
    max_steps = window
    limit = min(window, int(ahead.finish_step.max()) + 1)
    need_total = np.add.reduce(ahead.blocks_needed, axis=1)
    capacity = pool.num_free + int(np.add.reduce(rows.blocks_held[:count]))
    if need_total[limit - 1] > capacity:
        limit = max_steps = int(np.searchsorted(need_total, capacity, side="right"))
        if limit == 0:
            return None
    return RunWindow(limit, max_steps, ahead)
