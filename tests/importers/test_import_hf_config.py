"""``config.json`` -> model profile, on real files of four model families
(tests/data/hf_configs/README.md says where each comes from).

Where pdsim ships a hand-written profile of the same model, the imported one must describe
the same layers, drafter and dtypes; Qwen3-30B-A3B, which pdsim has no profile of, is held
against its model card's parameter counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pdsim.errors import ConfigError, InputFileError
from pdsim.importers.hf_config import architecture_from_hf, read_hf_config
from pdsim.perf.architecture import AttentionMixer, Mamba2Mixer
from pdsim.perf.profiles import load_model_architecture, model_config_fields
from pdsim.perf.sizes import active_params, total_params

HF = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def _import(file: str, name: str = "imported"):  # type: ignore[no-untyped-def]
    return architecture_from_hf(read_hf_config(HF / file), name, file)


@pytest.mark.parametrize(("file", "shipped"), [
    ("Llama-3.1-8B.config.json", "llama-3.1-8b"),
    ("DeepSeek-V3.config.json", "deepseek-v3"),
    ("Qwen3-Next-80B-A3B-Thinking.config.json", "qwen3-next-80b-a3b"),
])
def test_imported_profile_matches_the_shipped_one(file: str, shipped: str) -> None:
    got = _import(file).arch
    want = load_model_architecture(shipped)
    assert got.blocks == want.blocks
    assert (got.hidden_size, got.vocab_size, got.max_model_len) == (
        want.hidden_size, want.vocab_size, want.max_model_len)
    assert (got.weight_dtype, got.embedding_dtype) == (want.weight_dtype, want.embedding_dtype)
    if want.drafter is not None and want.drafter.kind == "mtp":
        assert got.drafter == want.drafter
    ours, theirs = model_config_fields(got), model_config_fields(want)
    assert ours["layer_groups"] == theirs["layer_groups"]
    assert total_params(got) == pytest.approx(total_params(want))


def test_deepseek_reads_mla_moe_mtp_and_fp8() -> None:
    imp = _import("DeepSeek-V3.config.json")
    a = imp.arch
    assert [b.num_layers for b in a.blocks] == [3, 58]  # first_k_dense_replace: 3
    assert a.blocks[0].mixer.kind == "mla" and a.blocks[1].ffn.kind == "moe"
    assert a.drafter is not None and a.drafter.num_modules == 1
    assert imp.quantization == "fp8" and a.weight_dtype == "fp8"
    assert a.embedding_dtype == "bf16"
    assert imp.assumed == ()  # the file gives everything
    # published: 671B total, 37B activated (DeepSeek-V3 technical report)
    assert total_params(a) / 1e9 == pytest.approx(671, rel=0.01)
    assert active_params(a) / 1e9 == pytest.approx(37, rel=0.03)


def test_qwen3_moe_matches_its_model_card() -> None:
    a = _import("Qwen3-30B-A3B.config.json").arch
    assert len(a.blocks) == 1 and a.blocks[0].num_layers == 48
    ffn = a.blocks[0].ffn
    assert ffn.kind == "moe" and (ffn.num_experts, ffn.top_k) == (128, 8)
    assert a.drafter is None
    # Qwen3-30B-A3B model card: 30.5B parameters in total, 3.3B activated
    assert total_params(a) / 1e9 == pytest.approx(30.5, rel=0.01)
    assert active_params(a) / 1e9 == pytest.approx(3.3, rel=0.03)


def test_llama_head_dim_is_derived_and_said_to_be() -> None:
    imp = _import("Llama-3.1-8B.config.json")
    assert dict(imp.assumed)["head_dim"].startswith("128")
    assert imp.arch.estimated["head_dim"].startswith("128")


def test_qwen3_next_hybrid_layers_and_assumptions() -> None:
    imp = _import("Qwen3-Next-80B-A3B-Thinking.config.json")
    kinds = {b.mixer.kind: b.num_layers for b in imp.arch.blocks}
    assert kinds == {"gated_deltanet": 36, "attention": 12}  # full_attention_interval 4
    fields = model_config_fields(imp.arch)
    assert {g["kind"] for g in fields["layer_groups"]} == {"mamba", "attention"}
    assumed = dict(imp.assumed)
    assert "drafter.num_modules" in assumed and "blocks.mixer.output_gate" in assumed


# nvidia/Nemotron-H-8B-Base-8K's config.json as NVIDIA's Megatron-Bridge quotes it in a test
# fixture (tests/unit_tests/models/nemotronh/test_nemotron_h_bridge.py,
# `nemotronh_8b_config_dict`): trimmed there, so not stored as a whole file; the two keys
# that fixture adds for its mocks (hidden_act, n_routed_experts: None) are left out here.
NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "attention_head_dim": 128, "bos_token_id": 1,
    "chunk_size": 128, "conv_kernel": 4, "eos_token_id": 2, "expand": 2,
    "hidden_dropout": 0.0, "hidden_size": 4096,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "initializer_range": 0.02, "intermediate_size": 21504, "layer_norm_epsilon": 1e-05,
    "mamba_head_dim": 64, "mamba_hidden_act": "silu", "mamba_num_heads": 128,
    "mamba_proj_bias": False, "max_position_embeddings": 8192, "mlp_bias": False,
    "mlp_hidden_act": "relu2", "model_type": "nemotron_h", "n_groups": 8,
    "num_attention_heads": 32, "num_hidden_layers": 52, "num_key_value_heads": 8,
    "num_logits_to_keep": 1, "pad_token_id": 0, "rescale_prenorm_residual": True,
    "residual_in_fp32": False, "rms_norm_eps": 1e-05, "ssm_state_size": 128,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.48.0.dev0", "use_bias": False, "use_cache": True,
    "use_conv_bias": True, "use_mamba_kernels": True, "vocab_size": 131072,
}


def test_nemotron_h_matches_the_shipped_profile() -> None:
    imp = architecture_from_hf(NEMOTRON_H_8B, "nemotron-h-8b")
    want = load_model_architecture("nemotron-h-8b")
    assert imp.arch.blocks == want.blocks
    assert model_config_fields(imp.arch)["layer_groups"] == model_config_fields(
        want)["layer_groups"]
    assert imp.assumed == ()


# ---- layouts no real file here covers: shape-only dicts, not real configs ----------

_BASE = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000,
         "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}


def _kinds(cfg: dict[str, object]) -> dict[object, int]:
    arch = architecture_from_hf({**_BASE, **cfg}, "shape").arch
    return {(b.mixer.kind, getattr(b.mixer, "sliding_window_tokens", None), b.ffn.kind):
            b.num_layers for b in arch.blocks}


def test_layer_types_with_sliding_windows() -> None:
    got = _kinds({"num_hidden_layers": 6, "sliding_window": 128,
                  "layer_types": ["sliding_attention", "full_attention"] * 3})
    assert got == {("attention", 128, "dense"): 3, ("attention", None, "dense"): 3}


def test_sliding_window_pattern_and_gemma2_alternation() -> None:
    got = _kinds({"num_hidden_layers": 12, "sliding_window": 512,
                  "sliding_window_pattern": 6})
    assert got == {("attention", 512, "dense"): 10, ("attention", None, "dense"): 2}
    got = _kinds({"num_hidden_layers": 4, "sliding_window": 4096, "model_type": "gemma2"})
    assert got == {("attention", 4096, "dense"): 2, ("attention", None, "dense"): 2}


def test_a_disabled_sliding_window_is_full_attention() -> None:
    got = _kinds({"num_hidden_layers": 4, "sliding_window": 4096,
                  "use_sliding_window": False})
    assert got == {("attention", None, "dense"): 4}


def test_nemotron_h_pattern() -> None:
    cfg = {**_BASE, "num_hidden_layers": 6, "hybrid_override_pattern": "M-M*-E",
           "mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 64, "n_groups": 2,
           "conv_kernel": 4, "n_routed_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 128}
    arch = architecture_from_hf(cfg, "shape").arch
    counts = {(b.mixer.kind, b.ffn.kind): b.num_layers for b in arch.blocks}
    assert counts == {("mamba2", "none"): 2, ("none", "dense"): 2, ("attention", "none"): 1,
                      ("none", "moe"): 1}
    mamba = next(b.mixer for b in arch.blocks if isinstance(b.mixer, Mamba2Mixer))
    assert (mamba.num_heads, mamba.state_size, mamba.num_groups) == (8, 64, 2)
    mlp = next(b.ffn for b in arch.blocks if b.ffn.kind == "dense")
    assert mlp.gated is False  # squared ReLU, assumed and said
    attn = next(b.mixer for b in arch.blocks if isinstance(b.mixer, AttentionMixer))
    assert attn.num_kv_heads == 2


def test_missing_keys_are_named() -> None:
    with pytest.raises(ConfigError, match=r"x.json: num_hidden_layers: missing"):
        architecture_from_hf({"hidden_size": 8}, "m", "x.json")
    with pytest.raises(ConfigError, match=r"quantization_config.quant_method: 'bitsandbytes'"):
        architecture_from_hf({**_BASE, "num_hidden_layers": 2,
                              "quantization_config": {"quant_method": "bitsandbytes"}}, "m")
    with pytest.raises(ConfigError, match=r"layer_types: unsupported layer type\(s\) chunked"):
        architecture_from_hf({**_BASE, "num_hidden_layers": 2,
                              "layer_types": ["chunked", "full_attention"]}, "m")


def test_unreadable_files_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{\n  \"hidden_size\": ,\n}", encoding="utf-8")
    with pytest.raises(InputFileError, match=r"config.json:2:\d+: not valid JSON"):
        read_hf_config(bad)
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(InputFileError, match="expected a JSON object"):
        read_hf_config(bad)


@pytest.mark.parametrize(("rope_scaling", "context"), [
    (None, 40960),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    ({"type": "linear", "factor": 2.0}, 81920),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 40960),
    ({"rope_type": "longrope", "factor": 4.0}, 40960),
])
def test_context_follows_vllms_rope_scaling_rule(rope_scaling: object, context: int) -> None:
    """Qwen's model cards enable YaRN by adding rope_scaling to config.json; vLLM then
    serves 4 x 32,768 tokens, and so must the imported profile (and --max-model-len)."""
    cfg = read_hf_config(HF / "Qwen3-30B-A3B.config.json")
    imp = architecture_from_hf({**cfg, "rope_scaling": rope_scaling}, "q")
    assert imp.arch.max_model_len == context


@pytest.mark.parametrize(("cfg", "qk_norm"), [
    ({"use_qk_norm": True, "qk_norm_type": "per_layer"}, "across_heads"),  # MiniMax-M2
    ({"use_qk_norm": False, "qk_norm_type": "per_layer"}, "none"),
    ({"qk_norm_type": "per_head"}, "per_head"),
    ({}, "none"),
])
def test_qk_norm_type_is_read(cfg: dict[str, object], qk_norm: str) -> None:
    arch = architecture_from_hf({**_BASE, "num_hidden_layers": 2, **cfg}, "m").arch
    assert {b.mixer.qk_norm for b in arch.blocks} == {qk_norm}


def test_an_unknown_qk_norm_type_is_named() -> None:
    with pytest.raises(ConfigError, match=r"qk_norm_type: 'per_token'"):
        architecture_from_hf({**_BASE, "num_hidden_layers": 2, "qk_norm_type": "per_token"},
                             "m")
