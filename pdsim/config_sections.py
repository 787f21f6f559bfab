"""The sections of the simulation config: model, speculation, schedulers, connector, router
and SLOs (the cluster's instance groups are in ``pdsim.config_cluster``). Frozen, strict
pydantic models; the root ``SimConfig`` (``pdsim.config``) holds them, derives values from
them and checks them against each other.
"""

from __future__ import annotations

import enum
from typing import Annotated, Literal, NamedTuple

import numpy as np
from pydantic import Field, model_validator

from pdsim._model import (
    MAX_BATCH_SEQS,
    MAX_BLOCKS,
    MAX_INSTANCES,
    MAX_TOKENS,
    MIN_BANDWIDTH_GB_PER_S,
    StrictModel,
    at_least,
    at_most,
    seconds_bound,
)
from pdsim.topology_config import TopologyConfig

PositiveInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
_TOKENS_WHY = "pdsim keeps token counts well inside 64-bit arrays"
TokenCount = Annotated[int, Field(ge=1), at_most(MAX_TOKENS, _TOKENS_WHY)]
_BYTES_WHY = "KV byte counts of a maximum-length request stay inside 64-bit integers"
LayerBytes = Annotated[int, Field(ge=0), at_most(2**20, _BYTES_WHY)]
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
    """attention (per-token KV), sliding_window (last window_tokens only) or mamba (a recurrent
    state per request)."""
    num_layers: Annotated[int, Field(ge=1), at_most(2**16, _BYTES_WHY)]
    """Layers in this group."""
    kv_bytes_per_token_per_layer: LayerBytes = 0
    """KV bytes one token occupies in one layer (0 for mamba)."""
    window_tokens: TokenCount | None = None
    """Sliding window in tokens (sliding_window groups only)."""
    state_bytes_per_layer: Annotated[int, Field(ge=0), at_most(2**30, _BYTES_WHY)] = 0
    """Recurrent-state bytes per request per layer (mamba groups)."""

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

    ``profile`` names a shipped model profile (``pdsim profile`` lists them) or a profile
    file (``*.yaml``, relative to the config file); the loader fills every field the YAML
    leaves out from that profile's architecture.
    """

    name: str = "custom"
    """Model name, for reports."""
    profile: str | None = None
    """A shipped model profile (`pdsim profile` lists them) or a model profile file (a path
    ending in .yaml, relative to the config file); the loader fills every field left out from
    it."""
    layer_groups: tuple[LayerGroup, ...] = (
        LayerGroup(num_layers=61, kv_bytes_per_token_per_layer=1152),
    )
    """The target model's layers, grouped by KV layout."""
    num_mtp_modules: Annotated[int, Field(ge=0), at_most(64, "drafts per step")] = 0
    """MTP modules the model ships (0: none)."""
    mtp_kv_bytes_per_token_per_module: LayerBytes = 1152
    """KV bytes one token occupies in one MTP module."""
    mtp_window_tokens: TokenCount | None = None
    """Sliding window of each MTP module's attention, in tokens; null: full attention. Stale
    drafter KV stays for the whole request under full attention, and only until it leaves
    the window under a sliding one."""
    max_model_len: TokenCount = 131072
    """Longest sequence (prompt + output) in tokens."""

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
    """Selects this variant: vLLM's per-position rates."""
    rates: tuple[Probability, ...]
    """rates[i] = P(the first i+1 drafts are all accepted), non-increasing (vLLM's per-position
    metric)."""

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
    """Selects this variant: `rates[i]` = P(draft i accepted | drafts 0..i-1 accepted)."""
    rates: tuple[Probability, ...]
    """rates[i] = P(draft i accepted | drafts 0..i-1 accepted)."""

    def conditional(self, n: int) -> np.ndarray:
        return np.asarray(self.rates[:n], dtype=np.float64)


class ConstantAcceptance(StrictModel):
    """Every draft is accepted with probability ``rate`` given its predecessors were."""

    kind: Literal["constant"] = "constant"
    """Selects this variant: Every draft is accepted with probability `rate` given its
    predecessors were."""
    rate: Probability
    """Probability each draft is accepted given its predecessors were."""

    def conditional(self, n: int) -> np.ndarray:
        return np.full(n, self.rate, dtype=np.float64)


Acceptance = Annotated[
    PerPositionAcceptance | ConditionalAcceptance | ConstantAcceptance,
    Field(discriminator="kind"),
]


class StaleKVConfig(StrictModel):
    """How stale MTP KV slots lower a module's acceptance (defaults fitted, docs/mtp-model.md).

    A module whose KV holds stale slots (computed from a wrong token) drafts worse: its
    conditional acceptance is multiplied by ``exp(-sensitivity_per_slot * S)``, where S sums
    ``exp(-(d - 1) / decay_tokens)`` over its stale slots at distance d from the decode
    front (no decay when ``decay_tokens`` is null). Where stale slots come from is engine
    behaviour, as vLLM's code makes it (docs/mtp-model.md): D's re-prefill cache holds the
    previous occupant's inputs, so a repair that reaches past what D itself computed writes
    garbage into every module (the padded first step before the fix re-prefills N - 1
    positions so; an unpadded first verification with R >= 3 rejections, R - 2), and after
    the fix P's guesses of the prompt tokens past its truncated end leave the residual,
    each right in a row with probability ``residual_guess_accuracy``.

    The defaults of ``sensitivity_per_slot`` and ``residual_guess_accuracy`` are fitted to
    Inkling-Small's measurements (``STALE_KV_FIT``); other models inherit them, which
    ``show-config`` says. The switches below are ablations or options, off the paths
    vLLM's code takes at temperature 0.
    """

    sensitivity_per_slot: NonNegFloat = 0.3235
    """Acceptance penalty per stale slot: conditional acceptance x exp(-sensitivity_per_slot x
    S)."""
    decay_tokens: PositiveFloat | None = None
    """Distance (tokens) over which a stale slot's weight decays as exp(-(d-1)/decay_tokens);
    null: no decay."""
    residual_guess_accuracy: Probability = 0.9193
    """Probability each of P's guesses of a prompt token past a truncated prompt end is right."""
    unverified_draft_slots: bool = False
    """P's and D's drafts can differ (temperature > 0, batch-variant numerics): P's slots
    computed from its wrong drafts then stay stale whatever D's first verification repairs,
    drawn independently of D. False (temperature 0, vLLM's greedy path): D drafts what P
    drafted, so D's first repair covers every slot P wrote from a wrong draft."""
    reprefill_cache_shortfall: bool = True
    """vLLM's code: D's multi-module re-prefill cache holds only what D itself computed (the
    rest is the previous occupant's inputs), so a repair reaching further re-prefills
    garbage. False: the cache starts full (an ablation: neither the padded step nor an
    unpadded first verification leaves garbage)."""
    garbage_into_every_module: bool = True
    """vLLM's code: a re-prefill from garbage writes stale slots into every module, module 0
    included. False: modules 1..N-1 only (an ablation)."""


class StaleKVFit(NamedTuple):
    """Where the shipped stale-KV defaults come from."""

    model_profile: str
    sensitivity_per_slot: float
    residual_guess_accuracy: float
    source: str


STALE_KV_FIT = StaleKVFit(
    "inkling-small", StaleKVConfig().sensitivity_per_slot,
    StaleKVConfig().residual_guess_accuracy,
    "fitted by tools/fit_stale_kv.py to vLLM PR #55055 (Inkling-Small-NVFP4, MTP-8, 1P1D): "
    "acceptance length 1.089 before the fix, then the acceptance rate +30.4 points after it "
    "(docs/mtp-model.md)")


SpecMethod = Literal["none", "ngram", "draft_model", "eagle", "eagle3", "mtp"]
EAGLE_FAMILY: frozenset[str] = frozenset({"eagle", "eagle3", "mtp"})


class SpeculativeConfig(StrictModel):
    """Speculative decoding: which drafter, how many drafts per step, how often accepted."""

    method: SpecMethod = "none"
    """Drafter method, as vLLM names it (none turns speculation off)."""
    num_speculative_tokens: Annotated[int, Field(ge=0), at_most(64, "drafts per step")] = 0
    """Drafts proposed per decode step (N)."""
    acceptance: Acceptance = ConstantAcceptance(rate=0.0)
    """How often drafts are accepted: per_position, conditional or constant rates."""
    stale_kv: StaleKVConfig = StaleKVConfig()
    """How stale MTP KV slots after a P/D handoff lower acceptance."""
    pad_first_decode_step: bool = True
    """vLLM with static speculation (PR #45237): a new request with exactly one token to
    compute, in a step that runs decodes and no prefill chunk, is padded to 1 + N tokens with
    placeholder drafts (rejected, and counted as a draft round); false: dynamic speculation,
    or an engine without the padding."""

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

    max_num_seqs: Annotated[int, Field(ge=1), at_most(
        MAX_BATCH_SEQS, "a batch's rows are arrays of this length")] = 128
    """Most requests in one step's batch (vLLM --max-num-seqs)."""
    max_num_batched_tokens: TokenCount = 8192
    """Most tokens in one step (vLLM --max-num-batched-tokens)."""
    block_size: TokenCount = 64
    """Tokens per KV block."""
    num_blocks: Annotated[int, Field(ge=1), at_most(
        MAX_BLOCKS, "block ids stay exact in 64-bit arithmetic")] | None = None
    """KV blocks in the pool; null: derived from kv_cache_gib (or the hardware's free memory)."""
    enable_chunked_prefill: bool = True
    """Split long prompts over steps (vLLM --enable-chunked-prefill)."""
    long_prefill_token_threshold: TokenCount | None = None
    """Most prompt tokens one request may prefill per step; null: no limit."""
    enable_prefix_caching: bool = False
    """Reuse KV blocks of shared prompt prefixes (vLLM --enable-prefix-caching)."""
    prefill_policy: Literal["mixed", "prefill_first"] = "mixed"
    """mixed: decode rows and prefill chunks share a step (vLLM v1, TensorRT-LLM in-flight
    batching); prefill_first: a step that can run prompt work runs only prefill chunks, up to
    max_num_batched_tokens, and the decode rows wait (SGLang's default scheduler, without
    --enable-mixed-chunk)."""
    recv_interval_steps: Annotated[int, Field(ge=1), at_most(
        100_000, "a wait counted in engine steps")] = 1
    """SGLang's ``--scheduler-recv-interval`` (``SchedulerRecvSkipper``): new requests are
    taken into the queue only when the steps since the last take weigh this much, a
    pure-decode step 1 and any other step (prompt work, or none: idle) past every
    interval; until then waiting prompts are not admitted. 1: every step (vLLM,
    TensorRT-LLM, SGLang's default). An instance with an interval steps one step at a
    time (no decode runs)."""
    batch_wait_steps: Annotated[int, Field(ge=0), at_most(
        100_000, "a wait counted in engine steps")] = 0
    """TensorRT-LLM's batch waiting (``batch_wait_timeout_iters``, PyExecutor
    ``_waiting_requests``): while the engine runs decode rows, new prompts are held back
    until this many steps have held them or the step's tokens (the prompts' tokens plus
    1 + N per decode row) reach ``batch_wait_max_tokens_ratio x max_num_batched_tokens``;
    the count restarts when prompts are let in. 0: off (TensorRT-LLM's default). Read only
    on a colocated pool without attention DP (TensorRT-LLM skips it there); an instance
    that waits steps one step at a time (no decode runs)."""
    batch_wait_max_tokens_ratio: Annotated[float, Field(ge=0, le=1)] = 0.0
    """TensorRT-LLM's ``batch_wait_max_tokens_ratio``: the share of
    ``max_num_batched_tokens`` whose scheduled tokens end a batch wait at once. 0: every
    step reaches it, so nothing waits (as in TensorRT-LLM, where both settings must be
    set for a wait)."""


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
    """pull: D reads P's blocks after a read handshake; push: P writes into blocks D registered."""
    link_bandwidth_gb_per_s: Annotated[float, Field(gt=0), at_least(
        MIN_BANDWIDTH_GB_PER_S, "1 KB/s; slower links make transfers outlast any run")] = 7.0
    """Bandwidth of one P->D link in GB/s (1e9 bytes), shared equally by concurrent transfers
    (without ``topology``)."""
    setup_latency_s: Annotated[NonNegFloat, seconds_bound()] = 0.002
    """Fixed time before a transfer starts moving bytes, in seconds."""
    handshake_s: Annotated[NonNegFloat, seconds_bound()] = 0.001
    """Read handshake before a pull transfer, in seconds."""
    kv_lease_s: Annotated[PositiveFloat, seconds_bound()] = 30.0
    """How long P keeps a finished request's blocks for D to read, in seconds."""
    prefill_backoff: Literal["auto", "off"] = "auto"
    """auto: after vLLM PR #55055 (P leaves the drafter's lookahead for D to recompute); off:
    before it."""
    kv_load_failure_policy: Literal["fail", "recompute"] = "recompute"
    """What D does when a KV transfer fails: recompute the prompt or fail the request."""
    topology: TopologyConfig | None = None
    """Nodes, NICs and where instances sit (docs/topology.md); null: one link per P->D pair
    at ``link_bandwidth_gb_per_s``."""


RouterWeight = Annotated[float, Field(ge=0, allow_inf_nan=False), at_most(
    1e6, "weights are relative; scale them down together")]


class RouterWeights(StrictModel):
    """Weights of the scoring policies' terms (docs/routing.md).

    Each term scores a candidate in [0, 1], higher better; the policy picks the largest
    weighted sum, ties to the lowest instance index. The defaults are llm-d's default
    scheduling profile (queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer
    3; its running-requests scorer is not in that profile, so ``running`` is 0).
    """

    queue: RouterWeight = 2.0
    """Weight of the queue term: (max - waiting) / (max - min) over the candidates, where
    waiting counts the requests queued or receiving KV (vLLM num_requests_waiting); 1 when
    all are equal."""
    kv_usage: RouterWeight = 2.0
    """Weight of the KV term: 1 - the fraction of the instance's KV blocks in use."""
    running: RouterWeight = 0.0
    """Weight of the running term: (max - running) / (max - min) over the candidates (vLLM
    num_requests_running); 1 when all are equal."""
    prefix: RouterWeight = 3.0
    """Weight of the prefix term (prefix_aware only): the fraction of the request's hash
    blocks whose leading run the instance's prefix cache holds."""


class CacheAwareRouting(StrictModel):
    """Thresholds of the ``cache_aware`` policy (vLLM router's cache-aware policy; its
    defaults)."""

    cache_threshold: Annotated[float, Field(ge=0, le=1)] = 0.5
    """Least fraction of the request's hash blocks the best-matching instance must hold for
    the request to follow its cache; below it, the instance with the fewest cached blocks."""
    balance_abs_threshold: Annotated[int, Field(ge=0), at_most(
        MAX_BATCH_SEQS * MAX_INSTANCES, "more requests than any cluster holds")] = 32
    """Load imbalance, absolute: the most and the least loaded instance (waiting + running
    requests) differ by more than this many requests..."""
    balance_rel_threshold: Annotated[float, Field(ge=1, allow_inf_nan=False), at_most(
        1e6, "a ratio beyond any load")] = 1.1
    """...and the most loaded holds more than this times the least: then the least loaded
    instance is picked, whatever the caches hold."""


ResponseRule = Literal["pdsim", "vllm", "sglang", "trtllm"]
RESPONSE_RULES: dict[str, int] = {"pdsim": 0, "vllm": 1, "sglang": 12, "trtllm": 7}
"""Per serving stack, the request's engine steps after the one that emitted its first
token at which a streaming client receives its first response, for a model
``RESPONSE_RULE_PROFILES`` does not list: none for pdsim; for vLLM, SGLang and
TensorRT-LLM fitted to all of the stack's fit rows of AIConfigurator's silicon sample run
without speculation, where a step emits one token (the measured TTFT less pdsim's, in
units of the request's own inter-token time; TensorRT-LLM's refitted with its steps
without a CUDA graph priced, ``eager_kernel_s``; docs/step-time.md, "The first response").
The engines send the first token at once, so a fitted delay stands for what pdsim does
not model between the engine and the client, not for a stream interval."""

RESPONSE_RULE_PROFILES: dict[tuple[str, str], int] = {
    ("trtllm", "deepseek-v3"): 12, ("trtllm", "llama-3.1-70b"): 1,
    ("trtllm", "llama-3.1-8b"): 11, ("sglang", "deepseek-v3"): 13,
    ("sglang", "llama-3.1-8b"): 16, ("vllm", "llama-3.1-70b"): 1,
    ("vllm", "llama-3.1-8b"): 3,
    # thirteenth round, the models added then (fit rows of the full run, 2026-12-03)
    ("sglang", "qwen3-32b"): 52, ("sglang", "qwen3-235b-a22b"): 20,
    ("trtllm", "gpt-oss-120b"): 6, ("trtllm", "kimi-k2.5"): 0,
    ("trtllm", "qwen3-235b-a22b"): 5, ("trtllm", "qwen3-32b"): 9,
    ("vllm", "gpt-oss-120b"): 4, ("vllm", "kimi-k2.5"): 7, ("vllm", "minimax-m2.5"): 4,
    ("vllm", "qwen3-235b-a22b"): 5, ("vllm", "qwen3-32b"): 0,
}
"""Per serving stack and shipped model profile, the first response's delay fitted the same
way to that model's fit rows alone: the fit rows of one stack pull apart by model
(TensorRT-LLM, its eager steps priced: DeepSeek 10, Llama-3.1-70B 1), and a delay per
stack and model carries better to deployments it was not fitted to than one per stack
(5-fold cross-validation on the fit rows, folds by deployment; ``python -m
validation.silicon_gap --fit-response``; docs/step-time.md, "The first response"). The
entries of the thirteenth round's models (Qwen3, MiniMax-M2.5, Kimi-K2.5, gpt-oss-120b)
were fitted the same way on their fit rows of the full run, each row's TTFT re-priced at
other delays from its own simulated TPOT, without cross-validation; SGLang's Qwen3-32B
wants 56 steps, far more than any response delay, so there it stands for a cost pdsim
does not model (docs/step-time.md, "The first response"). vLLM's Qwen3-32B was re-fitted in
the fourteenth round, once its main run was found to have computed its prompts
(``validation.silicon.AIPERF_RUNS_PREFILL_PAID``): 10 -> 0 steps on its 61 fit rows (mean
TTFT error 32.6% at 0, the least of every delay). In the fifteenth round every entry was
re-fitted the same way on the fit rows of the full run at the engines' fp8 MoE kernels by
version (``kernels.fp8_moe_efficiency_by_engine``) and the EP-always MiniMax recipes;
six moved: TensorRT-LLM DeepSeek 10 -> 12, SGLang Llama-3.1-8B 15 -> 16, Qwen3-32B
56 -> 53, Qwen3-235B 23 -> 20, vLLM MiniMax-M2.5 6 -> 4 and Qwen3-235B 5 -> 4; and once
more after the QK norms' kernels were counted (``roofline.QK_NORM_KERNELS``): SGLang
Qwen3-32B 53 -> 51, Qwen3-235B 20 -> 19, TensorRT-LLM Qwen3-235B 6 -> 5. In the sixteenth
round, re-fitted the same way with the fitted expert popularity skew (``load_cv`` 1.5): SGLang
DeepSeek 12 -> 13, Qwen3-32B 51 -> 52, Qwen3-235B 19 -> 20, vLLM Qwen3-235B 4 -> 5."""


def response_delay_steps(rule: str, profile: str | None) -> int:
    """The first response's delay in engine steps for the serving stack ``rule`` serving
    the model profile ``profile``: the profile's fitted delay where
    ``RESPONSE_RULE_PROFILES`` has one, else the stack's (``RESPONSE_RULES``)."""
    if profile is not None and (rule, profile) in RESPONSE_RULE_PROFILES:
        return RESPONSE_RULE_PROFILES[(rule, profile)]
    return RESPONSE_RULES[rule]


class RouterConfig(StrictModel):
    """The proxy's policy for picking instances (a registered policy name).

    The scoring policies (``kv_load_aware``, ``prefix_aware``) read ``weights``; changing a
    weight the policy does not read (any weight, under a policy that reads none) is an
    error naming the field.
    """

    policy: str = "round_robin"
    """A registered routing policy name: round_robin, least_loaded, random, kv_load_aware,
    prefix_aware or cache_aware."""
    weights: RouterWeights = RouterWeights()
    """Term weights of the scoring policies (kv_load_aware: queue, kv_usage, running;
    prefix_aware: those and prefix)."""
    cache_aware: CacheAwareRouting = CacheAwareRouting()
    """Thresholds of the cache_aware policy (vLLM router's defaults)."""
    frontend_latency_s: Annotated[NonNegFloat, seconds_bound()] = 0.0
    """Seconds from a request's arrival to its dispatch to an instance (HTTP, tokenization,
    the serving frontend); TTFT and end-to-end latency include it, TPOT does not."""
    frontend_latency_per_prompt_token_s: Annotated[NonNegFloat, seconds_bound()] = 0.0
    """Seconds per prompt token that a request spends in the frontend on the way in, on
    top of ``frontend_latency_s`` (tokenization and input processing of the prompt, off
    the GPU: the engine's steps do not pay it); TTFT and end-to-end latency include it,
    TPOT does not."""
    response_rule: ResponseRule = "pdsim"
    """The serving stack whose first streamed response the client's TTFT ends at: pdsim
    (the engine's first token), vllm, sglang or trtllm (the first response arrives that
    many of the request's engine steps after the one that emitted its first token, fitted
    per stack and model profile to the silicon sample's fit rows, ``RESPONSE_RULE_PROFILES``,
    else per stack, ``RESPONSE_RULES``; docs/step-time.md, "The first response")."""
    first_response_delay_steps: NonNegInt | None = None
    """The request's own engine steps after the one that emitted its first token at which
    the client receives its first streamed response (null: the response rule's for the
    served model): the delay counts engine iterations, as the serving stacks' output paths
    do (TensorRT-LLM ``stream_interval``, SGLang ``--stream-interval``, one step late under
    overlapped scheduling), so under speculation, where a step emits several tokens, the
    delay is that many steps, not tokens (without speculation one step emits one token).
    TTFT ends there and TPOT is (end-to-end - TTFT) / (output tokens - 1), as the
    benchmarks compute them."""

    def first_response_steps_for(self, profile: str | None) -> int:
        """The first response's delay in the request's engine steps when the served model
        is the profile ``profile``: the explicit value, else the response rule's
        (``response_delay_steps``). ``SimConfig.first_response_steps`` asks it."""
        if self.first_response_delay_steps is not None:
            return self.first_response_delay_steps
        return response_delay_steps(self.response_rule, profile)


class SLOConfig(StrictModel):
    """Latency targets; a request meets the SLO when both its TTFT and TPOT do."""

    ttft_s: Annotated[PositiveFloat, seconds_bound()] | None = None
    """Time-to-first-token target in seconds; null: none."""
    tpot_s: Annotated[PositiveFloat, seconds_bound()] | None = None
    """Time-per-output-token target in seconds; null: none."""
    percentile: Annotated[float, Field(gt=0, le=100)] = 90.0
    """Percentile of TTFT and of TPOT that is held against the targets."""
