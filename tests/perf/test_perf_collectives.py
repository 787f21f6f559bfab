"""Collectives from placement: the fitted constants reproduce their published tables, the
laws follow the placement (node, domain, routing, dtype), and the roofline uses them."""

from __future__ import annotations

from statistics import median

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pdsim.perf import collective_data as D
from pdsim.perf import collectives as C
from pdsim.perf.base import StepBatch
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.perf.kernels import CUSTOM_ALLREDUCE_EFFICIENCY, CUSTOM_ALLREDUCE_LATENCY_S
from pdsim.perf.profiles import load_hardware, load_model_architecture
from pdsim.perf.roofline import RooflineStepTime

H100 = load_hardware("h100-sxm")
GB200 = load_hardware("gb200")
NCCL = {"nccl_latency_s": 27.1e-6, "nccl_efficiency": 0.759,
        "custom_latency_s": CUSTOM_ALLREDUCE_LATENCY_S,
        "custom_efficiency": CUSTOM_ALLREDUCE_EFFICIENCY}


def test_custom_allreduce_fit_reproduces_the_sglang_table() -> None:
    """docs/step-time.md: median 16.8%, worst 28.6% on the 18 timings."""
    err = abs(D.custom_allreduce_errors(CUSTOM_ALLREDUCE_LATENCY_S,
                                        CUSTOM_ALLREDUCE_EFFICIENCY))
    assert len(err) == 18
    assert median(err) <= 0.17
    assert max(err) <= 0.29


def test_deepep_fit_reproduces_the_low_latency_table() -> None:
    """docs/step-time.md: median 2.1%, worst 7.4% on the 12 timings."""
    err = abs(D.deepep_errors(C.DEEPEP_DISPATCH_FIXED_S, C.DEEPEP_COMBINE_FIXED_S,
                              C.DEEPEP_NVLINK_EFFICIENCY, C.DEEPEP_RDMA_EFFICIENCY))
    assert len(err) == 12
    assert median(err) <= 0.025
    assert max(err) <= 0.075


def test_alltoall_law_matches_its_data_module() -> None:
    """The roofline's line and the fitted law are one formula: at DeepEP's shape on an
    H100 board + NIC (nominal NVLink 450 GB/s is not H800's 200, so compare at EP >= 32,
    where RDMA sets the time) the line reproduces the fitted prediction."""
    for ep in (32, 64, 128, 256):
        ll, _ = C.alltoall_lines(ep, H100, top_k=8, hidden=7168,
                                 dispatch_bytes=C.DISPATCH_BYTES["fp8"], combine_bytes=2.0,
                                 max_nodes_per_token=None)
        layer = ll[0] + 128 * ll[1]
        i = D.DEEPEP_EP.index(ep)
        measured = (D.DEEPEP_LL_DISPATCH_US[i] + D.DEEPEP_LL_COMBINE_US[i]) * 1e-6
        assert layer == pytest.approx(measured, rel=0.08)


@given(st.integers(2, 8), st.floats(1.0, 1e7))
def test_custom_kernel_wins_small_nccl_large(g: int, nbytes: float) -> None:
    small, nccl = C.allreduce_lines(g, H100, 1.0, **NCCL)
    custom_t = small[0] + nbytes * small[1]
    nccl_t = nccl[0] + nbytes * nccl[1]
    if nbytes <= 64 * 1024:
        assert custom_t < nccl_t
    if nbytes >= 8 * 2**20:
        assert nccl_t < custom_t


def test_across_nodes_only_nccl_and_bytes_split_per_nic() -> None:
    small, nccl = C.allreduce_lines(16, H100, 1.0, **NCCL)
    assert small == nccl  # no custom kernel spans nodes
    assert nccl[0] == pytest.approx(H100.scale_out_collective_latency_s)
    # every byte over the NIC (the old rule) is n = 8 times the hierarchical NIC phase
    all_over_nic = 2 * 15 / 16 / (50e9 * 0.759)
    assert nccl[1] < 0.5 * all_over_nic


def test_one_nvl72_domain_needs_no_rdma() -> None:
    ll, normal = C.alltoall_lines(32, GB200, top_k=8, hidden=7168,
                                  dispatch_bytes=C.DISPATCH_BYTES["fp8"],
                                  combine_bytes=2.0, max_nodes_per_token=4)
    nvlink = GB200.scale_up_bandwidth_gb_per_s * 1e9 * C.DEEPEP_NVLINK_EFFICIENCY
    assert ll[1] == pytest.approx(8 * 31 / 32 * 7168 * (C.DISPATCH_BYTES["fp8"] + 2) / nvlink)
    assert normal == ll


def test_node_limited_routing_cuts_normal_kernel_network_bytes() -> None:
    args = {"top_k": 8, "hidden": 7168, "dispatch_bytes": 1.03, "combine_bytes": 2.0}
    _, free = C.alltoall_lines(64, H100, max_nodes_per_token=None, **args)
    _, limited = C.alltoall_lines(64, H100, max_nodes_per_token=4, **args)
    ll, _ = C.alltoall_lines(64, H100, max_nodes_per_token=4, **args)
    assert limited[1] < free[1] < ll[1]  # per node < per copy; at most 4 nodes < ~4.9


def _model(**over: object) -> RooflineStepTime:
    cfg = {"kind": "roofline", "model": "deepseek-v3", "hardware": "b200",
           "tensor_parallel_size": 8, "expert_weight_dtype": "nvfp4", **over}
    return RooflineStepTime(RooflineStepTimeConfig.model_validate(cfg))


def test_ep_equal_tp_all_reduces_and_ep_over_dp_ranks_all_to_alls() -> None:
    same = _model(expert_parallel_size=8)._target
    assert same.a2a_count == 0
    assert same.ar_count == 2 * 61  # after attention and after every FFN
    dp = _model(tensor_parallel_size=1, expert_parallel_size=8)._target
    assert dp.ar_count == 0
    assert dp.a2a_count == 2 * 58  # dispatch and combine around the 58 MoE layers


def test_dispatch_dtype_follows_the_experts() -> None:
    fp4 = RooflineStepTimeConfig.model_validate(
        {"kind": "roofline", "model": "deepseek-v3", "hardware": "b200",
         "tensor_parallel_size": 8, "expert_weight_dtype": "nvfp4"})
    bf16 = RooflineStepTimeConfig.model_validate(
        {"kind": "roofline", "model": "deepseek-v3", "hardware": "b200",
         "tensor_parallel_size": 8, "weight_dtype": "bf16", "expert_weight_dtype": "bf16"})
    assert fp4.dispatch_dtype == "fp8"
    assert bf16.dispatch_dtype == "bf16"
    fp8_disp = _model(tensor_parallel_size=1, expert_parallel_size=16)._target
    bf16_disp = _model(tensor_parallel_size=1, expert_parallel_size=16,
                       moe_dispatch_dtype="bf16")._target
    assert bf16_disp.a2a_s_per_token > fp8_disp.a2a_s_per_token


def test_decode_step_uses_low_latency_and_prefill_normal_kernels() -> None:
    m = _model(tensor_parallel_size=1, expert_parallel_size=16)
    t = m._target
    decode = StepBatch(prefill_tokens=0, prefill_attention_pairs=0.0, decode_requests=64,
                       decode_tokens=64, decode_context_tokens=64 * 2000)
    with_prefill = StepBatch(prefill_tokens=1, prefill_attention_pairs=1.0,
                             decode_requests=63, decode_tokens=63,
                             decode_context_tokens=63 * 2000)
    assert t.a2a_prefill_s_per_token < t.a2a_s_per_token  # node-limited, once per node
    assert m.step_time_s(decode) > 0 and m.step_time_s(with_prefill) > 0


def test_small_batch_tp_decode_pays_the_custom_all_reduce() -> None:
    """At batch 4 a TP8 all-reduce moves 57 KB: the custom kernel's few microseconds,
    not NCCL's 27 us."""
    t = _model()._target
    (custom_latency_s, custom_s_per_token), (nccl_latency_s, nccl_s_per_token) = t.ar_lines
    per = min(custom_latency_s + 4 * custom_s_per_token,
              nccl_latency_s + 4 * nccl_s_per_token)
    assert per < 10e-6
    assert nccl_latency_s == pytest.approx(27.1e-6)


def test_borrowed_kernel_values_are_listed() -> None:
    b200 = RooflineStepTimeConfig.model_validate(
        {"kind": "roofline", "model": "llama-3.1-8b", "hardware": "b200"})
    text = b200.borrowed_fit
    assert "h100-sxm" in text
    for field in ("compute_efficiency=0.753", "kernel_latency_s=4.53e-06",
                  "custom_allreduce_latency_s=4.54e-06"):
        assert field in text
    mine = RooflineStepTimeConfig.model_validate(
        {"kind": "roofline", "model": "llama-3.1-8b", "hardware": "b200",
         "compute_efficiency": 0.6})
    assert "compute_efficiency" not in mine.borrowed_fit  # set in the config: not borrowed
    h100 = RooflineStepTimeConfig.model_validate(
        {"kind": "roofline", "model": "llama-3.1-8b", "hardware": "h100-sxm"})
    assert h100.borrowed_fit == ""
    a100 = RooflineStepTimeConfig.model_validate(
        {"kind": "roofline", "model": "llama-3.1-8b", "hardware": "a100-sxm"})
    assert "custom_allreduce_efficiency" in a100.borrowed_fit
    assert "compute_efficiency" not in a100.borrowed_fit.split("borrowed values:")[1]


def test_extra_query_tokens_at_long_context_cost_little() -> None:
    """MTP verification: 4 queries per request at 32k context read the KV once."""
    m = RooflineStepTime(RooflineStepTimeConfig.model_validate(
        {"kind": "roofline", "model": "llama-3.1-8b", "hardware": "h100-sxm"}))
    one = StepBatch(prefill_tokens=0, prefill_attention_pairs=0.0, decode_requests=32,
                    decode_tokens=32, decode_context_tokens=32 * 32768)
    four = StepBatch(prefill_tokens=0, prefill_attention_pairs=0.0, decode_requests=32,
                     decode_tokens=128, decode_context_tokens=32 * 32768)
    assert m.step_time_s(four) < 1.15 * m.step_time_s(one)


# ------------------------------------------------------- hybrid MoE layout (EP < TP)

def test_hybrid_moe_layout_is_accepted_only_for_divisors_of_tp() -> None:
    for ep in (2, 4):
        cfg = RooflineStepTimeConfig.model_validate(
            {"kind": "roofline", "model": "deepseek-v3", "hardware": "h200",
             "tensor_parallel_size": 8, "expert_parallel_size": ep})
        assert cfg.memory_rule_kwargs()["attention_dp_size"] == 1
    with pytest.raises(ValueError, match="a divisor of it"):
        RooflineStepTimeConfig.model_validate(
            {"kind": "roofline", "model": "deepseek-v3", "hardware": "h200",
             "tensor_parallel_size": 8, "expert_parallel_size": 3})


def test_hybrid_moe_layout_holds_and_reduces_like_tensor_parallel_experts() -> None:
    """Experts over 4 groups of 2 GPUs, each slicing its experts: every GPU holds an eighth
    of the expert bytes (as TP8 slicing) and an all-reduce combines the outputs."""
    from pdsim.perf.sizes import weight_bytes

    arch = _model().arch
    assert weight_bytes(arch, 8, 4) == weight_bytes(arch, 8, 1)
    assert weight_bytes(arch, 8, 4) < weight_bytes(arch, 4, 4)
    hybrid = _model(expert_parallel_size=4)._target
    assert hybrid.a2a_count == 0
    assert hybrid.ar_count == 2 * 61
    sliced = _model()._target
    assert [m[0] for m in hybrid.moe] == [m[0] for m in sliced.moe]  # weight read seconds


@given(st.integers(1, 256), st.integers(1, 8192), st.integers(0, 3))
def test_hybrid_moe_waits_for_its_busiest_group(batch: int, context: int, drafts: int) -> None:
    """Fewer, larger expert groups balance better: the step of TP8 with experts over 4
    groups lies between TP8-sliced experts (no busiest rank) and EP8 (8 ranks). The
    per-pair handling cost is off here: it falls with the expert split (sliced experts
    handle every pair on every GPU), the next test's property."""
    q = batch * (1 + drafts)
    b = StepBatch(0, 0.0, batch, q, batch * context)
    sliced, hybrid, ep8 = (_model(expert_parallel_size=ep, moe_pair_s=0.0).step_time_s(b)
                           for ep in (1, 4, 8))
    assert sliced <= hybrid <= ep8


@given(st.integers(1, 16384))
@example(1)
@example(8192)
def test_moe_pair_cost_is_paid_per_pair_a_gpu_handles(tokens: int) -> None:
    """The experts' compute grows by moe_pair_s x expert weight bytes per pair a GPU
    handles: every pair with sliced experts, 1/EP of them when EP <= TP shards them, the
    rank's k / TP per token when EP spans attention-DP ranks, times the busiest EP rank's
    excess (``straggler_factor``). A step grows by at most that (less where the experts'
    weight reads bound it), and by exactly it once a prefill makes the layer compute-bound."""
    from pdsim.perf.architecture import DTYPE_BYTES
    from pdsim.perf.routing import straggler_factor

    b = StepBatch(tokens, tokens * (tokens + 1) / 2, 0, 0, 0)
    pair_s = 1e-8
    for tp, ep, split in ((8, 1, 1), (8, 4, 4), (8, 8, 8), (1, 8, 1)):
        with_cost = _model(tensor_parallel_size=tp, expert_parallel_size=ep,
                           moe_pair_s=pair_s)
        without = _model(tensor_parallel_size=tp, expert_parallel_size=ep, moe_pair_s=0.0)
        moe = [blk.ffn for blk in with_cost.arch.blocks if hasattr(blk.ffn, "num_experts")]
        layers = sum(blk.num_layers for blk in with_cost.arch.blocks
                     if hasattr(blk.ffn, "num_experts"))
        per_token = layers * moe[0].top_k / split * pair_s * DTYPE_BYTES["nvfp4"]
        coeff = with_cost._target.moe[0][3] - without._target.moe[0][3]
        assert coeff == pytest.approx(per_token, rel=1e-9)
        grown = with_cost.step_time_s(b) - without.step_time_s(b)
        # the busiest EP rank handles its excess of the pairs (one MoE group: DeepSeek's)
        (group,) = with_cost._target.moe
        z, rank_cv2, pairs_per_token = group[5], group[6], group[7]
        routed = tokens * group[2]  # a prefill's tokens are all independent
        busiest = straggler_factor(z, rank_cv2, routed * pairs_per_token,
                                   with_cost._target.ep_ranks)
        assert (busiest == 1.0) == (with_cost._target.ep_ranks == 1)
        bound = tokens * per_token * busiest
        assert -1e-12 <= grown <= bound * (1 + 1e-9)
        if tokens >= 4096:
            assert grown == pytest.approx(bound, rel=1e-9)


def test_busiest_rank_reads_more_experts_while_a_step_touches_few() -> None:
    """At batch 1 each of 8 EP ranks holds 32 experts and the 8 a token picks fall unevenly:
    the busiest rank reads more than the mean's eighth. As the batch grows every rank's
    share is touched and the excess fades. Popularity is uniform here (``load_cv`` 0), so
    the busiest rank's excess is the binomial spread of its reads and pairs alone (with the
    profile's skew its extra pairs grow with the batch too)."""
    arch = load_model_architecture("deepseek-v3", "model")
    uniform = arch.model_copy(update={"routing": arch.routing.model_copy(
        update={"load_cv": 0.0})})
    sliced, ep8 = _model(model=uniform), _model(model=uniform, expert_parallel_size=8)
    (group,) = ep8._target.moe
    assert group[-1] == 256 / 8  # experts per rank

    def excess(batch: int) -> float:
        b = StepBatch(0, 0.0, batch, batch, batch * 2048)
        return ep8.step_time_s(b) / sliced.step_time_s(b) - 1.0

    small, large = excess(1), excess(256)
    assert small > 0.03
    assert small > large >= 0.0
