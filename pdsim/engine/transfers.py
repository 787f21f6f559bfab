"""Where KV transfers run: per-pair links (the default) or a topology of nodes and NICs.

Both networks start and cancel transfers by id, take link degradations by name and report
their samples (``Results.links``). Neither builds state per P x D pair up front:
``PairLinks`` makes a pair's ``Link`` the first time the pair transfers (or a degradation
names it), and ``TopologyNetwork`` makes a NIC's or NVLink port's state the first time a
flow crosses it, so a run's transfer state grows with the pairs or ports it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from pdsim.config import Role
from pdsim.engine.connector import Link
from pdsim.engine.fabric import Fabric, Port
from pdsim.facts import RateSamples
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.topology_config import TopologyConfig, instance_gpus, place, tensor_parallel_size

if TYPE_CHECKING:
    import simpy

    from pdsim.config import InstanceGroupConfig, SimConfig
    from pdsim.engine.instance import Instance

Samples = RateSamples
_ALL = "*"  # a degradation of every link or NIC


class TransferNetwork(Protocol):
    """What the simulation needs of a network."""

    def start(self, tid: int, p: Instance, d: Instance, nbytes: int,
              on_done: Callable[[float], None]) -> None: ...

    def cancel(self, tid: int) -> bool: ...

    def degrade(self, name: str | None, factor: float) -> None: ...

    def samples(self) -> dict[str, Samples]: ...


def kv_replicated(cfg: SimConfig, topo: TopologyConfig, group: InstanceGroupConfig) -> bool:
    """Every TP rank of ``group`` holds the whole KV: the topology says so, or its roofline
    model's layers use MLA (whose latent cannot be split by heads)."""
    if topo.kv_replicated_across_tp is not None:
        return topo.kv_replicated_across_tp
    st = cfg.step_time_of(group)
    if not isinstance(st, RooflineStepTimeConfig):
        return False
    return any(getattr(b.mixer, "kind", "") == "mla" for b in st.resolved_model().blocks)


class PairLinks:
    """One ``Link`` per P->D pair that has transferred, at ``connector.link_bandwidth``.

    A degradation is logged; a link made later replays the log (a sample of 0 bytes/s at
    each change that named it, and the latest factor), so its samples are those it would
    have had had it existed from the start.
    """

    def __init__(self, env: simpy.Environment, cfg: SimConfig) -> None:
        self.env = env
        self._bw = cfg.connector.link_bandwidth_gb_per_s * 1e9
        self.links: dict[tuple[int, int], Link] = {}
        self._active: dict[int, Link] = {}
        self._log: list[tuple[float, str, float]] = []

    def _link(self, p: Instance, d: Instance) -> Link:
        link = self.links.get((p.index, d.index))
        if link is None:
            name = f"{p.name}->{d.name}"
            link = Link(self.env, name, self._bw)
            for t_s, who, factor in self._log:
                if who in (_ALL, name):
                    link.samples.append((t_s, 0.0))
                    link.bandwidth_bytes_per_s = self._bw * factor
            self.links[(p.index, d.index)] = link
        return link

    def start(self, tid: int, p: Instance, d: Instance, nbytes: int,
              on_done: Callable[[float], None]) -> None:
        link = self._link(p, d)
        self._active[tid] = link
        link.start(tid, nbytes, self._landed(tid, on_done))

    def _landed(self, tid: int, on_done: Callable[[float], None]) -> Callable[[float], None]:
        def landed(now: float) -> None:
            self._active.pop(tid, None)
            on_done(now)
        return landed

    def cancel(self, tid: int) -> bool:
        link = self._active.pop(tid, None)
        return link is not None and link.cancel(tid)

    def degrade(self, name: str | None, factor: float) -> None:
        who = _ALL if name is None else name
        self._log.append((self.env.now, who, factor))
        for link in self.links.values():
            if who in (_ALL, link.name):
                link.set_bandwidth(self._bw * factor)

    def samples(self) -> dict[str, Samples]:
        return {self.links[k].name: self.links[k].samples for k in sorted(self.links)}


class TopologyNetwork:
    """Instances placed on nodes; transfers as max-min fair flows over NICs and NVLink."""

    def __init__(self, env: simpy.Environment, cfg: SimConfig, topo: TopologyConfig,
                 members: Sequence[Instance]) -> None:
        """``members``: every P and D instance, in order (each reads its pool's step time
        through ``instance.group``)."""
        self.topo = topo
        self.fabric = Fabric(env)
        self._nic_bw = topo.nic_bandwidth_gb_per_s * 1e9
        self._cap = topo.per_flow_cap_bytes_per_s
        self._ports: dict[tuple[int, int, str], Port] = {}  # (node, nic or gpu, kind)
        self._factor: dict[str, float] = {}
        # per instance: (first global GPU, GPUs, TP ranks, KV replicated on every rank)
        self._where: dict[int, tuple[int, int, int, bool]] = {}
        gpus = {inst.index: instance_gpus(cfg, topo, inst.group) for inst in members}
        # where each instance sits (checked when the config loaded: transfer_issues)
        first, self.num_nodes = place(topo, [(i.name, gpus[i.index]) for i in members])
        for inst in members:
            self._where[inst.index] = (first[inst.name], gpus[inst.index],
                                       tensor_parallel_size(cfg, inst.group),
                                       kv_replicated(cfg, topo, inst.group))

    def _gpu(self, inst: Instance, rank: int, dp_pick: int) -> int:
        """The global GPU of TP rank ``rank`` in the data-parallel rank ``dp_pick`` picks."""
        first, g, tp, _ = self._where[inst.index]
        dp = max(1, g // tp)
        return first + (dp_pick % dp) * tp + rank % tp

    def _port(self, node: int, unit: int, kind: str) -> Port:
        key = (node, unit, kind)
        port = self._ports.get(key)
        if port is None:
            if kind.startswith("nic"):
                name = f"node{node}/nic{unit}/{kind[4:]}"
                bw = self._nic_bw * self._factor_of(node, unit)
            else:
                name = f"node{node}/gpu{unit}/nvlink/{kind[7:]}"
                bw = self.topo.nvlink_bandwidth_gb_per_s * 1e9
            port = self._ports[key] = Port(name, bw)
        return port

    def _factor_of(self, node: int, nic: int) -> float:
        f = self._factor
        return (f.get(_ALL, 1.0) * f.get(f"node{node}", 1.0)
                * f.get(f"node{node}/nic{nic}", 1.0))

    def flows_of(self, tid: int, p: Instance, d: Instance,
                 nbytes: int) -> list[tuple[tuple[Port, ...], float, float]]:
        """The flows of a transfer of ``nbytes`` from ``p`` to ``d`` (see
        ``TopologyConfig``): ``(ports, bytes, cap bytes/s)`` each."""
        _, _, tp_p, _ = self._where[p.index]
        _, _, tp_d, replicated = self._where[d.index]
        n = tp_d if replicated else max(tp_p, tp_d)
        share = float(nbytes) if replicated else nbytes / n
        per_node, nics = self.topo.gpus_per_node, self.topo.nics_per_node
        rails = self.topo.flows_per_rank
        out: list[tuple[tuple[Port, ...], float, float]] = []
        for i in range(n):
            src = self._gpu(p, i * tp_p // n, tid)
            dst = self._gpu(d, i * tp_d // n, tid)
            s_node, s_gpu = divmod(src, per_node)
            d_node, d_gpu = divmod(dst, per_node)
            if s_node == d_node:
                ports = (self._port(s_node, s_gpu, "nvlink/tx"),
                         self._port(d_node, d_gpu, "nvlink/rx"))
                out.append((ports, share, float("inf")))
            else:
                for j in range(rails):
                    ports = (self._port(s_node, (s_gpu * rails + j) % nics, "nic/tx"),
                             self._port(d_node, (d_gpu * rails + j) % nics, "nic/rx"))
                    out.append((ports, share / rails, self._cap))
        return out

    def start(self, tid: int, p: Instance, d: Instance, nbytes: int,
              on_done: Callable[[float], None]) -> None:
        self.fabric.start(tid, self.flows_of(tid, p, d, nbytes), on_done)

    def cancel(self, tid: int) -> bool:
        return self.fabric.cancel(tid)

    def degrade(self, name: str | None, factor: float) -> None:
        self._factor[_ALL if name is None else name] = factor
        nics = [(key, port) for key, port in self._ports.items() if key[2].startswith("nic")]
        self.fabric.set_capacity([port for _, port in nics],
                                 [self._nic_bw * self._factor_of(k[0], k[1]) for k, _ in nics])

    def samples(self) -> dict[str, Samples]:
        return {self._ports[k].name: self._ports[k].samples for k in sorted(self._ports)}


def make_network(env: simpy.Environment, cfg: SimConfig,
                 instances: Sequence[Instance]) -> TransferNetwork:
    """The network ``cfg.connector`` describes, between the P and D among ``instances``."""
    topo = cfg.connector.topology
    if topo is None:
        return PairLinks(env, cfg)
    return TopologyNetwork(env, cfg, topo,
                           [i for i in instances if i.role is not Role.COLOCATED])


__all__ = ["PairLinks", "TopologyNetwork", "TransferNetwork",
           "instance_gpus", "kv_replicated", "make_network", "tensor_parallel_size"]
