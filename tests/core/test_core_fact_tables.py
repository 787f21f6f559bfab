"""The compact tables a run hands over read as the Python structures they replace:
``SegmentTable`` as the dict of request id to segment lists, ``RateSamples`` as the
list of ``(time, bytes/s)`` tuples."""

from __future__ import annotations

import numpy as np
import pytest
from core_support import make_config

from pdsim import Simulation
from pdsim.facts import RateSamples, SegmentTable


def test_segments_are_each_request_s_own_lists() -> None:
    cfg = make_config("workload.num_requests=60", "workload.arrivals.rate_per_s=200",
                      "cluster.decode.count=2",
                      "faults.instance_outages=[{instance: D0, start_s: 0.05, end_s: 0.15}]")
    sim = Simulation(cfg)  # keeps its requests: their own segment lists to compare with
    res = sim.run()
    assert isinstance(res.segments, SegmentTable)
    assert len(res.segments) == len(sim.requests)
    assert sum(len(r.segments) for r in sim.requests) > len(sim.requests) // 2
    for req in sim.requests:
        assert res.segments[req.id] == req.segments
    want = {req.id: req.segments for req in sim.requests}
    assert res.segments == want and dict(res.segments) == want
    chunks = [sum(b - a + 1 for _, a, b in segs) for segs in want.values()]
    np.testing.assert_array_equal(res.records.column("num_chunks"), chunks)  # type: ignore[attr-defined]


def test_segment_table_from_rows_in_any_order() -> None:
    rows = np.array([[2, 0, 5, 6], [0, 1, 0, 3], [2, 1, 9, 9], [0, 0, 4, 4]])
    t = SegmentTable.from_flat(rows, 4)
    assert dict(t) == {0: [[1, 0, 3], [0, 4, 4]], 1: [], 2: [[0, 5, 6], [1, 9, 9]], 3: []}
    np.testing.assert_array_equal(t.chunks_per_request(), [5, 0, 3, 0])
    assert 4 not in t and -1 not in t
    with pytest.raises(KeyError):
        t[4]
    assert t.get(7, []) == []
    assert SegmentTable.from_dict(dict(t)) == t


def test_rate_samples_read_as_a_list_of_pairs() -> None:
    pairs = [(0.0, 0.0), (0.25, 7e9), (0.5, 0.0)]
    s = RateSamples()
    for p in pairs:
        s.append(p)
    assert list(s) == pairs and s == pairs and s == RateSamples(pairs)
    assert len(s) == 3 and s[1] == (0.25, 7e9) and s[-1] == (0.5, 0.0) and s[1:] == pairs[1:]
    np.testing.assert_array_equal(np.asarray(s), np.array(pairs))
    assert np.asarray(s, dtype=np.float64).shape == (3, 2)
    with pytest.raises(IndexError):
        s[3]
    assert not RateSamples()
