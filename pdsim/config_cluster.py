"""The cluster section: the instance groups (pools) of each role, and what each pool derives.

A role (prefill, decode, colocated) has one group or a list of groups, its pools. A pool
has its own instance count, scheduler, KV memory and, optionally, its own step-time model
(hardware, parallelism, dtypes); without one it runs on the root ``step_time``. Instances
are named across a role's pools in list order (``P0..``, ``D0..``, ``C0..``).

Per-pool derivations live here as functions of explicit slices (the root ``SimConfig``
delegates to them): the model as a pool stores its KV (``pool_model``: a pool whose KV
dtype differs from the one the ``model`` section was derived at gets that section's KV
layout re-derived from its architecture) and its KV pool in blocks (``pool_num_blocks``).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, NamedTuple

from pydantic import Field, model_validator

from pdsim._model import MAX_BLOCKS, MAX_INSTANCES, MAX_KV_CACHE_GIB, StrictModel, at_most
from pdsim.config_sections import LayerGroup, ModelConfig, Role, SchedulerConfig
from pdsim.errors import ConfigError
from pdsim.perf.config import RooflineStepTimeConfig, StepTimeConfig
from pdsim.perf.dp_group import BALANCE_PADDING

MAX_POOLS = 64
"""Most pools (groups) one role may have."""


class InstanceGroupConfig(StrictModel):
    """``count`` identical instances: one pool.

    The KV pool is ``scheduler.num_blocks`` when given, else ``kv_cache_gib`` of KV memory
    divided into blocks, else (``kv_cache_gib: null`` with a roofline step time) what the
    hardware's memory leaves after the weights. ``step_time`` (null: the root
    ``step_time``) lets a pool run on its own hardware, parallelism and dtypes.
    """

    count: Annotated[int, Field(ge=0), at_most(
        MAX_INSTANCES, "each instance is simulated step by step")] = 1
    """Identical instances in this group."""
    scheduler: SchedulerConfig = SchedulerConfig()
    """Scheduler limits of each instance."""
    kv_cache_gib: Annotated[float, Field(gt=0), at_most(
        MAX_KV_CACHE_GIB, "1 PiB per instance; larger pools overflow the block count")
    ] | None = None
    """KV memory per instance in GiB; null with a roofline step time: what the GPU memory leaves
    after the weights."""
    name: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """Pool name, shown in tables and results; null: unnamed (role.index in a list of pools)."""
    step_time: StepTimeConfig | None = None
    """This pool's step-time model (its hardware, parallelism, dtypes); null: the root
    step_time."""
    attention_dp_size: Annotated[int, Field(ge=1), at_most(
        MAX_INSTANCES, "each rank is simulated step by step")] = 1
    """Attention data-parallel ranks per engine: every ``attention_dp_size`` consecutive
    instances of the pool are the ranks of one engine (each its own scheduler and KV pool)
    that step together, the MoE's expert-parallel group spanning them; the router sees
    the engine, which assigns each request to a rank (``attention_dp_balance``). 1: each
    instance stands alone. ``count`` must be a multiple."""
    attention_dp_balance: Annotated[str, Field(min_length=1, max_length=64)] = "vllm"
    """How an attention-DP engine assigns a request to a rank (a registered policy:
    ``vllm``, ``sglang_round_robin``, ``trtllm``); read only with attention_dp_size > 1."""
    attention_dp_padding: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """Which steps of an attention-DP engine pad every rank's batch to the largest rank's
    token count (CUDA graphs run one shape on every rank): ``vllm`` (every step within the
    CUDA-graph capture size), ``sglang`` / ``trtllm`` (decode-only steps), ``none``
    (eager); null: the rule of the ``attention_dp_balance`` backend. Read only with
    attention_dp_size > 1."""
    attention_dp_context_wait_steps: Annotated[int, Field(ge=0), at_most(
        1_000_000, "a wait counted in engine steps")] = 0
    """TensorRT-LLM's attention-DP context balance (``attention_dp_config: enable_balance:
    true, timeout_iters: N``, PyExecutor ``_balance_adp_requests``): while every rank runs
    decode rows but not every rank has a prompt waiting (and room for it), the engine's
    steps admit no new prompt, until every rank has one or N steps have passed (the count
    runs on over steps without waiting prompts and restarts when prompts are let in).
    0: off (TensorRT-LLM's default). Read only on a colocated pool with
    attention_dp_size > 1."""

    @property
    def dp_padding(self) -> str:
        """The attention-DP padding rule in force: the one named, else the balance's."""
        if self.attention_dp_padding is not None:
            return self.attention_dp_padding
        return BALANCE_PADDING.get(self.attention_dp_balance, "none")

    def batch_waits(self, role: Role) -> bool:
        """Whether the pool's instances in ``role`` run TensorRT-LLM's batch waiting: only a
        colocated engine without attention DP (TensorRT-LLM skips it there) that sets both
        ``scheduler.batch_wait_steps`` and ``batch_wait_max_tokens_ratio``."""
        sched = self.scheduler
        return bool(role is Role.COLOCATED and self.attention_dp_size == 1
                    and sched.batch_wait_steps and sched.batch_wait_max_tokens_ratio)

    @property
    def num_dp_engines(self) -> int:
        """Attention-DP engines of the pool (its instances when attention_dp_size is 1)."""
        return self.count // self.attention_dp_size


GroupOrPools = InstanceGroupConfig | Annotated[
    tuple[InstanceGroupConfig, ...], Field(min_length=1, max_length=MAX_POOLS)]


class Pool(NamedTuple):
    """One pool of a role, as the cluster runs it."""

    role: Role
    group: InstanceGroupConfig
    path: str
    """Where the pool sits in the config: ``cluster.decode`` or ``cluster.decode.1``."""
    name: str
    """The pool's name: ``group.name``, else ``decode.1`` in a list of pools, else ''."""
    first: int
    """Number of the pool's first instance among the role's instances."""

    @property
    def instance_names(self) -> list[str]:
        """``P3``, ``D0``...: the role's letter and the instance's number in the role."""
        letter = self.role.value[0].upper()
        return [f"{letter}{self.first + i}" for i in range(self.group.count)]

    @property
    def label(self) -> str:
        """The pool's key in derived values: its path without ``cluster.`` (``decode``,
        ``decode.1``)."""
        return self.path.removeprefix("cluster.")


class ClusterConfig(StrictModel):
    """``disaggregated``: P and D groups; ``colocated``: instances that prefill and decode.

    Each role takes one group or a list of groups (pools), e.g. two D pools on different
    hardware; the router picks among all instances of a role, across its pools.
    """

    mode: Literal["disaggregated", "colocated"] = "disaggregated"
    """disaggregated: prefill (P) and decode (D) groups; colocated: instances that do both."""
    prefill: GroupOrPools = InstanceGroupConfig(
        scheduler=SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=8192),
        kv_cache_gib=40.0)
    """The prefill (P) instances (disaggregated mode): one group or a list of pools."""
    decode: GroupOrPools = InstanceGroupConfig(
        scheduler=SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=2048),
        kv_cache_gib=40.0)
    """The decode (D) instances (disaggregated mode): one group or a list of pools."""
    colocated: GroupOrPools = InstanceGroupConfig(count=1, kv_cache_gib=40.0)
    """The instances that prefill and decode (colocated mode): one group or a list of pools."""

    def roles(self) -> list[Role]:
        """The roles this mode runs, in a fixed order."""
        if self.mode == "colocated":
            return [Role.COLOCATED]
        return [Role.PREFILL, Role.DECODE]

    def pools(self, role: Role | None = None) -> list[Pool]:
        """The pools this mode runs (of ``role`` only, if given), in a fixed order."""
        out = []
        for r in self.roles() if role is None else [role]:
            value = getattr(self, r.value)
            listed = isinstance(value, tuple)
            first = 0
            for i, g in enumerate(value if listed else (value,)):
                path = f"cluster.{r.value}.{i}" if listed else f"cluster.{r.value}"
                name = g.name or (f"{r.value}.{i}" if listed else "")
                out.append(Pool(r, g, path, name, first))
                first += g.count
        return out

    def count(self, role: Role) -> int:
        """Instances of ``role`` across its pools."""
        value = getattr(self, role.value)
        return sum(g.count for g in value) if isinstance(value, tuple) else int(value.count)

    def pool_of(self, group: InstanceGroupConfig) -> Pool:
        """The pool ``group`` (this very object) is. Raises ``KeyError``."""
        for role in Role:
            for p in self.pools(role):
                if p.group is group:
                    return p
        raise KeyError("not a group of this cluster")

    def single(self, role: Role, purpose: str) -> InstanceGroupConfig:
        """The one group of ``role``; a ``ConfigError`` naming ``purpose`` for a list."""
        value: GroupOrPools = getattr(self, role.value)
        if isinstance(value, tuple):
            if len(value) == 1:
                return value[0]
            raise ConfigError(f"cluster.{role.value}", f"{purpose} needs one {role.value} "
                              f"group, not a list of {len(value)} pools")
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> ClusterConfig:
        # the names results are keyed by, automatic ones (decode.1) included: an explicit
        # name equal to another pool's automatic name would merge the two in results
        seen: dict[str, Pool] = {}
        for role in Role:
            for p in self.pools(role):
                if not p.name:
                    continue
                other = seen.get(p.name)
                if other is not None:
                    whose = (f"the name of {other.path}" if other.group.name is not None
                             else f"the automatic name of {other.path}")
                    mine = "pool name" if p.group.name is not None else "automatic name"
                    raise ValueError(f"{mine} {p.name!r} of {p.path} is already {whose}; "
                                     "give each pool its own")
                seen[p.name] = p
        return self


# ------------------------------------------------------------ per-pool derivations


def _kv_dtype(st: StepTimeConfig | None, profile: str | None) -> str | None:
    """The KV dtype a step time stores (a roofline's, else the model profile's)."""
    if isinstance(st, RooflineStepTimeConfig):
        return st.resolved_model().kv_cache_dtype
    if profile is not None:
        from pdsim.perf.profiles import load_model_architecture

        return load_model_architecture(profile, "model.profile").kv_cache_dtype
    return None


def pool_model(model: ModelConfig, root: StepTimeConfig,
               own: StepTimeConfig | None) -> ModelConfig:
    """The model as a pool with step time ``own`` (None: the root's) stores its KV.

    The ``model`` section's KV layout was derived at the root's KV dtype (the root
    roofline's ``kv_cache_dtype``, else the profile's). A pool whose own roofline step time
    stores KV in another dtype gets the layer groups and drafter KV re-derived from its
    architecture at that dtype; every other pool stores the ``model`` section as written.
    """
    if not isinstance(own, RooflineStepTimeConfig):
        return model
    base = _kv_dtype(root, model.profile)
    arch = own.resolved_model()
    if base is None or arch.kv_cache_dtype == base:
        return model
    from pdsim.perf.profiles import model_config_fields

    fields = model_config_fields(arch)
    groups = tuple(LayerGroup.model_validate(g) for g in fields["layer_groups"])
    return model.model_copy(update={
        "layer_groups": groups,
        "mtp_kv_bytes_per_token_per_module": fields["mtp_kv_bytes_per_token_per_module"]})


def pool_num_blocks(pool: Pool, st: StepTimeConfig, kv_bytes_per_token: int,
                    drafter_modules: int, has_mamba: bool) -> int:
    """KV blocks of one instance of ``pool`` (step time ``st``, its own or the root's):
    ``scheduler.num_blocks``, ``kv_cache_gib`` divided into blocks of
    ``kv_bytes_per_token``, or derived from the hardware's memory (a roofline ``st``).
    Raises ``ConfigError`` naming the pool's path."""
    group, path = pool.group, pool.path
    sched = group.scheduler
    if sched.num_blocks is not None:
        n = sched.num_blocks
    elif group.kv_cache_gib is not None:
        block_bytes = sched.block_size * max(1, kv_bytes_per_token)
        n = max(1, math.floor(group.kv_cache_gib * 2**30 / block_bytes))
    elif isinstance(st, RooflineStepTimeConfig):
        from pdsim.perf.memory import kv_blocks_per_instance

        n = kv_blocks_per_instance(
            st.resolved_model(), st.resolved_hardware(), st.tensor_parallel_size,
            st.gpu_memory_utilization, sched.block_size,
            expert_parallel_size=st.expert_parallel_size, drafter_modules=drafter_modules,
            max_num_seqs=sched.max_num_seqs if has_mamba else None,
            runtime_reserve_gib=st.runtime_reserve_gib, path=path,
            batch_seqs=sched.max_num_seqs,
            **st.memory_rule_kwargs(sched.max_num_batched_tokens))
    else:
        raise ConfigError(f"{path}.kv_cache_gib",
                          "give kv_cache_gib or scheduler.num_blocks (or use a roofline "
                          "step_time, which derives the KV pool from the hardware)")
    if n > MAX_BLOCKS:  # a derived pool: the field's own bound covers a given one
        raise ConfigError(f"{path}.kv_cache_gib", f"derives {n:,} KV blocks; at most "
                          f"{MAX_BLOCKS:,} (block ids exact in 64-bit arithmetic): use a "
                          f"smaller pool or a larger block_size")
    return n
