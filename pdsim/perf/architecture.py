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

import math
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


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def mixer_params(m: AnyMixer, hidden: int, tp: int = 1) -> tuple[float, float]:
    """(parameters of one layer's mixer, of them held by one GPU under ``tp``-way TP).

    Head-sharded projections split across ranks; MLA's down-projections (``q_a``,
    ``kv_a``) are replicated, as are the k/v projections when KV heads < ``tp``.
    """
    if isinstance(m, AttentionMixer):
        inp = m.input_size or hidden
        q = inp * m.num_heads * m.head_dim * (2 if m.output_gate else 1)
        kv = 2 * inp * m.num_kv_heads * m.head_dim
        o = m.num_heads * m.head_dim * hidden
        kv_gpu = 2 * inp * _ceil_div(m.num_kv_heads, tp) * m.head_dim
        return float(q + kv + o), (q + o) / tp + kv_gpu
    if isinstance(m, MLAMixer):
        qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            q_rep, q_sharded = 0, hidden * m.num_heads * qk_dim
        else:
            q_rep = hidden * m.q_lora_rank
            q_sharded = m.q_lora_rank * m.num_heads * qk_dim
        kv_a = hidden * (m.kv_lora_rank + m.qk_rope_head_dim)
        kv_b = m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
        o = m.num_heads * m.v_head_dim * hidden
        sharded = q_sharded + kv_b + o
        replicated = q_rep + kv_a
        return float(sharded + replicated), sharded / tp + replicated
    if isinstance(m, Mamba2Mixer):
        d_inner = m.num_heads * m.head_dim
        bc = 2 * m.num_groups * m.state_size
        in_proj = hidden * (2 * d_inner + bc + m.num_heads)
        conv = (d_inner + bc) * m.conv_kernel
        out_proj = d_inner * hidden
        total = in_proj + conv + out_proj
        return float(total), total / tp
    if isinstance(m, GatedDeltaNetMixer):
        key_dim = m.num_key_heads * m.key_head_dim
        value_dim = m.num_value_heads * m.value_head_dim
        in_proj = hidden * (2 * key_dim + 2 * value_dim + 2 * m.num_value_heads)
        conv = (2 * key_dim + value_dim) * m.conv_kernel
        out_proj = value_dim * hidden
        total = in_proj + conv + out_proj
        return float(total), total / tp
    return 0.0, 0.0


def expert_params(ffn: MoEFFN, hidden: int) -> float:
    """Parameters of one routed expert of one layer."""
    return float((3 if ffn.gated else 2) * hidden * ffn.expert_intermediate_size)


def ffn_dense_params(ffn: AnyFFN, hidden: int) -> float:
    """Parameters every token uses: a dense MLP, or an MoE's shared experts and router."""
    if isinstance(ffn, DenseFFN):
        return float((3 if ffn.gated else 2) * hidden * ffn.intermediate_size)
    if isinstance(ffn, MoEFFN):
        inter = ffn.shared_expert_intermediate_size or ffn.expert_intermediate_size
        shared = ffn.num_shared_experts * (3 if ffn.gated else 2) * hidden * inter
        return float(shared + hidden * ffn.num_experts)
    return 0.0


def _router_params(ffn: AnyFFN, hidden: int) -> float:
    return float(hidden * ffn.num_experts) if isinstance(ffn, MoEFFN) else 0.0


def layer_params(block: LayerBlock, hidden: int) -> tuple[float, float]:
    """(total, active per token) parameters of one layer of ``block``."""
    mixer, _ = mixer_params(block.mixer, hidden)
    dense = ffn_dense_params(block.ffn, hidden)
    total = active = mixer + dense
    if isinstance(block.ffn, MoEFFN):
        e = expert_params(block.ffn, hidden)
        total += block.ffn.num_experts * e
        active += block.ffn.top_k * e
    return total, active


def embedding_params(arch: ModelArchitecture) -> tuple[float, float]:
    """(input embedding, LM head) parameters; the head is 0 when tied to the embedding."""
    emb = float(arch.vocab_size * arch.hidden_size)
    return emb, (0.0 if arch.tie_word_embeddings else emb)


def total_params(arch: ModelArchitecture) -> float:
    """Target parameters (embedding and LM head included, drafter excluded)."""
    emb, head = embedding_params(arch)
    return sum(b.num_layers * layer_params(b, arch.hidden_size)[0] for b in arch.blocks) \
        + emb + head


def active_params(arch: ModelArchitecture) -> float:
    """Target parameters one token uses (embedding and LM head counted, as vendors do)."""
    emb, head = embedding_params(arch)
    return sum(b.num_layers * layer_params(b, arch.hidden_size)[1] for b in arch.blocks) \
        + emb + head


def drafter_module_params(arch: ModelArchitecture) -> float:
    """Parameters of one drafter module (its own LM head included, shared ones not)."""
    d = arch.drafter
    if d is None:
        return 0.0
    h = arch.hidden_size
    block = LayerBlock(num_layers=1, mixer=d.mixer, ffn=d.ffn)
    total, _ = layer_params(block, h)
    total += d.input_projection_factor * h * h
    if d.draft_vocab_size is not None:
        total += d.draft_vocab_size * h
    return total


# ------------------------------------------------------------------ weight bytes


def _bytes(dtype: str) -> float:
    return DTYPE_BYTES[dtype]


def weight_bytes(arch: ModelArchitecture, tensor_parallel_size: int = 1,
                 expert_parallel_size: int = 1, drafter_modules: int = 0) -> float:
    """Weight bytes one GPU holds, for the target plus ``drafter_modules`` drafter modules.

    Experts are split over ``expert_parallel_size`` GPUs when it is > 1, else sliced over
    the ``tensor_parallel_size`` ranks; the embedding and LM head are vocab-parallel.
    ``weight_bytes(arch)`` is the whole model's weight bytes.
    """
    tp = tensor_parallel_size
    shard = expert_parallel_size if expert_parallel_size > 1 else tp
    h = arch.hidden_size
    w = _bytes(arch.weight_dtype)
    we = _bytes(arch.expert_weight_dtype or arch.weight_dtype)
    emb, head = embedding_params(arch)
    out = (emb + head) * _bytes(arch.embedding_dtype) / tp
    for b in arch.blocks:
        out += b.num_layers * _layer_weight_bytes(b.mixer, b.ffn, h, tp, shard, w, we)
    if drafter_modules and arch.drafter is not None:
        d = arch.drafter
        wd = _bytes(d.weight_dtype or arch.weight_dtype)
        wde = _bytes(d.weight_dtype or arch.expert_weight_dtype or arch.weight_dtype)
        per = _layer_weight_bytes(d.mixer, d.ffn, h, tp, shard, wd, wde)
        per += d.input_projection_factor * h * h * wd  # replicated projection
        if d.draft_vocab_size is not None:
            per += d.draft_vocab_size * h * _bytes(arch.embedding_dtype) / tp
        out += drafter_modules * per
    return out


def _layer_weight_bytes(mixer: AnyMixer, ffn: AnyFFN, h: int, tp: int,
                        shard: int, w: float, we: float) -> float:
    _, mixer_gpu = mixer_params(mixer, h, tp)
    router = _router_params(ffn, h)
    dense = ffn_dense_params(ffn, h) - router
    out = (mixer_gpu + dense / tp + router) * w
    if isinstance(ffn, MoEFFN):
        out += ffn.num_experts * expert_params(ffn, h) * we / shard
    return out


# ---------------------------------------------------------------- KV and states


def kv_bytes_per_token_per_layer(mixer: AnyMixer, kv_dtype: str,
                                 tp: int = 1) -> float:
    """KV-cache bytes one token adds to one layer, on one GPU of a ``tp``-way group.

    ``tp=1`` gives the whole layer's bytes. GQA splits KV heads over ranks (replicating
    when there are fewer heads than ranks); MLA's single latent is replicated.
    """
    b = _bytes(kv_dtype)
    if isinstance(mixer, AttentionMixer):
        return 2 * _ceil_div(mixer.num_kv_heads, tp) * mixer.head_dim * b
    if isinstance(mixer, MLAMixer):
        return (mixer.kv_lora_rank + mixer.qk_rope_head_dim) * b
    return 0.0


def state_bytes_per_layer(mixer: AnyMixer, state_dtype: str,
                          tp: int = 1) -> float:
    """Recurrent-state bytes of one request in one layer (SSM/delta state + conv window)."""
    b = _bytes(state_dtype)
    if isinstance(mixer, Mamba2Mixer):
        d_inner = mixer.num_heads * mixer.head_dim
        ssm = d_inner * mixer.state_size
        conv = (mixer.conv_kernel - 1) * (d_inner + 2 * mixer.num_groups * mixer.state_size)
        return (ssm + conv) * b / tp
    if isinstance(mixer, GatedDeltaNetMixer):
        ssm = mixer.num_value_heads * mixer.key_head_dim * mixer.value_head_dim
        conv = (mixer.conv_kernel - 1) * (2 * mixer.num_key_heads * mixer.key_head_dim
                                          + mixer.num_value_heads * mixer.value_head_dim)
        return (ssm + conv) * b / tp
    return 0.0


def drafter_kv_bytes_per_token(arch: ModelArchitecture, tp: int = 1) -> float:
    """KV bytes one token adds to one drafter module (0 without a drafter)."""
    if arch.drafter is None:
        return 0.0
    return kv_bytes_per_token_per_layer(arch.drafter.mixer, arch.kv_cache_dtype, tp)


def kv_bytes_per_token(arch: ModelArchitecture, tp: int = 1, drafter_modules: int = 0) -> float:
    """KV bytes per token across the target's attention layers and the drafter modules."""
    target = sum(b.num_layers * kv_bytes_per_token_per_layer(b.mixer, arch.kv_cache_dtype, tp)
                 for b in arch.blocks)
    return target + drafter_modules * drafter_kv_bytes_per_token(arch, tp)


def state_bytes_per_request(arch: ModelArchitecture, tp: int = 1) -> float:
    """Recurrent-state bytes one request holds across all Mamba / linear-attention layers."""
    return sum(b.num_layers * state_bytes_per_layer(b.mixer, arch.state_dtype, tp)
               for b in arch.blocks)


# ------------------------------------------------------------------------ FLOPs


def attention_flops_per_pair(mixer: AnyMixer, decode: bool) -> float:
    """FLOPs of one (query token, key token) pair in one layer: scores plus weighted sum.

    MLA decodes in the absorbed form (attending the latent, ``kv_lora + rope`` wide) and
    prefills in the expanded form (per-head ``qk_nope + rope`` and ``v`` dims).
    """
    if isinstance(mixer, AttentionMixer):
        return 4.0 * mixer.num_heads * mixer.head_dim
    if isinstance(mixer, MLAMixer):
        if decode:
            return 2.0 * mixer.num_heads * (2 * mixer.kv_lora_rank + mixer.qk_rope_head_dim)
        qk = mixer.qk_nope_head_dim + mixer.qk_rope_head_dim
        return 2.0 * mixer.num_heads * (qk + mixer.v_head_dim)
    return 0.0


def recurrent_flops_per_token(mixer: AnyMixer) -> float:
    """FLOPs of one token's state update and read-out in one recurrent layer (approximate).

    Mamba-2: decay, outer-product update and read-out, about 6 per state element.
    Gated DeltaNet: the delta rule reads S k before updating, about 8 per state element.
    """
    if isinstance(mixer, Mamba2Mixer):
        return 6.0 * mixer.num_heads * mixer.head_dim * mixer.state_size
    if isinstance(mixer, GatedDeltaNetMixer):
        return 8.0 * mixer.num_value_heads * mixer.key_head_dim * mixer.value_head_dim
    return 0.0


def linear_flops_per_token(arch: ModelArchitecture) -> float:
    """FLOPs of the target's matrix multiplies for one token, LM head included."""
    _, head = embedding_params(arch)
    if arch.tie_word_embeddings:
        head = float(arch.vocab_size * arch.hidden_size)
    layers = sum(b.num_layers * layer_params(b, arch.hidden_size)[1] for b in arch.blocks)
    return 2.0 * (layers + head)


def flops_per_token(arch: ModelArchitecture, context_tokens: int = 0) -> float:
    """Target FLOPs to compute one new token after ``context_tokens`` (linear + attention)."""
    attn = sum(b.num_layers * attention_flops_per_pair(b.mixer, decode=False)
               for b in arch.blocks)
    rec = sum(b.num_layers * recurrent_flops_per_token(b.mixer) for b in arch.blocks)
    ctx = float(context_tokens + 1)
    windowed = 0.0
    for b in arch.blocks:
        if isinstance(b.mixer, AttentionMixer) and b.mixer.sliding_window_tokens is not None:
            full = b.num_layers * attention_flops_per_pair(b.mixer, decode=False)
            windowed += full * (ctx - min(ctx, b.mixer.sliding_window_tokens))
    return linear_flops_per_token(arch) + rec + attn * ctx - windowed


def expected_experts_touched(num_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts ``tokens`` tokens route to, under uniform top-k routing.

    Each expert is missed by one token with probability ``1 - k/E``, so
    ``E * (1 - (1 - k/E) ** tokens)``; it tends to ``k * tokens`` for few tokens and to
    ``E`` for many.
    """
    if tokens <= 0:
        return 0.0
    if top_k >= num_experts:
        return float(num_experts)
    return num_experts * -math.expm1(tokens * math.log1p(-top_k / num_experts))
