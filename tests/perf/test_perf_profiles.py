"""Every shipped profile loads, names its sources, and maps onto pdsim's ModelConfig."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
import yaml

from pdsim.config import ModelConfig
from pdsim.errors import ConfigError
from pdsim.perf.architecture import MoEFFN
from pdsim.perf.profiles import (
    hardware_names,
    load_hardware,
    load_model_architecture,
    model_config_fields,
    model_names,
)
from pdsim.perf.routing import DEFAULT_ROUTING, FITTED_LOAD_CV

REQUIRED_HARDWARE = {"h100-sxm", "h200", "b200", "gb200", "mi300x"}
REQUIRED_MODELS = {"deepseek-v3", "inkling-small", "qwen3-next-80b-a3b", "llama-3.1-8b",
                   "llama-3.1-70b", "nemotron-h-8b"}


def _raw(kind: str, name: str) -> dict[str, Any]:
    path = resources.files("pdsim").joinpath("data").joinpath(kind).joinpath(f"{name}.yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_required_profiles_ship() -> None:
    assert set(hardware_names()) >= REQUIRED_HARDWARE
    assert set(model_names()) >= REQUIRED_MODELS


@pytest.mark.parametrize("name", sorted(REQUIRED_HARDWARE))
def test_hardware_figures_name_their_source(name: str) -> None:
    hw = load_hardware(name)
    assert hw.name == name
    figures = [f"dense_tflops.{p}" for p in hw.dense_tflops] + [
        "hbm_capacity_gib", "hbm_bandwidth_gb_per_s", "scale_up_bandwidth_gb_per_s",
        "scale_up_domain_gpus", "scale_out_bandwidth_gb_per_s"]
    for figure in figures:
        assert hw.sources.get(figure, "").strip(), f"{name}: no source for {figure}"
    # FP4 tensor cores exist on Blackwell only
    assert ("fp4" in hw.dense_tflops) == (name in {"b200", "gb200"})
    assert hw.peak_flops("fp4") == hw.peak_flops("fp4" if name in {"b200", "gb200"}
                                                  else "bf16")
    assert hw.dense_tflops["fp8"] == pytest.approx(2 * hw.dense_tflops["bf16"], rel=1e-3)


@pytest.mark.parametrize("name", sorted(REQUIRED_MODELS))
def test_model_profile_maps_onto_model_config(name: str) -> None:
    arch = load_model_architecture(name)
    assert arch.name == name and arch.sources
    fields = model_config_fields(name)
    model = ModelConfig.model_validate_json(json.dumps(fields))
    assert model.max_model_len == arch.max_model_len
    assert model.has_mamba == (name in {"qwen3-next-80b-a3b", "nemotron-h-8b"})
    if arch.drafter is not None and arch.drafter.kind == "mtp":
        assert model.num_mtp_modules == arch.drafter.num_modules
    else:
        assert model.num_mtp_modules == 0


def test_model_config_fields_by_hand() -> None:
    ds = model_config_fields("deepseek-v3")
    assert ds["layer_groups"] == [{"kind": "attention", "num_layers": 61,
                                   "kv_bytes_per_token_per_layer": 1152,
                                   "window_tokens": None, "state_bytes_per_layer": 0}]
    assert ds["num_mtp_modules"] == 1 and ds["mtp_kv_bytes_per_token_per_module"] == 1152
    ink = model_config_fields("inkling-small")
    assert ink["num_mtp_modules"] == 8
    assert ink["layer_groups"][0]["num_layers"] == 42
    fp8 = model_config_fields("deepseek-v3", kv_cache_dtype="fp8")
    assert fp8["layer_groups"][0]["kv_bytes_per_token_per_layer"] == 576


def test_inkling_marks_every_guess() -> None:
    raw = _raw("models", "inkling-small")
    estimated = raw["estimated"]
    for field in ("hidden_size", "vocab_size", "blocks.0.mixer", "drafter.ffn",
                  "kv_cache_dtype"):
        assert estimated.get(field), f"{field} should be marked estimated"
    for path in estimated:  # every key names a real field of the profile
        node: Any = raw
        for part in path.split("."):
            node = node[int(part)] if isinstance(node, list) else node[part]
    # the public facts are not marked as guesses
    for fact in ("blocks.0.num_layers", "drafter.num_modules", "weight_dtype"):
        assert fact not in estimated and fact in raw["sources"]
    arch = load_model_architecture("inkling-small")
    assert arch.weight_dtype == "nvfp4"
    assert arch.blocks[0].ffn.kind == "moe"
    ffn = arch.blocks[0].ffn
    assert (ffn.num_experts, ffn.top_k, ffn.num_shared_experts) == (256, 6, 1)


def test_unknown_profile_names_the_shipped_ones() -> None:
    with pytest.raises(ConfigError) as err:
        load_hardware("h9000")
    assert err.value.path == "step_time.hardware"
    assert "h100-sxm" in err.value.message
    with pytest.raises(ConfigError) as err:
        model_config_fields("gpt-7")
    assert err.value.path == "model.profile" and "deepseek-v3" in err.value.message


def test_inline_specs() -> None:
    hw = load_hardware({"name": "toy", "dense_tflops": {"bf16": 100},
                        "hbm_capacity_gib": 16, "hbm_bandwidth_gb_per_s": 1000,
                        "scale_up_bandwidth_gb_per_s": 100,
                        "scale_out_bandwidth_gb_per_s": 10})
    assert hw.peak_flops("fp8") == 100e12
    arch = load_model_architecture({
        "name": "toy-swa", "hidden_size": 1024, "vocab_size": 1000, "max_model_len": 4096,
        "blocks": [
            {"num_layers": 3, "mixer": {"kind": "attention", "num_heads": 8,
                                        "num_kv_heads": 2, "head_dim": 128,
                                        "sliding_window_tokens": 512},
             "ffn": {"kind": "dense", "intermediate_size": 4096}},
            {"num_layers": 1, "mixer": {"kind": "attention", "num_heads": 8,
                                        "num_kv_heads": 2, "head_dim": 128},
             "ffn": {"kind": "dense", "intermediate_size": 4096}}]})
    groups = model_config_fields(arch)["layer_groups"]
    assert [(g["kind"], g["num_layers"], g["window_tokens"]) for g in groups] == [
        ("sliding_window", 3, 512), ("attention", 1, None)]
    with pytest.raises(ConfigError) as err:
        load_model_architecture({"name": "bad", "hidden_size": 8, "vocab_size": 8,
                                 "max_model_len": 8, "blocks": [], "colour": "red"})
    assert {p for p, _ in err.value.issues} >= {"step_time.model.blocks",
                                                "step_time.model.colour"}


def test_moe_profiles_carry_the_one_fitted_popularity_skew() -> None:
    """The experts' popularity skew is one value fitted for every MoE model
    (docs/step-time.md, "Expert popularity skew"): no shipped MoE profile sets its own, each
    takes the fitted default and says where it comes from."""
    moe = [name for name in model_names()
           if any(isinstance(group.ffn, MoEFFN)
                  for group in load_model_architecture(name).blocks)]
    assert {"deepseek-v3", "qwen3-235b-a22b", "minimax-m2.5"} <= set(moe)
    for name in moe:
        assert "load_cv" not in _raw("models", name).get("routing", {}), name
        routing = load_model_architecture(name).routing
        assert routing.load_cv == FITTED_LOAD_CV, name
        assert routing.sources["load_cv"].startswith("fitted"), name
    assert DEFAULT_ROUTING.load_cv == FITTED_LOAD_CV
    assert DEFAULT_ROUTING.sources["load_cv"].startswith("fitted")
