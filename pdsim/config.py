"""The simulation config's root, ``SimConfig``: frozen, strict pydantic, loaded from YAML.

Its sections (model, speculation, connector, router, SLOs) are defined in
``pdsim.config_sections`` and the cluster's pools in ``pdsim.config_cluster``, both
re-exported here; the workload, step-time and fault sections live with their subsystems.
Per-pool values (a pool's step time, KV bytes, KV pool) are methods taking the pool's
group: ``step_time_of``, ``model_of``, ``kv_bytes_per_token_of``, ``kv_layout``,
``num_blocks``.

Derived values (``num_prefill_lookahead_tokens`` above all) are properties of the root
config, computed here and nowhere else: the scheduler, the connector and the drafter state
all read them, none derives them on its own (the contract vLLM PR #55055 introduced).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import ValidationInfo, ValidatorFunctionWrapHandler, field_validator, model_validator

from pdsim._model import StrictModel
from pdsim.config_cluster import (
    ClusterConfig,
    InstanceGroupConfig,
    Pool,
    pool_model,
    pool_num_blocks,
)
from pdsim.config_router import router_weight_issues
from pdsim.config_sections import (
    EAGLE_FAMILY,
    STALE_KV_FIT,
    ConditionalAcceptance,
    ConnectorConfig,
    ConstantAcceptance,
    LayerGroup,
    ModelConfig,
    NonNegInt,
    PerPositionAcceptance,
    Role,
    RouterConfig,
    SchedulerConfig,
    SLOConfig,
    SpeculativeConfig,
    StaleKVConfig,
)
from pdsim.engine_config import EngineConfig
from pdsim.errors import ConfigError
from pdsim.faults import FaultsConfig
from pdsim.kv_layout import KVLayout, block_bytes_per_token
from pdsim.perf.config import (
    CHECK_WEIGHTS_FIT,
    RooflineStepTimeConfig,
    SimpleStepTimeConfig,
    StepTimeConfig,
)
from pdsim.perf.dp_group import DP_PADDINGS
from pdsim.policies import DP_BALANCERS, ROUTERS
from pdsim.topology_config import transfer_issues
from pdsim.workload.config import WorkloadConfig

__all__ = [
    "EAGLE_FAMILY",
    "ClusterConfig",
    "ConditionalAcceptance",
    "ConnectorConfig",
    "ConstantAcceptance",
    "InstanceGroupConfig",
    "LayerGroup",
    "ModelConfig",
    "PerPositionAcceptance",
    "Pool",
    "Role",
    "RouterConfig",
    "SLOConfig",
    "SchedulerConfig",
    "SimConfig",
    "SpeculativeConfig",
    "StaleKVConfig",
]


# ------------------------------------------------------------------------- root


class SimConfig(StrictModel):
    """A whole simulation: model, drafter, cluster, connector, workload, seed."""

    name: str = "pdsim"
    """Run name, shown in tables and written into the results."""
    description: str = ""
    """Free text describing the run."""
    seed: NonNegInt = 0
    """Seed of every named random stream (arrivals, lengths, acceptance, routing, faults)."""
    model: ModelConfig = ModelConfig()
    """The served model: KV layout, MTP modules, context limit (or a shipped profile)."""
    speculative: SpeculativeConfig = SpeculativeConfig()
    """Speculative decoding: drafter method, drafts per step, acceptance, stale-KV model."""
    cluster: ClusterConfig = ClusterConfig()
    """Instances: disaggregated prefill/decode groups or colocated ones, with their schedulers."""
    connector: ConnectorConfig = ConnectorConfig()
    """The KV connector between prefill and decode instances."""
    router: RouterConfig = RouterConfig()
    """How the proxy picks an instance for each request."""
    workload: WorkloadConfig = WorkloadConfig()
    """Which requests arrive, when, and their prompt and output lengths."""
    step_time: StepTimeConfig = SimpleStepTimeConfig()
    """How long an engine step takes: simple (linear), roofline (profiles) or measured (CSV)."""
    slo: SLOConfig = SLOConfig()
    """Latency targets for goodput (TTFT and TPOT)."""
    faults: FaultsConfig = FaultsConfig()
    """Injected faults: failed KV transfers, instance outages, degraded links."""
    engine: EngineConfig = EngineConfig()
    """How the engine computes (never what it models)."""

    # ---------------------------------------------------------------- derived

    @property
    def use_multi_module_mtp(self) -> bool:
        """vLLM's rule: method mtp and min(modules, num_speculative_tokens) > 1."""
        s = self.speculative
        return s.method == "mtp" and min(self.model.num_mtp_modules,
                                         s.num_speculative_tokens) > 1

    @property
    def num_prefill_lookahead_tokens(self) -> int:
        """Tokens past the target's computed range that the drafter reads during prefill.

        N for multi-module MTP, 1 for the other eagle-family drafters, 0 otherwise. The
        single source the scheduler, the connector and the drafter state read.
        """
        if self.use_multi_module_mtp:
            return self.speculative.num_speculative_tokens
        if self.speculative.method in EAGLE_FAMILY:
            return 1
        return 0

    @property
    def prefill_backoff_tokens(self) -> int:
        """Trailing prompt tokens P leaves for D to recompute (the connector's
        ``_prefill_backoff()``; PR #55055).

        ``connector.prefill_backoff: auto`` (after the fix): ``max(1 if Mamba else 0,
        lookahead - 1)``. ``off`` (before it): only Mamba backs off, by one token, because a
        recurrent state cannot be rewound.
        """
        mamba = 1 if self.model.has_mamba else 0
        if self.connector.prefill_backoff != "auto":
            return mamba
        return max(mamba, self.num_prefill_lookahead_tokens - 1)

    @property
    def d_first_step_prompt_tokens(self) -> int:
        """Prompt tokens D computes itself after a remote prefill of a prompt longer than the
        backoff: the backoff, or the last prompt token it recomputes for logits."""
        return max(1, self.prefill_backoff_tokens)

    @property
    def d_first_step_padded_when_busy(self) -> bool:
        """Whether D pads that first step to ``1 + N`` tokens with placeholder drafts when it
        already runs decodes (static speculation, one token to compute: vLLM's scheduler),
        which is what pollutes multi-module MTP KV before the fix (docs/mtp-model.md)."""
        s = self.speculative
        return (s.enabled and s.pad_first_decode_step
                and self.d_first_step_prompt_tokens == 1)

    @property
    def extra_retained_tokens(self) -> int:
        """Extra tokens sliding-window groups keep (not attended) for drafter re-prefill."""
        return max(0, self.num_prefill_lookahead_tokens - 1)

    @property
    def num_drafter_modules(self) -> int:
        """Distinct drafter modules that hold KV: N for multi-module MTP, else 1 or 0."""
        if self.use_multi_module_mtp:
            return self.speculative.num_speculative_tokens
        return 1 if self.speculative.enabled else 0

    @property
    def first_response_steps(self) -> int:
        """The request's engine steps after its first token at which the client receives
        its first streamed response: the router's override, else its response rule's
        delay for the served model's profile."""
        return self.router.first_response_steps_for(self.model.profile)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token: target attention layers plus the drafter modules' KV (as the
        ``model`` section stores them; a pool may differ: ``kv_bytes_per_token_of``)."""
        return self.kv_bytes_per_token_of(None)

    @property
    def _kv_drafter_modules(self) -> int:
        """Drafter modules whose KV sits in the pool (eagle-family drafters only)."""
        return self.num_drafter_modules if self.speculative.method in EAGLE_FAMILY else 0

    def step_time_of(self, group: InstanceGroupConfig | None) -> StepTimeConfig:
        """The step-time model of ``group``: its own ``step_time``, else the root's."""
        own = group.step_time if group is not None else None
        return own if own is not None else self.step_time

    def model_of(self, group: InstanceGroupConfig | None) -> ModelConfig:
        """The model as ``group`` stores its KV: the ``model`` section, or its KV layout
        re-derived at the group's own KV dtype (``config_cluster.pool_model``)."""
        if group is None or group.step_time is None:
            return self.model
        return pool_model(self.model, self.step_time, group.step_time)

    def kv_bytes_per_token_of(self, group: InstanceGroupConfig | None) -> int:
        """KV bytes one token occupies in ``group``'s pool (None: the ``model`` section's):
        target attention layers plus the drafter modules' KV."""
        model = self.model_of(group)
        return (model.target_kv_bytes_per_token
                + self._kv_drafter_modules * model.mtp_kv_bytes_per_token_per_module)

    @property
    def conditional_acceptance(self) -> np.ndarray:
        """Clean conditional acceptance of each draft position (length N)."""
        n = self.speculative.num_speculative_tokens
        return self.speculative.acceptance.conditional(n)

    def kv_layout(self, block_size: int,
                  group: InstanceGroupConfig | None = None) -> KVLayout:
        """The KV layout of a pool of ``block_size``-token blocks (of ``group``'s KV, None:
        the ``model`` section's): full-attention and drafter KV per block, sliding-window
        groups keeping ``window + extra_retained_tokens`` tokens, Mamba state as whole
        block-equivalents."""
        model = self.model_of(group)
        groups = model.layer_groups
        extra = self.extra_retained_tokens
        sliding = tuple(
            (int(g.window_tokens or 0) + extra, g.num_layers * g.kv_bytes_per_token_per_layer)
            for g in groups if g.kind == "sliding_window")
        sliding_bytes = sum(bpt for _, bpt in sliding)
        full = self.kv_bytes_per_token_of(group) - sliding_bytes
        block_bytes = block_size * int(block_bytes_per_token(full, sliding_bytes))
        fixed = (math.ceil(model.mamba_state_bytes / block_bytes)
                 if model.has_mamba else 0)
        return KVLayout(block_size=block_size, block_bytes=block_bytes, sliding=sliding,
                        fixed_blocks=fixed, full=full > 0 or not sliding)

    @property
    def stale_kv_provenance(self) -> str:
        """Where the stale-KV parameters in force come from: the shipped fit (and to which
        model) or the config (set or calibrated by the user). Empty without multi-module
        MTP, where they do not act."""
        if not self.use_multi_module_mtp:
            return ""
        s = self.speculative.stale_kv
        if (s.sensitivity_per_slot, s.residual_guess_accuracy) != (
                STALE_KV_FIT.sensitivity_per_slot, STALE_KV_FIT.residual_guess_accuracy):
            return "set in the config (calibrated or chosen by the user)"
        return f"shipped default, {STALE_KV_FIT.source} (model profile " \
               f"{STALE_KV_FIT.model_profile})"

    @property
    def foreign_fit_warnings(self) -> list[str]:
        """Parameters in force that were fitted to another model or GPU than this config's."""
        out = []
        this = self.model.profile or self.model.name
        if (self.stale_kv_provenance.startswith("shipped default")
                and self.model.profile != STALE_KV_FIT.model_profile):
            out.append(
                f"speculative.stale_kv: sensitivity_per_slot and residual_guess_accuracy "
                f"were fitted to {STALE_KV_FIT.model_profile}, not to this model ({this}); "
                f"fit them to this model's measurements with `pdsim calibrate`, or set them "
                f"in the config if you know this model's values")
        pools = self.cluster.pools()
        owners = [(f"{p.path}.step_time", p.group.step_time) for p in pools
                  if p.group.step_time is not None]
        if len(owners) < len(pools):  # some pool runs on the root step time
            owners.insert(0, ("step_time", self.step_time))
        for path, st in owners:
            if isinstance(st, RooflineStepTimeConfig) and st.borrowed_fit:
                out.append(f"{path}: {st.kernels_from} borrows kernel constants from another "
                           f"GPU's fit ({st.borrowed_fit})")
        return out

    @property
    def warnings(self) -> list[str]:
        """What ``show-config`` warns about: fits borrowed from another model or GPU, and
        settings this mode ignores."""
        out = list(self.foreign_fit_warnings)
        if not self.root_step_time_users and self.step_time != SimpleStepTimeConfig():
            out.append("step_time: every pool has its own step time, so the root step_time "
                       "is used by none")
        if self.cluster.mode == "colocated" and self.connector.topology is not None:
            out.append("connector.topology: a colocated cluster moves no KV between "
                       "instances, so the topology is not used")
        return out

    @property
    def workload_max_prompt_tokens(self) -> int:
        """The longest prompt the workload can draw (max_model_len when unbounded)."""
        return min(self.model.max_model_len,
                   self.workload.shared_prefix_tokens
                   + _max_tokens(self.workload.prompt_tokens, self.workload.trace is None,
                                 self.model.max_model_len))

    @property
    def longest_request_tokens(self) -> int:
        """Prompt plus output tokens of the longest request the workload can draw, capped
        by ``model.max_model_len`` (the whole of it for traces and unbounded draws)."""
        w = self.workload
        synthetic = w.trace is None
        total = (w.shared_prefix_tokens
                 + _max_tokens(w.prompt_tokens, synthetic, self.model.max_model_len)
                 + _max_tokens(w.output_tokens, synthetic, self.model.max_model_len))
        return min(self.model.max_model_len, total)

    def admission_room_tokens(self, role: Role) -> int:
        """KV slots an instance of ``role`` reserves past a request's tokens when it checks
        that the request fits its pool: the sampled token, and on D (or colocated) the
        drafts. The engine's admission check and the config's capacity check both use it."""
        n_spec = self.speculative.num_speculative_tokens if role is not Role.PREFILL else 0
        return 1 + n_spec

    def pool(self, of: Role | InstanceGroupConfig) -> Pool:
        """The pool of a group (this very object), or a role's first pool."""
        if isinstance(of, Role):
            return self.cluster.pools(of)[0]
        return self.cluster.pool_of(of)

    def num_blocks(self, of: Role | InstanceGroupConfig) -> int:
        """KV blocks of one instance of a group (or of a role's first pool): given, from
        ``kv_cache_gib``, or derived from the hardware's memory (its roofline step time).
        Raises ``ConfigError`` naming the pool's path."""
        pool = self.pool(of)
        layout = self.kv_layout(pool.group.scheduler.block_size, pool.group)
        return pool_num_blocks(pool, self.step_time_of(pool.group),
                               layout.block_bytes // layout.block_size,
                               self._kv_drafter_modules, self.model.has_mamba)

    @property
    def root_step_time_users(self) -> list[str]:
        """Paths of the pools that run on the root ``step_time`` (no step time of their
        own); empty when every pool has its own, and the root is used by none."""
        return [p.path for p in self.cluster.pools() if p.group.step_time is None]

    # -------------------------------------------------------------- validation

    @field_validator("step_time", mode="wrap")
    @classmethod
    def _root_step_time(cls, value: object, handler: ValidatorFunctionWrapHandler,
                        info: ValidationInfo) -> StepTimeConfig:
        """A root step time that no pool runs on is checked for what it says, not for
        whether its weights fit a GPU (they never load)."""
        cluster = info.data.get("cluster")
        if not isinstance(cluster, ClusterConfig) or any(
                p.group.step_time is None for p in cluster.pools()):
            return handler(value)  # type: ignore[no-any-return]
        token = CHECK_WEIGHTS_FIT.set(False)
        try:
            return handler(value)  # type: ignore[no-any-return]
        finally:
            CHECK_WEIGHTS_FIT.reset(token)

    @model_validator(mode="after")
    def _cross_checks(self) -> SimConfig:
        issues: list[tuple[str, str]] = []
        s, m = self.speculative, self.model
        if s.method == "mtp" and m.num_mtp_modules == 0:
            issues.append(("speculative.method",
                           "mtp needs a model with MTP modules (model.num_mtp_modules >= 1)"))
        if (s.method == "mtp" and m.num_mtp_modules > 1
                and s.num_speculative_tokens > m.num_mtp_modules):
            issues.append(("speculative.num_speculative_tokens",
                           f"{s.num_speculative_tokens} drafts but the model has only "
                           f"{m.num_mtp_modules} MTP modules; allowed: 1..{m.num_mtp_modules}"))
        c = self.cluster
        issues.extend(_pool_issues(self))
        n_query = 1 + s.num_speculative_tokens
        for pool in c.pools():
            role, group, path = pool.role, pool.group, pool.path
            sched = group.scheduler
            if group.count < 1:
                continue
            issues.extend(_dp_issues(path, group, self.step_time_of(group)))
            try:
                blocks = self.num_blocks(group)
            except ConfigError as exc:
                issues.extend(exc.issues)
            else:
                longest = self.longest_request_tokens
                if role is Role.PREFILL:
                    longest = min(longest, self.workload_max_prompt_tokens)
                # unbounded draws and traces: requests too long are rejected at admission
                if longest >= m.max_model_len and (
                        self.workload.trace is not None
                        or _max_tokens(self.workload.prompt_tokens, True, -1) < 0
                        or _max_tokens(self.workload.output_tokens, True, -1) < 0):
                    continue

                room = self.admission_room_tokens(role)
                need = self.kv_layout(sched.block_size, group).blocks_for(longest + room)
                if need > blocks:
                    where = ("scheduler.num_blocks" if sched.num_blocks is not None
                             else "kv_cache_gib")
                    spec = " + num_speculative_tokens" if room > 1 else ""
                    issues.append((f"{path}.{where}",
                                   f"the KV pool ({blocks} blocks of {sched.block_size} "
                                   f"tokens) cannot hold one maximum-length request "
                                   f"({longest} tokens, capped by model.max_model_len "
                                   f"{m.max_model_len}, and the {room} slot(s) it reserves "
                                   f"at admission: 1{spec}; {need} blocks)"))
            if role is not Role.PREFILL and sched.max_num_batched_tokens < (
                    sched.max_num_seqs * n_query):
                issues.append((f"{path}.scheduler.max_num_batched_tokens",
                               f"{sched.max_num_batched_tokens} cannot hold a full decode "
                               f"batch: max_num_seqs * (1 + num_speculative_tokens) = "
                               f"{sched.max_num_seqs * n_query}"))
            la = self.num_prefill_lookahead_tokens
            if role is not Role.DECODE and sched.max_num_batched_tokens < la:
                issues.append((f"{path}.scheduler.max_num_batched_tokens",
                               f"{sched.max_num_batched_tokens} is below "
                               f"num_prefill_lookahead_tokens ({la}): the last prefill "
                               f"chunk could never be scheduled"))
            thr = sched.long_prefill_token_threshold
            if thr is not None and thr < la:
                issues.append((f"{path}.scheduler.long_prefill_token_threshold",
                               f"{thr} is below num_prefill_lookahead_tokens ({la})"))
            if (sched.enable_prefix_caching and self.use_multi_module_mtp
                    and sched.block_size < s.num_speculative_tokens):
                issues.append((f"{path}.scheduler.block_size",
                               f"prefix caching with multi-module MTP needs block_size >= "
                               f"num_speculative_tokens ({s.num_speculative_tokens})"))
            if (not sched.enable_chunked_prefill
                    and sched.max_num_batched_tokens < m.max_model_len
                    and role is not Role.DECODE):
                issues.append((f"{path}.scheduler.max_num_batched_tokens",
                               "without chunked prefill it must be >= model.max_model_len"))
        if self.router.policy not in ROUTERS:
            issues.append(("router.policy", f"unknown policy {self.router.policy!r}; "
                           f"allowed: {', '.join(ROUTERS)}"))
        else:
            issues.extend(router_weight_issues(self.router))
        pools = c.pools()
        names = {n for p in pools for n in p.instance_names}
        # instances by pool, so a user of several pools sees which instance is where
        have = "; ".join(", ".join(p.instance_names) + (f" (pool {p.name})" if p.name else "")
                         for p in pools)
        for i, o in enumerate(self.faults.instance_outages):
            if o.instance not in names:
                named = next((p for p in pools if o.instance in (p.name, p.label)), None)
                hint = ("" if named is None else
                        f"; {o.instance} is a pool: an outage names one of its instances, "
                        f"{', '.join(named.instance_names)}")
                issues.append((f"faults.instance_outages.{i}.instance",
                               f"no instance {o.instance!r}{hint}; this cluster has {have}"))
        issues.extend(transfer_issues(self))
        issues.extend(self.faults.overlap_issues())
        if issues:
            raise ConfigError("", issues=issues)
        return self


def _pool_issues(cfg: SimConfig) -> list[tuple[str, str]]:
    """Every role the mode runs has instances; a pool's own roofline step time serves the
    config's model profile."""
    issues = []
    c = cfg.cluster
    for role in c.roles():
        if c.count(role) < 1:
            single = not isinstance(getattr(c, role.value), tuple)
            what = (f"{c.mode} mode needs at least one {role.value} instance"
                    if role is not Role.COLOCATED else "colocated mode needs at least one "
                    "instance")
            issues.append((f"cluster.{role.value}" + (".count" if single else ""),
                           what + ("" if single else " (every pool's count is 0)")))
    profile = cfg.model.profile
    for pool in c.pools():
        st = pool.group.step_time
        if (profile is not None and isinstance(st, RooflineStepTimeConfig)
                and isinstance(st.model, str) and st.model != profile):
            issues.append((f"{pool.path}.step_time.model",
                           f"{st.model!r} is not the served model ({profile!r}, "
                           f"model.profile): every pool serves the same model"))
    return issues


def _max_tokens(dist: object, synthetic: bool, unbounded: int) -> int:
    """Largest length ``dist`` can draw; ``unbounded`` when it has no upper bound."""
    if not synthetic:
        return unbounded
    kind = getattr(dist, "kind", None)
    if kind == "fixed":
        return int(dist.tokens)  # type: ignore[attr-defined]
    if kind == "uniform":
        return int(dist.high_tokens)  # type: ignore[attr-defined]
    if kind in ("normal", "lognormal"):
        cap = dist.max_tokens  # type: ignore[attr-defined]
        return int(cap) if cap is not None else unbounded
    if kind == "empirical":
        vals = dist.values or dist.bin_edges  # type: ignore[attr-defined]
        return int(max(vals)) if vals else unbounded
    return unbounded


def _dp_issues(path: str, group: InstanceGroupConfig,
               st: StepTimeConfig) -> list[tuple[str, str]]:
    """An attention-DP engine's ranks are its expert-parallel group's attention ranks: a
    roofline MoE with expert parallelism spreads its experts over every rank's GPUs."""
    dp = group.attention_dp_size
    if group.count % dp:
        return [(f"{path}.count",
                 f"{group.count} is not a multiple of attention_dp_size ({dp}): the pool's "
                 f"instances are the ranks of whole attention-DP engines")]
    if group.attention_dp_balance not in DP_BALANCERS:
        return [(f"{path}.attention_dp_balance",
                 f"unknown policy {group.attention_dp_balance!r}; allowed: "
                 f"{', '.join(DP_BALANCERS)}")]
    if group.attention_dp_padding is not None and group.attention_dp_padding not in DP_PADDINGS:
        return [(f"{path}.attention_dp_padding",
                 f"unknown rule {group.attention_dp_padding!r}; allowed: "
                 f"{', '.join(sorted(DP_PADDINGS))}")]
    if dp == 1 or not isinstance(st, RooflineStepTimeConfig):
        return []
    tp, ep = st.tensor_parallel_size, st.expert_parallel_size
    if ep > 1 and ep != tp * dp:
        return [(f"{path}.attention_dp_size",
                 f"{dp} ranks of tensor_parallel_size {tp} hold {tp * dp} GPUs, but the "
                 f"step time's expert_parallel_size is {ep}: the experts are spread over "
                 f"the engine's GPUs (expert_parallel_size = tensor_parallel_size x "
                 f"attention_dp_size)")]
    return []
