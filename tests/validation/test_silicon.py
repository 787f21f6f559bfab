"""The silicon-sample suite (validation/silicon.py): the split, the expressibility rules,
the configs it builds, and a fixed slice scored against the error measured today."""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter

import pytest

import pdsim
from pdsim.config_sections import Role, response_delay_steps
from validation import silicon as S

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

# The slice's figures as measured, and the tolerance, live beside the slice in
# validation/silicon.py (CI_MEASURED_MEAN_APE, CI_MEASURED_ON) so the report quotes them.
MEASURED_MEAN_APE = S.CI_MEASURED_MEAN_APE
TOLERANCE_PP = S.CI_TOLERANCE_PP
"""The slice fails when a mean error rises more than 5 percentage points above the figure
measured (the runs are deterministic: any move is a change in pdsim, not noise)."""


@pytest.fixture(scope="module")
def sample() -> list[S.SiliconRow]:
    return S.load_sample()


def _row(**over: str) -> S.SiliconRow:
    base = {k: "" for k in (
        "id", "silicon_data_source", "backend", "backend_version", "model_path", "system",
        "precision", "mode", "isl", "osl", "gemm_quant_mode", "moe_quant_mode", "batch_size",
        "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
        "prefill_batch_size", "prefill_num_workers", "prefill_tp_size", "prefill_pp_size",
        "prefill_attention_dp_size", "prefill_moe_tp_size", "prefill_moe_ep_size",
        "decode_batch_size", "decode_num_workers", "decode_tp_size", "decode_pp_size",
        "decode_attention_dp_size", "decode_moe_tp_size", "decode_moe_ep_size",
        "silicon_ttft_ms", "silicon_tpot_ms")}
    base.update(id="synthetic", silicon_data_source="x; silicon_concurrency=64",
                backend="trtllm", model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm",
                precision="fp8", mode="agg", isl="1024", osl="1024", gemm_quant_mode="fp8",
                moe_quant_mode="fp8", batch_size="64", tp_size="8", pp_size="1",
                attention_dp_size="1", moe_tp_size="8", moe_ep_size="1",
                silicon_ttft_ms="100", silicon_tpot_ms="10")
    base.update(over)
    return S.SiliconRow(base)


# ------------------------------------------------------------------------ split


def test_split_rule_is_first_hex_digit_of_sha256() -> None:
    for row_id in ("a", "dsr1_b200_trtllm_fp4_agg_1024x1024_c4_cfg82", "ü-row"):
        digit = hashlib.sha256(row_id.encode("utf-8")).hexdigest()[0]
        assert S.is_held_out(row_id) is (digit in "01234")
        assert S.split_of(row_id) == ("held-out" if digit in "01234" else "fit")


def test_split_counts_match_the_data_readme(sample: list[S.SiliconRow]) -> None:
    assert len(sample) == 5221
    assert sum(r.split == "held-out" for r in sample) == 1633


def test_fit_twins_are_held_out_rows_measured_as_a_fit_row(
        sample: list[S.SiliconRow]) -> None:
    ids = [f"row{i}" for i in range(40)]
    fit = next(i for i in ids if S.split_of(i) == "fit")
    held = [i for i in ids if S.split_of(i) == "held-out"][:3]
    rows = [_row(id=fit, silicon_ttft_ms="123.456", silicon_tpot_ms="7.25"),
            _row(id=held[0], silicon_ttft_ms="123.456", silicon_tpot_ms="7.25"),
            # the same TTFT alone, or the same value written with other digits, is no twin
            _row(id=held[1], silicon_ttft_ms="123.456", silicon_tpot_ms="7.26"),
            _row(id=held[2], silicon_ttft_ms="123.4560", silicon_tpot_ms="7.25")]
    assert S.fit_twins(rows) == {held[0]}
    # two held-out copies of one run are not each other's twins
    assert S.fit_twins(rows[1:]) == frozenset()
    # the sample itself: a held-out row with a fit twin shares its measurement, never its id
    twins = S.fit_twins(sample)
    assert 0 < len(twins) < sum(r.split == "held-out" for r in sample)
    fit_keys = {S.measurement_key(r) for r in sample if r.split == "fit"}
    for r in sample:
        if r.split == "held-out":
            assert (r.id in twins) is (S.measurement_key(r) in fit_keys)


# --------------------------------------------------------------- expressibility


@pytest.mark.parametrize(("over", "reason"), [
    ({"model_path": "zhipuai/GLM-5"}, "no pdsim model profile"),
    ({"system": "b300_sxm"}, "no pdsim hardware profile"),
    ({"pp_size": "2"}, "pipeline parallelism (pp > 1)"),
    ({"tp_size": "1", "attention_dp_size": "8", "moe_tp_size": "4", "moe_ep_size": "2"},
     "MoE hybrid tensor x expert parallelism across attention-DP ranks (moe_tp > 1, "
     "moe_ep > 1, attention_dp > 1)"),
    ({"tp_size": "1", "attention_dp_size": "8", "moe_tp_size": "8", "moe_ep_size": "1"},
     "MoE tensor parallelism across attention-DP ranks"),
    ({"moe_tp_size": "2", "moe_ep_size": "1"},
     "inconsistent MoE parallel sizes (moe_tp x moe_ep != tp x attention_dp)"),
    ({"mode": "disagg"}, "disagg row without worker counts"),
    ({"silicon_data_source": "x", "batch_size": ""}, "no concurrency in the row"),
    ({"gemm_quant_mode": "w4a8"}, "unknown quant mode"),
    ({"tp_size": "48", "moe_tp_size": "48"},
     "tensor parallel size does not divide the attention heads"),
    # InferenceMAX's recipes on GB200 were all disaggregated: its agg rows there are not
    ({"silicon_data_source": "source_file=2026-04-06.csv; silicon_concurrency=538",
      "system": "gb200", "tp_size": "64", "moe_tp_size": "64"},
     "InferenceMAX ran only disaggregated recipes on the system (an agg row is a "
     "disaggregated run without its P/D split)"),
    ({"silicon_data_source": "source_file=2026-04-06.csv; silicon_concurrency=512",
      "model_path": "openai/gpt-oss-120b", "backend": "vllm", "system": "h100_sxm",
      "tp_size": "2", "moe_tp_size": "2"},
     "concurrency outside the recipe's search space"),
])
def test_not_expressible_reasons(over: dict[str, str], reason: str) -> None:
    with pytest.raises(S.NotExpressible) as exc:
        S.plan_row(_row(**over))
    assert exc.value.reason == reason


def test_reason_counts_over_the_sample(sample: list[S.SiliconRow]) -> None:
    """Pins the rules: a change in what is expressible shows here and in the doc."""
    reasons: Counter[str] = Counter()
    for r in sample:
        try:
            S.plan_row(r)
        except S.NotExpressible as exc:
            reasons[exc.reason] += 1
    assert reasons == {
        "no pdsim model profile": 465,
        "disagg row without worker counts": 962,
        "no pdsim hardware profile": 566,
        "MoE tensor parallelism across attention-DP ranks": 33,
        "InferenceMAX ran only disaggregated recipes on the system (an agg row is a "
        "disaggregated run without its P/D split)": 55,
        "concurrency outside the recipe's search space": 9,
        "weights do not fit the GPUs under the backend's default memory rule": 10,
        "inconsistent MoE parallel sizes (moe_tp x moe_ep != tp x attention_dp)": 19,
        "no concurrency in the row": 7,
    }
    assert len(sample) - sum(reasons.values()) == 3095


def test_hybrid_moe_layout_is_one_tp_group_with_expert_groups() -> None:
    """TensorRT-LLM's --tp 8 --ep 4 (moe_tp 2 x moe_ep 4): one TP8 instance whose experts
    are split over 4 groups of 2 GPUs (expert_parallel_size 4, a divisor of the TP)."""
    plan = S.plan_row(_row(moe_tp_size="2", moe_ep_size="4"))
    assert plan.roles["colocated"] == S.Layout(instances=1, tp=8, ep=4, per_rank_batch=64)
    st = S.build_config(plan)["cluster"]["colocated"]["step_time"]
    assert (st["tensor_parallel_size"], st["expert_parallel_size"]) == (8, 4)
    assert "attention_dp_size" not in S.build_config(plan)["cluster"]["colocated"]


def test_attention_dp_ranks_become_one_engine_sharing_experts() -> None:
    plan = S.plan_row(_row(tp_size="1", attention_dp_size="8", moe_tp_size="1",
                           moe_ep_size="8", batch_size="128",
                           silicon_data_source="x; silicon_concurrency=1024"))
    assert plan.concurrency == 1024
    assert plan.roles["colocated"] == S.Layout(instances=8, tp=1, ep=8, per_rank_batch=128,
                                               dp=8)
    group = S.build_config(plan)["cluster"]["colocated"]
    assert group["count"] == 8
    assert group["attention_dp_size"] == 8
    assert group["attention_dp_balance"] == S.DP_BALANCE[plan.backend]


def test_disagg_pools_from_workers_and_dp() -> None:
    plan = S.plan_row(_row(
        mode="disagg", tp_size="", moe_tp_size="", moe_ep_size="", batch_size="",
        prefill_num_workers="2", prefill_tp_size="1", prefill_attention_dp_size="8",
        prefill_moe_tp_size="1", prefill_moe_ep_size="8", prefill_batch_size="1",
        decode_num_workers="1", decode_tp_size="8", decode_attention_dp_size="1",
        decode_moe_tp_size="8", decode_moe_ep_size="1", decode_batch_size="64"))
    assert plan.roles["prefill"] == S.Layout(16, 1, 8, 1, dp=8)
    assert plan.roles["decode"] == S.Layout(1, 8, 1, 64)
    cfg = pdsim.load_config(S.build_config(plan))
    assert cfg.cluster.mode == "disaggregated"
    assert cfg.cluster.count(Role.PREFILL) == 16
    # two prefill workers, each one attention-DP engine of 8 ranks; decode stands alone
    assert cfg.cluster.single(Role.PREFILL, "test").num_dp_engines == 2
    assert cfg.cluster.single(Role.DECODE, "test").attention_dp_size == 1


def test_config_mirrors_the_protocol() -> None:
    plan = S.plan_row(_row())
    cfg = pdsim.load_config(S.build_config(plan))
    assert cfg.workload.arrivals.kind == "closed_loop"
    assert cfg.workload.arrivals.concurrency == 64
    # aiperf's profiling phase alone (its warm-up drains first): 20C requests, since
    # 64 x 1024 x 20 output tokens is within the budget
    assert cfg.workload.num_requests == 20 * 64
    assert cfg.speculative.method == "none"
    sched = cfg.cluster.colocated.scheduler  # type: ignore[union-attr]
    # AIC's agg max_num_tokens, batch + ISL + 1500, rounded up to whole 32-token blocks
    assert sched.max_num_batched_tokens == 2592
    big = S.plan_row(_row(silicon_data_source="x; silicon_concurrency=4096"))
    assert S.measured_rounds(big) == 2


def test_protocol_follows_the_rows_source(sample: list[S.SiliconRow]) -> None:
    dated = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=64; wip=False"
    dump = "db-dump/2026-04-27; config_id=759; silicon_concurrency=64; workflow_run_id=778"
    aic = ("source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/"
           "meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=64")
    assert S.row_protocol(_row(silicon_data_source=dated)) == "inferencemax"
    assert S.row_protocol(_row(silicon_data_source=dump)) == "inferencemax"
    assert S.row_protocol(_row(silicon_data_source=aic)) == "aiperf"
    assert S.row_protocol(_row(silicon_data_source="x; silicon_concurrency=64")) == "aiperf"
    # the dated dumps and the db-dump: 1,353 + 2,015 + 882 rows of the 5,221
    counts = Counter(S.row_protocol(r) for r in sample)
    assert counts == {"inferencemax": 4250, "aiperf": 971}


def test_inferencemax_rows_run_ten_rounds_of_ranged_lengths() -> None:
    dated = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=64; wip=False"
    plan = S.plan_row(_row(silicon_data_source=dated))
    assert plan.protocol == "inferencemax"
    assert S.measured_rounds(plan) == 10
    cfg = pdsim.load_config(S.build_config(plan))
    assert cfg.workload.num_requests == 10 * 64
    # bench_serving's np.random.randint(int(L * 0.8), L + 1): [819, 1024] for L = 1024
    assert cfg.workload.prompt_tokens.bin_edges == (819, 1025)  # type: ignore[union-attr]
    assert cfg.workload.output_tokens.bin_edges == (819, 1025)  # type: ignore[union-attr]
    res = pdsim.simulate(cfg.model_copy(update={"workload": cfg.workload.model_copy(
        update={"num_requests": 64})}))
    import numpy as np
    cols = res.records.columns  # type: ignore[union-attr]
    for name in ("prompt_tokens", "output_tokens"):
        n = np.asarray(cols[name])
        assert n.min() >= 819 and n.max() <= 1024 and len(set(n.tolist())) > 10


def test_aiperf_prompt_pool_is_cached_where_the_backend_caches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # aiperf repeats its 100 default prompts; vLLM caches prefixes, so its rows draw from
    # 100 shared prompts, warm the cache with the 2C warm-up first and cache on P/colocated
    llama = dict(backend="vllm", model_path="nvidia/Llama-3.1-8B-Instruct-FP8",
                 system="h200_sxm", tp_size="1", moe_tp_size="1", isl="2000", osl="100",
                 silicon_data_source="x; silicon_concurrency=64")
    plan = S.plan_row(_row(**llama))
    assert plan.protocol == "aiperf" and S.reuses_prompts(plan)
    assert S.warmup_requests(plan) == 2 * 64
    cfg = pdsim.load_config(S.build_config(plan))
    assert cfg.workload.num_requests == 20 * 64 + 2 * 64
    pool = cfg.workload.shared_prefix
    assert pool is not None and pool.num_groups == S.AIPERF_DATASET_ENTRIES == 100
    assert pool.prefix_tokens + cfg.workload.prompt_tokens.tokens == 2000  # type: ignore[union-attr]
    assert pool.hash_block_tokens == cfg.cluster.colocated.scheduler.block_size  # type: ignore[union-attr]
    assert cfg.cluster.colocated.scheduler.enable_prefix_caching  # type: ignore[union-attr]
    res = pdsim.simulate(cfg)
    # after the warm-up nearly every prompt is a hit; the cold ones are the first uses
    assert res.summary["prefix_cache_hit_rate"] > 0.7
    score = S.score_row(_row(**llama))
    with monkeypatch.context() as m:
        m.setitem(S.PREFIX_CACHING, "vllm", False)
        cold = S.score_row(_row(**llama))
    # the prompts' prefill is saved: 2000 tokens per request every 100 steps at C = 64
    assert score.pdsim_tpot_ms < 0.6 * cold.pdsim_tpot_ms
    # not where the deployment does not reuse (TensorRT-LLM's template, SGLang's fit rows)
    # nor where the client sends new prompts (InferenceMAX's random token ids)
    dated = "source_file=2026-04-06.csv; model=X; silicon_concurrency=64; wip=False"
    for other in (_row(**{**llama, "backend": "trtllm"}), _row(**{**llama, "backend": "sglang"}),
                  _row(**{**llama, "silicon_data_source": dated})):
        oplan = S.plan_row(other)
        ocfg = pdsim.load_config(S.build_config(oplan))
        assert not S.reuses_prompts(oplan) and ocfg.workload.shared_prefix is None
        assert not ocfg.cluster.colocated.scheduler.enable_prefix_caching  # type: ignore[union-attr]


def test_rows_of_an_mtp_recipe_image_run_mtp(sample: list[S.SiliconRow]) -> None:
    # the image only InferenceMAX's MTP recipes used: 3 drafts, 1 with attention DP, at
    # the TensorRT-LLM blog's per-position acceptance
    img = ("source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=8; "
           "measured=2026-02-06T00:00:00.000Z; wip=False; "
           "image=nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6.post3")
    plan = S.plan_row(_row(silicon_data_source=img, precision="fp4", gemm_quant_mode="nvfp4",
                           moe_quant_mode="nvfp4"))
    assert plan.mtp_drafts == 3
    cfg = pdsim.load_config(S.build_config(plan))
    assert (cfg.speculative.method, cfg.speculative.num_speculative_tokens) == ("mtp", 3)
    assert cfg.speculative.acceptance.rates == (0.92, 0.66, 0.24)  # type: ignore[union-attr]
    # the first-response delay is the rule's, in engine steps: no conversion in the suite
    assert cfg.router.response_rule == "trtllm"
    assert cfg.first_response_steps == response_delay_steps("trtllm", plan.model)
    assert "first_response_delay_steps" not in S.build_config(plan)["router"]
    dp = S.plan_row(_row(silicon_data_source=img, tp_size="1", attention_dp_size="8",
                         moe_tp_size="1", moe_ep_size="8", batch_size="1"))
    assert dp.mtp_drafts == 1
    assert S.build_config(dp)["speculative"]["acceptance"]["rates"] == [0.92]
    assert "first_response_delay_steps" not in S.build_config(dp)["router"]
    # the STP recipes' image, another backend or model, or no image: no speculation
    stp = img.replace("rc6.post3", "rc6.post2")
    for row in (_row(silicon_data_source=stp), _row(silicon_data_source=img, backend="sglang"),
                _row(silicon_data_source=img, system="h200_sxm"), _row()):
        other = S.plan_row(row)
        assert other.mtp_drafts == 0
        assert S.build_config(other)["speculative"] == {"method": "none"}
        assert "first_response_delay_steps" not in S.build_config(other)["router"]
    # over the sample: the B200 TensorRT-LLM DeepSeek-R1 rows measured on that image
    hits = [r for r in sample if "rc6.post3" in r.fields["silicon_data_source"]]
    assert len(hits) == 88
    assert {(r.fields["backend"], r.fields["system"], r.fields["model_path"]) for r in hits} == {
        ("trtllm", "b200_sxm", "deepseek-ai/DeepSeek-R1")}


def test_memory_rule_kv_dtype_and_admission_follow_the_backend() -> None:
    # TensorRT-LLM: free_gpu_memory_fraction 0.8 as AIC's generator writes it, an fp8 KV
    # cache for an fp8 deployment (AIC's fp8 quant profile), and no-evict admission
    plan = S.plan_row(_row())
    assert plan.kv_dtype == "fp8"
    cfg = S.build_config(plan)
    st = cfg["cluster"]["colocated"]["step_time"]
    assert (st["memory_rule"], st["free_gpu_memory_fraction"], st["kv_cache_dtype"]) == (
        "trtllm", 0.8, "fp8")
    for backend in ("vllm", "sglang"):
        other = S.build_config(S.plan_row(_row(backend=backend)))
        ost = other["cluster"]["colocated"]["step_time"]
        assert ost["memory_rule"] == backend and "free_gpu_memory_fraction" not in ost
    assert S.plan_row(_row(gemm_quant_mode="", moe_quant_mode="", precision="bf16",
                           model_path="meta-llama/Llama-3.1-70B")).kv_dtype == "bf16"


def test_prefill_policy_reaches_every_role(monkeypatch: pytest.MonkeyPatch) -> None:
    # the backend's policy (PREFILL_POLICIES) is what every instance group's scheduler runs
    monkeypatch.setitem(S.PREFILL_POLICIES, "sglang", "prefill_first")
    cfg = S.build_config(S.plan_row(_row(backend="sglang")))
    assert pdsim.load_config(cfg).cluster.colocated.scheduler.prefill_policy == "prefill_first"
    assert S.build_config(S.plan_row(_row()))["cluster"]["colocated"]["scheduler"][
        "prefill_policy"] == S.PREFILL_POLICIES["trtllm"]
    disagg = S.build_config(S.plan_row(_row(
        backend="sglang", mode="disagg", tp_size="", moe_tp_size="", moe_ep_size="",
        batch_size="", prefill_num_workers="1", prefill_tp_size="8",
        prefill_attention_dp_size="1", prefill_moe_tp_size="8", prefill_moe_ep_size="1",
        prefill_batch_size="1", decode_num_workers="1", decode_tp_size="8",
        decode_attention_dp_size="1", decode_moe_tp_size="8", decode_moe_ep_size="1",
        decode_batch_size="64")))
    assert {disagg["cluster"][r]["scheduler"]["prefill_policy"]
            for r in ("prefill", "decode")} == {"prefill_first"}


def test_frontend_cost_per_prompt_token_reaches_the_router() -> None:
    """Each backend's cost per prompt token on the way in is its table's (vLLM's fitted,
    none elsewhere)."""
    for backend in ("vllm", "sglang", "trtllm"):
        cfg = pdsim.load_config(S.build_config(S.plan_row(_row(backend=backend))))
        assert cfg.router.frontend_latency_per_prompt_token_s == (
            S.FRONTEND_LATENCY_PER_PROMPT_TOKEN_S.get(backend, 0.0))
    assert S.FRONTEND_LATENCY_PER_PROMPT_TOKEN_S["vllm"] > 0


def test_frontend_latency_reaches_the_router(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(S.FRONTEND_LATENCY_S, "vllm", 0.05)
    cfg = pdsim.load_config(S.build_config(S.plan_row(_row(backend="vllm"))))
    assert cfg.router.frontend_latency_s == 0.05
    other = pdsim.load_config(S.build_config(S.plan_row(_row(backend="sglang"))))
    assert other.router.frontend_latency_s == S.FRONTEND_LATENCY_S.get("sglang", 0.0)


def test_frontend_fit_is_the_low_concurrency_median_of_fit_rows() -> None:
    from validation import silicon_gap as G
    base = {"error": "", "preemptions": 0, "pdsim_ttft_ms": 40.0}
    scores = [{**base, "split": "fit", "partition": "vllm agg h200_sxm", "concurrency": c,
               "measured_ttft_ms": m} for c, m in ((4, 90.0), (8, 100.0), (8, 140.0),
                                                    (64, 900.0))]
    scores.append({**base, "split": "held-out", "partition": "vllm agg h200_sxm",
                   "concurrency": 4, "measured_ttft_ms": 5000.0})
    assert G.fit_frontend_latency(scores) == {"vllm": (pytest.approx(0.060), 3)}


def test_response_rule_follows_the_backend() -> None:
    """Each backend's rows end TTFT at its serving stack's first response
    (router.response_rule); the rule's delay is the fitted table's for the row's model."""
    for backend in ("trtllm", "vllm", "sglang"):
        plan = S.plan_row(_row(backend=backend))
        cfg = pdsim.load_config(S.build_config(plan))
        assert cfg.router.response_rule == backend
        assert cfg.first_response_steps == response_delay_steps(backend, plan.model) > 0


def test_first_response_fit_minimises_fit_rows_mean_error() -> None:
    """The fitted delay (output tokens at the row's own inter-token time) is the one that
    brings fit rows closest; held-out rows and preempting rows do not count."""
    from validation import silicon_gap as G
    base = {"error": "", "preemptions": 0, "partition": "vllm agg h200_sxm", "osl": 100}
    scores = [{**base, "split": "fit", "pdsim_ttft_ms": t, "pdsim_tpot_ms": 10.0,
               "measured_ttft_ms": t + 40.0} for t in (20.0, 50.0, 80.0)]
    scores.append({**base, "split": "held-out", "pdsim_ttft_ms": 20.0,
                   "pdsim_tpot_ms": 10.0, "measured_ttft_ms": 5000.0})
    scores.append({**base, "split": "fit", "preemptions": 3, "pdsim_ttft_ms": 20.0,
                   "pdsim_tpot_ms": 10.0, "measured_ttft_ms": 5000.0})
    ((backend, (tokens, n, before, after)),) = G.fit_first_response(scores).items()
    assert (backend, tokens, n) == ("vllm", 4, 3)
    assert after == pytest.approx(0.0, abs=1e-9)
    # under speculation a step is the row's tokens per step: 2 steps of 2 tokens here
    spec = [{**s, "pdsim_tokens_per_step": 2.0} for s in scores]
    ((_, (steps, _, _, after)),) = G.fit_first_response(spec).items()
    assert steps == 2 and after == pytest.approx(0.0, abs=1e-9)
    assert before > 10.0
    # never past the last token
    assert G.response_ttft_ms({**base, "pdsim_ttft_ms": 20.0, "pdsim_tpot_ms": 10.0},
                              500) == pytest.approx(20.0 + 99 * 10.0)


def test_first_response_per_model_and_its_cross_validation() -> None:
    """Per backend and model profile each model gets its own delay; cross-validation, with
    folds by deployment, scores both groupings on rows fitted elsewhere and prefers the
    per-model one when the models want different delays."""
    from validation import silicon_gap as G
    base = {"error": "", "preemptions": 0, "split": "fit", "partition": "vllm agg h200_sxm",
            "osl": 100, "pdsim_tpot_ms": 10.0}
    scores = []
    for model, extra_ms in (("deepseek-ai/DeepSeek-R1", 40.0), ("meta-llama/Llama-3.1-70B",
                                                               10.0)):
        for isl in range(100, 2100, 100):  # 20 deployments a model, spread over the folds
            for t in (20.0, 60.0):
                scores.append({**base, "model": model, "isl": isl, "pdsim_ttft_ms": t,
                               "measured_ttft_ms": t + extra_ms})
    fitted = G.fit_first_response(scores, "backend+profile")
    assert {k: v[0] for k, v in fitted.items()} == {"vllm deepseek-v3": 4,
                                                   "vllm llama-3.1-70b": 1}
    assert G.response_key(scores[0], "backend") == "vllm"
    assert len({G.response_fold(s) for s in scores}) == G.CV_FOLDS
    cv = G.cross_validate_first_response(scores)
    assert cv["backend+profile"][0] == pytest.approx(0.0, abs=1e-9)
    assert cv["backend"][0] > 5.0
    assert cv["backend"][2] == cv["backend+profile"][2] == len(scores)


def test_gap_analysis_reads_fit_rows_only() -> None:
    from validation import silicon_gap as G
    fields = {}
    scores = []
    for i, c in enumerate((4, 8, 16, 64)):
        rid = f"r{i}"
        fields[rid] = _row(id=rid).fields
        for split in ("fit", "held-out"):
            meas = 100.0 * c if split == "fit" else 1.0  # held-out rows must not count
            scores.append({"row_id": rid, "split": split, "error": "", "preemptions": 0,
                           "partition": "trtllm agg b200_sxm", "model": "m/DeepSeek-R1",
                           "isl": 1024, "concurrency": c, "measured_ttft_ms": meas,
                           "pdsim_ttft_ms": 50.0})
    fit = G.fit_scores(scores)
    assert len(fit) == 4
    gaps = G.low_concurrency_gaps(fit)
    assert gaps == [("trtllm agg b200_sxm", "DeepSeek-R1", 1024, 2, 550.0, 600.0, 50.0)]
    ((name, n, b_meas, b_sim, ratio),) = G.concurrency_exponents(fit, fields)
    assert (name, n, ratio) == ("trtllm agg", 1, 8.0)
    assert b_meas == pytest.approx(1.0) and b_sim == pytest.approx(0.0, abs=1e-12)


def test_lifetime_slopes_find_a_gap_of_one_lifetime_per_round() -> None:
    """Question 3 of the gap analysis: a gap of a + lifetime / C (one request of C held back
    a whole lifetime each round) gives slope 1, per protocol and concurrency; a gap that
    ignores the lifetime gives slope 0; groups below the minimum rows are left out."""
    from validation import silicon_gap as G
    fields, scores = {}, []
    dated = "source_file=2026-04-06.csv; silicon_concurrency=8"
    for i, osl in enumerate((128, 256, 512, 1024, 2048, 4096)):
        for proto, src in (("aiperf", "x; silicon_concurrency=8"), ("inferencemax", dated)):
            rid = f"{proto}{i}"
            fields[rid] = _row(id=rid, silicon_data_source=src).fields
            tpot = 5.0 + i
            gap = 20.0 + (osl * tpot / 8 if proto == "aiperf" else 0.0)
            scores.append({"row_id": rid, "split": "fit", "error": "", "preemptions": 0,
                           "partition": "trtllm agg h100_sxm", "concurrency": 8,
                           "osl": osl, "measured_tpot_ms": tpot,
                           "measured_ttft_ms": 100.0 + gap, "pdsim_ttft_ms": 100.0})
    scores.append({**scores[0], "concurrency": 16})  # a group of one row: left out
    slopes = {name: (c, n, a, s, r2) for name, c, n, a, s, r2
              in G.lifetime_slopes(scores, fields)}
    assert set(slopes) == {"aiperf trtllm agg", "inferencemax trtllm agg"}
    c, n, a, slope, r2 = slopes["aiperf trtllm agg"]
    assert (c, n) == (8, 6)
    assert slope == pytest.approx(1.0) and a == pytest.approx(20.0) and r2 == pytest.approx(1.0)
    _, _, a, slope, _ = slopes["inferencemax trtllm agg"]
    assert slope == pytest.approx(0.0, abs=1e-9) and a == pytest.approx(20.0)


def test_no_evict_admission_caps_the_batch_at_what_the_pool_holds_whole() -> None:
    """Llama-70B fp8 on one H200 with 8192/1024 at C 256: the pool cannot hold 256 whole
    requests, so TensorRT-LLM's GUARANTEED_NO_EVICT runs fewer and pdsim never preempts."""
    from pdsim.config_sections import Role as R
    row = _row(model_path="meta-llama/Llama-3.1-70B", system="h200_sxm", tp_size="1",
               moe_tp_size="1", isl="8192", osl="1024", batch_size="256",
               silicon_data_source="x; silicon_concurrency=256")
    plan = S.plan_row(row)
    cfg = pdsim.load_config(S.build_config(plan))
    seqs = cfg.cluster.colocated.scheduler.max_num_seqs  # type: ignore[union-attr]
    blocks = cfg.num_blocks(R.COLOCATED)
    per_request = -(-(8192 + 1024) // 32)
    assert seqs == blocks // per_request < 256
    vllm = pdsim.load_config(S.build_config(S.plan_row(_row(
        **{**row.fields, "backend": "vllm"}))))
    assert vllm.cluster.colocated.scheduler.max_num_seqs == 256  # type: ignore[union-attr]


def test_no_evict_reservation_is_the_mean_over_inferencemax_drawn_lengths() -> None:
    """InferenceMAX draws prompt and output lengths uniform in [int(0.8 L), L]: what a
    request reserves to completion is the mean of ceil((prompt + output) / block) over
    every pair (brute force here), below the fixed-length reservation, and the cap is the
    pool over it. Llama-70B fp8 on two H200 at 1024/8192 and C 128 then runs all 128 (the
    fixed-length reservation held only 120 of them: 22x the measured TTFT)."""
    import numpy as np

    from pdsim.config_sections import Role as R
    row = _row(model_path="meta-llama/Llama-3.1-70B", system="h200_sxm", tp_size="2",
               moe_tp_size="2", isl="1024", osl="8192", batch_size="128",
               silicon_data_source="source_file=2026-04-06.csv; silicon_concurrency=128")
    plan = S.plan_row(row)
    assert plan.protocol == "inferencemax"
    i, o = np.meshgrid(np.arange(819, 1025), np.arange(6553, 8193))
    brute = float(np.mean(-(-(i + o) // 32)))
    assert S.request_blocks(plan, "colocated") == pytest.approx(brute, rel=1e-12)
    assert brute < -(-(1024 + 8192) // 32)
    prefill = float(np.mean(-(-(np.arange(819, 1025) + 1) // 32)))
    assert S.request_blocks(plan, "prefill") == pytest.approx(prefill, rel=1e-12)
    cfg = pdsim.load_config(S.build_config(plan))
    seqs = cfg.cluster.colocated.scheduler.max_num_seqs  # type: ignore[union-attr]
    blocks = cfg.num_blocks(R.COLOCATED)
    assert seqs == min(128, int(blocks // brute))
    assert blocks // -(-(1024 + 8192) // 32) < 128 <= seqs


@pytest.mark.parametrize(("version", "runs_async"), [
    ("0.14.0", True), ("0.19.0", True), ("1.0.0", True), ("nightly-5b8c30d62b754b57", True),
    ("0.12.0", False), ("0.11.2", False), ("", False), ("main", False)])
def test_vllm_rows_schedule_async_from_v0_14(version: str, runs_async: bool) -> None:
    # vLLM schedules asynchronously by default from v0.14: those rows' CPU costs overlap
    # the GPU's step; other backends and older or unversioned vLLM rows keep the sum
    row = _row(backend="vllm", backend_version=version, model_path="openai/gpt-oss-120b",
               gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4")
    st = S.build_config(S.plan_row(row))["cluster"]["colocated"]["step_time"]
    assert st.get("async_scheduling", False) is runs_async
    assert st["cpu_cost_rule"] == "vllm"
    trt = S.build_config(S.plan_row(_row(backend_version="1.2.0")))
    assert "async_scheduling" not in trt["cluster"]["colocated"]["step_time"]


def test_every_mapped_checkpoint_is_a_shipped_profile() -> None:
    # each checkpoint the suite maps runs as a shipped model profile, MoE ones as MoE;
    # a row with no quant mode and no precision runs the checkpoint's own dtype
    from pdsim.perf.architecture import MoEFFN
    from pdsim.perf.profiles import load_model_architecture

    for checkpoint, profile in S.MODEL_PROFILES.items():
        arch = load_model_architecture(profile)
        moe = any(isinstance(b.ffn, MoEFFN) for b in arch.blocks)
        assert moe is (profile in S.MOE_PROFILES), checkpoint
    plan = S.plan_row(_row(model_path="MiniMaxAI/MiniMax-M2.5", backend="vllm",
                           backend_version="0.19.0", precision="", gemm_quant_mode="",
                           moe_quant_mode=""))
    assert (plan.model, plan.weight_dtype, plan.expert_weight_dtype) == (
        "minimax-m2.5", "fp8", "fp8")
    plan = S.plan_row(_row(model_path="Qwen/Qwen3-32B", backend="vllm", precision="",
                           gemm_quant_mode="", moe_quant_mode="", moe_tp_size="1",
                           tp_size="1"))
    assert (plan.model, plan.weight_dtype) == ("qwen3-32b", "bf16")


@pytest.mark.parametrize(("over", "interval"), [
    ({}, 30),  # fp8 DeepSeek-R1 on 8 B200 at C 64
    ({"batch_size": "8", "silicon_data_source": "source_file=2026-04-06.csv; "
      "silicon_concurrency=8"}, 10),
    ({"tp_size": "4", "moe_tp_size": "4", "gemm_quant_mode": "nvfp4",
      "moe_quant_mode": "nvfp4"}, 30),  # the fp4 recipe has no TP 4 branch
    ({"system": "h200_sxm"}, 1),  # the H200 recipe sets none
    ({"silicon_data_source": "x; silicon_concurrency=64"}, 1),  # aiperf: the generator
    ({"backend": "trtllm"}, 1),
])
def test_sglang_receive_interval_is_the_inferencemax_recipes(over: dict[str, str],
                                                             interval: int) -> None:
    row = _row(**{"backend": "sglang", "moe_tp_size": "8",
                  "silicon_data_source": "source_file=2026-04-06.csv; silicon_concurrency=64",
                  **over})
    plan = S.plan_row(row)
    sched = S.build_config(plan)["cluster"]["colocated"]["scheduler"]
    assert sched.get("recv_interval_steps", 1) == interval
    if interval == 30 and plan.weight_dtype == "fp8":
        # the fp8 recipe at TP 4 (its weights fit only at the recipe's own memory fraction)
        lay = dataclasses.replace(plan.roles["colocated"], tp=4)
        assert S.sglang_recv_interval(plan, lay) == 10


def test_trtllm_attention_dp_rows_of_inferencemax_run_the_context_balance() -> None:
    over = {"tp_size": "1", "attention_dp_size": "8", "moe_tp_size": "1", "moe_ep_size": "8",
            "batch_size": "32"}
    for source, wait in (("source_file=2026-03-25.csv; silicon_concurrency=256", 60),
                         ("x; silicon_concurrency=256", 0)):
        plan = S.plan_row(_row(silicon_data_source=source, **over))
        group = S.build_config(plan)["cluster"]["colocated"]
        assert group["attention_dp_size"] == 8
        assert group.get("attention_dp_context_wait_steps", 0) == wait
        pdsim.load_config(S.build_config(plan))


_DUMP = "db-dump/2026-04-27; silicon_concurrency={c}; measured={day}T00:00:00.000Z"
_LLAMA70 = {"model_path": "meta-llama/Llama-3.1-70B", "system": "h200_sxm",
            "tp_size": "2", "moe_tp_size": "", "gemm_quant_mode": "fp8",
            "moe_quant_mode": ""}


@pytest.mark.parametrize(("over", "steps", "tokens"), [
    ({}, 40, max(8192, -(-(64 + 1024 + 64) // 64) * 64)),  # DeepSeek fp8 B200 1k/1k C 64
    ({"batch_size": "256", "silicon_data_source": _DUMP.format(c=256, day="2026-03-25")},
     40, 8192),  # max(8192, ...) is 8192 up to C 7104
    ({"silicon_data_source": _DUMP.format(c=32, day="2026-03-25"), "batch_size": "32"},
     0, 0),  # below the recipe's C 64
    ({"silicon_data_source": _DUMP.format(c=64, day="2026-01-20")}, 0, 0),  # before it
    ({"osl": "8192"}, 0, 0),  # only at 1k/1k
    ({"tp_size": "1", "attention_dp_size": "8", "moe_tp_size": "1", "moe_ep_size": "8",
      "batch_size": "8"}, 0, 0),  # attention DP: TensorRT-LLM skips the wait
    ({"backend": "sglang"}, 0, 0),
    ({**_LLAMA70, "silicon_data_source": _DUMP.format(c=16, day="2025-10-29"),
      "batch_size": "16"}, 20, 16384),
    ({**_LLAMA70, "tp_size": "8",
      "silicon_data_source": _DUMP.format(c=16, day="2025-10-29")}, 0, 0),  # TP 8: none
    ({**_LLAMA70, "silicon_data_source": _DUMP.format(c=16, day="2025-09-10")},
     0, 0),  # before the recipe set it
])
def test_trtllm_batch_waiting_is_the_inferencemax_recipes(over: dict[str, str], steps: int,
                                                         tokens: int) -> None:
    """Batch waiting runs on the rows whose InferenceMAX recipe set it, with its limits."""
    fields = {"silicon_data_source": _DUMP.format(c=64, day="2026-03-25"), **over}
    plan = S.plan_row(_row(**fields))
    sched = S.build_config(plan)["cluster"]["colocated"]["scheduler"]
    assert sched.get("batch_wait_steps", 0) == steps
    if steps:
        assert sched["max_num_batched_tokens"] == tokens
        assert 0 < sched["batch_wait_max_tokens_ratio"] <= 0.9
    pdsim.load_config(S.build_config(plan))


def test_aiperf_mean_weighs_the_burst_as_one_round_in_twenty() -> None:
    import numpy as np
    values = np.array([10.0, 10.0, 1.0, 1.0])  # C = 2: a burst round and one more
    assert S.aiperf_mean(values, 2) == pytest.approx((10.0 + 19 * 1.0) / 20)
    twenty = np.repeat(np.arange(20.0), 3)
    assert S.aiperf_mean(twenty, 3) == pytest.approx(twenty.mean())
    # InferenceMAX's 10 rounds: the burst weighs 1/10
    assert S.aiperf_mean(values, 2, 10) == pytest.approx((10.0 + 9 * 1.0) / 10)


def test_stratified_sample_is_fixed_and_covers_every_stratum(
        sample: list[S.SiliconRow]) -> None:
    expressible = []
    for r in sample:
        try:
            S.plan_row(r)
        except S.NotExpressible:
            continue
        expressible.append(r)
    a = S.stratified_sample(expressible, 150)
    assert [r.id for r in a] == [r.id for r in S.stratified_sample(expressible, 150)]
    strata = {(r.partition, r.split) for r in expressible}
    assert {(r.partition, r.split) for r in a} == strata


# ------------------------------------------------------------------ the slice


def test_ci_slice_error_within_tolerance(sample: list[S.SiliconRow]) -> None:
    rows = S.ci_slice(sample)
    assert len(rows) == 2 * S.CI_ROWS_PER_SPLIT
    assert {r.split for r in rows} == {"fit", "held-out"}
    scores = [S.score_row(r) for r in rows]
    assert all(s.ok for s in scores), [s.error for s in scores if not s.ok]
    failures = []
    for split in ("fit", "held-out"):
        st = S.stats(s for s in scores if s.split == split)
        for metric, value in (("ttft", st.ttft_mean), ("tpot", st.tpot_mean)):
            limit = MEASURED_MEAN_APE[(split, metric)] + TOLERANCE_PP
            if not value <= limit:
                failures.append(f"{split} {metric} mean error {value:.1f}% > {limit:.1f}%")
    assert not failures, failures


def test_recipe_rules_read_only_inferencemax_rows() -> None:
    """The recipe rules are facts about InferenceMAX's recipes: the same layout from
    AIConfigurator's own runs (aiperf) stays expressible, and so does the recipe's own
    largest concurrency."""
    gb200 = {"system": "gb200", "tp_size": "8", "moe_tp_size": "8", "batch_size": "16",
             "precision": "fp4", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"}
    S.plan_row(_row(silicon_data_source="/data/gb200/trtllm/x.csv; silicon_concurrency=16",
                    **gb200))
    with pytest.raises(S.NotExpressible):
        S.plan_row(_row(silicon_data_source="source_file=2026-04-06.csv; "
                        "silicon_concurrency=16", **gb200))
    oss = {"model_path": "openai/gpt-oss-120b", "backend": "vllm", "system": "h100_sxm",
           "tp_size": "2", "moe_tp_size": "2", "precision": "fp4", "gemm_quant_mode": "",
           "moe_quant_mode": ""}
    assert S.plan_row(_row(silicon_data_source="source_file=2026-04-06.csv; "
                           "silicon_concurrency=64", **oss)).concurrency == 64
    assert S.plan_row(_row(silicon_data_source="aic; silicon_concurrency=512",
                           **oss)).concurrency == 512


@pytest.mark.parametrize(("recorded", "ran"), [
    # (tp_size, attention_dp_size, moe_tp_size, moe_ep_size, batch_size) at concurrency 64
    (("64", "1", "8", "8", "64"), ("8", "1", "1", "8", "64")),    # TRT-LLM / SGLang TP8 EP8
    (("16", "1", "4", "4", "64"), ("4", "1", "1", "4", "64")),    # TP4 EP4
    (("1", "64", "8", "8", "1"), ("1", "8", "1", "8", "8")),      # attention DP 8, EP 8
    (("4", "4", "1", "16", "16"), ("4", "1", "1", "4", "64")),    # vLLM TP4 + expert parallel
    (("8", "1", "1", "8", "64"), ("8", "1", "1", "8", "64")),     # already the recipe's
    (("1", "8", "1", "8", "8"), ("1", "8", "1", "8", "8")),
    (("8", "1", "8", "1", "64"), ("8", "1", "8", "1", "64")),     # no expert parallelism
])
def test_recipe_layout_undoes_the_multiplied_out_exports(
        recorded: tuple[str, ...], ran: tuple[str, ...]) -> None:
    keys = ("tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "batch_size")
    src = "source_file=2026-04-06.csv; silicon_concurrency=64"
    row = _row(silicon_data_source=src, **dict(zip(keys, recorded, strict=True)))
    assert tuple(S.recipe_layout_fields(row)[k] for k in keys) == ran
    # AIConfigurator's own runs record what they ran: nothing is rewritten
    aic = _row(silicon_data_source="x; silicon_concurrency=64",
               **dict(zip(keys, recorded, strict=True)))
    assert S.recipe_layout_fields(aic) is aic.fields


def test_recipe_layouts_agree_with_the_ids_that_name_them(
        sample: list[S.SiliconRow]) -> None:
    """The dated CSVs' ids name the recipe's tp and ep (``..._tp8_ep8_1517``): every row
    the rule rewrites runs on tp GPUs with experts over ep of them."""
    import re

    name = re.compile(r"_tp(\d+)(?:_0)?_ep(\d+)(?:_0)?_\d+$")
    checked = 0
    for r in sample:
        ran = S.recipe_layout_fields(r)
        m = name.search(r.id)
        if ran is r.fields or m is None:
            continue
        tp, ep = int(m.group(1)), int(m.group(2))
        if S.ep_always_recipe(r) is not None:
            # the script enabled expert parallelism though EP_SIZE (the id's ep) was 1
            assert ep == 1 and S._int(ran["moe_ep_size"]) == tp, r.id
            continue
        assert S._int(ran["tp_size"]) * S._int(ran["attention_dp_size"]) == tp, r.id
        assert S._int(ran["moe_ep_size"]) == ep and S._int(ran["moe_tp_size"]) == 1, r.id
        checked += 1
    assert checked > 100


@pytest.mark.parametrize(("system", "day", "version", "tp", "ep_ran"), [
    ("h200_sxm", "2026-03-27", "0.18.0", "8", "8"),   # -ge 1: expert parallel
    ("h200_sxm", "2026-03-01", "0.16.0", "4", "1"),   # before the EP flag
    ("h200_sxm", "2026-05-27", "0.20.0", "8", "1"),   # after PR #1354: -gt 1
    ("b200_sxm", "2026-03-28", "0.17.0", "4", "4"),
    ("b200_sxm", "2026-04-03", "0.19.0", "4", "1"),   # the v0.19 upgrade: -gt 1
])
def test_minimax_vllm_fp8_recipes_enabled_expert_parallel_by_date(
        system: str, day: str, version: str, tp: str, ep_ran: str) -> None:
    """minimaxm2.5-fp8-{h200,b200}-vllm passed --enable-expert-parallel whatever EP_SIZE
    while their scripts tested ``-ge 1`` (VLLM_EP_ALWAYS_RECIPES): those days' rows run
    with the experts over the TP GPUs; the fp4 recipe and other days' rows as recorded."""
    fields = {"model_path": "MiniMaxAI/MiniMax-M2.5", "backend": "vllm", "system": system,
              "backend_version": version, "tp_size": tp, "moe_tp_size": tp,
              "moe_ep_size": "1", "precision": "fp8", "gemm_quant_mode": "fp8",
              "moe_quant_mode": "fp8", "batch_size": "16"}
    src = f"source_file=2026-04-06.csv; silicon_concurrency=16; measured={day}T00:00:00Z"
    ran = S.recipe_layout_fields(_row(silicon_data_source=src, **fields))
    assert (ran["moe_ep_size"], ran["moe_tp_size"]) == (
        (ep_ran, "1") if ep_ran != "1" else ("1", tp))
    fp4 = _row(silicon_data_source=src, **{**fields, "gemm_quant_mode": "nvfp4",
                                            "moe_quant_mode": "nvfp4"})
    assert S.recipe_layout_fields(fp4) is fp4.fields


def test_h200_mtp_recipe_is_known_by_its_day() -> None:
    """dsr1-fp8-h200-trt-mtp shared its image with the STP recipe: only the rows of the day
    its runs were measured run MTP (3 drafts, 1 with attention DP)."""
    src = ("source_file=2026-04-06.csv; silicon_concurrency=8; measured={day}T00:00:00.000Z; "
           "wip=False; image=nvcr.io#nvidia/tensorrt-llm/release:1.1.0rc2.post2")
    h200 = {"system": "h200_sxm", "precision": "fp8", "gemm_quant_mode": "fp8_block",
            "moe_quant_mode": "fp8_block", "batch_size": "8", "moe_tp_size": "1",
            "moe_ep_size": "8"}
    assert S.plan_row(_row(silicon_data_source=src.format(day="2026-01-14"),
                           **h200)).mtp_drafts == 3
    assert S.plan_row(_row(silicon_data_source=src.format(day="2025-12-15"),
                           **h200)).mtp_drafts == 0
    dp = {**h200, "tp_size": "1", "attention_dp_size": "8"}
    assert S.plan_row(_row(silicon_data_source=src.format(day="2026-01-14"),
                           **dp)).mtp_drafts == 1


def test_a_run_that_paid_its_prefills_reuses_no_prompt() -> None:
    """vLLM caches repeated aiperf prompts by default; the runs listed in
    AIPERF_RUNS_PREFILL_PAID computed theirs, and their rows run without reuse."""
    vllm = {"backend": "vllm", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm",
            "precision": "bf16", "gemm_quant_mode": "", "moe_quant_mode": "",
            "tp_size": "2", "moe_tp_size": "", "batch_size": "16"}
    (paid,) = S.AIPERF_RUNS_PREFILL_PAID
    cached = S.plan_row(_row(silicon_data_source="source_file=/x/aic-auto-gap-analysis/data/"
                             "h200_sxm/vllm/0.12.0/other.csv; silicon_concurrency=16", **vllm))
    computed = S.plan_row(_row(silicon_data_source=f"source_file=/x/{paid}; "
                               "silicon_concurrency=16", **vllm))
    assert cached.protocol == computed.protocol == "aiperf"
    assert S.reuses_prompts(cached) and not S.reuses_prompts(computed)
    assert S.build_config(cached)["workload"] != S.build_config(computed)["workload"]
