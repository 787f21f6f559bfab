"""The candidates ``pdsim plan`` compares, and the config each one runs as.

A *layout* is how one instance of a role is parallelised: ``tp`` GPUs of tensor
parallelism, and for MoE models optionally expert parallelism over ``tp * dp`` GPUs, where
``dp`` data-parallel attention ranks (pdsim instances) share one expert pool (vLLM's
``--data-parallel-size N --enable-expert-parallel``). A *unit* of a layout is the GPUs
one expert pool spans: ``tp * dp``. A candidate places whole units of each role so that
the GPU budget is used exactly, then picks the number of draft tokens, the scheduler limits
per role and (where a role has several instances) the router.

Only layouts the model allows are generated: ``tp`` divides every mixer's heads, ``dp``
and expert parallelism only for MoE models, the expert-parallel size divides the expert
count. Whether the weights fit, and anything else the simulator would refuse, is decided
by building the candidate's config (``candidate_config``): a candidate the simulator
cannot run is pruned with the simulator's own error as the reason.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pdsim.config import Role, SimConfig
from pdsim.errors import ConfigError
from pdsim.perf.architecture import ModelArchitecture, MoEFFN
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.plan.spec import Mode, PlanSpec, RoleSpace


@dataclass(frozen=True, order=True)
class Layout:
    """One instance's parallelism: ``tp`` GPUs; ``dp`` instances share an expert pool of
    ``tp * dp`` GPUs when ``ep`` (expert parallelism) is on."""

    tp: int
    dp: int = 1
    ep: bool = False

    @property
    def expert_parallel_size(self) -> int:
        return self.tp * self.dp if self.ep else 1

    @property
    def unit_gpus(self) -> int:
        """GPUs of one unit (one expert pool, or one instance without DP)."""
        return self.tp * self.dp

    @property
    def label(self) -> str:
        if not self.ep:
            return f"TP{self.tp}"
        return f"TP{self.tp} EP{self.expert_parallel_size}" + (
            f" (DP{self.dp})" if self.dp > 1 else "")


@dataclass(frozen=True)
class RoleChoice:
    """One role of a candidate: ``units`` units of ``layout`` and its scheduler limits."""

    layout: Layout
    units: int
    max_num_seqs: int
    max_num_batched_tokens: int

    @property
    def instances(self) -> int:
        return self.units * self.layout.dp

    @property
    def gpus(self) -> int:
        return self.units * self.layout.unit_gpus

    def label(self, name: str) -> str:
        return (f"{name} {self.instances}x[{self.layout.label}] seqs {self.max_num_seqs} "
                f"tok {self.max_num_batched_tokens}")


@dataclass(frozen=True)
class Candidate:
    """One deployment: colocated (``colocated`` set) or disaggregated (``prefill`` and
    ``decode`` set), ``num_speculative_tokens`` drafts per step, ``router`` policy."""

    mode: Mode
    num_speculative_tokens: int
    router: str
    colocated: RoleChoice | None = None
    prefill: RoleChoice | None = None
    decode: RoleChoice | None = None

    @property
    def roles(self) -> list[tuple[str, RoleChoice]]:
        out = [("colocated", self.colocated), ("prefill", self.prefill),
               ("decode", self.decode)]
        return [(n, c) for n, c in out if c is not None]

    @property
    def gpus(self) -> int:
        return sum(c.gpus for _, c in self.roles)

    @property
    def label(self) -> str:
        short = {"colocated": "C", "prefill": "P", "decode": "D"}
        parts = [c.label(short[n]) for n, c in self.roles]
        spec = f"MTP{self.num_speculative_tokens}" if self.num_speculative_tokens else "no-spec"
        many = any(c.instances > 1 for _, c in self.roles)
        return " | ".join([*parts, spec] + ([self.router] if many else []))


# ------------------------------------------------------------------ layouts


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def _head_counts(arch: ModelArchitecture) -> list[int]:
    heads = []
    for b in arch.blocks:
        for attr in ("num_heads", "num_value_heads"):
            n = getattr(b.mixer, attr, None)
            if isinstance(n, int):
                heads.append(n)
    return heads


def _num_experts(arch: ModelArchitecture) -> int | None:
    counts = [b.ffn.num_experts for b in arch.blocks if isinstance(b.ffn, MoEFFN)]
    return min(counts) if counts else None


def layouts(arch: ModelArchitecture, gpus: int, spec: PlanSpec) -> list[Layout]:
    """Every layout of at most ``gpus`` GPUs the model allows, in a fixed order."""
    heads = _head_counts(arch)
    experts = _num_experts(arch)
    tps = spec.tensor_parallel_sizes or _powers_of_two(gpus)
    tps = [t for t in tps if t <= gpus and all(h % t == 0 for h in heads)]
    out: set[Layout] = set()
    for tp in tps:
        if False in spec.expert_parallel or experts is None:
            out.add(Layout(tp))
        if experts is None or True not in spec.expert_parallel:
            continue
        dps = spec.data_parallel_sizes or _powers_of_two(gpus // tp)
        for dp in dps:
            ep = tp * dp
            if ep <= gpus and ep > 1 and experts % ep == 0:
                out.add(Layout(tp, dp, ep=True))
    return sorted(out)


def speculative_depths(cfg: SimConfig, arch: ModelArchitecture, spec: PlanSpec) -> list[int]:
    """Draft tokens per step to try: ``spec``'s list, else 0 up to the model's maximum
    (its MTP modules when it ships several; for one module, EAGLE or n-gram, as many
    depths as the configured acceptance gives rates for, at least the configured one)."""
    if spec.num_speculative_tokens is not None:
        return sorted(set(spec.num_speculative_tokens))
    s = cfg.speculative
    method = s.method if s.enabled else ("mtp" if arch.drafter is not None else "none")
    if method == "none":
        return [0]
    rates = getattr(s.acceptance, "rates", None)
    modules = arch.drafter.num_modules if arch.drafter is not None else 0
    if method == "mtp" and modules > 1:
        top = modules if rates is None else min(modules, len(rates))
    else:
        top = len(rates) if rates is not None else max(1, s.num_speculative_tokens)
    return list(range(0, top + 1))


# ------------------------------------------------------------------ candidates


def _roofline(cfg: SimConfig) -> RooflineStepTimeConfig:
    st = cfg.step_time
    if not isinstance(st, RooflineStepTimeConfig):
        raise ConfigError("step_time.kind", "pdsim plan needs a roofline step time (a model "
                          "and hardware profile): it derives every layout's cost and memory "
                          "from them")
    if any(p.group.step_time is not None for p in cfg.cluster.pools()):
        raise ConfigError("cluster", "pdsim plan chooses each role's parallelism itself: "
                          "give the hardware in the root step_time, not per pool")
    return st


def _base_scheduler(cfg: SimConfig, role: str) -> dict[str, Any]:
    """The configured scheduler a role starts from; a mode the config does not run borrows
    from the other mode (colocated from decode, P and D from colocated)."""
    c = cfg.cluster
    have = {p.role.value: p.group for p in c.pools()}
    source = role if role in have else {"colocated": "decode", "prefill": "colocated",
                                        "decode": "colocated"}[role]
    group = have[source]
    data: dict[str, Any] = group.scheduler.model_dump(mode="json")
    data.pop("num_blocks", None)  # derived from each layout's memory
    return data


def _values(space: RoleSpace, base: dict[str, Any], field: str) -> list[int]:
    given = getattr(space, field)
    return sorted(set(given)) if given is not None else [int(base[field])]


def _unit_splits(lp: Layout, ld: Layout, gpus: int) -> Iterator[tuple[int, int]]:
    """(P units, D units) using exactly ``gpus`` GPUs, at least one of each."""
    for p_units in range(1, gpus // lp.unit_gpus + 1):
        rest = gpus - p_units * lp.unit_gpus
        if rest >= ld.unit_gpus and rest % ld.unit_gpus == 0:
            yield p_units, rest // ld.unit_gpus


def enumerate_candidates(cfg: SimConfig, spec: PlanSpec, gpus: int) -> list[Candidate]:
    """Every candidate of the space, in a fixed order (no pruning yet)."""
    st = _roofline(cfg)
    arch = st.resolved_model()
    lays = layouts(arch, gpus, spec)
    depths = speculative_depths(cfg, arch, spec)
    routers = list(spec.routers) if spec.routers is not None else [cfg.router.policy]
    out: list[Candidate] = []

    def choices(role: str, layout: Layout, units: int) -> list[RoleChoice]:
        base = _base_scheduler(cfg, role)
        space: RoleSpace = getattr(spec, role)
        return [RoleChoice(layout, units, s, t) for s, t in itertools.product(
            _values(space, base, "max_num_seqs"), _values(space, base, "max_num_batched_tokens"))]

    for mode in spec.modes:
        shapes: list[dict[str, RoleChoice]] = []
        if mode == "colocated":
            for lay in lays:
                if gpus % lay.unit_gpus == 0:
                    shapes += [{"colocated": c} for c in
                               choices("colocated", lay, gpus // lay.unit_gpus)]
        else:
            for lp, ld in itertools.product(lays, lays):
                for pu, du in _unit_splits(lp, ld, gpus):
                    shapes += [{"prefill": p, "decode": d} for p, d in itertools.product(
                        choices("prefill", lp, pu), choices("decode", ld, du))]
        for shape, k in itertools.product(shapes, depths):
            many = any(c.instances > 1 for c in shape.values())
            # with one instance per role the router has no choice to make: one candidate
            for router in (routers if many else [cfg.router.policy]):
                out.append(Candidate(mode=mode, num_speculative_tokens=k, router=router,
                                     **shape))
    return out


def _group(cfg: SimConfig, role: str, choice: RoleChoice,
           step_time: dict[str, Any] | None) -> dict[str, Any]:
    sched = _base_scheduler(cfg, role)
    sched["max_num_seqs"] = choice.max_num_seqs
    sched["max_num_batched_tokens"] = choice.max_num_batched_tokens
    group: dict[str, Any] = {"count": choice.instances, "scheduler": sched}
    if choice.layout.ep and choice.layout.dp > 1:
        # the DP ranks sharing an expert pool are one attention-DP engine, as vLLM runs them
        group["attention_dp_size"] = choice.layout.dp
    if step_time is not None:
        group["step_time"] = step_time
    return group


def _step_time(base: dict[str, Any], layout: Layout) -> dict[str, Any]:
    st = copy.deepcopy(base)
    st["tensor_parallel_size"] = layout.tp
    st["expert_parallel_size"] = layout.expert_parallel_size
    return st


def candidate_data(cfg: SimConfig, cand: Candidate) -> dict[str, Any]:
    """``cfg`` as ``cand`` deploys it, as a YAML-shaped mapping (not validated).

    The root ``step_time`` carries the decode (or colocated) layout and the prefill group
    its own where it differs, as ``pdsim import-vllm`` writes a deployment. KV pools are
    derived from each layout's memory (``kv_cache_gib`` and ``num_blocks`` are dropped: a
    size chosen for one layout means nothing for another); a transfer topology's placement
    names instances of the configured cluster and is dropped too.
    """
    data = cfg.model_dump(mode="json")
    base_st = data["step_time"]
    main = cand.colocated or cand.decode
    assert main is not None
    data["step_time"] = _step_time(base_st, main.layout)
    cluster: dict[str, Any] = {"mode": cand.mode}
    if cand.colocated is not None:
        cluster["colocated"] = _group(cfg, "colocated", cand.colocated, None)
    else:
        assert cand.prefill is not None and cand.decode is not None
        p_st = (None if cand.prefill.layout == cand.decode.layout
                else _step_time(base_st, cand.prefill.layout))
        cluster["prefill"] = _group(cfg, "prefill", cand.prefill, p_st)
        cluster["decode"] = _group(cfg, "decode", cand.decode, None)
    data["cluster"] = cluster
    data["router"]["policy"] = cand.router
    spec = data["speculative"]
    k = cand.num_speculative_tokens
    if k == 0:
        spec["method"] = "none"
    elif spec["method"] == "none":
        spec["method"] = "mtp"
    spec["num_speculative_tokens"] = k
    if isinstance(data["connector"].get("topology"), dict):
        data["connector"]["topology"] = None
    return data


def candidate_config(cfg: SimConfig, cand: Candidate) -> SimConfig:
    """The validated config of ``cand``, with every pool's step-time model built (so the
    weights and drafter fit). Raises ``ConfigError`` with the simulator's own reason."""
    from pdsim.loader import config_from_dict
    from pdsim.perf.build import build_step_time_model

    c = config_from_dict(candidate_data(cfg, cand))
    for pool in c.cluster.pools():
        build_step_time_model(c, pool.role, pool.group)
    return c


def config_gpus(cfg: SimConfig) -> int | None:
    """GPUs a (hand-written) roofline config deploys: each pool's instances times its TP
    (None for another step-time kind)."""
    total = 0
    for pool in cfg.cluster.pools():
        st = cfg.step_time_of(pool.group)
        if not isinstance(st, RooflineStepTimeConfig):
            return None
        total += pool.group.count * st.tensor_parallel_size
    return total


__all__ = ["Candidate", "Layout", "Role", "RoleChoice", "candidate_config", "candidate_data",
           "config_gpus", "enumerate_candidates", "layouts", "speculative_depths"]
