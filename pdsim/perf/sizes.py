"""Sizes of a model architecture: parameter counts, weight, KV and state bytes, FLOPs.

Pure functions of the architecture schema (``pdsim.perf.architecture``), per GPU where a
tensor-parallel size is given; the memory model, the roofline and the profile report read
them.
"""

from __future__ import annotations

import math

from pdsim.kv_layout import block_bytes_per_token
from pdsim.perf.architecture import (
    DTYPE_BYTES,
    AnyFFN,
    AnyMixer,
    AttentionMixer,
    DenseFFN,
    GatedDeltaNetMixer,
    LayerBlock,
    Mamba2Mixer,
    MLAMixer,
    ModelArchitecture,
    MoEFFN,
)


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

    Experts are split over ``expert_parallel_size`` GPUs when it is at least
    ``tensor_parallel_size``, else sliced over the ``tensor_parallel_size`` ranks (the
    hybrid layout, experts over groups each slicing its own, holds the same bytes per
    GPU); the embedding and LM head are vocab-parallel.
    ``weight_bytes(arch)`` is the whole model's weight bytes.
    """
    tp = tensor_parallel_size
    shard = max(expert_parallel_size, tp)  # each GPU holds 1/shard of the experts
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


def pool_block_bytes_per_token(arch: ModelArchitecture, tp: int = 1,
                               drafter_modules: int = 0) -> float:
    """Per-GPU bytes per token of the KV pool's block (``kv_layout.block_bytes_per_token``:
    the full-attention and drafter KV, the sliding-window layers' only when every layer
    slides); sliding-window layers are charged in blocks of it as their windows fill."""
    sliding = sum(b.num_layers * kv_bytes_per_token_per_layer(b.mixer, arch.kv_cache_dtype, tp)
                  for b in arch.blocks
                  if isinstance(b.mixer, AttentionMixer) and b.mixer.sliding_window_tokens)
    return block_bytes_per_token(kv_bytes_per_token(arch, tp, drafter_modules) - sliding,
                                 sliding)


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
