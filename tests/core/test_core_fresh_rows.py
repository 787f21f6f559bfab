"""A request entering decode fresh joins a run with a look-ahead read from a table built
for a block of requests; it is exactly what the per-row look-ahead computes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from core_support import CONFIGS
from test_core_runs import small_overrides

from pdsim import Simulation, load_config
from pdsim.engine.look_ahead import lone_fresh_row, look_ahead, look_ahead_row


def _same_row(fast: Any, slow: Any) -> None:
    assert fast.finish_step == slow.finish_step and fast.repair_first == slow.repair_first
    live = len(slow.context_at_start)
    np.testing.assert_array_equal(fast.accepted[:live], slow.accepted[:live])
    np.testing.assert_array_equal(fast.emitted_by_step[:live], slow.emitted_by_step[:live])
    for name in ("context_at_start", "blocks_needed"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))
    if slow.repair_after is None:
        assert fast.repair_after is None
    else:
        np.testing.assert_array_equal(fast.repair_after, slow.repair_after)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: Path(p).stem)
def test_fresh_rows_equal_the_per_row_look_ahead(path: Path) -> None:
    """Every request entering decode on every shipped config: the table's look-ahead over
    a short and a full window equals the one computed for the row alone (table off)."""
    cfg = load_config(path, small_overrides(Path(path)))
    checked = {"fresh": 0}

    def entering(inst: Any, req: Any) -> None:
        table = inst.fresh_rows
        if table is None:
            return
        s, rows = req.slot, inst.rows
        for steps in (5, inst.max_run_steps):
            fast = look_ahead_row(rows, inst.layout, table, s, steps)
            slow = look_ahead_row(rows, inst.layout, None, s, steps)
            assert (fast is None) == (slow is None)
            if slow is not None:
                _same_row(fast, slow)
        fresh = table.look_ahead(req.id, 5, int(rows.context_tokens[s]),
                                 int(rows.target_tokens[s]) - int(rows.output_tokens[s]),
                                 int(rows.blocks_held[s]),
                                 max(int(rows.rejected_last_step[s]) - 1, 0))
        checked["fresh"] += fresh is not None

    sim = Simulation(cfg)
    sim.hooks.decode_entered.append(entering)
    sim.run()
    if cfg.speculative.num_speculative_tokens:
        assert checked["fresh"] > 0  # the table was used, not only its fallback


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: Path(p).stem)
def test_lone_fresh_row_equals_the_general_look_ahead(path: Path) -> None:
    """A decode run of one row that entered decode fresh reads its look-ahead from the
    table (``lone_fresh_row``): on every shipped config, each request that enters decode
    alone gets the same ``Ahead`` as the general look-ahead computes (values and dtypes,
    over a short and a full window). The draws and emitted tokens after the row's
    finishing step are not compared: the table stops where its rows finish, nothing reads
    them (those steps are not decoding) and the table fills them."""
    cfg = load_config(path, small_overrides(Path(path)))
    checked = {"lone": 0}

    def entering(inst: Any, req: Any) -> None:
        table, rows = inst.fresh_rows, inst.rows
        if table is None or rows.count != 1 or not rows.may_run(1):
            return
        for steps in (5, inst.max_run_steps):
            lone = lone_fresh_row(rows, table, steps, inst.run_steps)
            slow = look_ahead(rows, inst.layout, 1, steps, inst.run_steps)
            fast = look_ahead(rows, inst.layout, 1, steps, inst.run_steps, table)
            for name, want in slow._asdict().items():
                got = getattr(fast, name)
                if want is None:
                    assert got is None
                    continue
                assert got.dtype == want.dtype and got.shape == want.shape, name
                if name in ("accepted", "emitted_by_step"):  # its live steps
                    got, want = got[slow.decoding], want[slow.decoding]
                np.testing.assert_array_equal(got, want, err_msg=name)
            checked["lone"] += lone is not None

    sim = Simulation(cfg)
    sim.hooks.decode_entered.append(entering)
    sim.run()
    if checked["lone"] == 0:  # (no drafter, or every lone row had stale KV or prior steps)
        pytest.skip("no request entered decode alone and fresh on this config")
