"""An interrupted run reports what it measured, including requests still decoding."""

from __future__ import annotations

import numpy as np

import pdsim
from pdsim.simulation import Simulation


def _interrupted(stop_s: float) -> tuple[Simulation, pdsim.Results]:
    cfg = pdsim.load_config("configs/mtp3.yaml", ["workload.num_requests=60"])
    sim = Simulation(cfg)
    sim.start()
    while sim.env.now < stop_s:
        sim.step()
    return sim, sim.results()


def test_requests_still_decoding_keep_their_counters_and_chunks() -> None:
    sim, res = _interrupted(5.0)
    decoding = {inst.rows.request_of_row[s].id: (inst, s)  # type: ignore[union-attr]
                for inst in sim.instances for s in range(inst.rows.count)}
    assert decoding, "the run should be interrupted while requests decode"
    for rid, (inst, s) in decoding.items():
        rec = res.records[rid]
        assert rec["status"] == "in_flight"
        assert rec["output_tokens"] == int(inst.rows.output_tokens[s]) > 0
        assert rec["num_drafts"] == int(inst.rows.drafts[s]) > 0
        assert rec["num_accepted_tokens"] == int(inst.rows.accepted_tokens[s])
        # one chunk for the first token, one per decode step since
        assert rec["num_chunks"] == rec["num_drafts"] + 1
    s = res.summary
    assert s["in_flight"] >= len(decoding)
    assert sum(s["num_accepted_tokens_per_pos"]) == s["num_accepted_tokens"]
    assert s["num_drafts"] == int(np.sum(res.records.columns["num_drafts"]))


def test_building_results_twice_gives_the_same_summary() -> None:
    sim, first = _interrupted(4.0)
    again = sim.results()
    assert first.summary["num_drafts"] == again.summary["num_drafts"]
    assert first.summary["total_output_tokens"] == again.summary["total_output_tokens"]
