"""When a decode run may be taken, and planning one.

A run replaces step-by-step decoding only where both give the same numbers: the
predicate ``run_may_be_taken`` states the conditions in one place, and
``engine.decode_runs: off`` switches runs off altogether (every decode step its own event;
``tests/reliability/test_rel_decode_runs.py`` checks the two agree on every shipped config).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pdsim.engine.decode_advance import run_may_start
from pdsim.engine.decode_run import DecodeRun
from pdsim.engine.look_ahead import look_ahead

if TYPE_CHECKING:
    from pdsim.engine.instance import Instance


def run_may_be_taken(inst: Instance) -> bool:
    """Whether ``inst``'s next decode steps may go as a decode run: runs are on, it
    decodes and has decode rows, no prefill is in progress (its chunks would change the
    steps) and every row's acceptance rates stay constant (``run_may_start``)."""
    count = inst.rows.count
    return (inst.decode_runs and inst.decodes and count > 0 and not inst.prefilling
            and run_may_start(inst.rows, count))


def plan_decode_run(inst: Instance) -> DecodeRun | None:
    """Plan the instance's next decode steps, or None when they cannot be planned.

    Call it only where the scheduler would take a pure-decode step now (it has just
    planned one, or nothing waits). Not planned where ``run_may_be_taken`` says no, or
    with too few free blocks for even one step.
    """
    if not run_may_be_taken(inst):
        return None
    count = inst.rows.count
    window = inst.max_run_steps
    ahead = look_ahead(inst.rows, inst.layout, count, window, inst.run_steps)
    # never past the step in which the last row finishes (no empty steps) unless rows
    # join; never past a block shortage
    max_steps = window
    limit = min(window, int(ahead.finish_step.max()) + 1)
    need_total = np.add.reduce(ahead.blocks_needed, axis=1)
    capacity = inst.pool.num_free + int(np.add.reduce(inst.rows.blocks_held[:count]))
    if need_total[limit - 1] > capacity:
        limit = max_steps = int(np.searchsorted(need_total, capacity, side="right"))
        if limit == 0:
            return None
    run = DecodeRun(inst, limit, max_steps, ahead)
    return run if run.num_steps > 0 else None
