"""Decode rows stay dense: vacating several rows at once leaves the same rows where
vacating them one by one (highest first) would."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import Simulation, load_config
from pdsim.config import Role
from pdsim.engine.decode_rows import DecodeRows
from pdsim.engine.request import Request


def _filled(k: int, seed: int) -> tuple[DecodeRows, list[Request]]:
    sim = Simulation(load_config("configs/mtp3.yaml"))
    d = sim.by_role[Role.DECODE][0]
    rows = d.rows
    rng = np.random.default_rng(seed)
    reqs = [Request(i, 0.0, 100, 50, d.n_spec) for i in range(k)]
    for s, req in enumerate(reqs):
        req.slot = s
        rows.request_of_row[s] = req
    for arr in rows._arrays:
        arr[:k] = rng.integers(0, 1000, arr[:k].shape).astype(arr.dtype)
    rows.count = k
    return rows, reqs


@settings(max_examples=60, deadline=None)
@given(data=st.data(), k=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_vacating_rows_at_once_equals_one_by_one(data: st.DataObject, k: int,
                                                 seed: int) -> None:
    slots = data.draw(st.lists(st.integers(0, k - 1), unique=True, max_size=k))
    one, reqs_one = _filled(k, seed)
    many, reqs_many = _filled(k, seed)
    for s in sorted(slots, reverse=True):
        one.vacate(s)
    many.vacate_many(slots)
    assert one.count == many.count == k - len(slots)
    left = one.count
    for a, b in zip(one._arrays, many._arrays, strict=True):
        np.testing.assert_array_equal(a[:left], b[:left])
    assert [r.id if r else None for r in one.request_of_row] == \
        [r.id if r else None for r in many.request_of_row]
    assert [r.slot for r in reqs_one] == [r.slot for r in reqs_many]
