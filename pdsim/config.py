"""The simulation config: frozen, strict pydantic models, loaded from YAML.

Derived values (``num_prefill_lookahead_tokens`` above all) are properties of the root
config, computed here and nowhere else: the scheduler, the connector and the drafter state
all read them, none derives them on its own (the contract vLLM PR #55055 introduced).
"""

from __future__ import annotations

import enum
import math
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from pdsim._model import StrictModel
from pdsim.engine_config import EngineConfig
from pdsim.errors import ConfigError
from pdsim.faults import FaultsConfig
from pdsim.perf.config import SimpleStepTimeConfig, StepTimeConfig
from pdsim.workload.config import WorkloadConfig

PositiveInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Probability = Annotated[float, Field(ge=0, le=1)]


class Role(enum.Enum):
    """What an instance does: prefill only (P), decode only (D), or both (colocated)."""

    PREFILL = "prefill"
    DECODE = "decode"
    COLOCATED = "colocated"


# --------------------------------------------------------------------------- model


class LayerGroup(StrictModel):
    """Layers that share one KV layout.

    ``attention``: full attention, ``kv_bytes_per_token_per_layer`` bytes per token.
    ``sliding_window``: attends the last ``window_tokens`` tokens only.
    ``mamba``: a recurrent state of ``state_bytes_per_layer`` per request (no per-token KV).
    """

    kind: Literal["attention", "sliding_window", "mamba"] = "attention"
    num_layers: PositiveInt
    kv_bytes_per_token_per_layer: NonNegInt = 0
    window_tokens: PositiveInt | None = None
    state_bytes_per_layer: NonNegInt = 0

    @model_validator(mode="after")
    def _check(self) -> LayerGroup:
        if self.kind == "sliding_window" and self.window_tokens is None:
            raise ValueError("a sliding_window group needs window_tokens")
        if self.kind != "sliding_window" and self.window_tokens is not None:
            raise ValueError("window_tokens applies to sliding_window groups only")
        if self.kind == "mamba" and self.kv_bytes_per_token_per_layer:
            raise ValueError("a mamba group has no per-token KV; use state_bytes_per_layer")
        return self


class ModelConfig(StrictModel):
    """The served model, as far as KV layout and drafting are concerned.

    ``profile`` names a shipped model profile (``pdsim profile`` lists them); the loader
    fills every field the YAML leaves out from that profile's architecture.
    """

    name: str = "custom"
    profile: str | None = None
    layer_groups: tuple[LayerGroup, ...] = (
        LayerGroup(num_layers=61, kv_bytes_per_token_per_layer=1152),
    )
    num_mtp_modules: NonNegInt = 0
    mtp_kv_bytes_per_token_per_module: NonNegInt = 1152
    max_model_len: PositiveInt = 131072

    @property
    def has_mamba(self) -> bool:
        return any(g.kind == "mamba" for g in self.layer_groups)

    @property
    def target_kv_bytes_per_token(self) -> int:
        """KV bytes one token occupies across the target's attention layers."""
        return sum(g.num_layers * g.kv_bytes_per_token_per_layer for g in self.layer_groups
                   if g.kind != "mamba")

    @property
    def mamba_state_bytes(self) -> int:
        """Recurrent-state bytes of one request across all mamba layers."""
        return sum(g.num_layers * g.state_bytes_per_layer for g in self.layer_groups
                   if g.kind == "mamba")


# --------------------------------------------------------------------- speculation


class PerPositionAcceptance(StrictModel):
    """vLLM's per-position rates: ``rates[i]`` = P(the first i+1 drafts are accepted)."""

    kind: Literal["per_position"] = "per_position"
    rates: tuple[Probability, ...]

    @model_validator(mode="after")
    def _monotone(self) -> PerPositionAcceptance:
        if any(b > a + 1e-12 for a, b in zip(self.rates, self.rates[1:], strict=False)):
            raise ValueError("per-position rates must be non-increasing (P(first i+1 accepted))")
        return self

    def conditional(self, n: int) -> np.ndarray:
        r = np.asarray(self.rates[:n], dtype=np.float64)
        prev = np.concatenate(([1.0], r[:-1]))
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where(prev > 0, r / np.where(prev > 0, prev, 1.0), 0.0)
        return np.clip(c, 0.0, 1.0)


class ConditionalAcceptance(StrictModel):
    """``rates[i]`` = P(draft i accepted | drafts 0..i-1 accepted)."""

    kind: Literal["conditional"] = "conditional"
    rates: tuple[Probability, ...]

    def conditional(self, n: int) -> np.ndarray:
        return np.asarray(self.rates[:n], dtype=np.float64)


class ConstantAcceptance(StrictModel):
    """Every draft is accepted with probability ``rate`` given its predecessors were."""

    kind: Literal["constant"] = "constant"
    rate: Probability

    def conditional(self, n: int) -> np.ndarray:
        return np.full(n, self.rate, dtype=np.float64)


Acceptance = Annotated[
    PerPositionAcceptance | ConditionalAcceptance | ConstantAcceptance,
    Field(discriminator="kind"),
]


class StaleKVConfig(StrictModel):
    """How stale MTP KV slots lower a module's acceptance (fitted defaults, see README).

    A module whose KV holds stale slots (computed from a wrong token) drafts worse: its
    conditional acceptance is multiplied by ``exp(-sensitivity_per_slot * S)``, where S sums
    ``exp(-(d - 1) / decay_tokens)`` over its stale slots at distance d from the decode
    front (no decay when ``decay_tokens`` is null). ``residual_guess_accuracy`` is the
    probability that P's guess of the first token past its truncated prompt end is right;
    guess k past the end is right with probability ``residual_guess_accuracy ** (k + 1)``.
    """

    sensitivity_per_slot: NonNegFloat = 1.994
    decay_tokens: PositiveFloat | None = None
    residual_guess_accuracy: Probability = 0.9882


SpecMethod = Literal["none", "ngram", "draft_model", "eagle", "eagle3", "mtp"]
EAGLE_FAMILY: frozenset[str] = frozenset({"eagle", "eagle3", "mtp"})


class SpeculativeConfig(StrictModel):
    """Speculative decoding: which drafter, how many drafts per step, how often accepted."""

    method: SpecMethod = "none"
    num_speculative_tokens: NonNegInt = 0
    acceptance: Acceptance = ConstantAcceptance(rate=0.0)
    stale_kv: StaleKVConfig = StaleKVConfig()

    @model_validator(mode="after")
    def _check(self) -> SpeculativeConfig:
        if self.method == "none" and self.num_speculative_tokens:
            raise ValueError("num_speculative_tokens must be 0 when method is none")
        if self.method != "none" and self.num_speculative_tokens < 1:
            raise ValueError(f"method {self.method} needs num_speculative_tokens >= 1")
        rates = getattr(self.acceptance, "rates", None)
        if rates is not None and len(rates) < self.num_speculative_tokens:
            raise ValueError(
                f"acceptance.rates has {len(rates)} entries; num_speculative_tokens is "
                f"{self.num_speculative_tokens}: give one rate per draft position")
        return self

    @property
    def enabled(self) -> bool:
        return self.method != "none"


# ---------------------------------------------------------------------- cluster


class SchedulerConfig(StrictModel):
    """vLLM-v1-style scheduler limits of one instance."""

    max_num_seqs: PositiveInt = 128
    max_num_batched_tokens: PositiveInt = 8192
    block_size: PositiveInt = 64
    num_blocks: PositiveInt | None = None
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: PositiveInt | None = None
    enable_prefix_caching: bool = False


class InstanceGroupConfig(StrictModel):
    """``count`` identical instances.

    The KV pool is ``scheduler.num_blocks`` when given, else ``kv_cache_gib`` of KV memory
    divided into blocks, else (``kv_cache_gib: null`` with a roofline step time) what the
    hardware's memory leaves after the weights.
    """

    count: NonNegInt = 1
    scheduler: SchedulerConfig = SchedulerConfig()
    kv_cache_gib: PositiveFloat | None = None


class ClusterConfig(StrictModel):
    """``disaggregated``: P and D groups; ``colocated``: instances that prefill and decode."""

    mode: Literal["disaggregated", "colocated"] = "disaggregated"
    prefill: InstanceGroupConfig = InstanceGroupConfig(
        scheduler=SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=8192),
        kv_cache_gib=40.0)
    decode: InstanceGroupConfig = InstanceGroupConfig(
        scheduler=SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=2048),
        kv_cache_gib=40.0)
    colocated: InstanceGroupConfig = InstanceGroupConfig(count=1, kv_cache_gib=40.0)

    def groups(self) -> list[tuple[Role, InstanceGroupConfig]]:
        """The instance groups this mode runs, in a fixed order."""
        if self.mode == "colocated":
            return [(Role.COLOCATED, self.colocated)]
        return [(Role.PREFILL, self.prefill), (Role.DECODE, self.decode)]


class ConnectorConfig(StrictModel):
    """NIXL-like KV connector between P and D.

    A transfer moves whole blocks: ``setup_latency_s + bytes / bandwidth``, concurrent
    transfers on one P->D link sharing ``link_bandwidth_gb_per_s`` (GB/s, 1e9 bytes)
    equally. ``prefill_backoff``: ``auto`` is vLLM after PR #55055 (P truncates
    ``_prefill_backoff()`` trailing prompt tokens, D recomputes them); ``off`` is before it
    (only Mamba models back off, by one token). ``transfer_mode``: in ``pull`` D reads P's
    blocks after a read handshake (``handshake_s``); in ``push`` P writes into the blocks
    D registered when it admitted the request (no handshake). Either way a transfer starts
    once D has allocated its blocks, after ``setup_latency_s``.
    """

    transfer_mode: Literal["pull", "push"] = "pull"
    link_bandwidth_gb_per_s: PositiveFloat = 7.0
    setup_latency_s: NonNegFloat = 0.002
    handshake_s: NonNegFloat = 0.001
    kv_lease_s: PositiveFloat = 30.0
    prefill_backoff: Literal["auto", "off"] = "auto"
    kv_load_failure_policy: Literal["fail", "recompute"] = "recompute"


class RouterConfig(StrictModel):
    """The proxy's policy for picking instances (a registered policy name)."""

    policy: str = "round_robin"


class SLOConfig(StrictModel):
    """Latency targets; a request meets the SLO when both its TTFT and TPOT do."""

    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    percentile: Annotated[float, Field(gt=0, le=100)] = 90.0


# ------------------------------------------------------------------------- root


class SimConfig(StrictModel):
    """A whole simulation: model, drafter, cluster, connector, workload, seed."""

    name: str = "pdsim"
    description: str = ""
    seed: NonNegInt = 0
    model: ModelConfig = ModelConfig()
    speculative: SpeculativeConfig = SpeculativeConfig()
    cluster: ClusterConfig = ClusterConfig()
    connector: ConnectorConfig = ConnectorConfig()
    router: RouterConfig = RouterConfig()
    workload: WorkloadConfig = WorkloadConfig()
    step_time: StepTimeConfig = SimpleStepTimeConfig()
    slo: SLOConfig = SLOConfig()
    faults: FaultsConfig = FaultsConfig()
    engine: EngineConfig = EngineConfig()

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
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token: target attention layers plus the drafter modules' KV."""
        mods = self.num_drafter_modules if self.speculative.method in EAGLE_FAMILY else 0
        return (self.model.target_kv_bytes_per_token
                + mods * self.model.mtp_kv_bytes_per_token_per_module)

    @property
    def conditional_acceptance(self) -> np.ndarray:
        """Clean conditional acceptance of each draft position (length N)."""
        n = self.speculative.num_speculative_tokens
        return self.speculative.acceptance.conditional(n)

    @property
    def workload_max_prompt_tokens(self) -> int:
        """The longest prompt the workload can draw (max_model_len when unbounded)."""
        return min(self.model.max_model_len,
                   _max_tokens(self.workload.prompt_tokens, self.workload.trace is None,
                               self.model.max_model_len))

    @property
    def longest_request_tokens(self) -> int:
        """Prompt plus output tokens of the longest request the workload can draw, capped
        by ``model.max_model_len`` (the whole of it for traces and unbounded draws)."""
        w = self.workload
        synthetic = w.trace is None
        total = (_max_tokens(w.prompt_tokens, synthetic, self.model.max_model_len)
                 + _max_tokens(w.output_tokens, synthetic, self.model.max_model_len))
        return min(self.model.max_model_len, total)

    def num_blocks(self, role: Role) -> int:
        """KV blocks of one instance of ``role``: given, from ``kv_cache_gib``, or derived
        from the hardware's memory (roofline step time). Raises ``ConfigError``."""
        group = dict(self.cluster.groups())[role]
        sched = group.scheduler
        path = f"cluster.{role.value}"
        if sched.num_blocks is not None:
            n = sched.num_blocks
        elif group.kv_cache_gib is not None:
            block_bytes = sched.block_size * max(1, self.kv_bytes_per_token)
            n = max(1, math.floor(group.kv_cache_gib * 2**30 / block_bytes))
        elif self.step_time.kind == "roofline":
            from pdsim.perf.memory import kv_blocks_per_instance

            st = self.step_time
            n = kv_blocks_per_instance(
                st.resolved_model(), st.resolved_hardware(), st.tensor_parallel_size,
                st.gpu_memory_utilization, sched.block_size,
                expert_parallel_size=st.expert_parallel_size,
                drafter_modules=(self.num_drafter_modules
                                 if self.speculative.method in EAGLE_FAMILY else 0),
                max_num_seqs=sched.max_num_seqs if self.model.has_mamba else None,
                runtime_reserve_gib=st.runtime_reserve_gib, path=path)
        else:
            raise ConfigError(f"{path}.kv_cache_gib",
                              "give kv_cache_gib or scheduler.num_blocks (or use a roofline "
                              "step_time, which derives the KV pool from the hardware)")
        return n

    # -------------------------------------------------------------- validation

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
        if c.mode == "disaggregated":
            if c.prefill.count < 1:
                issues.append(("cluster.prefill.count",
                               "disaggregated mode needs at least one prefill instance"))
            if c.decode.count < 1:
                issues.append(("cluster.decode.count",
                               "disaggregated mode needs at least one decode instance"))
        elif c.colocated.count < 1:
            issues.append(("cluster.colocated.count",
                           "colocated mode needs at least one instance"))
        n_query = 1 + s.num_speculative_tokens
        for role, group in c.groups():
            path = f"cluster.{role.value}"
            sched = group.scheduler
            if group.count < 1:
                continue
            try:
                blocks = self.num_blocks(role)
            except ConfigError as exc:
                issues.extend(exc.issues)
            else:
                longest = self.longest_request_tokens
                if role is Role.PREFILL:
                    longest = min(longest, self.workload_max_prompt_tokens)
                from pdsim.engine.kvcache import KVLayout

                # unbounded draws and traces: requests too long are rejected at admission
                if longest >= m.max_model_len and (
                        self.workload.trace is not None
                        or _max_tokens(self.workload.prompt_tokens, True, -1) < 0
                        or _max_tokens(self.workload.output_tokens, True, -1) < 0):
                    continue

                need = KVLayout.from_config(self, sched.block_size).blocks_for(longest)
                if need > blocks:
                    where = ("scheduler.num_blocks" if sched.num_blocks is not None
                             else "kv_cache_gib")
                    issues.append((f"{path}.{where}",
                                   f"the KV pool ({blocks} blocks of {sched.block_size} "
                                   f"tokens) cannot hold one maximum-length request "
                                   f"({longest} tokens, {need} blocks; capped by "
                                   f"model.max_model_len {m.max_model_len})"))
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
        from pdsim.engine.router import ROUTERS

        if self.router.policy not in ROUTERS:
            issues.append(("router.policy", f"unknown policy {self.router.policy!r}; "
                           f"allowed: {', '.join(sorted(ROUTERS))}"))
        names = {f"{role.value[0].upper()}{i}" for role, g in c.groups() for i in range(g.count)}
        for i, o in enumerate(self.faults.instance_outages):
            if o.instance not in names:
                issues.append((f"faults.instance_outages.{i}.instance",
                               f"no instance {o.instance!r}; this cluster has "
                               f"{', '.join(sorted(names))}"))
        links = {f"P{i}->D{j}" for i in range(c.prefill.count) for j in range(c.decode.count)}
        for i, d in enumerate(self.faults.link_degradations):
            if d.link is not None and (c.mode == "colocated" or d.link not in links):
                issues.append((f"faults.link_degradations.{i}.link",
                               f"no link {d.link!r}; links: {', '.join(sorted(links)) or 'none'}"))
        if issues:
            raise ConfigError("", issues=issues)
        return self


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
