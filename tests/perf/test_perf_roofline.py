"""The roofline step-time model: closed forms, monotonicity, magnitudes, drafter costs."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pdsim.config import Role
from pdsim.errors import ConfigError
from pdsim.loader import config_from_dict, load_config
from pdsim.perf.base import StepBatch
from pdsim.perf.build import build_step_time_model
from pdsim.perf.config import (
    CPU_COST_RULES,
    CPU_OVERHEAD_PER_REQUEST_S,
    CPU_OVERHEAD_S,
    RooflineStepTimeConfig,
)
from pdsim.perf.memory import smallest_fitting_tensor_parallel_size
from pdsim.perf.profiles import (
    hardware_names,
    load_hardware,
    load_model_architecture,
    model_config_fields,
    model_names,
)
from pdsim.perf.roofline import (
    FFN_KERNELS,
    FORWARD_KERNELS,
    MIXER_KERNELS,
    RooflineStepTime,
)


def decode(batch: int, ctx: int, drafts: int = 0) -> StepBatch:
    return StepBatch(0, 0.0, batch, batch * (1 + drafts), batch * ctx, 0)


def prefill(chunk: int, before: int = 0) -> StepBatch:
    return StepBatch(chunk, chunk * (before + (chunk + 1) / 2), 0, 0, 0, 0)


def model(name: str, hw: str = "h100-sxm", tp: int = 1, passes: int = 0, modules: int = 0,
          **kw: Any) -> RooflineStepTime:
    cfg = RooflineStepTimeConfig(model=name, hardware=hw, tensor_parallel_size=tp, **kw)
    return RooflineStepTime(cfg, passes, modules)


def _llama8b_fixed_s(cfg: RooflineStepTimeConfig, requests: int) -> float:
    """CPU + kernel latencies of one Llama-3.1-8B forward (32 attention + dense layers)."""
    kernels = FORWARD_KERNELS + 32 * (MIXER_KERNELS["attention"] + FFN_KERNELS["dense"])
    return (cfg.overhead_s + requests * cfg.overhead_per_request_s
            + kernels * cfg.kernel_latency_s)


def test_small_batch_decode_is_the_weight_read() -> None:
    """Llama-3.1-8B, batch 1: fixed costs + (layer weights + LM head) / effective bandwidth
    + this request's KV read + its logits, every other group far below its memory roof."""
    m = model("llama-3.1-8b")
    cfg = RooflineStepTimeConfig(model="llama-3.1-8b", hardware="h100-sxm")
    assert cfg.memory_efficiency == load_hardware("h100-sxm").kernels.memory_efficiency
    layer_params = 32 * 218_103_808
    head_params = 128256 * 4096
    bw = 3350e9 * cfg.memory_efficiency
    weights_s = 2 * (layer_params + head_params) / bw
    kv_s = (1024 + 1) * 32 * 4096 / bw
    logits_s = 128256 * 4.0 * 3 / bw
    expected = _llama8b_fixed_s(cfg, 1) + weights_s + kv_s + logits_s
    assert m.step_time_s(decode(1, 1024)) == pytest.approx(expected, rel=1e-9)


def test_large_prefill_is_compute_bound() -> None:
    """Prefill of 8k tokens: 2 x params FLOPs per token at the fitted GEMM efficiency for
    8k tokens, plus causal attention (pairs x 4 x heads x head_dim per layer)."""
    m = model("llama-3.1-8b")
    cfg = RooflineStepTimeConfig(model="llama-3.1-8b", hardware="h100-sxm")
    chunk = 8192
    peak = 989.4e12 * cfg.compute_efficiency
    half = cfg.gemm_half_tokens
    gemm_s = 2 * 32 * 218_103_808 * (chunk + half) / peak
    head_s = 2 * 128256 * 4096 * (1 + half) / peak
    pairs = chunk * (chunk + 1) / 2
    attn_s = pairs * 32 * 4 * 32 * 128 / (989.4e12 * cfg.attention_efficiency)
    logits_s = 128256 * 4.0 * 3 / (3350e9 * cfg.memory_efficiency)
    expected = _llama8b_fixed_s(cfg, 1) + gemm_s + head_s + attn_s + logits_s
    assert m.step_time_s(prefill(chunk)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("name,hw,tp", [("llama-3.1-8b", "h100-sxm", 1),
                                        ("deepseek-v3", "h200", 8),
                                        ("deepseek-v3", "h200", 1),
                                        ("qwen3-next-80b-a3b", "b200", 1),
                                        ("nemotron-h-8b", "mi300x", 1),
                                        ("inkling-small", "gb200", 4)])
def test_step_time_grows_with_batch_and_context(name: str, hw: str, tp: int) -> None:
    # tp 1 on an 8-GPU expert pool: attention data parallel, the busiest EP rank priced
    m = model(name, hw, tp, expert_parallel_size=8) if tp == 1 and name == "deepseek-v3" \
        else model(name, hw, tp)
    for ctx in (0, 1024, 16384):
        times = [m.step_time_s(decode(b, ctx)) for b in (1, 2, 8, 32, 128, 512, 2048)]
        assert times == sorted(times)
    for b in (1, 64):
        times = [m.step_time_s(decode(b, c)) for c in (0, 512, 4096, 32768)]
        assert times == sorted(times)
    chunks = [m.step_time_s(prefill(c)) for c in (16, 256, 2048, 8192)]
    assert chunks == sorted(chunks)
    assert m.step_time_s(prefill(1024, 8192)) > m.step_time_s(prefill(1024))


def test_decode_growth_follows_the_roofline() -> None:
    m = model("llama-3.1-8b")
    fixed = _llama8b_fixed_s(RooflineStepTimeConfig(model="llama-3.1-8b",
                                                    hardware="h100-sxm"), 0)
    # memory-bound: 16x the batch at short context costs little more than the weight read
    assert m.step_time_s(decode(16, 128)) < 1.1 * m.step_time_s(decode(1, 128))
    # compute-bound: doubling a very large batch nearly doubles the variable time
    big = (m.step_time_s(decode(8192, 1)) - fixed) / (m.step_time_s(decode(4096, 1)) - fixed)
    assert big == pytest.approx(2.0, rel=0.05)
    # KV reads are linear in context: equal context steps add equal time
    t = [m.step_time_s(decode(64, c)) for c in (4096, 8192, 12288)]
    assert t[2] - t[1] == pytest.approx(t[1] - t[0], rel=1e-9)
    # attention is quadratic in a chunk: between 2x and 4x the time for 2x the tokens
    ratio = (m.step_time_s(prefill(16384)) - fixed) / (m.step_time_s(prefill(8192)) - fixed)
    assert 2.0 < ratio < 4.0


def test_moe_weight_traffic_follows_experts_touched() -> None:
    m = model("deepseek-v3", "h200", 8)
    small = m.step_time_s(decode(16, 512)) - m.step_time_s(decode(1, 512))
    large = m.step_time_s(decode(256, 512)) - m.step_time_s(decode(241, 512))
    assert small > 5 * large  # the first tokens pull in new experts, later ones reuse them
    dense = model("llama-3.1-8b")
    ratio = dense.step_time_s(decode(16, 512)) / dense.step_time_s(decode(1, 512))
    assert m.step_time_s(decode(16, 512)) / m.step_time_s(decode(1, 512)) > ratio


def test_magnitudes_on_shipped_hardware() -> None:
    """A 70B-class dense decode step on one H100 is tens of milliseconds."""
    m70 = model("llama-3.1-70b", "h100-sxm", 1, weight_dtype="fp8")
    for b in (1, 8, 32, 64):
        for ctx in (512, 2048, 4096):
            assert 0.01 < m70.step_time_s(decode(b, ctx)) < 0.1
    assert 0.3 < m70.step_time_s(prefill(8192)) < 3.0
    m8 = model("llama-3.1-8b")
    assert 0.003 < m8.step_time_s(decode(1, 1024)) < 0.02
    ds = model("deepseek-v3", "h200", 8)
    assert 0.003 < ds.step_time_s(decode(1, 1024)) < 0.05
    assert 0.01 < ds.step_time_s(decode(64, 4096)) < 0.2
    # faster hardware is faster
    assert model("llama-3.1-8b", "b200").step_time_s(decode(8, 1024)) < \
        model("llama-3.1-8b", "h100-sxm").step_time_s(decode(8, 1024))


@pytest.mark.parametrize("name", sorted(model_names()))
def test_every_profile_on_every_gpu_is_sane(name: str) -> None:
    arch = load_model_architecture(name)
    for hw_name in hardware_names():
        tp = smallest_fitting_tensor_parallel_size(arch, load_hardware(hw_name))
        assert tp is not None and tp <= 16  # DeepSeek-V3 on 80 GB H100s needs two nodes
        m = model(name, hw_name, tp)
        assert 5e-4 < m.step_time_s(decode(1, 1024)) < 0.2
        assert 5e-4 < m.step_time_s(prefill(4096)) < 5.0


def test_drafter_costs() -> None:
    plain = model("inkling-small", "b200", 4)
    mtp1 = model("inkling-small", "b200", 4, passes=1, modules=1)
    mtp8 = model("inkling-small", "b200", 4, passes=8, modules=8)
    b = decode(32, 2048)
    assert plain.step_time_s(b) < mtp1.step_time_s(decode(32, 2048, 1)) \
        < mtp8.step_time_s(decode(32, 2048, 8))
    # verifying N+1 positions and drafting N times stays well below N+1 plain steps
    assert mtp8.step_time_s(decode(32, 2048, 8)) < 3 * plain.step_time_s(b)
    # multi-module MTP runs every module over the prefill; a reused module runs once
    reused = model("inkling-small", "b200", 4, passes=8, modules=1)
    assert mtp8.step_time_s(prefill(4096)) > reused.step_time_s(prefill(4096)) \
        > plain.step_time_s(prefill(4096))
    # the standalone repair re-prefills drafter positions
    repair = StepBatch(0, 0.0, 32, 32 * 9, 32 * 2048, 7)
    assert mtp8.step_time_s(repair) > mtp8.step_time_s(decode(32, 2048, 8))
    # EAGLE-3's head is a fraction of the target
    l8 = model("llama-3.1-8b")
    eagle = model("llama-3.1-8b", passes=3, modules=1)
    extra = eagle.step_time_s(decode(8, 1024, 3)) - l8.step_time_s(decode(8, 1024))
    assert 0 < extra < 0.5 * l8.step_time_s(decode(8, 1024))


def test_mixed_batch_between_parts_and_sum() -> None:
    m = model("llama-3.1-8b")
    mixed = StepBatch(2048, 2048 * 1024.5, 32, 32, 32 * 4096, 0)
    p = m.step_time_s(prefill(2048))
    d = m.step_time_s(decode(32, 4096))
    assert max(p, d) <= m.step_time_s(mixed) <= p + d


def test_parallelism() -> None:
    one = model("llama-3.1-70b", "h200", 1, weight_dtype="fp8").step_time_s(decode(8, 2048))
    four = model("llama-3.1-70b", "h200", 4, weight_dtype="fp8").step_time_s(decode(8, 2048))
    # weight reads split four ways; 160 all-reduces and the kernel latencies do not
    assert four < 0.7 * one
    ep = model("deepseek-v3", "h200", 8, expert_parallel_size=8)
    assert ep.step_time_s(decode(64, 1024)) > 0
    cross = model("deepseek-v3", "h200", 8, expert_parallel_size=32)
    # the 32-GPU expert group leaves the NVLink board: all-to-all over the network
    assert cross.step_time_s(prefill(8192)) > ep.step_time_s(prefill(8192))
    with pytest.raises(ValueError, match="multiple of"):
        RooflineStepTimeConfig(model="deepseek-v3", hardware="h200",
                               tensor_parallel_size=8, expert_parallel_size=12)


def test_step_is_cheap() -> None:
    m = model("inkling-small", "b200", 4, passes=8, modules=8)
    batches = [StepBatch(i % 3 * 512, (i % 3) * 512 * 700.0, 40 + i % 9, (40 + i % 9) * 9,
                         (40 + i % 9) * (1000 + i), i % 8) for i in range(2000)]
    start = time.perf_counter()
    for b in batches * 5:
        m.step_time_s(b)
    per_call = (time.perf_counter() - start) / 10_000
    assert per_call < 1e-4


# ------------------------------------------------------- through the root config


def sim_config(model_name: str, spec: dict[str, Any] | None = None,
               **step_time: Any) -> Any:
    data: dict[str, Any] = {
        "model": model_config_fields(model_name),
        "step_time": {"kind": "roofline", "model": model_name, **step_time},
    }
    if spec:
        data["speculative"] = spec
    return config_from_dict(data)


def test_built_from_the_root_config() -> None:
    cfg = sim_config("inkling-small", {"method": "mtp", "num_speculative_tokens": 8},
                     hardware="b200", tensor_parallel_size=4)
    stm = build_step_time_model(cfg, Role.DECODE)
    assert isinstance(stm, RooflineStepTime)
    assert stm.step_time_s(decode(16, 1024, 8)) > 0
    plain = build_step_time_model(sim_config("inkling-small", hardware="b200",
                                             tensor_parallel_size=4), Role.DECODE)
    assert stm.step_time_s(decode(16, 1024, 8)) > plain.step_time_s(decode(16, 1024, 8))


def test_roofline_config_errors() -> None:
    with pytest.raises(ConfigError) as err:
        sim_config("llama-3.1-70b", hardware="h100-sxm")
    assert err.value.path.startswith("step_time")
    assert "does not fit" in err.value.message
    assert "tensor_parallel_size >= 2" in err.value.message
    with pytest.raises(ConfigError) as err:
        sim_config("llama-3.1-8b", hardware="h1000")
    assert err.value.path == "step_time.hardware" and "h100-sxm" in err.value.message
    cfg = sim_config("llama-3.1-8b", {"method": "draft_model", "num_speculative_tokens": 3},
                     hardware="h100-sxm")
    with pytest.raises(ConfigError, match="separate draft model"):
        build_step_time_model(cfg, Role.DECODE)
    cfg = sim_config("llama-3.1-8b", {"method": "eagle3", "num_speculative_tokens": 3},
                     hardware="h100-sxm")
    assert build_step_time_model(cfg, Role.DECODE).step_time_s(decode(4, 100, 3)) > 0
    cfg = sim_config("nemotron-h-8b", {"method": "eagle3", "num_speculative_tokens": 2},
                     hardware="h100-sxm")
    with pytest.raises(ConfigError, match="has none"):
        build_step_time_model(cfg, Role.DECODE)


@pytest.mark.parametrize("rule", sorted(CPU_COST_RULES))
def test_cpu_cost_rule_prices_each_step_and_request(rule: str) -> None:
    # the rule's costs are what a step pays: per step plus per request in it, the GPU work
    # unchanged (the same batch under pdsim's rule differs by exactly the increments)
    per_step, per_request, eager = CPU_COST_RULES[rule]
    cfg = RooflineStepTimeConfig(model="llama-3.1-8b", hardware="h100-sxm",
                                 cpu_cost_rule=rule)
    assert (cfg.overhead_s, cfg.overhead_per_request_s, cfg.eager_kernel_s) == (
        per_step, per_request, eager)
    base, named = model("llama-3.1-8b"), RooflineStepTime(cfg)
    for batch in (1, 64, 512):
        extra = named.step_time_s(decode(batch, 2000)) - base.step_time_s(decode(batch, 2000))
        want = (per_step - CPU_OVERHEAD_S) + batch * (per_request - CPU_OVERHEAD_PER_REQUEST_S)
        assert extra == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_cpu_cost_rule_defaults_and_overrides() -> None:
    # pdsim's own rule is the default and keeps the fitted defaults (shipped configs and
    # the engine fingerprint unchanged); the Python schedulers' loops cost more per step
    # and per request than TensorRT-LLM's C++ executor, which keeps pdsim's
    default = RooflineStepTimeConfig(model="llama-3.1-8b", hardware="h200")
    assert default.cpu_cost_rule == "pdsim"
    assert CPU_COST_RULES["pdsim"][:2] == CPU_COST_RULES["trtllm"][:2] == (
        default.overhead_s, default.overhead_per_request_s)
    assert default.eager_kernel_s == 0.0 == CPU_COST_RULES["pdsim"][2]
    for rule in ("vllm", "sglang"):
        assert all(a > b for a, b in zip(CPU_COST_RULES[rule][:2], CPU_COST_RULES["pdsim"],
                                         strict=False))
    # only TensorRT-LLM's loop has a fitted cost for its steps without a CUDA graph
    assert CPU_COST_RULES["trtllm"][2] > 0
    assert CPU_COST_RULES["vllm"][2] == CPU_COST_RULES["sglang"][2] == 0.0
    vllm = RooflineStepTimeConfig(model="llama-3.1-8b", hardware="h200", cpu_cost_rule="vllm")
    assert "cpu_cost_rule vllm" in vllm.parameter_provenance
    # a value the config gives wins over the rule's, and is said to be the config's
    mine = RooflineStepTimeConfig(model="llama-3.1-8b", hardware="h200",
                                  cpu_cost_rule="vllm", overhead_s=1e-3)
    assert (mine.overhead_s, mine.overhead_per_request_s) == (1e-3, CPU_COST_RULES["vllm"][1])
    assert "CPU costs set in the config" in mine.parameter_provenance
    # a resolved config loads back to itself
    again = RooflineStepTimeConfig.model_validate(vllm.model_dump())
    assert again == vllm
    with pytest.raises(ConfigError) as err:
        sim_config("llama-3.1-8b", hardware="h200", cpu_cost_rule="tgi")
    assert err.value.path == "step_time.cpu_cost_rule" and "vllm" in err.value.message


@pytest.mark.parametrize("rule", ["vllm", "sglang", "pdsim"])
def test_async_scheduling_hides_the_loops_cpu_costs_under_the_gpu_step(rule: str) -> None:
    # async scheduling prepares the next step while the GPU runs this one: the step lasts
    # the longer of its CPU costs and its GPU work, never their sum
    sync_cfg = RooflineStepTimeConfig(model="llama-3.1-8b", hardware="h100-sxm",
                                      cpu_cost_rule=rule)
    sync = RooflineStepTime(sync_cfg)
    async_ = RooflineStepTime(sync_cfg.model_copy(update={"async_scheduling": True}))
    gpu_only = RooflineStepTime(sync_cfg.model_copy(
        update={"overhead_s": 0.0, "overhead_per_request_s": 0.0}))
    for batch in (decode(1, 500), decode(64, 2000), decode(512, 3000), prefill(4096),
                  StepBatch(256, 256 * 128.5, 31, 31, 31 * 1000)):
        r = batch.decode_requests + (1 if batch.prefill_tokens else 0)
        cpu = sync_cfg.overhead_s + sync_cfg.overhead_per_request_s * r
        gpu = gpu_only.step_time_s(batch)
        assert sync.step_time_s(batch) == pytest.approx(cpu + gpu, rel=1e-12)
        assert async_.step_time_s(batch) == pytest.approx(max(cpu, gpu), rel=1e-12)
        assert async_.step_time_s(batch) < sync.step_time_s(batch)
    # a small model's decode step at a large batch can be CPU-bound even so (vLLM's loop
    # costs 32 us a request): then the CPU cost is the step
    if rule == "vllm":
        batch = decode(512, 100)
        cpu = sync_cfg.overhead_s + sync_cfg.overhead_per_request_s * 512
        assert gpu_only.step_time_s(batch) < cpu == pytest.approx(async_.step_time_s(batch))


def test_moe_pair_cost_scales_with_the_hidden_width() -> None:
    # the per-pair work is one token's row of the hidden width: the fitted cost is at
    # DeepSeek-V3's 7,168, so a model of half the width pays half per pair
    from pdsim.perf.kernels import MOE_PAIR_HIDDEN_SIZE
    from pdsim.perf.profiles import load_model_architecture

    assert load_model_architecture("deepseek-v3").hidden_size == MOE_PAIR_HIDDEN_SIZE
    for name in ("deepseek-v3", "minimax-m2.5"):
        arch = load_model_architecture(name)
        costs = [RooflineStepTime(RooflineStepTimeConfig(
            model=name, hardware="b200", tensor_parallel_size=8, moe_pair_s=c))
            for c in (0.0, 1e-8)]
        n = 8192
        batch = prefill(n)
        pairs = sum(b.num_layers * b.ffn.top_k for b in arch.blocks
                    if hasattr(b.ffn, "top_k")) * n
        extra = costs[1].step_time_s(batch) - costs[0].step_time_s(batch)
        # every GPU of TP 8 handles every pair of its tokens (experts sliced), fp8 bytes 1
        assert extra == pytest.approx(pairs * 1e-8 * arch.hidden_size / MOE_PAIR_HIDDEN_SIZE,
                                      rel=1e-6)


def test_eager_steps_pay_the_host_launch_of_every_kernel() -> None:
    # a step with a prefill chunk runs without a CUDA graph: under the trtllm rule it pays
    # eager_kernel_s per kernel of the forward on top of pdsim's rule (whose is 0); a
    # decode-only step replays a graph and pays nothing more
    pdsim_rule = RooflineStepTime(RooflineStepTimeConfig(model="deepseek-v3", hardware="b200",
                                                         tensor_parallel_size=8))
    trt_cfg = RooflineStepTimeConfig(model="deepseek-v3", hardware="b200",
                                     tensor_parallel_size=8, cpu_cost_rule="trtllm")
    trt = RooflineStepTime(trt_cfg)
    kernels = trt._target.kernels
    assert kernels == 3 * (9 + 4) + 58 * (9 + 7 + 3) + 5  # DeepSeek-V3's 61 layers + head
    for batch in (decode(1, 1000), decode(256, 3000)):
        assert trt.step_time_s(batch) == pytest.approx(pdsim_rule.step_time_s(batch))
    for batch in (prefill(1024), StepBatch(512, 512 * 256.5, 63, 63, 63 * 2000)):
        extra = trt.step_time_s(batch) - pdsim_rule.step_time_s(batch)
        assert extra == pytest.approx(kernels * trt_cfg.eager_kernel_s, rel=1e-9)
    # a caller (an attention-DP engine) may declare a decode-only rank's step eager
    assert trt.step_time_s(decode(8, 1000), True) == pytest.approx(
        trt.step_time_s(decode(8, 1000)) + kernels * trt_cfg.eager_kernel_s)
    # an override wins and is said to be the config's
    mine = RooflineStepTimeConfig(model="deepseek-v3", hardware="b200", tensor_parallel_size=8,
                                  cpu_cost_rule="trtllm", eager_kernel_s=0.0)
    assert RooflineStepTime(mine).step_time_s(prefill(1024)) == pytest.approx(
        pdsim_rule.step_time_s(prefill(1024)))
    assert "CPU costs set in the config" in mine.parameter_provenance
    assert "cpu_cost_rule trtllm" in trt_cfg.parameter_provenance


def test_eager_drafter_forwards_pay_too() -> None:
    # under speculation each drafter forward of an eager step launches its kernels too
    base = {"model": "deepseek-v3", "hardware": "b200", "tensor_parallel_size": 8}
    plain = RooflineStepTime(RooflineStepTimeConfig(**base), draft_passes_decode=3,
                             draft_modules_prefill=1)
    cfg = RooflineStepTimeConfig(**base, cpu_cost_rule="trtllm")
    trt = RooflineStepTime(cfg, draft_passes_decode=3, draft_modules_prefill=1)
    assert trt._draft is not None
    mixed = StepBatch(512, 512 * 256.5, 16, 64, 16 * 2000)
    extra = trt.step_time_s(mixed) - plain.step_time_s(mixed)
    assert extra == pytest.approx((trt._target.kernels + 3 * trt._draft.kernels)
                                  * cfg.eager_kernel_s, rel=1e-9)
    assert trt.step_time_s(decode(16, 2000, 3)) == pytest.approx(
        plain.step_time_s(decode(16, 2000, 3)))


def test_a_decode_batch_without_a_captured_graph_runs_eagerly() -> None:
    # TensorRT-LLM's cuda_graph_config: with padding every batch up to the largest captured
    # size replays a graph, without it only the captured sizes do; a decode step that
    # replays none pays the eager launches, one that does pays nothing more
    base = {"model": "deepseek-v3", "hardware": "h200", "tensor_parallel_size": 8,
            "cpu_cost_rule": "trtllm"}
    every = RooflineStepTime(RooflineStepTimeConfig(**base))
    exact_cfg = RooflineStepTimeConfig(**base, cuda_graph_batch_sizes=(128,),
                                       cuda_graph_padding=False)
    exact = RooflineStepTime(exact_cfg)
    padded = RooflineStepTime(RooflineStepTimeConfig(**base, cuda_graph_batch_sizes=(64, 128)))
    launch = every._target.kernels * exact_cfg.eager_kernel_s
    for r in (1, 100, 128):
        plain = every.step_time_s(decode(r, 2000))
        assert padded.step_time_s(decode(r, 2000)) == pytest.approx(plain)
        want = plain if r == 128 else plain + launch
        assert exact.step_time_s(decode(r, 2000)) == pytest.approx(want)
        assert exact.runs_eager(decode(r, 2000)) is (r != 128)
    assert padded.runs_eager(decode(129, 2000)) and padded.runs_eager(prefill(64))
    # a YAML list is read as the tuple; an empty one is an error naming the field
    cfg = load_config({"model": {"profile": "deepseek-v3"}, "step_time": {
        **base, "kind": "roofline", "cuda_graph_batch_sizes": [128]}})
    assert cfg.step_time.cuda_graph_batch_sizes == (128,)
    with pytest.raises(ConfigError) as err:
        load_config({"model": {"profile": "deepseek-v3"}, "step_time": {
            **base, "kind": "roofline", "cuda_graph_batch_sizes": []}})
    assert err.value.path == "step_time.cuda_graph_batch_sizes"
    assert "at least 1 item" in str(err.value)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_qk_norm_across_heads_all_reduces_once_a_layer_under_tp(tp: int) -> None:
    """MiniMax-M2 normalises each token's whole query and key: a TP engine all-reduces two
    fp32 sums a token in every layer (and splits the norm's kernel around it); a per-head
    norm, or one GPU, needs nothing."""
    from pdsim.perf.collectives import allreduce_lines
    from pdsim.perf.roofline import QK_NORM_PARTIAL_BYTES, QK_NORM_SPLIT_KERNELS

    arch = load_model_architecture("minimax-m2.5")
    assert arch.blocks[0].mixer.qk_norm == "across_heads"
    per_head = arch.model_copy(update={"blocks": [
        b.model_copy(update={"mixer": b.mixer.model_copy(update={"qk_norm": "per_head"})})
        for b in arch.blocks]})
    cfgs = [RooflineStepTimeConfig(model=m, hardware="b200", tensor_parallel_size=tp,
                                   weight_dtype="nvfp4")
            for m in (arch, per_head)]
    across, plain = (RooflineStepTime(c) for c in cfgs)
    layers = sum(b.num_layers for b in arch.blocks)
    for batch in (decode(16, 2048), prefill(4096)):
        tokens = batch.prefill_tokens + batch.decode_tokens
        extra = across.step_time_s(batch) - plain.step_time_s(batch)
        if tp == 1:
            assert extra == 0.0
            continue
        c = cfgs[0]
        (c_lat, c_tok), (n_lat, n_tok) = allreduce_lines(
            tp, load_hardware("b200"), QK_NORM_PARTIAL_BYTES,
            nccl_latency_s=c.collective_latency_s,
            nccl_efficiency=c.communication_efficiency,
            custom_latency_s=c.custom_allreduce_latency_s,
            custom_efficiency=c.custom_allreduce_efficiency)
        one = min(c_lat + tokens * c_tok, n_lat + tokens * n_tok)
        assert one > 0.0
        assert extra == pytest.approx(layers * (one + QK_NORM_SPLIT_KERNELS
                                                * c.kernel_latency_s), rel=1e-9)


def test_a_qk_norm_adds_its_two_kernels_a_layer() -> None:
    """A per-head QK norm (Qwen3) adds the queries' and the keys' norm kernels to every
    layer, at any TP and batch; nothing else of the step changes."""
    from pdsim.perf.roofline import QK_NORM_KERNELS

    arch = load_model_architecture("qwen3-32b")
    assert {b.mixer.qk_norm for b in arch.blocks} == {"per_head"}
    none = arch.model_copy(update={"blocks": [
        b.model_copy(update={"mixer": b.mixer.model_copy(update={"qk_norm": "none"})})
        for b in arch.blocks]})
    layers = sum(b.num_layers for b in arch.blocks)
    for tp in (1, 4):
        cfgs = [RooflineStepTimeConfig(model=m, hardware="h100-sxm", tensor_parallel_size=tp)
                for m in (arch, none)]
        normed, plain = (RooflineStepTime(c) for c in cfgs)
        for batch in (decode(8, 1024), prefill(2048)):
            extra = normed.step_time_s(batch) - plain.step_time_s(batch)
            kernel = layers * QK_NORM_KERNELS * cfgs[0].kernel_latency_s
            if batch.prefill_tokens:  # a step without a CUDA graph launches them too
                kernel += layers * QK_NORM_KERNELS * cfgs[0].eager_kernel_s
            assert extra == pytest.approx(kernel, rel=1e-9)
