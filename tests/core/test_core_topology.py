"""The transfer topology: max-min fair flows over NICs, placement, heterogeneous TP, and
transfer state that grows with what a run uses, never with P x D."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import simpy
from core_support import base_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from pdsim import load_config, simulate
from pdsim.config import Role
from pdsim.engine.connector import Link
from pdsim.engine.fabric import Fabric, Flow, Port, max_min_rates
from pdsim.engine.transfers import PairLinks, TopologyNetwork
from pdsim.errors import ConfigError
from pdsim.invariants import run_checked
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.simulation import Simulation

GB = 1e9


def two_by_two(**topology: Any) -> dict[str, Any]:
    """2 P and 2 D of one GPU each on two nodes of 2 GPUs and 2 NICs (10 GB/s each way)."""
    d = base_dict()
    d["cluster"]["prefill"]["count"] = 2
    d["cluster"]["decode"]["count"] = 2
    d["connector"]["topology"] = {"gpus_per_node": 2, "nics_per_node": 2,
                                  "nic_bandwidth_gb_per_s": 10.0,
                                  "per_flow_cap_gb_per_s": 6.0, **topology}
    return d


def test_two_p_two_d_on_two_nodes_get_the_max_min_rates() -> None:
    """Packed: P0, P1 on node0 (GPUs/NICs 0, 1), D0, D1 on node1. Transfers A: P0->D0,
    B: P0->D1, C and D: P1->D1. By hand (progressive filling): node1's NIC 1 receive side
    carries B, C, D and fills first, at 10/3 GB/s each; A, alone with B on node0's NIC 0
    transmit side (10 - 10/3 left), rises to its 6 GB/s cap before that fills."""
    sim = Simulation(load_config(two_by_two()))
    net = sim.network
    assert isinstance(net, TopologyNetwork)
    p0, p1 = sim.prefills
    d0, d1 = sim.decodes
    done: dict[int, float] = {}
    for tid, (p, d) in enumerate([(p0, d0), (p0, d1), (p1, d1), (p1, d1)]):
        net.start(tid, p, d, int(6 * GB), lambda now, t=tid: done.setdefault(t, now))
    rates = {f.tid: f.rate_bytes_per_s / GB for f in net.fabric.flows}
    assert rates == pytest.approx({0: 6.0, 1: 10 / 3, 2: 10 / 3, 3: 10 / 3})
    ports = {f.tid: [p.name for p in f.ports] for f in net.fabric.flows}
    assert ports[0] == ["node0/nic0/tx", "node1/nic0/rx"]
    assert ports[2] == ["node0/nic1/tx", "node1/nic1/rx"]
    sim.env.run(until=10.0)
    # A lands at 1 s; B, C, D (6 GB at 10/3 GB/s each) at 1.8 s
    assert done[0] == pytest.approx(1.0)
    assert [done[t] for t in (1, 2, 3)] == pytest.approx([1.8] * 3)


def test_a_transfer_within_a_node_goes_over_nvlink() -> None:
    sim = Simulation(load_config(two_by_two(
        placement={"P0": 0, "D0": 0, "P1": 1, "D1": 1}, nvlink_bandwidth_gb_per_s=100.0)))
    net = sim.network
    assert isinstance(net, TopologyNetwork)
    net.start(0, sim.prefills[0], sim.decodes[0], int(GB), lambda now: None)
    (flow,) = net.fabric.flows
    assert [p.name for p in flow.ports] == ["node0/gpu0/nvlink/tx", "node0/gpu1/nvlink/rx"]
    assert flow.rate_bytes_per_s == pytest.approx(100 * GB)  # no per-flow network cap


def _roofline(tp: int, model: str) -> RooflineStepTimeConfig:
    if model == "deepseek-v3":  # fits 4 B200s in fp4
        return RooflineStepTimeConfig(model=model, hardware="b200", tensor_parallel_size=tp,
                                      weight_dtype="nvfp4")
    return RooflineStepTimeConfig(model=model, hardware="h100-sxm", tensor_parallel_size=tp)


def _hetero(tp_p: int, tp_d: int, model: str = "llama-3.1-70b") -> list[tuple[int, int, float]]:
    """(P GPU, D GPU, bytes) of each flow of an 8 GB transfer, P and D on separate nodes."""
    cfg = load_config(two_by_two())
    topo = cfg.connector.topology
    assert topo is not None
    topo = topo.model_copy(update={"gpus_per_node": 8, "nics_per_node": 8,
                                   "gpus_per_instance": None,
                                   "placement": {"P0": 0, "D0": 1}})
    p = SimpleNamespace(index=0, name="P0", role=Role.PREFILL,
                        group=SimpleNamespace(step_time=_roofline(tp_p, model)))
    d = SimpleNamespace(index=1, name="D0", role=Role.DECODE,
                        group=SimpleNamespace(step_time=_roofline(tp_d, model)))
    net = TopologyNetwork(simpy.Environment(), cfg, topo, [p, d])  # type: ignore[list-item]
    out = []
    for ports, nbytes, _ in net.flows_of(0, p, d, 8_000_000_000):  # type: ignore[arg-type]
        src, dst = (int(x.name.split("/nic")[1].split("/")[0]) for x in ports)
        out.append((src, dst, nbytes))
    return out


def test_heterogeneous_tp_splits_a_transfer_into_max_tp_flows() -> None:
    """NIXL: each D rank reads its heads from P rank d // (tp_d / tp_p); with tp_p > tp_d
    it reads from tp_p / tp_d P ranks. Either way max(tp_p, tp_d) reads of bytes / that."""
    assert _hetero(2, 4) == [(0, 0, 2e9), (0, 1, 2e9), (1, 2, 2e9), (1, 3, 2e9)]
    assert _hetero(4, 2) == [(0, 0, 2e9), (1, 0, 2e9), (2, 1, 2e9), (3, 1, 2e9)]
    assert _hetero(2, 2) == [(0, 0, 4e9), (1, 1, 4e9)]


def test_mla_kv_is_read_whole_by_every_d_rank() -> None:
    """MLA's latent is replicated on every TP rank, so each of D's ranks reads a copy."""
    assert _hetero(4, 8, "deepseek-v3") == [(i // 2, i, 8e9) for i in range(8)]


def test_flows_per_rank_slices_a_rank_over_several_nics() -> None:
    sim = Simulation(load_config(two_by_two(flows_per_rank=2)))
    net = sim.network
    assert isinstance(net, TopologyNetwork)
    flows = net.flows_of(0, sim.prefills[1], sim.decodes[0], 1000)
    assert [[p.name for p in ports] for ports, _, _ in flows] == [
        ["node0/nic0/tx", "node1/nic0/rx"], ["node0/nic1/tx", "node1/nic1/rx"]]
    assert [nbytes for _, nbytes, _ in flows] == [500, 500]


# ------------------------------------------------------------- max-min properties

@st.composite
def networks(draw: st.DrawFn) -> list[Flow]:
    ports = [Port(f"p{i}", draw(st.floats(1.0, 100.0)))
             for i in range(draw(st.integers(1, 6)))]
    flows = []
    for fid in range(draw(st.integers(1, 12))):
        crossed = draw(st.lists(st.sampled_from(ports), min_size=1, max_size=3, unique=True))
        cap = draw(st.one_of(st.just(math.inf), st.floats(0.5, 80.0)))
        flows.append(Flow(fid, fid, tuple(crossed), 1.0, cap))
    return flows


@settings(max_examples=300, deadline=None)
@given(networks())
def test_max_min_rates_are_feasible_and_max_min_fair(flows: list[Flow]) -> None:
    max_min_rates(flows)
    load: dict[Port, float] = {}
    for f in flows:
        assert 0 < f.rate_bytes_per_s <= f.cap_bytes_per_s * (1 + 1e-9)
        for p in f.ports:
            load[p] = load.get(p, 0.0) + f.rate_bytes_per_s
    for p, used in load.items():
        assert used <= p.capacity_bytes_per_s * (1 + 1e-9)
    # optimality: every flow is at its cap, or crosses a full port on which no flow is faster
    for f in flows:
        if f.rate_bytes_per_s >= f.cap_bytes_per_s * (1 - 1e-9):
            continue
        assert any(
            load[p] >= p.capacity_bytes_per_s * (1 - 1e-9)
            and all(g.rate_bytes_per_s <= f.rate_bytes_per_s * (1 + 1e-9)
                    for g in flows if p in g.ports)
            for p in f.ports), f.fid


def reference_rates(flows: list[Flow]) -> dict[int, float]:
    """Progressive filling by brute force: raise every unfrozen flow by the smallest step
    that fills a port or reaches a cap, freeze what is full, repeat."""
    rate = dict.fromkeys((f.fid for f in flows), 0.0)
    live = list(flows)
    while live:
        used = {p: sum(rate[g.fid] for g in flows if p in g.ports) for f in flows
                for p in f.ports}
        n = {p: sum(1 for g in live if p in g.ports) for p in used}
        step = min([f.cap_bytes_per_s - rate[f.fid] for f in live]
                   + [(p.capacity_bytes_per_s - used[p]) / n[p] for p in used if n[p]])
        for f in live:
            rate[f.fid] += step
        full = {p for p in used
                if used[p] + step * n[p] >= p.capacity_bytes_per_s * (1 - 1e-12)}
        live = [f for f in live if rate[f.fid] < f.cap_bytes_per_s * (1 - 1e-12)
                and not any(p in full for p in f.ports)]
    return rate


@settings(max_examples=200, deadline=None)
@given(networks())
def test_max_min_rates_match_brute_force_progressive_filling(flows: list[Flow]) -> None:
    max_min_rates(flows)
    want = reference_rates(flows)
    assert {f.fid: f.rate_bytes_per_s for f in flows} == pytest.approx(want, rel=1e-9)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.integers(0, 3), st.integers(0, 3),
                          st.floats(1e3, 5e9), st.booleans()), min_size=1, max_size=10))
def test_every_transfer_moves_exactly_its_bytes_at_the_rates_in_force(
        transfers: list[tuple[float, int, int, float, bool]]) -> None:
    """Integrating each flow's rate over the events gives its bytes when it lands."""
    env = simpy.Environment()
    fabric = Fabric(env)
    tx = [Port(f"tx{i}", 10 * GB) for i in range(4)]
    rx = [Port(f"rx{i}", 7 * GB) for i in range(4)]
    landed: dict[int, float] = {}
    for tid, (t0, a, b, nbytes, two) in enumerate(transfers):
        flows = [((tx[a], rx[b]), nbytes, 4 * GB)]
        if two:
            flows.append(((tx[(a + 1) % 4], rx[b]), nbytes / 2, 4 * GB))

        def go(_e: object, tid: int = tid, flows: Any = flows) -> None:
            fabric.start(tid, flows, lambda now: landed.setdefault(tid, now))
        env.timeout(t0).callbacks.append(go)
    moved: dict[int, float] = {}  # by flow id
    owner: dict[int, int] = {}  # flow id -> transfer id
    last = 0.0
    rates: dict[int, float] = {}
    while env.peek() < math.inf:
        env.step()
        for fid, r in rates.items():
            moved[fid] = moved.get(fid, 0.0) + r * (env.now - last)
        last = env.now
        rates = {f.fid: f.rate_bytes_per_s for f in fabric.flows}
        owner.update({f.fid: f.tid for f in fabric.flows})
    assert sorted(landed) == list(range(len(transfers)))
    for tid, (t0, _, _, nbytes, two) in enumerate(transfers):
        got = [moved[fid] for fid in sorted(owner) if owner[fid] == tid]
        want = [nbytes, nbytes / 2] if two else [nbytes]
        assert got == pytest.approx(want, rel=1e-9, abs=2.0)
        assert landed[tid] > t0


# ---------------------------------------------------------------- no P x D state

def _big(topology: dict[str, Any] | None) -> dict[str, Any]:
    d = base_dict()
    d["cluster"]["prefill"]["count"] = 100
    d["cluster"]["decode"]["count"] = 100
    d["workload"]["num_requests"] = 20
    if topology is not None:
        d["connector"]["topology"] = topology
    return d


def test_100p_100d_builds_no_per_pair_links() -> None:
    sim = Simulation(load_config(_big(None)))
    assert isinstance(sim.network, PairLinks)
    assert sim.network.links == {}
    res = sim.run()
    assert 0 < len(sim.network.links) <= 20  # one per pair that transferred
    assert len(res.links) == len(sim.network.links)


def test_100p_100d_topology_state_grows_with_ports_used() -> None:
    sim = Simulation(load_config(_big({"gpus_per_node": 8})))
    net = sim.network
    assert isinstance(net, TopologyNetwork)
    assert net.num_nodes == 25  # 200 one-GPU instances, 8 per node
    assert len(net._where) == 200
    res = sim.run()
    assert 0 < len(res.links) <= 2 * 20  # a transmit and a receive port per transfer
    assert res.summary.completed == 20


# ----------------------------------------------------------------- faults, errors

def test_a_node_degradation_slows_its_nics_only_while_it_lasts() -> None:
    d = two_by_two()
    d["faults"] = {"link_degradations": [
        {"link": "node1", "start_s": 0.0, "end_s": 1.0, "bandwidth_factor": 0.1}]}
    sim = Simulation(load_config(d))
    net = sim.network
    assert isinstance(net, TopologyNetwork)
    sim.start()
    sim.env.run(until=0.5)
    net.start(99, sim.prefills[0], sim.decodes[0], int(GB), lambda now: None)
    flow = next(f for f in net.fabric.flows if f.tid == 99)
    assert flow.rate_bytes_per_s == pytest.approx(1 * GB)  # node1's receive side at 10%


@pytest.mark.parametrize(("patch", "path"), [
    ({"faults": {"link_degradations": [{"link": "P0->D0", "start_s": 0.0, "end_s": 1.0,
                                        "bandwidth_factor": 0.5}]}},
     "faults.link_degradations.0.link"),
    ({"faults": {"link_degradations": [{"link": "node0/nic7", "start_s": 0.0, "end_s": 1.0,
                                        "bandwidth_factor": 0.5}]}},
     "faults.link_degradations.0.link"),
    ({"connector": {"topology": {"placement": {"P0": 0, "P1": 0, "D0": 1, "D9": 1}}}},
     "connector.topology.placement"),
])
def test_bad_topology_names_are_clear_errors(patch: dict[str, Any], path: str) -> None:
    d = two_by_two()
    d.setdefault("faults", {}).update(patch.get("faults", {}))
    if "connector" in patch:
        d["connector"]["topology"].update(patch["connector"]["topology"])
    with pytest.raises(ConfigError) as err:
        load_config(d)
    assert any(p.startswith(path) for p, _ in err.value.issues)


def test_an_overfull_node_and_a_node_beyond_the_cluster_are_clear_errors() -> None:
    full = two_by_two(placement={"P0": 0, "P1": 0, "D0": 0, "D1": 1})
    with pytest.raises(ConfigError, match=r"placement\.D0: node 0 has 2 GPUs"):
        Simulation(load_config(full))
    far = two_by_two()
    far["faults"] = {"link_degradations": [{"link": "node2", "start_s": 0.0, "end_s": 1.0,
                                            "bandwidth_factor": 0.5}]}
    with pytest.raises(ConfigError, match=r"node0\.\.node1"):
        simulate(load_config(far))


def test_a_link_made_late_has_the_samples_and_bandwidth_of_one_made_first() -> None:
    """Per-pair links are made on first use; a degradation logged before replays on it, so
    it matches a link that existed from the start (the per-pair model's numbers)."""
    cfg = load_config(two_by_two())
    env = simpy.Environment()
    links = PairLinks(env, cfg)
    eager = Link(env, "P0->D1", 7 * GB)
    p = SimpleNamespace(index=0, name="P0")
    d = SimpleNamespace(index=3, name="D1")
    done: list[float] = []
    changes = [(0.0, "P0->D1", 0.5), (1.0, "P0->D1", 1.0), (2.0, None, 0.25), (2.5, "P1->D0", 0.5)]
    for t_s, name, factor in changes:
        def change(_e: object, name: str | None = name, factor: float = factor) -> None:
            links.degrade(name, factor)
            if name in (None, "P0->D1"):
                eager.set_bandwidth(7 * GB * factor)
        env.timeout(t_s).callbacks.append(change)

    def go(_e: object) -> None:
        links.start(1, p, d, int(GB), done.append)  # type: ignore[arg-type]
        eager.start(1, int(GB), done.append)
    env.timeout(3.0).callbacks.append(go)
    env.run()
    assert done == pytest.approx([3 + 1 / 1.75] * 2)
    assert list(links.samples()) == ["P0->D1"]
    assert links.samples()["P0->D1"] == eager.samples


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_engine_invariants_hold_on_a_topology_with_every_fault(mode: str) -> None:
    """Outages, failed and timed-out transfers and a degraded node, checked after every
    event (``pdsim.invariants``): transfers cancelled mid-flow leave the fabric consistent."""
    d = two_by_two(per_flow_cap_gb_per_s=None)
    d["connector"]["transfer_mode"] = mode
    d["workload"]["num_requests"] = 60
    d["faults"] = {"kv_transfer_failure_probability": 0.2, "kv_transfer_timeout_s": 0.05,
                   "instance_outages": [{"instance": "D1", "start_s": 0.2, "end_s": 0.4},
                                        {"instance": "P0", "start_s": 0.5, "end_s": 0.7}],
                   "link_degradations": [{"link": "node1", "start_s": 0.0, "end_s": 1.0,
                                          "bandwidth_factor": 1e-6}]}
    res = run_checked(load_config(d))
    s = res.summary
    assert s["completed"] + s["failed"] + s["rejected"] == s["num_requests"]
    assert s["faults"]["kv_transfer_timeouts"] > 0  # the degraded node made some time out


def test_shipped_heterogeneous_deployment_splits_transfers_by_its_pools_tp() -> None:
    """configs/hetero_pd.yaml end to end: P (TP8) feeds D pools at TP4 over the stated
    topology, so a transfer is 8 flows of an eighth of the bytes, from node 0 to the node
    the D instance was packed on (D0, D1 on node 1; D2 on node 2)."""
    cfg = load_config("configs/hetero_pd.yaml", ["workload.num_requests=20"])
    sim = Simulation(cfg)
    net = sim.network
    assert isinstance(net, TopologyNetwork)
    p = sim.by_name["P0"]
    for d_name, node in (("D0", 1), ("D1", 1), ("D2", 2)):
        flows = net.flows_of(0, p, sim.by_name[d_name], 8_000_000_000)
        assert [nbytes for _, nbytes, _ in flows] == [1e9] * 8
        assert {ports[0].name.split("/")[0] for ports, _, _ in flows} == {"node0"}
        assert {ports[1].name.split("/")[0] for ports, _, _ in flows} == {f"node{node}"}
    res = sim.run()
    assert res.summary.completed == 20
