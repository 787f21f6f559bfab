"""A decode run leaves the join room of its (steps x columns) arrays unset and clears a
column only when a row joins into it (``decode_run.widen_unset``): nothing may read an
entry of that room before it is written. Filled with garbage instead of whatever the
allocator gives, every record and every logged step comes out the same."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from core_support import CONFIGS
from test_core_runs import small_overrides

from pdsim import Simulation, load_config
from pdsim.engine import decode_run


def _garbage_room(arr: np.ndarray, cols: int) -> np.ndarray:
    out = np.empty((*arr.shape[:-1], cols), dtype=arr.dtype)
    out.fill(True if out.dtype == np.bool_ else 7)
    out[..., : arr.shape[-1]] = arr
    return out


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: Path(p).stem)
def test_unset_join_room_is_never_read(path: Path) -> None:
    cfg = load_config(path, small_overrides(Path(path)))
    joined = {"rows": 0}

    def counting(inst: object, run: decode_run.DecodeRun) -> None:
        joined["rows"] -= run.num_cols  # the columns it starts with; the commit adds all

    plain = Simulation(cfg).run()
    sim = Simulation(cfg)
    sim.hooks.run_planned.append(counting)
    commit = decode_run.DecodeRun.commit

    def commit_counting(self: decode_run.DecodeRun) -> float:
        joined["rows"] += self.num_cols
        return commit(self)

    with mock.patch.object(decode_run, "widen_unset", _garbage_room), \
            mock.patch.object(decode_run.DecodeRun, "commit", commit_counting):
        dirty = sim.run()
    assert repr(list(dirty.records)) == repr(list(plain.records))  # (repr: NaN equals NaN)
    for a, b in zip(dirty.instances, plain.instances, strict=True):
        assert a.step_log.tobytes() == b.step_log.tobytes(), a.name
    assert dirty.segments == plain.segments
    if joined["rows"] == 0:
        pytest.skip("no row joined a decode run on this config")
