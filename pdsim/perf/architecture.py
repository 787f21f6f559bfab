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
    """

    kind: Literal["attention"] = "attention"
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    sliding_window_tokens: PositiveInt | None = None
    output_gate: bool = False
    input_size: PositiveInt | None = None

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
    num_heads: PositiveInt
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class Mamba2Mixer(StrictModel):
    """A Mamba-2 (SSD) layer: a recurrent state per request instead of a per-token KV."""

    kind: Literal["mamba2"] = "mamba2"
    num_heads: PositiveInt
    head_dim: PositiveInt
    state_size: PositiveInt
    num_groups: PositiveInt = 1
    conv_kernel: PositiveInt = 4


class GatedDeltaNetMixer(StrictModel):
    """Gated DeltaNet linear attention (Qwen3-Next): a d_k x d_v state per value head."""

    kind: Literal["gated_deltanet"] = "gated_deltanet"
    num_key_heads: PositiveInt
    num_value_heads: PositiveInt
    key_head_dim: PositiveInt
    value_head_dim: PositiveInt
    conv_kernel: PositiveInt = 4


class NoMixer(StrictModel):
    """A layer without a token mixer (an FFN-only layer of a hybrid stack)."""

    kind: Literal["none"] = "none"


Mixer = Annotated[
    AttentionMixer | MLAMixer | Mamba2Mixer | GatedDeltaNetMixer | NoMixer,
    Field(discriminator="kind"),
]


# -------------------------------------------------------------------------- FFNs


class DenseFFN(StrictModel):
    """A dense MLP: gated (SwiGLU, 3 matrices) or not (2 matrices, e.g. squared ReLU)."""

    kind: Literal["dense"] = "dense"
    intermediate_size: PositiveInt
    gated: bool = True


class MoEFFN(StrictModel):
    """Routed experts (``top_k`` of ``num_experts`` per token) plus always-on shared ones."""

    kind: Literal["moe"] = "moe"
    num_experts: PositiveInt
    top_k: PositiveInt
    expert_intermediate_size: PositiveInt
    num_shared_experts: NonNegInt = 0
    shared_expert_intermediate_size: PositiveInt | None = None
    gated: bool = True

    @model_validator(mode="after")
    def _check(self) -> MoEFFN:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds num_experts ({self.num_experts})")
        return self


class NoFFN(StrictModel):
    """A layer without a feed-forward part (a mixer-only layer of a hybrid stack)."""

    kind: Literal["none"] = "none"


FFN = Annotated[DenseFFN | MoEFFN | NoFFN, Field(discriminator="kind")]

AnyMixer = AttentionMixer | MLAMixer | Mamba2Mixer | GatedDeltaNetMixer | NoMixer
AnyFFN = DenseFFN | MoEFFN | NoFFN


class LayerBlock(StrictModel):
    """``num_layers`` consecutive identical layers (order does not matter for cost)."""

    num_layers: PositiveInt
    mixer: Mixer
    ffn: FFN

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
    num_modules: PositiveInt = 1
    mixer: Mixer
    ffn: FFN
    input_projection_factor: PositiveInt = 2
    draft_vocab_size: PositiveInt | None = None
    weight_dtype: DType | None = None


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
    display_name: str = ""
    hidden_size: PositiveInt
    vocab_size: PositiveInt
    tie_word_embeddings: bool = False
    max_model_len: PositiveInt
    blocks: tuple[LayerBlock, ...] = Field(min_length=1)
    drafter: DrafterSpec | None = None
    routing: ExpertRouting = Field(default_factory=lambda: DEFAULT_ROUTING)
    weight_dtype: DType = "bf16"
    expert_weight_dtype: DType | None = None
    embedding_dtype: DType = "bf16"
    kv_cache_dtype: DType = "bf16"
    state_dtype: DType = "bf16"
    activation_dtype: DType = "bf16"
    published_total_params_b: PositiveFloat | None = None
    published_active_params_b: PositiveFloat | None = None
    sources: dict[str, str] = Field(default_factory=dict)
    estimated: dict[str, str] = Field(default_factory=dict)
    notes: str = ""

    @property
    def num_layers(self) -> int:
        """Target layers (drafter modules excluded)."""
        return sum(b.num_layers for b in self.blocks)


# -------------------------------------------------------------- parameter counts
