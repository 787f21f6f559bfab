"""The transfer topology: nodes, their NICs and NVLink, and where instances sit.

``connector.topology`` (``TopologyConfig``) replaces the per-pair link model: a KV transfer
becomes flows over the NICs of the nodes it crosses (or over NVLink within a node), sharing
them max-min fairly (``pdsim.engine.fabric``). The defaults and their sources are in
docs/topology.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from pdsim._model import MAX_INSTANCES, MIN_BANDWIDTH_GB_PER_S, StrictModel, at_least
from pdsim.errors import ConfigError

_BW_WHY = "1 KB/s; slower links make transfers outlast any run"
Bandwidth = Annotated[float, Field(gt=0), at_least(MIN_BANDWIDTH_GB_PER_S, _BW_WHY)]

#: a node's NICs (``node3``) or one NIC (``node3/nic1``), as fault names and in results
NIC_NAME = re.compile(r"node(\d+)(?:/nic(\d+))?")
#: a legacy per-pair link (``P0->D1``)
PAIR_LINK_NAME = re.compile(r"P(\d+)->D(\d+)")


class TopologyConfig(StrictModel):
    """Nodes of ``gpus_per_node`` GPUs with ``nics_per_node`` NICs each.

    Instances are placed on nodes: packed in order (every P, then every D; an instance that
    does not fit in what is left of a node starts the next one) or by ``placement``. An
    instance occupies ``gpus_per_instance`` GPUs (default: its step time's
    ``max(tensor_parallel_size, expert_parallel_size)`` for the roofline model, else 1).

    A transfer from P (tensor-parallel size ``tp_p``) to D (``tp_d``) is ``max(tp_p, tp_d)``
    flows of ``bytes / max(tp_p, tp_d)`` each (NIXL's heterogeneous-TP reads); when the KV is
    replicated on every TP rank (MLA), each of D's ``tp_d`` ranks reads a whole copy.
    Flow ``i`` leaves from GPU ``i mod tp_p`` of P and lands on GPU ``i mod tp_d`` of D; a
    GPU uses NIC ``gpu mod nics_per_node`` of its node (with ``flows_per_rank`` = k, its
    share is k flows on NICs ``gpu * k + j``, mod the NICs). A flow between nodes crosses the
    sender's NIC (transmit side) and the receiver's NIC (receive side), each of
    ``nic_bandwidth_gb_per_s`` per direction, and never runs faster than
    ``per_flow_cap_gb_per_s``; a flow within a node crosses the two GPUs' NVLink ports
    (``nvlink_bandwidth_gb_per_s`` per direction). Flows share what they cross max-min
    fairly. ``connector.setup_latency_s`` (and the pull handshake) still precede each
    transfer.
    """

    gpus_per_node: Annotated[int, Field(ge=1, le=1024)] = 8
    """GPUs in one node (8 in an HGX/DGX H100, H200 or B200 node)."""
    nics_per_node: Annotated[int, Field(ge=1, le=1024)] = 8
    """Network adapters per node used for KV transfers (one per GPU in an HGX/DGX node)."""
    nic_bandwidth_gb_per_s: Bandwidth = 50.0
    """Line rate of one NIC per direction, GB/s (1e9 bytes): 50 for 400 Gb/s (ConnectX-7)."""
    per_flow_cap_gb_per_s: Bandwidth | None = 21.75
    """The most one flow (one rank's share of a transfer) reaches between nodes, GB/s; null:
    the line rate. Default: Mooncake's 87 GB/s over 4 x 200 Gb/s NICs, per NIC."""
    nvlink_bandwidth_gb_per_s: Bandwidth = 450.0
    """NVLink bandwidth of one GPU per direction, GB/s (450: H100/H200 NVLink 4)."""
    flows_per_rank: Annotated[int, Field(ge=1, le=64)] = 1
    """Flows one rank's share of a transfer is sliced into between nodes, each on its own
    NIC (multi-rail: Mooncake's transfer engine slices a transfer over every NIC); 1: the
    rank's own NIC."""
    gpus_per_instance: Annotated[int, Field(ge=1, le=65536)] | None = None
    """GPUs one instance occupies; null: from its step time (see above)."""
    kv_replicated_across_tp: bool | None = None
    """Every TP rank holds the whole KV (MLA); null: true when the roofline model's layers
    use MLA, else false."""
    placement: dict[str, Annotated[int, Field(ge=0, le=MAX_INSTANCES * 64)]] | None = None
    """Node of each instance, by name (``P0: 0``, ``D0: 1``); null: packed in order."""

    @property
    def per_flow_cap_bytes_per_s(self) -> float:
        """The per-flow cap in bytes/s (inf when null)."""
        cap = self.per_flow_cap_gb_per_s
        return float("inf") if cap is None else cap * 1e9


def tensor_parallel_size(cfg: Any, group: Any) -> int:
    """TP ranks of one instance of ``group`` (1 unless its step time is the roofline)."""
    st = cfg.step_time_of(group)
    return int(st.tensor_parallel_size) if getattr(st, "kind", None) == "roofline" else 1


def instance_gpus(cfg: Any, topo: TopologyConfig, group: Any) -> int:
    """GPUs one instance of ``group`` occupies: ``topo.gpus_per_instance``, else the
    roofline's ``max(tensor_parallel_size, expert_parallel_size)``, else 1."""
    if topo.gpus_per_instance is not None:
        return topo.gpus_per_instance
    st = cfg.step_time_of(group)
    if getattr(st, "kind", None) == "roofline":
        return max(int(st.tensor_parallel_size), int(st.expert_parallel_size))
    return 1


def place(topo: TopologyConfig, instances: Sequence[tuple[str, int]]
          ) -> tuple[dict[str, int], int]:
    """Where ``instances`` (name, GPUs; every P, then every D) sit: the first global GPU of
    each (node ``gpu // gpus_per_node``), and the nodes they occupy. Packed in order (an
    instance that does not fit in what is left of a node starts the next one) or by
    ``topo.placement``. Raises ``ConfigError`` for a node given more GPUs than it has."""
    placement, per_node = topo.placement, topo.gpus_per_node
    first: dict[str, int] = {}
    used: dict[int, int] = {}
    nxt = 0  # the next free global GPU when packing
    for name, g in instances:
        if placement is None:
            if nxt % per_node + g > per_node:
                nxt += -nxt % per_node  # does not fit what is left: next node
            first[name] = nxt
            nxt += g
        else:
            node = placement[name]
            first[name] = node * per_node + used.get(node, 0)
            used[node] = used.get(node, 0) + g
            if used[node] > per_node:
                raise ConfigError(f"connector.topology.placement.{name}",
                                  f"node {node} has {per_node} GPUs; the instances placed "
                                  f"on it need {used[node]}")
    last = max((first[n] + g for n, g in instances), default=0)
    return first, -(-last // per_node)


def _placement_issues(cfg: Any, topo: TopologyConfig) -> tuple[list[tuple[str, str]], int]:
    """Problems with where the P and D instances sit, and the nodes they occupy (0 when
    they cannot be placed)."""
    issues = []
    instances: list[tuple[str, int]] = []
    for pool in cfg.cluster.pools():
        if pool.role.value == "colocated":
            continue
        g = instance_gpus(cfg, topo, pool.group)
        tp = tensor_parallel_size(cfg, pool.group)
        if g < tp:  # its TP ranks would read and write other instances' GPUs
            issues.append(("connector.topology.gpus_per_instance",
                           f"{g} GPU(s) per instance cannot hold {pool.path}'s "
                           f"tensor_parallel_size {tp} (a GPU per TP rank); give at least "
                           f"{tp}, or null to take each pool's from its step time"))
        instances.extend((name, g) for name in pool.instance_names)
    if issues:
        return issues, 0
    try:
        return [], place(topo, instances)[1]
    except ConfigError as exc:
        return list(exc.issues), 0


def transfer_issues(cfg: Any) -> list[tuple[str, str]]:
    """Problems with what ``cfg`` (a ``SimConfig``) names in the transfer network: the
    links of ``faults.link_degradations`` and the instances of ``topology.placement``.

    Names are parsed, not looked up in a list of every P x D pair."""
    counts = {"prefill": 0, "decode": 0}
    names: set[str] = set()  # the P and D instances, as the cluster names them
    for pool in cfg.cluster.pools():
        if pool.role.value in counts:
            counts[pool.role.value] += pool.group.count
            names.update(pool.instance_names)
    topo = cfg.connector.topology
    colocated = cfg.cluster.mode == "colocated"
    issues = []
    bw_field = type(cfg.connector).model_fields["link_bandwidth_gb_per_s"]
    if (topo is not None and not colocated
            and cfg.connector.link_bandwidth_gb_per_s != bw_field.default):
        issues.append(("connector.link_bandwidth_gb_per_s",
                       f"{cfg.connector.link_bandwidth_gb_per_s:g} would change nothing: "
                       "connector.topology sets the transfer bandwidth (its "
                       "nic_bandwidth_gb_per_s and per_flow_cap_gb_per_s); set those, or "
                       "connector.topology: null for one link per P->D pair"))
    for i, deg in enumerate(cfg.faults.link_degradations):
        name, path = deg.link, f"faults.link_degradations.{i}.link"
        if name is None:
            continue
        if colocated:
            issues.append((path, f"no link {name!r}: a colocated cluster transfers no KV"))
        elif topo is None:
            m = PAIR_LINK_NAME.fullmatch(name)
            if m is None or int(m.group(1)) >= counts["prefill"] or int(
                    m.group(2)) >= counts["decode"]:
                issues.append((path, f"no link {name!r}; links are P<i>->D<j> with i < "
                                     f"{counts['prefill']} and j < {counts['decode']}"))
            elif any(g != str(int(g)) for g in m.groups()):  # P01->D0 would match no link
                issues.append((path, f"{name!r}: write 'P{int(m.group(1))}->D"
                                     f"{int(m.group(2))}' (numbers without leading zeros, "
                                     "as the links are named)"))
        else:
            m = NIC_NAME.fullmatch(name)
            if m is None:
                issues.append((path, f"{name!r} names no NICs: with connector.topology, name "
                                     "a node's NICs (node0) or one NIC (node0/nic1)"))
            elif any(g is not None and g != str(int(g)) for g in m.groups()):
                # the network names its NICs node1/nic0; node01/nic00 would match none
                canonical = f"node{int(m.group(1))}" + (
                    "" if m.group(2) is None else f"/nic{int(m.group(2))}")
                issues.append((path, f"{name!r}: write {canonical!r} (numbers without "
                                     "leading zeros, as the network names its NICs)"))
            elif m.group(2) is not None and int(m.group(2)) >= topo.nics_per_node:
                issues.append((path, f"no NIC {name!r}: nodes have {topo.nics_per_node} "
                                     f"NICs, nic0..nic{topo.nics_per_node - 1}"))
    if topo is not None and topo.placement is not None and not colocated:
        for name in sorted(set(topo.placement) - names):
            issues.append((f"connector.topology.placement.{name}",
                           f"no instance {name!r} (instances: P0..P{counts['prefill'] - 1}, "
                           f"D0..D{counts['decode'] - 1})"))
        missing = sorted(names - set(topo.placement), key=lambda n: (n[0] != "P", int(n[1:])))
        if missing:
            shown = ", ".join(missing[:8]) + (", ..." if len(missing) > 8 else "")
            issues.append(("connector.topology.placement",
                           f"places every instance or none; missing {shown}"))
    if topo is not None and not colocated and not any(
            p.startswith("connector.topology.placement") for p, _ in issues):
        placed, num_nodes = _placement_issues(cfg, topo)
        named = {p for p, _ in issues}  # a name already refused is not refused twice
        issues.extend(placed)
        for i, deg in enumerate(cfg.faults.link_degradations):
            m = NIC_NAME.fullmatch(deg.link or "")
            if (num_nodes and m is not None and int(m.group(1)) >= num_nodes
                    and f"faults.link_degradations.{i}.link" not in named):
                issues.append((f"faults.link_degradations.{i}.link",
                               f"no {deg.link!r}: the instances occupy {num_nodes} "
                               f"node(s), node0..node{num_nodes - 1}"))
    return issues


__all__ = ["NIC_NAME", "PAIR_LINK_NAME", "TopologyConfig", "instance_gpus", "place",
           "tensor_parallel_size", "transfer_issues"]
