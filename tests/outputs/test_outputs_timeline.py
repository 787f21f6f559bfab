"""The Chrome/Perfetto trace: valid JSON, named tracks, non-overlapping slices, paired flows."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pdsim
from pdsim.facts import InstanceFacts, StepColumns
from pdsim.results import Results
from pdsim.timeline import DEFAULT_MAX_STEPS, timeline_document, write_timeline

MTP3 = Path(__file__).resolve().parents[2] / "configs" / "mtp3.yaml"


def load(path: Path) -> dict[str, Any]:
    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} in the trace: not valid JSON")

    doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=no_constants)
    assert isinstance(doc, dict)
    return doc


def check_trace(doc: dict[str, Any]) -> dict[str, Any]:
    """The invariants every timeline keeps; returns the events grouped for more checks."""
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    assert doc["displayTimeUnit"] == "ms"
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    slices: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    flows: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    asyncs: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for e in events:
        assert e["ph"] in {"M", "X", "C", "b", "e", "s", "f"}, e
        assert e["pid"] in names, f"event on an unnamed process: {e}"
        if e["ph"] != "M":
            assert isinstance(e["ts"], int) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], int) and e["dur"] >= 0
            assert (e["pid"], e["tid"]) in threads
            slices[(e["pid"], e["tid"])].append((e["ts"], e["dur"]))
        elif e["ph"] in "sf":
            assert e["id"] not in flows or e["ph"] not in flows[e["id"]], "duplicate flow end"
            flows[e["id"]][e["ph"]] = e
        elif e["ph"] in "be":
            assert e["ph"] not in asyncs[e["id"]]
            asyncs[e["id"]][e["ph"]] = e
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, int | float) for v in e["args"].values())
    # slices within one track never overlap (touching is fine)
    for spans in slices.values():
        spans.sort()
        ends = np.array([a + d for a, d in spans[:-1]])
        starts = np.array([a for a, _ in spans[1:]])
        assert (ends <= starts).all()
    # every flow has one start and one end, from a prefill track to a decode track, each
    # inside a slice of its track (so it binds to that step)
    for fid, pair in flows.items():
        assert set(pair) == {"s", "f"}, f"flow {fid} does not pair up"
        s, f = pair["s"], pair["f"]
        assert f["bp"] == "e"
        assert s["cat"] == f["cat"] and s["name"] == f["name"]
        assert "(prefill" in names[s["pid"]] and "(decode" in names[f["pid"]]
        assert s["ts"] <= f["ts"]
        for ev in (s, f):
            spans = slices[(ev["pid"], ev["tid"])]
            assert any(a <= ev["ts"] <= a + d for a, d in spans), f"flow {fid} unbound"
    for aid, pair in asyncs.items():
        assert set(pair) == {"b", "e"}, f"transfer {aid} does not pair up"
        assert pair["b"]["pid"] == pair["e"]["pid"]
        assert names[pair["b"]["pid"]].startswith("link ") or (
            names[pair["b"]["pid"]] == "KV transfers")
        assert pair["b"]["ts"] <= pair["e"]["ts"]
    return {"names": names, "slices": slices, "flows": flows, "asyncs": asyncs}


def test_timeline_1p1d(mtp3_res: Results, tmp_path: Path) -> None:
    path = write_timeline(mtp3_res, tmp_path / "timeline.json")
    doc = load(path)
    got = check_trace(doc)
    assert sorted(got["names"].values()) == ["D0 (decode)", "P0 (prefill)", "link P0->D0"]
    steps = sum(len(f.step_log) for f in mtp3_res.instances)
    assert sum(len(v) for v in got["slices"].values()) == steps
    transferred = [r for r in mtp3_res.records if r["transfer_end_s"] == r["transfer_end_s"]]
    assert len(got["flows"]) == len(transferred) == len(got["asyncs"]) > 0
    assert doc["otherData"]["name"] == mtp3_res.config.name
    assert "truncated_at_s" not in doc["otherData"]
    # a step slice carries its batch
    x = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "decode")
    assert {"prefill_tokens", "decode_requests", "kv_used_blocks", "kv_usage", "running",
            "waiting", "receiving", "step"} <= set(x["args"])


def test_timeline_2p2d(res_2p2d: Results, tmp_path: Path) -> None:
    doc = load(write_timeline(res_2p2d, tmp_path / "timeline.json"))
    got = check_trace(doc)
    assert sum(n.startswith("link ") for n in got["names"].values()) == 4
    # each flow goes from the request's prefill instance to its decode instance
    by_id = {r["request_id"]: r for r in res_2p2d.records}
    for fid, pair in got["flows"].items():
        r = by_id[fid]
        assert got["names"][pair["s"]["pid"]].startswith(r["prefill_instance"] + " ")
        assert got["names"][pair["f"]["pid"]].startswith(r["decode_instance"] + " ")


def test_timeline_colocated(tmp_path: Path) -> None:
    cfg = pdsim.load_config(MTP3, overrides=["workload.num_requests=40",
                                              "cluster.mode=colocated"])
    res = pdsim.simulate(cfg)
    doc = load(write_timeline(res, tmp_path / "timeline.json"))
    got = check_trace(doc)
    assert not got["flows"] and not got["asyncs"]
    assert all("(colocated)" in n for n in got["names"].values())


def test_step_cap_and_window(mtp3_res: Results) -> None:
    doc = timeline_document(mtp3_res, max_steps=300)
    got = check_trace(doc)
    cut = doc["otherData"]["truncated_at_s"]
    assert sum(len(v) for v in got["slices"].values()) == 300
    assert all(a < cut * 1e6 for spans in got["slices"].values() for a, _ in spans)
    doc = timeline_document(mtp3_res, max_steps=None, window_s=(5.0, 10.0))
    got = check_trace(doc)
    starts = [a for spans in got["slices"].values() for a, _ in spans]
    assert starts and min(starts) >= 5e6 and max(starts) < 10e6
    assert doc["otherData"]["window_s"] == [5.0, 10.0]


def test_large_run_is_fast_and_compact(mtp3_cfg: pdsim.SimConfig, tmp_path: Path) -> None:
    """120k back-to-back decode steps whose KV changes every step: written in seconds, and
    capped at the default number of step slices."""
    n = 120_000
    start = np.arange(n) * 0.01
    log = np.column_stack([start, start + 0.01, np.zeros(n), np.full(n, 8),
                           40 + np.arange(n) % 50, np.full(n, 8), np.zeros(n), np.zeros(n)])
    inst = InstanceFacts("D0", "decode", 1000, StepColumns.from_matrix(log), 0.0, 0)
    res = Results(mtp3_cfg, [], [inst], {})
    t0 = time.perf_counter()
    path = write_timeline(res, tmp_path / "timeline.json")
    # about 2 s on an idle machine; the bound only catches a writer gone quadratic
    assert time.perf_counter() - t0 < 30.0
    assert path.stat().st_size < 40e6
    doc = load(path)
    check_trace(doc)
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == DEFAULT_MAX_STEPS
    assert doc["otherData"]["truncated_at_s"] == pytest.approx(DEFAULT_MAX_STEPS * 0.01)
    assert doc["otherData"]["max_steps"] == DEFAULT_MAX_STEPS


def test_timeline_with_a_topology_keeps_the_transfers(tmp_path: Path) -> None:
    """With a transfer topology the links are NIC ports, no P->D pair: the transfers'
    slices go on one `KV transfers` process (they were dropped), naming both ends."""
    res = pdsim.simulate(pdsim.load_config(
        Path(__file__).resolve().parents[2] / "configs" / "hetero_pd.yaml",
        ["workload.num_requests=20"]))
    got = check_trace(load(write_timeline(res, tmp_path / "timeline.json")))
    names = got["names"]
    assert "KV transfers" in names.values()
    assert sum(n.startswith("link node") for n in names.values()) == len(res.links)
    transferred = {r["request_id"]: r for r in res.records
                   if r["transfer_end_s"] == r["transfer_end_s"]}
    assert len(got["asyncs"]) == len(transferred) > 0
    for rid, pair in got["asyncs"].items():
        assert names[pair["b"]["pid"]] == "KV transfers"
        r = transferred[rid]
        assert (pair["b"]["args"]["from"], pair["b"]["args"]["to"]) == (
            r["prefill_instance"], r["decode_instance"])
