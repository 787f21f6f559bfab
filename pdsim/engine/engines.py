"""The engines of one cluster, built from its pools: every instance, and the attention-DP
engines that group some of them.

Instances are numbered across all pools in the config's pool order (their ``index``:
routing ties and step-end order follow it), and a role's pools are one group to the
router. A pool with ``attention_dp_size > 1`` makes one ``DPGroup`` of each run of that
many consecutive instances (its ranks): the router then sees the role's engines, not its
ranks (``route_targets``), and one process steps each engine's ranks together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdsim.config import Role, SimConfig
from pdsim.engine.dp_group import DPGroup
from pdsim.engine.instance import Cluster, EngineHooks, Instance

if TYPE_CHECKING:
    import simpy

    from pdsim.spec_decode.acceptance import AcceptanceSampler
    from pdsim.workload import RequestSpecs


class Engines:
    """A cluster's instances by role and name, and its attention-DP engines."""

    def __init__(self, cluster: Cluster, env: simpy.Environment, config: SimConfig,
                 specs: RequestSpecs, sampler: AcceptanceSampler,
                 hooks: EngineHooks) -> None:
        self.env = env
        self.instances: list[Instance] = []
        self.by_role: dict[Role, list[Instance]] = {}
        self.dp_groups: list[DPGroup] = []
        # what the router picks from, by role, where some pool has attention-DP engines
        # (its engines and the role's lone instances); empty when none has
        self.route_targets: dict[Role, list[Instance | DPGroup]] = {}
        for pool in config.cluster.pools():
            members = self.by_role.setdefault(pool.role, [])
            made = []
            for name in pool.instance_names:
                inst = Instance(cluster, env, config, specs, sampler, hooks,
                                len(self.instances), name, pool.role, pool.group, pool.name)
                self.instances.append(inst)
                members.append(inst)
                made.append(inst)
            dp = pool.group.attention_dp_size
            targets = self.route_targets.setdefault(pool.role, [])
            if dp == 1:
                targets.extend(made)
                continue
            for k in range(0, len(made), dp):
                engine = DPGroup(env, made[k:k + dp], pool.group.attention_dp_balance)
                self.dp_groups.append(engine)
                targets.append(engine)
        if not self.dp_groups:
            self.route_targets.clear()
        self.by_name = {inst.name: inst for inst in self.instances}
        # the role groups the request path reads (no enum hashing per request)
        self.prefills = self.by_role.get(Role.PREFILL, [])
        self.decodes = self.by_role.get(Role.DECODE, [])
        self.colocated = self.by_role.get(Role.COLOCATED, [])

    def start(self) -> None:
        """Start every loop: each lone instance's, and each attention-DP engine's (which
        steps its ranks)."""
        env = self.env
        ranked = {id(r) for g in self.dp_groups for r in g.ranks}
        for inst in self.instances:
            if id(inst) not in ranked:
                env.process(inst.run())
        for engine in self.dp_groups:
            env.process(engine.run())

    def failing_together(self) -> dict[str, list[Instance]]:
        """For each rank of an attention-DP engine, every rank of its engine: a rank going
        down takes its engine down (vLLM's DP engine cores share one lifetime)."""
        return {r.name: g.ranks for g in self.dp_groups for r in g.ranks}


__all__ = ["Engines"]
