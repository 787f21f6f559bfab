"""Model architectures described by their shapes, and what follows from them.

A ``ModelArchitecture`` is the data of a model profile (``pdsim/data/models/*.yaml``):
layer blocks (a token mixer and a feed-forward part each), embedding sizes, dtypes and an
optional drafter (MTP modules or an EAGLE head). Everything the step-time model and the
memory model need is *derived* from it here, by plain arithmetic:

- parameter counts (total, active per token) and weight bytes, whole and per GPU;
- KV bytes per token per layer (attention, MLA) and recurrent-state bytes per request
  (Mamba-2, Gated DeltaNet), whole and per GPU;
- FLOPs per token of the linear layers and per (query, key) pair of attention.

Units: parameters are counts, bytes are bytes, FLOPs count a multiply-add as 2.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from pdsim._model import StrictModel
from pdsim.perf.routing import DEFAULT_ROUTING, ExpertRouting

PositiveInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]

DType = Literal["fp32", "bf16", "fp16", "fp8", "int8", "nvfp4", "mxfp4", "int4"]
"""Storage formats of weights, KV cache, activations and recurrent states."""

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    # 4-bit values plus one fp8 scale per 16 values (NVIDIA NVFP4)
    "nvfp4": 0.5 + 1.0 / 16,
    # 4-bit values plus one 8-bit shared exponent per 32 values (OCP MX)
    "mxfp4": 0.5 + 1.0 / 32,
    # weight-only int4 with one bf16 scale per group of 128 (GPTQ/AWQ style)
    "int4": 0.5 + 2.0 / 128,
}
"""Bytes per element of each ``DType``, block scales included."""

GEMM_PRECISION: dict[str, str] = {
    "fp32": "bf16",
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "int8": "fp8",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "int4": "bf16",  # weight-only: dequantised to bf16 in the kernel
}
"""Tensor-core rate a GEMM with weights of this dtype runs at (``HardwareSpec`` keys)."""


# ----------------------------------------------------------------------- mixers


class AttentionMixer(StrictModel):
    """Multi-head / grouped-query attention (sliding-window when ``sliding_window_tokens``).

    ``output_gate``: the q projection also emits a sigmoid gate per head (Qwen3-Next's
    gated attention), doubling its width. ``input_size``: width of the q/k/v projections'
    input when it is not the hidden size (an EAGLE-3 layer reads 2 x hidden).
    ``qk_norm``: where the queries and keys are RMS-normalised before RoPE (two more
    kernels a layer, one norm of the queries and one of the keys); ``across_heads``
    (MiniMax-M2) normalises each token's whole query and whole key vector, so a tensor-
    parallel engine, whose ranks hold a slice of the heads, all-reduces each token's two
    partial sums of squares in every layer (and splits each norm around it).
    """

    kind: Literal["attention"] = "attention"
    """Selects this variant: Multi-head / grouped-query attention (sliding-window when
    `sliding_window_tokens`)."""
    num_heads: PositiveInt
    """Query heads."""
    num_kv_heads: PositiveInt
    """Key/value heads (grouped-query attention when fewer than num_heads)."""
    head_dim: PositiveInt
    """Elements per head."""
    sliding_window_tokens: PositiveInt | None = None
    """Sliding window in tokens; null: full attention."""
    output_gate: bool = False
    """The q projection also emits a sigmoid gate per head (doubles its width)."""
    input_size: PositiveInt | None = None
    """Width of the q/k/v projections' input when not the hidden size; null: hidden size."""
    qk_norm: Literal["none", "per_head", "across_heads"] = "none"
    """RMSNorm of queries and keys before RoPE: none, per head (Qwen3: no communication),
    or across all heads (MiniMax-M2: one all-reduce per layer under tensor parallelism)."""

    @model_validator(mode="after")
    def _check(self) -> AttentionMixer:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        return self


class MLAMixer(StrictModel):
    """DeepSeek multi-head latent attention: the KV cache holds one compressed latent.

    KV per token per layer = ``kv_lora_rank + qk_rope_head_dim`` elements, shared by all
    heads (so it is replicated, not split, under tensor parallelism).
    """

    kind: Literal["mla"] = "mla"
    """Selects this variant: DeepSeek multi-head latent attention."""
    num_heads: PositiveInt
    """Attention heads."""
    q_lora_rank: PositiveInt | None = None
    """Rank of the compressed query; null: no query compression."""
    kv_lora_rank: PositiveInt
    """Rank of the compressed KV latent (cached per token)."""
    qk_nope_head_dim: PositiveInt
    """Per-head query/key dimension without rotary embedding."""
    qk_rope_head_dim: PositiveInt
    """Per-head rotary dimension (cached per token with the latent)."""
    v_head_dim: PositiveInt
    """Per-head value dimension."""


class Mamba2Mixer(StrictModel):
    """A Mamba-2 (SSD) layer: a recurrent state per request instead of a per-token KV."""

    kind: Literal["mamba2"] = "mamba2"
    """Selects this variant: A Mamba-2 (SSD) layer."""
    num_heads: PositiveInt
    """SSM heads."""
    head_dim: PositiveInt
    """Elements per head."""
    state_size: PositiveInt
    """SSM state size per head."""
    num_groups: PositiveInt = 1
    """B/C groups."""
    conv_kernel: PositiveInt = 4
    """Width of the causal convolution."""


class GatedDeltaNetMixer(StrictModel):
    """Gated DeltaNet linear attention (Qwen3-Next): a d_k x d_v state per value head."""

    kind: Literal["gated_deltanet"] = "gated_deltanet"
    """Selects this variant: Gated DeltaNet linear attention (Qwen3-Next)."""
    num_key_heads: PositiveInt
    """Key heads."""
    num_value_heads: PositiveInt
    """Value heads (each holds a d_k x d_v state)."""
    key_head_dim: PositiveInt
    """Key head dimension (d_k)."""
    value_head_dim: PositiveInt
    """Value head dimension (d_v)."""
    conv_kernel: PositiveInt = 4
    """Width of the causal convolution."""


class NoMixer(StrictModel):
    """A layer without a token mixer (an FFN-only layer of a hybrid stack)."""

    kind: Literal["none"] = "none"
    """Selects this variant: A layer without a token mixer (an FFN-only layer of a hybrid
    stack)."""


Mixer = Annotated[
    AttentionMixer | MLAMixer | Mamba2Mixer | GatedDeltaNetMixer | NoMixer,
    Field(discriminator="kind"),
]


# -------------------------------------------------------------------------- FFNs


class DenseFFN(StrictModel):
    """A dense MLP: gated (SwiGLU, 3 matrices) or not (2 matrices, e.g. squared ReLU)."""

    kind: Literal["dense"] = "dense"
    """Selects this variant: A dense MLP."""
    intermediate_size: PositiveInt
    """MLP hidden width."""
    gated: bool = True
    """Gated (SwiGLU, 3 matrices) or not (2 matrices)."""


class MoEFFN(StrictModel):
    """Routed experts (``top_k`` of ``num_experts`` per token) plus always-on shared ones."""

    kind: Literal["moe"] = "moe"
    """Selects this variant: Routed experts (`top_k` of `num_experts` per token) plus always-on
    shared ones."""
    num_experts: PositiveInt
    """Routed experts."""
    top_k: PositiveInt
    """Routed experts each token uses."""
    expert_intermediate_size: PositiveInt
    """Hidden width of one routed expert."""
    num_shared_experts: NonNegInt = 0
    """Always-on shared experts."""
    shared_expert_intermediate_size: PositiveInt | None = None
    """Hidden width of one shared expert; null: expert_intermediate_size."""
    gated: bool = True
    """Gated experts (3 matrices) or not (2)."""

    @model_validator(mode="after")
    def _check(self) -> MoEFFN:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds num_experts ({self.num_experts})")
        return self


class NoFFN(StrictModel):
    """A layer without a feed-forward part (a mixer-only layer of a hybrid stack)."""

    kind: Literal["none"] = "none"
    """Selects this variant: A layer without a feed-forward part (a mixer-only layer of a hybrid
    stack)."""


FFN = Annotated[DenseFFN | MoEFFN | NoFFN, Field(discriminator="kind")]

AnyMixer = AttentionMixer | MLAMixer | Mamba2Mixer | GatedDeltaNetMixer | NoMixer
AnyFFN = DenseFFN | MoEFFN | NoFFN


class LayerBlock(StrictModel):
    """``num_layers`` consecutive identical layers (order does not matter for cost)."""

    num_layers: PositiveInt
    """Consecutive identical layers."""
    mixer: Mixer
    """The token mixer (attention, MLA, Mamba-2, gated DeltaNet or none)."""
    ffn: FFN
    """The feed-forward part (dense, MoE or none)."""

    @model_validator(mode="after")
    def _check(self) -> LayerBlock:
        if isinstance(self.mixer, NoMixer) and isinstance(self.ffn, NoFFN):
            raise ValueError("a layer needs a mixer or an ffn")
        return self


class DrafterSpec(StrictModel):
    """The speculative drafter shipped with the model.

    ``kind: mtp``: ``num_modules`` MTP modules (each one layer, an input projection of
    ``input_projection_factor`` x hidden -> hidden, sharing the target's embedding and LM
    head). ``kind: eagle3``: one EAGLE-3 layer whose projection fuses three target hidden
    states (factor 3) and whose own LM head covers ``draft_vocab_size`` tokens.
    """

    kind: Literal["mtp", "eagle", "eagle3"]
    """mtp (MTP modules), eagle or eagle3 (one head)."""
    num_modules: PositiveInt = 1
    """Drafter modules (MTP layers)."""
    mixer: Mixer
    """The drafter layer's token mixer."""
    ffn: FFN
    """The drafter layer's feed-forward part."""
    input_projection_factor: PositiveInt = 2
    """Input projection width as a multiple of hidden (2 for MTP, 3 for EAGLE-3)."""
    draft_vocab_size: PositiveInt | None = None
    """The drafter's own LM head vocabulary; null: the target's LM head."""
    weight_dtype: DType | None = None
    """The drafter's weight dtype; null: the target's."""


class ModelArchitecture(StrictModel):
    """A model profile: the architecture from which every cost is derived.

    ``weight_dtype`` applies to the linear layers of the transformer blocks,
    ``expert_weight_dtype`` (default: ``weight_dtype``) to MoE experts,
    ``embedding_dtype`` to the embedding and LM head (usually left unquantised).
    ``state_dtype`` is the recurrent state of Mamba / linear-attention layers.
    ``routing``: MoE routing statistics (``pdsim.perf.routing``; default
    ``DEFAULT_ROUTING``). ``sources`` names where each figure comes from; ``estimated``
    maps every guessed field (a dotted path) to the reason for the guess.
    """

    name: str
    """Profile name."""
    display_name: str = ""
    """Human-readable model name."""
    hidden_size: PositiveInt
    """Hidden (model) dimension."""
    vocab_size: PositiveInt
    """Vocabulary size."""
    tie_word_embeddings: bool = False
    """The LM head shares the embedding's weights."""
    max_model_len: PositiveInt
    """Longest sequence in tokens."""
    blocks: tuple[LayerBlock, ...] = Field(min_length=1)
    """The target's layers, as blocks of identical layers."""
    drafter: DrafterSpec | None = None
    """The speculative drafter shipped with the model; null: none."""
    routing: ExpertRouting = Field(default_factory=lambda: DEFAULT_ROUTING)
    """MoE routing statistics (expert load spread, token reuse)."""
    weight_dtype: DType = "bf16"
    """Dtype of the transformer blocks' linear layers."""
    expert_weight_dtype: DType | None = None
    """Dtype of MoE experts; null: weight_dtype."""
    embedding_dtype: DType = "bf16"
    """Dtype of the embedding and LM head."""
    kv_cache_dtype: DType = "bf16"
    """Dtype of the KV cache."""
    state_dtype: DType = "bf16"
    """Dtype of Mamba / linear-attention recurrent state."""
    activation_dtype: DType = "bf16"
    """Dtype of activations."""
    published_total_params_b: PositiveFloat | None = None
    """Published total parameters in billions (checked against the count)."""
    published_active_params_b: PositiveFloat | None = None
    """Published active parameters per token in billions."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Where each figure comes from, keyed by field name."""
    estimated: dict[str, str] = Field(default_factory=dict)
    """Every guessed field (dotted path) mapped to the reason for the guess."""
    notes: str = ""
    """Free text."""

    @property
    def num_layers(self) -> int:
        """Target layers (drafter modules excluded)."""
        return sum(b.num_layers for b in self.blocks)


# -------------------------------------------------------------- parameter counts
