"""A request entering decode fresh joins a run with a look-ahead read from a table built
for a block of requests; it is exactly what the per-row look-ahead computes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from core_support import CONFIGS
from test_core_runs import small_overrides

import pdsim.engine.decode_run as decode_run
import pdsim.engine.instance as instance_module
from pdsim import Simulation, load_config


def _same_row(fast: Any, slow: Any) -> None:
    assert fast.fstep == slow.fstep and fast.repair_first == slow.repair_first
    live = len(slow.ctx_start)
    np.testing.assert_array_equal(fast.accepted[:live], slow.accepted[:live])
    np.testing.assert_array_equal(fast.cum[:live], slow.cum[:live])
    for name in ("ctx_start", "need"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))
    if slow.repair_after is None:
        assert fast.repair_after is None
    else:
        np.testing.assert_array_equal(fast.repair_after, slow.repair_after)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: Path(p).stem)
def test_fresh_rows_equal_the_per_row_look_ahead(path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request entering decode on every shipped config: the table's look-ahead over
    a short and a full window equals the one computed for the row alone (table off)."""
    cfg = load_config(path, small_overrides(Path(path)))
    checked = {"fresh": 0}
    original = instance_module.Instance._enter_decode

    def entering(inst: Any, req: Any, step: int) -> None:
        original(inst, req, step)
        if inst.fresh_rows is None:
            return
        s = req.slot
        for steps in (5, inst.max_run_steps):
            fast = decode_run._look_ahead_row(inst, s, steps)
            table, inst.fresh_rows = inst.fresh_rows, None
            try:
                slow = decode_run._look_ahead_row(inst, s, steps)
            finally:
                inst.fresh_rows = table
            assert (fast is None) == (slow is None)
            if slow is not None:
                _same_row(fast, slow)
        fresh = table.look_ahead(req.id, 5, int(inst.ctx[s]),
                                 int(inst.tgt[s]) - int(inst.out[s]), int(inst.blocks[s]),
                                 max(int(inst.prev_rej[s]) - 1, 0))
        checked["fresh"] += fresh is not None

    monkeypatch.setattr(instance_module.Instance, "_enter_decode", entering)
    Simulation(cfg).run()
    if cfg.speculative.num_speculative_tokens:
        assert checked["fresh"] > 0  # the table was used, not only its fallback
