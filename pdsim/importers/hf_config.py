"""A Hugging Face ``config.json``, read into a pdsim model profile (``ModelArchitecture``).

Every layer is classified on its own (token mixer: full, sliding-window or MLA attention,
Gated DeltaNet, Mamba-2 or none; feed-forward: dense, MoE or none) from the keys the model
families use: ``layer_types``, ``sliding_window`` / ``sliding_window_pattern``,
``full_attention_interval`` (Qwen3-Next), ``hybrid_override_pattern`` /
``layers_block_type`` (Nemotron-H), ``first_k_dense_replace`` / ``moe_layer_freq``
(DeepSeek), ``mlp_only_layers`` / ``decoder_sparse_step`` (Qwen MoE); identical layers are
then merged into blocks. MTP modules come from ``num_nextn_predict_layers`` or
``mtp_num_hidden_layers``, dtypes from ``torch_dtype`` and ``quantization_config``.

A value the file does not give is assumed, and every assumption is recorded (the profile's
``estimated`` map and the importer's report); a value pdsim needs and cannot assume is a
``ConfigError`` naming the file and the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from pdsim._model import MAX_TOKENS
from pdsim.errors import ConfigError, InputFileError, read_text_file
from pdsim.perf.architecture import (
    AnyFFN,
    AnyMixer,
    AttentionMixer,
    DenseFFN,
    DrafterSpec,
    DType,
    GatedDeltaNetMixer,
    LayerBlock,
    Mamba2Mixer,
    MLAMixer,
    ModelArchitecture,
    MoEFFN,
    NoFFN,
    NoMixer,
)

MAX_HF_INT = 2**31
"""The largest dimension or count a config.json may give: no model comes near it, and
every size derived from it stays finite."""
MAX_HF_LAYERS = 10_000
"""The most layers (``num_hidden_layers``) pdsim builds a profile for, checked before any
layer is built; the deepest published models have a few hundred."""

TORCH_DTYPES: dict[str, DType] = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16",
                                  "float32": "fp32", "float": "fp32"}
"""``torch_dtype`` (and vLLM ``--dtype``) names and the pdsim dtype each is."""


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The JSON object of a ``config.json``; errors name the file (and line)."""
    text = read_text_file(path, "a config.json")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(str(path), exc.lineno, f"not valid JSON: {exc.msg}",
                             column=exc.colno) from None
    except RecursionError:
        raise InputFileError(str(path), None, "nested too deeply for a config.json") from None
    if not isinstance(data, dict):
        raise InputFileError(str(path), 1, "expected a JSON object (a model's config.json)")
    return data


@dataclass(frozen=True)
class ImportedModel:
    """A model profile read from a ``config.json`` and what had to be assumed for it."""

    arch: ModelArchitecture
    assumed: tuple[tuple[str, str], ...]
    """(profile field, why this value) for every value the file did not give."""
    quantization: str | None
    """The file's ``quantization_config.quant_method`` (None: unquantised)."""


class _Reader:
    """Typed access to a config.json's keys, recording every assumed value."""

    def __init__(self, cfg: Mapping[str, Any], source: str) -> None:
        text = cfg.get("text_config")  # multimodal wrappers keep the LM in text_config
        self.cfg: dict[str, Any] = {**cfg, **text} if isinstance(text, dict) else dict(cfg)
        self.source = source
        self.assumed: list[tuple[str, str]] = []

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def first(self, *keys: str) -> Any:
        for k in keys:
            if self.cfg.get(k) is not None:
                return self.cfg[k]
        return None

    def int(self, *keys: str, default: int | None = None, why: str = "",
            field: str = "", minimum: int = 0) -> int:
        v = self.first(*keys)
        if v is None:
            if default is None:
                raise ConfigError(f"{self.source}: {keys[0]}", "missing; pdsim needs it "
                                  "to build the model profile")
            self.assumed.append((field or keys[0], f"{default} ({why})"))
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            what = "a non-negative" if minimum == 0 else f"a (>= {minimum})"
            raise ConfigError(f"{self.source}: {keys[0]}",
                              f"expected {what} whole number, got {str(v)[:40]!r}")
        if v > MAX_HF_INT:
            raise ConfigError(f"{self.source}: {keys[0]}",
                              f"{v} is too large (at most {MAX_HF_INT:,})")
        return v

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key}", message)


def _rope_scaled_context(rope_scaling: Any, max_len: int) -> int:
    """The context vLLM derives from ``max_len`` and ``rope_scaling`` (its model config's
    ``_get_and_verify_max_len``): every RoPE scaling but ``su``, ``longrope`` and
    ``llama3`` multiplies it by ``factor``, YaRN starting from
    ``original_max_position_embeddings``."""
    if not isinstance(rope_scaling, dict):
        return max_len
    kind = rope_scaling.get("rope_type", rope_scaling.get("type"))
    factor = rope_scaling.get("factor")
    if kind in ("su", "longrope", "llama3") or not isinstance(factor, int | float):
        return max_len
    base = rope_scaling.get("original_max_position_embeddings", max_len)
    return int((base if kind == "yarn" and isinstance(base, int) else max_len) * factor)


def _attention(r: _Reader, window: int | None) -> AnyMixer:
    if r.has("kv_lora_rank"):
        return MLAMixer(num_heads=r.int("num_attention_heads"),
                        q_lora_rank=r.first("q_lora_rank"),
                        kv_lora_rank=r.int("kv_lora_rank"),
                        qk_nope_head_dim=r.int("qk_nope_head_dim"),
                        qk_rope_head_dim=r.int("qk_rope_head_dim"),
                        v_head_dim=r.int("v_head_dim"))
    heads = r.int("num_attention_heads", minimum=1)
    hidden = r.int("hidden_size")
    gate = r.cfg.get("attn_output_gate")
    if gate is None and r.cfg.get("model_type") == "qwen3_next":
        gate = True
        r.assumed.append(("blocks.mixer.output_gate", "true (Qwen3-Next's gated attention; "
                          "its config.json has no attn_output_gate)"))
    return AttentionMixer(
        num_heads=heads,
        num_kv_heads=r.int("num_key_value_heads", default=heads, field="num_kv_heads",
                           why="no num_key_value_heads: multi-head attention"),
        head_dim=r.int("head_dim", "attention_head_dim", default=hidden // heads,
                       field="head_dim",
                       why="no head_dim: hidden_size / num_attention_heads"),
        sliding_window_tokens=window,
        output_gate=bool(gate),
        qk_norm=_qk_norm(r))


def _qk_norm(r: _Reader) -> Literal["none", "per_head", "across_heads"]:
    """``qk_norm`` from ``qk_norm_type`` (MiniMax-M2's ``per_layer``: one norm over all
    heads, all-reduced under tensor parallelism); a config without it says nothing."""
    kind = r.cfg.get("qk_norm_type")
    if kind is None or r.cfg.get("use_qk_norm") is False:
        return "none"
    if kind == "per_layer":
        return "across_heads"
    if kind == "per_head":
        return "per_head"
    raise r.fail("qk_norm_type", f"{kind!r}: expected 'per_layer' or 'per_head'")


def _mixer_kinds(r: _Reader, n: int) -> list[str]:
    """Per layer: attention, sliding, linear, mamba or none."""
    layer_types = r.first("layer_types")
    if isinstance(layer_types, list):
        if len(layer_types) < n:
            raise r.fail("layer_types", f"{len(layer_types)} entries for {n} layers")
        known = {"full_attention": "attention", "sliding_attention": "sliding",
                 "linear_attention": "linear", "mamba": "mamba"}
        unknown = sorted({t for t in layer_types[:n] if t not in known})
        if unknown:
            raise r.fail("layer_types", f"unsupported layer type(s) {', '.join(unknown)}; "
                         f"pdsim reads {', '.join(known)}")
        return [known[t] for t in layer_types[:n]]
    interval = r.first("full_attention_interval")
    if interval:
        return ["attention" if (i + 1) % int(interval) == 0 else "linear" for i in range(n)]
    window = r.first("sliding_window")
    if not window or r.cfg.get("use_sliding_window") is False:
        return ["attention"] * n
    pattern = r.first("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 0:  # Gemma 3: every pattern-th layer is global
        return ["attention" if (i + 1) % pattern == 0 else "sliding" for i in range(n)]
    if r.cfg.get("model_type") == "gemma2":  # Gemma 2 alternates, sliding first
        return ["sliding" if i % 2 == 0 else "attention" for i in range(n)]
    if r.cfg.get("use_sliding_window") and r.has("max_window_layers"):  # Qwen2
        m = r.int("max_window_layers")
        return ["sliding" if i >= m else "attention" for i in range(n)]
    return ["sliding"] * n


def _moe(r: _Reader) -> MoEFFN | None:
    experts = r.first("n_routed_experts", "num_experts", "num_local_experts")
    if not experts:
        return None
    shared = r.first("n_shared_experts") or 0
    shared_size = r.first("shared_expert_intermediate_size")
    if not shared and shared_size:
        shared = 1
    if not r.has("moe_intermediate_size"):
        r.assumed.append(("blocks.ffn.expert_intermediate_size", "intermediate_size (no "
                          "moe_intermediate_size: each expert is an MLP of that width)"))
    return MoEFFN(num_experts=int(experts),
                  top_k=r.int("num_experts_per_tok", "experts_per_token", "moe_topk"),
                  expert_intermediate_size=r.int("moe_intermediate_size", "intermediate_size"),
                  num_shared_experts=int(shared),
                  shared_expert_intermediate_size=shared_size or None)


def _is_moe_layer(r: _Reader, i: int) -> bool:
    if i < (r.first("first_k_dense_replace") or 0):
        return False
    freq = r.first("moe_layer_freq")
    if isinstance(freq, int) and freq > 1 and i % freq:
        return False
    if i in (r.first("mlp_only_layers") or []):
        return False
    step = r.first("decoder_sparse_step") or 1
    return (i + 1) % int(step) == 0


def _hybrid_pattern(r: _Reader, n: int) -> list[str] | None:
    """Nemotron-H's one-kind-per-layer pattern, as M / * / - / E characters."""
    pattern = r.first("hybrid_override_pattern")
    if isinstance(pattern, str):
        chars = list(pattern)
        key = "hybrid_override_pattern"
    else:
        types = r.first("layers_block_type")
        if not isinstance(types, list):
            return None
        names = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
        bad = sorted({str(t) for t in types if t not in names})
        if bad:
            raise r.fail("layers_block_type", f"unsupported block type(s) {', '.join(bad)}")
        chars = [names[t] for t in types]
        key = "layers_block_type"
    if len(chars) != n or any(c not in "M*-E" for c in chars):
        raise r.fail(key, f"expected {n} layers of M (Mamba-2), * (attention), - (MLP) or "
                     f"E (MoE), got {''.join(chars)!r}")
    return chars


def _mamba(r: _Reader) -> Mamba2Mixer:
    return Mamba2Mixer(num_heads=r.int("mamba_num_heads"), head_dim=r.int("mamba_head_dim"),
                       state_size=r.int("ssm_state_size"),
                       num_groups=r.int("n_groups", "mamba_n_groups", default=1,
                                        field="mamba.num_groups", why="no n_groups"),
                       conv_kernel=r.int("conv_kernel", "mamba_d_conv", default=4,
                                         field="mamba.conv_kernel", why="no conv_kernel"))


def _layers(r: _Reader) -> list[tuple[AnyMixer, AnyFFN]]:
    n = r.int("num_hidden_layers")
    if n < 1:
        raise r.fail("num_hidden_layers", "must be at least 1")
    if n > MAX_HF_LAYERS:
        raise r.fail("num_hidden_layers", f"{n:,} layers; pdsim builds at most "
                     f"{MAX_HF_LAYERS:,}")
    dense = DenseFFN(intermediate_size=r.int("intermediate_size"))
    pattern = _hybrid_pattern(r, n)
    if pattern is not None:
        act = str(r.cfg.get("mlp_hidden_act", "relu2"))
        if not r.has("mlp_hidden_act"):
            r.assumed.append(("blocks.ffn.gated", "false (no mlp_hidden_act: Nemotron-H's "
                              "squared-ReLU MLP, two matrices)"))
        mlp = DenseFFN(intermediate_size=dense.intermediate_size,
                       gated=act not in ("relu2", "squared_relu", "relu", "gelu"))
        moe = _moe(r) if "E" in pattern else None
        kinds: dict[str, tuple[AnyMixer, AnyFFN]] = {
            "M": (_mamba(r) if "M" in pattern else NoMixer(), NoFFN()),
            "*": (_attention(r, None), NoFFN()),
            "-": (NoMixer(), mlp),
            "E": (NoMixer(), moe if moe is not None else NoFFN())}
        return [kinds[c] for c in pattern]
    kinds_per_layer = _mixer_kinds(r, n)
    window = (r.int("sliding_window", minimum=1) if "sliding" in kinds_per_layer else None)
    if window is not None and window >= MAX_TOKENS:
        # a window no sequence pdsim runs can outgrow: the layers attend every token
        kinds_per_layer = ["attention" if k == "sliding" else k for k in kinds_per_layer]
        window = None
    mixers: dict[str, AnyMixer] = {}
    out: list[tuple[AnyMixer, AnyFFN]] = []
    moe = _moe(r)
    for i, kind in enumerate(kinds_per_layer):
        if kind not in mixers:
            if kind == "attention":
                mixers[kind] = _attention(r, None)
            elif kind == "sliding":
                mixers[kind] = _attention(r, window)
            elif kind == "linear":
                mixers[kind] = GatedDeltaNetMixer(
                    num_key_heads=r.int("linear_num_key_heads"),
                    num_value_heads=r.int("linear_num_value_heads"),
                    key_head_dim=r.int("linear_key_head_dim"),
                    value_head_dim=r.int("linear_value_head_dim"),
                    conv_kernel=r.int("linear_conv_kernel_dim", default=4,
                                      field="gated_deltanet.conv_kernel",
                                      why="no linear_conv_kernel_dim"))
            else:
                mixers[kind] = _mamba(r)
        ffn: AnyFFN = moe if moe is not None and _is_moe_layer(r, i) else dense
        out.append((mixers[kind], ffn))
    return out


def _blocks(layers: list[tuple[AnyMixer, AnyFFN]]) -> tuple[LayerBlock, ...]:
    """Identical layers merged into blocks, in order of first appearance."""
    counts: dict[tuple[str, str], tuple[AnyMixer, AnyFFN, int]] = {}
    for mixer, ffn in layers:
        key = (mixer.model_dump_json(), ffn.model_dump_json())
        m, f, c = counts.get(key, (mixer, ffn, 0))
        counts[key] = (m, f, c + 1)
    return tuple(LayerBlock(num_layers=c, mixer=m, ffn=f) for m, f, c in counts.values())


def _drafter(r: _Reader, layers: list[tuple[AnyMixer, AnyFFN]]) -> DrafterSpec | None:
    modules = r.first("num_nextn_predict_layers", "mtp_num_hidden_layers")
    if modules is None and r.cfg.get("model_type") == "qwen3_next":
        modules = 1
        r.assumed.append(("drafter.num_modules", "1 (Qwen3-Next's config.json does not "
                          "count its MTP layer; the model card ships one)"))
    if not modules:
        return None
    attn = [(m, f) for m, f in layers if isinstance(m, AttentionMixer | MLAMixer)
            and not (isinstance(m, AttentionMixer) and m.sliding_window_tokens)]
    if not attn:
        raise r.fail("num_nextn_predict_layers", "MTP modules need a full-attention layer "
                     "to copy, and this model has none")
    mixer, ffn = attn[-1]
    if isinstance(ffn, NoFFN):
        ffn = next((f for _, f in layers if not isinstance(f, NoFFN)), ffn)
    return DrafterSpec(kind="mtp", num_modules=int(modules), mixer=mixer, ffn=ffn,
                       input_projection_factor=2)


def _quant_dtype(q: Mapping[str, Any], source: str) -> tuple[DType | None, DType | None]:
    """(weight dtype, expert weight dtype) a ``quantization_config`` stores."""
    method = str(q.get("quant_method", "")).lower()
    where = f"{source}: quantization_config.quant_method"
    if method == "fp8":
        return "fp8", None
    if method == "mxfp4":  # gpt-oss: MoE experts in MXFP4, attention left in bf16
        return None, "mxfp4"
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        if algo in ("FP8", "NVFP4"):
            return ("fp8" if algo == "FP8" else "nvfp4"), None
        raise ConfigError(where, f"modelopt quant_algo {algo!r}: pdsim reads FP8 and NVFP4")
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = q.get("bits", q.get("w_bit", 4))
        return ("int4" if bits == 4 else "int8"), None
    if method == "compressed-tensors":
        for group in (q.get("config_groups") or {}).values():
            w = group.get("weights") or {}
            bits, kind = w.get("num_bits"), w.get("type")
            table: dict[tuple[Any, Any], DType] = {
                (8, "float"): "fp8", (8, "int"): "int8", (4, "int"): "int4",
                (4, "float"): "nvfp4"}
            if (bits, kind) in table:
                return table[(bits, kind)], None
        raise ConfigError(where, "compressed-tensors config_groups without 8- or 4-bit "
                          "weights pdsim can read")
    raise ConfigError(where, f"{method!r} is not a quantization pdsim reads (fp8, mxfp4, "
                      f"modelopt, awq, gptq, compressed-tensors)")


def architecture_from_hf(cfg: Mapping[str, Any], name: str,
                         source: str = "config.json") -> ImportedModel:
    """The model profile a ``config.json`` describes. ``source`` names the file in errors
    and in the profile's ``sources``. Raises ``ConfigError``."""
    try:
        return _architecture(cfg, name, source)
    except ValidationError as exc:  # values each in range whose combination is no model
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(source, f"these values give no valid model: {exc.title} "
                          f"{where}: {err['msg']}") from None
    except (ArithmeticError, ValueError, TypeError) as exc:  # e.g. a string where a count is
        raise ConfigError(source, f"these values give no valid model ({exc})") from None


def _architecture(cfg: Mapping[str, Any], name: str, source: str) -> ImportedModel:
    r = _Reader(cfg, source)
    layers = _layers(r)
    torch_dtype = r.first("torch_dtype", "dtype")
    if torch_dtype is None:
        r.assumed.append(("weight_dtype", "bf16 (no torch_dtype)"))
    dtype = TORCH_DTYPES.get(str(torch_dtype or "bfloat16"))
    if dtype is None:
        raise r.fail("torch_dtype", f"{torch_dtype!r}: expected one of "
                     f"{', '.join(TORCH_DTYPES)}")
    q = r.first("quantization_config")
    weight, expert = _quant_dtype(q, source) if isinstance(q, dict) else (None, None)
    max_len = r.first("max_position_embeddings", "max_sequence_length", "seq_length",
                      "n_positions")
    if not isinstance(max_len, int) or max_len < 1:
        raise r.fail("max_position_embeddings", "missing; pdsim needs the context limit "
                     "(or give --max-model-len on the command line)")
    max_len = _rope_scaled_context(r.first("rope_scaling"), max_len)
    if not r.has("tie_word_embeddings"):
        r.assumed.append(("tie_word_embeddings", "false (not given)"))
    arch = ModelArchitecture(
        name=name,
        display_name=f"{name} (imported from {Path(source).name})",
        hidden_size=r.int("hidden_size"),
        vocab_size=r.int("vocab_size"),
        tie_word_embeddings=bool(r.cfg.get("tie_word_embeddings", False)),
        max_model_len=max_len,
        blocks=_blocks(layers),
        drafter=_drafter(r, layers),
        weight_dtype=weight or dtype,
        expert_weight_dtype=expert,
        embedding_dtype=dtype,
        kv_cache_dtype=dtype,
        state_dtype=dtype,
        activation_dtype="bf16" if dtype == "fp32" else dtype,
        sources={"architecture": source},
        estimated={k: v for k, v in r.assumed},
        notes="written by `pdsim import-vllm`",
    )
    return ImportedModel(arch=arch, assumed=tuple(dict(r.assumed).items()),
                         quantization=(str(q.get("quant_method")) if isinstance(q, dict)
                                       else None))
