"""``python -m validation.silicon``: pdsim scored on AIConfigurator's silicon sample.

The sample (``validation/data/aic-silicon/``, Apache-2.0, see its README) holds 5,221
measured TTFT/TPOT points of TensorRT-LLM, SGLang and vLLM deployments. Each row pdsim can
express becomes a pdsim config that mirrors the benchmark protocol; the rest are listed
with the reason. Errors are absolute percentage errors of the mean TTFT and mean TPOT,
reported per partition (backend x mode x system) for fit and held-out rows apart.

The protocol mirrored is chosen per row from its source (``row_protocol``): the dated
InferenceMAX dumps ran SemiAnalysis InferenceMAX's client (bench_serving's
``benchmark_serving.py``: 10C prompts at max concurrency C, 2C warm-up requests awaited
first, input and output lengths uniform in ``[int(0.8 L), L]``), AIConfigurator's own runs
its aiperf template (``aiperf profile --concurrency C --num-requests 20C
--warmup-request-count 2C`` with fixed ISL/OSL). Both stream, ignore EOS, and report the
mean TTFT (from sending a request to its first streamed token, so at high concurrency it
includes queueing, the prompts batched with it and the P/D transfer) and the mean over
requests of ``(latency - TTFT) / (output tokens - 1)``. pdsim has no cold-start effects
to warm up, so it runs the measured phase alone: a closed loop at C from an idle cluster,
``R x C`` requests (R the protocol's rounds when cheap, at least 2), weighting the first
round (the burst) as the full run would (docs/validation-silicon.md, "How a row is run").
The one warm state it mirrors is a prefix cache: aiperf repeats 100 prompts, and where the
backend caches prefixes (``PREFIX_CACHING``) the warm-up requests run first, unscored.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import hashlib
import json
import math
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np

from pdsim.perf.kernels import version_key

DATA_DIR = Path(__file__).resolve().parent / "data" / "aic-silicon"
CSV_PATH = DATA_DIR / "silicon_sample.csv"
DOC = Path(__file__).resolve().parent.parent / "docs" / "validation-silicon.md"
COMMAND = "python -m validation.silicon --write"

HELD_OUT_DIGITS = frozenset("01234")
"""First hex digits of sha256(id) that hold a row out (fixed by the data's README)."""

MODEL_PROFILES: dict[str, str] = {
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-v3",
    "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    "openai/gpt-oss-120b": "gpt-oss-120b",
}
"""Checkpoints whose architecture a shipped model profile is (R1, V3 and V3.1 share V3's
architecture; the NVIDIA checkpoints and Qwen3-235B-A22B-FP8 are quantisations of the same
models; each profile's architecture is its checkpoint's config.json, as bundled with
AIConfigurator at 095f58a, ``aic-core/src/aiconfigurator_core/model_configs/``)."""

MOE_PROFILES = frozenset({"deepseek-v3", "qwen3-235b-a22b", "minimax-m2.5", "kimi-k2.5",
                          "gpt-oss-120b"})
MTP_PROFILES = frozenset({"deepseek-v3"})
"""Profiles whose checkpoint ships an MTP head (so a row may have been measured with MTP)."""

HARDWARE_PROFILES: dict[str, str] = {
    "h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "gb200": "gb200",
}

QUANT_DTYPES: dict[str, str] = {
    "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4", "int4_wo": "int4", "bf16": "bf16",
    "fp16": "fp16", "float16": "fp16",
}
PRECISION_DTYPES: dict[str, str] = {"fp8": "fp8", "fp4": "nvfp4", "int4": "int4",
                                    "bf16": "bf16"}

BLOCK_TOKENS: dict[str, int] = {"trtllm": 32, "vllm": 16, "sglang": 16}
"""KV block size per backend: TensorRT-LLM's tokens_per_block default as AIConfigurator's
generator sets it (32), vLLM's default (16); SGLang pages by token (16 stands in)."""

AIPERF_ROUNDS = 20
"""aiperf's profiling phase: 20 x C requests (AIConfigurator's BENCH_MULTI_ROUND)."""
MIN_MEASURED_ROUNDS = 2
OUTPUT_TOKEN_BUDGET = 2_000_000
"""Output tokens per row above which fewer rounds than the protocol's are simulated."""


@dataclass(frozen=True)
class BenchmarkProtocol:
    """A benchmark client's measured phase, as pdsim mirrors it: ``rounds`` x C requests in
    a closed loop at C from an idle server (the warm-up, ``warmup_rounds`` x C requests,
    drains before it and is not simulated), and lengths fixed or uniform in
    ``[int(range_ratio x L), L]``. TTFT and TPOT are the plain means over the measured
    requests of each request's TTFT and ``(latency - TTFT) / (output tokens - 1)``."""

    name: str
    rounds: int
    warmup_rounds: int
    range_ratio: float | None
    """``None``: every request has exactly ISL/OSL tokens."""
    prompt_pool: int | None = None
    """Distinct prompts the client draws every request from (warm-up included); ``None``:
    each prompt is new."""


AIPERF_DATASET_ENTRIES = 100
"""aiperf's synthetic dataset size when ``--num-dataset-entries`` is not given
(``InputDefaults.NUM_DATASET_ENTRIES = 100``, ``aiperf/common/config/config_defaults.py``;
sampled with ``DatasetSamplingStrategy.SHUFFLE``): AIConfigurator's ``bench_run.sh.j2``
does not give it, so 20C measured and 2C warm-up requests reuse 100 prompts."""


PROTOCOLS: dict[str, BenchmarkProtocol] = {
    "aiperf": BenchmarkProtocol("aiperf", AIPERF_ROUNDS, 2, None, AIPERF_DATASET_ENTRIES),
    "inferencemax": BenchmarkProtocol("inferencemax", 10, 2, 0.8),
}
"""``aiperf``: AIConfigurator's generated benchmark (``bench_run.sh.j2``: ``aiperf profile
--num-requests 20C --warmup-request-count 2C``, fixed ISL/OSL). ``inferencemax``:
SemiAnalysis InferenceMAX's client (``benchmarks/benchmark_lib.sh`` run_benchmark_serving:
``utils/bench_serving/benchmark_serving.py --num-prompts 10C --max-concurrency C
--request-rate inf --num-warmups 2C --random-range-ratio 0.8 --ignore-eos``; its
``sample_random_requests`` draws input and output lengths as
``np.random.randint(int(L * ratio), L + 1)``; the warm-up requests are awaited before the
measured run starts); srt-slurm's ``sa-bench`` runs the same client for the multi-node
disaggregated recipes with the same multipliers (``DEFAULT_NUM_PROMPTS_MULT = 10``,
``DEFAULT_NUM_WARMUP_MULT = 2``, ``DEFAULT_RANDOM_RANGE_RATIO = 0.8``; read in public
forks, docs/step-time.md "The first response"; docs/validation-silicon.md, "How a row is
run")."""

_INFERENCEMAX_SOURCE = re.compile(
    r"db-dump/\d{4}-\d{2}-\d{2};|source_file=\d{4}-\d{2}-\d{2}\.csv;")


def row_protocol(row: SiliconRow) -> str:
    """The benchmark protocol a row was measured with, from its ``silicon_data_source``:
    the dated InferenceMAX dumps (``source_file=YYYY-MM-DD.csv``, ``db-dump/YYYY-MM-DD``)
    ran InferenceMAX's client; every other row AIConfigurator's aiperf template."""
    src = row.fields["silicon_data_source"]
    return "inferencemax" if _INFERENCEMAX_SOURCE.match(src) else "aiperf"

MAX_BATCH_PER_RANK = 4096

MEMORY_RULES: dict[str, str] = {"trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
"""Each backend's KV-memory rule (``memory_rule``, pdsim.perf.memory)."""

PREFILL_POLICIES: dict[str, str] = {"trtllm": "mixed", "vllm": "mixed", "sglang": "mixed"}
"""Each backend's step composition (``scheduler.prefill_policy``). vLLM v1 and TensorRT-LLM's
in-flight batching mix prefill chunks into decode steps. SGLang's default scheduler runs a
prefill batch alone while prompts wait (``prefill_first``: a closed loop of fixed-length
requests then stays in waves), but on 65 fit SGLang rows it moved the median TTFT ratio from
0.18 to 0.51 while the mean TTFT error went from 82.1% to 83.6% (B200 better, H200 2x too
slow) and the mean TPOT error from 20.4% to 22.5%, so the suite keeps ``mixed`` for SGLang
too (docs/validation-silicon.md, "Why TTFT is short")."""

PREFIX_CACHING: dict[str, bool] = {"vllm": True, "trtllm": False, "sglang": False}
"""Whether a backend's deployment reuses the KV of a repeated prompt (``scheduler.
enable_prefix_caching`` on P and colocated instances), where the protocol repeats prompts
(``prompt_pool``). vLLM v1 caches prefixes by default and AIConfigurator's
``cli_args.*.j2`` passes ``--no-enable-prefix-caching`` only when asked; its TensorRT-LLM
template writes ``enable_block_reuse: false`` unless asked (``extra_engine_args.yaml.j2``).
SGLang's radix cache is on by default, but its fit rows (27, Llama-3.1-8B on H200) show the
prefill paid: at OSL 100 the measured TPOT (29-31 ms) is above pdsim's without reuse
(20-22 ms), and with reuse the TPOT mean error went from 22.6% to 44.1%, so SGLang runs
without (docs/step-time.md, "Repeated prompts in the aiperf rows")."""

AIPERF_RUNS_PREFILL_PAID: frozenset[str] = frozenset({
    "aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv",
})
"""AIConfigurator runs (``silicon_data_source`` file) whose deployment, unlike its backend's
default (``PREFIX_CACHING``), paid every prompt's prefill. Found on fit rows (issue 25's
fourteenth round): the vLLM 0.12.0 Qwen3-32B run on H100 measured TPOTs that grow with
ISL / OSL and concurrency as computed prompts do (99 ms at 4096/128, concurrency 128, TP8,
where reused prompts would leave 20 ms steps): its 58 fit rows score TPOT 26.9% mean
(median pdsim / measured 0.79) with reuse and 7.1% (0.97) without. The Llama-3.1-8B run of
the same vLLM on H200 could not have computed its prompts (docs/step-time.md, "Repeated
prompts in the aiperf rows"), so the choice is per run: what differs between them (the
aiperf or AIConfigurator version that generated them) is not recorded. The run's Qwen3-235B
and Kimi-K2.5 neighbours are left at the default: their fit rows' TPOT barely moves."""

CPU_COST_RULES: dict[str, str] = {"trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
"""Each backend's serving-loop CPU costs per step and per request in a step
(``step_time.cpu_cost_rule``, pdsim.perf.config.CPU_COST_RULES, where the values and their
fit live: docs/step-time.md, "Engine CPU costs: the cpu_cost_rule"); TensorRT-LLM's rule
keeps pdsim's defaults per step and request and adds the host launches of its steps without
a CUDA graph (``eager_kernel_s``, "Steps without a CUDA graph")."""

KERNEL_RULES: dict[str, str] = {"trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
"""Each backend's own kernels (``step_time.kernel_rule``): the MoE layers' per-pair cost
fitted to that engine's measured MoE layers in AIConfigurator's perf database
(``kernels.moe_pair_s_by_engine`` of the hardware profiles, tools/fit_moe_kernels.py
``--by-backend``; docs/step-time.md, "Per-pair handling of routed tokens"), not to this
sample."""

DP_BALANCE: dict[str, str] = {"trtllm": "trtllm", "vllm": "vllm",
                              "sglang": "sglang_round_robin"}
"""Each backend's assignment of requests to attention-DP ranks (``attention_dp_balance``,
pdsim.engine.dp_group): TensorRT-LLM's attention-DP balance, vLLM's DP load balancer,
SGLang's data-parallel controller at its default ``round_robin``."""

FRONTEND_LATENCY_S: dict[str, float] = {}
"""Each backend's per-request cost on the way in (``router.frontend_latency_s``, seconds);
none. ``python -m validation.silicon_gap --fit-frontend`` fits it on fit rows only (the
median measured - pdsim TTFT at concurrency <= 8: SGLang 0.241 s, TensorRT-LLM 0.160 s,
vLLM 0.056 s on 2026-12-02), but run inside the closed loop a cost before the engine makes
the fixed-length requests arrive in bursts (they finish in adjacent decode steps), so TTFT
grew by 1-8x the cost and the CI slice's TTFT error rose from 63.2% to 80.6% (fit) and
54.2% to 94.4% (held-out): not applied (docs/validation-silicon.md, "Why TTFT is short")."""

FRONTEND_LATENCY_PER_PROMPT_TOKEN_S: dict[str, float] = {"vllm": 12.5e-6}
"""Each backend's cost per prompt token on the way in
(``router.frontend_latency_per_prompt_token_s``, seconds): vLLM 12.5 us, fitted jointly with
vLLM's first-response delay (1 token) on the 167 vLLM fit rows of both harnesses after the
GEMM and MoE kernels were re-priced (mean TTFT error 28.3% at the earlier 3 tokens + 22.5
us -> 20.1% on the grid, 19.7% simulated); first fitted as 22.5 us with 3 tokens (25.4% ->
19.6%; aiperf's prompt-cache hits, whose measured TTFT grows with the prompt while their
TPOT shows no prefill, 53.3% -> 23.1%); docs/step-time.md, "A cost per prompt token on
the way in (vLLM)". None for SGLang and TensorRT-LLM (not fitted)."""

RESPONSE_RULES: dict[str, str] = {"trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
"""Each backend's first-response rule (``router.response_rule``): the measured TTFT ends at
the first streamed response the client receives, which arrives some of the request's
engine steps after its first token (pdsim.config_sections.RESPONSE_RULE_PROFILES per backend
and model profile, else RESPONSE_RULES per backend; fitted on fit rows only;
docs/validation-silicon.md, "Why TTFT is short")."""

TRTLLM_ADP_CONTEXT_WAIT_STEPS = 60
"""TensorRT-LLM's attention-DP context balance in InferenceMAX's recipes: every DeepSeek-R1
TensorRT-LLM recipe that turns attention DP on adds ``attention_dp_config:
{batching_wait_iters: 0, enable_balance: true, timeout_iters: 60}``
(``benchmarks/single_node/dsr1_{fp4,fp8}_b200_trt.sh``, ``dsr1_fp8_h200_trt.sh`` of
SemiAnalysisAI/InferenceX at 51e31df, the state of 2026-04-06; the same at 12ba0ae,
2026-03-25). Run as ``attention_dp_context_wait_steps`` on the agg attention-DP rows of
that protocol; AIConfigurator's generator sets no ``attention_dp_config`` (TensorRT-LLM's
default: no balance), so its rows run without it (docs/step-time.md, "The attention-DP
context balance")."""

SGLANG_RECV_INTERVALS = {"low": 10, "high": 30, "low_concurrency_below": 16}
"""SGLang's ``--scheduler-recv-interval`` in InferenceMAX's DeepSeek-R1 recipes on B200
(``benchmarks/single_node/dsr1_fp4_b200.sh`` and ``dsr1_fp8_b200.sh`` of
SemiAnalysisAI/InferenceX at 12ba0ae, 2026-03-25, and 51e31df, 2026-04-06): 30 at a
concurrency of 16 or more, else 10 (the fp8 recipe at TP 4: 10 always); the H200 recipe
(``dsr1_fp8_h200.sh``) sets none, nor does AIConfigurator's generator. Run as
``scheduler.recv_interval_steps`` (``sglang_recv_interval``)."""


def sglang_recv_interval(plan: Plan, lay: Layout) -> int:
    """The receive interval a row's SGLang server ran with (``SGLANG_RECV_INTERVALS``):
    InferenceMAX's agg DeepSeek-R1 recipes on B200; 1 (every step) otherwise."""
    if not (plan.backend == "sglang" and plan.protocol == "inferencemax"
            and plan.mode == "agg" and plan.hardware == "b200"
            and plan.model == "deepseek-v3"):
        return 1
    iv = SGLANG_RECV_INTERVALS
    if plan.weight_dtype == "fp8" and lay.tp == 4:
        return iv["low"]
    return iv["high"] if plan.concurrency >= iv["low_concurrency_below"] else iv["low"]


@dataclass(frozen=True)
class BatchWaitRecipe:
    """An InferenceMAX TensorRT-LLM recipe that turns batch waiting on
    (``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio``): agg rows of ``model``
    in ``weight_dtypes`` on ``systems`` at ISL/OSL ``isl``/``osl``, concurrency at least
    ``min_concurrency``, TP below ``below_tp`` (0: any), measured in [``since``,
    ``until``] (``measured=`` of the source; an empty ``until``: still in force). The
    recipe's ``max_num_tokens`` (which the ratio scales) is ``max_num_tokens``, or with 0
    the DeepSeek recipes' ``max(8192, C + ISL + 64 rounded up to 64)``."""

    model: str
    systems: frozenset[str]
    weight_dtypes: frozenset[str]
    isl: int
    osl: int
    min_concurrency: int
    below_tp: int
    since: str
    until: str
    wait_steps: int
    max_tokens_ratio: float
    max_num_tokens: int


BATCH_WAIT_RECIPES: tuple[BatchWaitRecipe, ...] = (
    BatchWaitRecipe("llama-3.1-70b", frozenset({"b200", "h200"}),
                    frozenset({"fp8", "nvfp4"}), 1024, 1024, 1, 8,
                    "2025-09-18", "2025-10-29", 20, 0.9, 16384),
    BatchWaitRecipe("deepseek-v3", frozenset({"b200"}), frozenset({"fp8"}), 1024, 1024,
                    64, 0, "2026-01-29", "", 40, 0.8, 0),
)
"""SemiAnalysisAI/InferenceX: ``benchmarks/70b_fp{4,8}_{b200,h200}_trt_{slurm,docker}.sh``
from 1b563c858 (2025-09-18, "Update 70B TRT To use latest container and flags") until the
Llama-3.1-70B recipes were removed (2582bce40, 2025-10-29; the sample's TensorRT-LLM 70B
rows were measured that day) write ``batch_wait_max_tokens_ratio: 0.9`` and
``batch_wait_timeout_iters: 20`` "for 1k/1k" when TP < 8, with ``--max_num_tokens 16384``
for every 70B run (image ``tensorrt-llm/release:1.1.0rc2.post2``);
``benchmarks/dsr1_fp8_b200_trt.sh`` from ec7bafaae (2026-01-29, "Add delay batching ...
for 1k1k high-concurrency") writes ``batch_wait_timeout_iters: 40`` and
``batch_wait_max_tokens_ratio: 0.8`` at 1k/1k and C >= 64, with ``--max_num_tokens``
``max(8192, (C + ISL + 64 + 63) / 64 x 64)``. TensorRT-LLM's PyExecutor skips the wait
with attention DP (``_schedule``: ``not self.enable_attention_dp and
self.enable_batch_waiting``), as pdsim does. Run as ``scheduler.batch_wait_steps`` and
``batch_wait_max_tokens_ratio`` with the recipe's ``max_num_batched_tokens``
(docs/step-time.md, "Batch waiting")."""


def batch_wait_recipe(plan: Plan, lay: Layout) -> BatchWaitRecipe | None:
    """The batch-waiting recipe a row's server ran (``BATCH_WAIT_RECIPES``), else None."""
    if not (plan.backend == "trtllm" and plan.protocol == "inferencemax"
            and plan.mode == "agg" and lay.dp == 1 and plan.measured_on):
        return None
    for rec in BATCH_WAIT_RECIPES:
        if (plan.model == rec.model and plan.hardware in rec.systems
                and plan.weight_dtype in rec.weight_dtypes
                and (plan.isl, plan.osl) == (rec.isl, rec.osl)
                and plan.concurrency >= rec.min_concurrency
                and (not rec.below_tp or lay.tp < rec.below_tp)
                and rec.since <= plan.measured_on <= (rec.until or "9999-12-31")):
            return rec
    return None


def recipe_max_num_tokens(rec: BatchWaitRecipe, plan: Plan) -> int:
    """The ``max_num_tokens`` the recipe's server ran with."""
    if rec.max_num_tokens:
        return rec.max_num_tokens
    return max(8192, _round_up(plan.concurrency + plan.isl + 64, 64))


TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.8
"""``kv_cache_config.free_gpu_memory_fraction`` as AIConfigurator's generator writes it
(``backend_templates/trtllm/extra_engine_args.yaml.j2``: ``default(0.80)``)."""

FP8_KV_PRECISIONS = frozenset({"fp8", "nvfp4"})
"""Weight dtypes whose AIConfigurator quant profile runs an fp8 KV cache: the ``fp8`` and
``nvfp4`` profiles set ``kvcache_quant_mode: fp8`` (``sdk/task_v1_compat.py``,
``_PROFILE_TO_QUANT``), as its checkpoint inference does for fp8/fp8_block/nvfp4
checkpoints (``sdk/models/helpers.py``); bf16 and int4 weight-only keep a bf16 cache."""

@dataclass(frozen=True)
class MtpRecipe:
    """Public benchmark recipes that ran MTP, known by the serving image a row records
    (``image=`` in ``silicon_data_source``): rows of ``backend`` on ``system`` serving one
    of ``models`` with that image ran ``drafts`` MTP drafts per step
    (``drafts_attention_dp`` with attention data parallelism)."""

    image: str
    backend: str
    system: str
    models: frozenset[str]
    drafts: int
    drafts_attention_dp: int
    measured_on: frozenset[str] = frozenset()
    """Days (YYYY-MM-DD) the MTP recipe's runs were measured, where the STP recipe ran the
    same image: only rows of those days ran MTP (empty: every row with the image)."""


MTP_RECIPES: tuple[MtpRecipe, ...] = (
    MtpRecipe("tensorrt-llm/release:1.2.0rc6.post3", "trtllm", "b200_sxm",
              frozenset({"deepseek-ai/DeepSeek-R1"}), 3, 1),
    MtpRecipe("tensorrt-llm/release:1.1.0rc2.post2", "trtllm", "h200_sxm",
              frozenset({"deepseek-ai/DeepSeek-R1"}), 3, 1, frozenset({"2026-01-14"})),
)
"""InferenceMAX's (SemiAnalysisAI/InferenceX) ``.github/configs/nvidia-master.yaml`` from
2026-02-05 (5d517074c, ``dsr1-fp8-b200-trt-mtp``) and 2026-02-06 (0aae52d4c,
``dsr1-fp4-b200-trt-mtp``) to 2026-04-10 gives the image
``nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3`` to those two recipes only, every
search-space entry ``spec-decoding: mtp``; the STP recipes ``dsr1-fp4-b200-trt`` and
``dsr1-fp8-b200-trt`` ran ``1.2.0rc6.post2``. Their scripts
(``benchmarks/dsr1_fp{4,8}_b200_trt_mtp.sh``) set ``num_nextn_predict_layers`` 3, or 1
when ``DP_ATTENTION`` is true. The sample's rows with that image were measured on
2026-02-05 and -06 (docs/validation-silicon.md, "MTP").

On H200 the MTP recipe ``dsr1-fp8-h200-trt-mtp`` (InferenceX PR #392, merged 2026-01-15,
``MTP=3 (or MTP=1 when DP_ATTN=true)``) ran the STP recipe's image ``1.1.0rc2.post2``, so the
image cannot tell them apart; the day can. The sample's 41 rows of TensorRT-LLM DeepSeek-R1
agg on H200 measured on 2026-01-14 are exactly that recipe's search space (1K/1K
concurrency 4-64 at TP8 EP8 and 128-256 with attention DP; 1K/8K 4-128 and 256; 8K/1K 4-32
and 64-256), ten of them at points the STP recipe never searched (128 and 256 at every
length: its 1K/1K and 1K/8K stop at 64, its 8K/1K at 64 with attention DP), so that day's
rows are the MTP recipe's runs. One later row (2026-01-28, 1K/8K at 256 with attention DP)
lies in the MTP space alone too, but that day also measured an STP point, so it is not
taken."""

MTP_ACCEPTANCE_RATES = (0.92, 0.66, 0.24)
"""Per-position acceptance of DeepSeek-R1's MTP drafts (TensorRT-LLM tech blog 1, "Pushing
Latency Boundaries: Optimizing DeepSeek-R1 Performance on NVIDIA B200 GPUs", section
"Autoregressive MTP Layers": acceptance lengths 1.92, 2.58, 2.82 for MTP 1-3 on 8 x B200;
the rates are their successive differences, as validation row
trtllm-dsr1-b200-bs1-mtp3-speedup uses them). Measured on that blog's dataset, not on
InferenceMAX's random prompts."""


def mtp_drafts(row: SiliconRow, attention_dp: bool) -> int:
    """MTP drafts per step the row's recipe ran (``MTP_RECIPES``), else 0."""
    f = row.fields
    m = re.search(r"image=([^;\s]+)", f["silicon_data_source"])
    if m is None:
        return 0
    for rec in MTP_RECIPES:
        if (m.group(1).endswith(rec.image) and f["backend"] == rec.backend
                and f["system"] == rec.system and f["model_path"] in rec.models
                and (not rec.measured_on or row.measured_on in rec.measured_on)):
            return rec.drafts_attention_dp if attention_dp else rec.drafts
    return 0


INFERENCEMAX_DISAGG_ONLY_SYSTEMS = frozenset({"gb200"})
"""Systems on which InferenceMAX (SemiAnalysisAI/InferenceX) ran no aggregated recipe: every
GB200 recipe was a multi-node Dynamo disaggregated one (``runners/launch_gb200-nv.sh`` and
``.github/workflows/gb200-tests.yml`` at 0ba7aa3, 2025-11-17, ran ``submit_disagg.sh``
only, and every gb200 entry of ``.github/configs/nvidia-master.yaml`` from 2025-12 to
2026-04 is ``multinode: true``, dynamo-trt or dynamo-sglang). The sample's InferenceMAX rows
on them marked ``agg`` record a TP of 12 to 72 GPUs (the run's whole P + D GPU count,
DeepSeek-R1 on GB200, 2025-11-16/17): disaggregated runs whose P/D split the dump lost, so
the layout pdsim would run is not the one measured."""


@dataclass(frozen=True)
class RecipeSearchSpace:
    """The concurrencies an InferenceMAX recipe ran: every version of its
    ``nvidia-master.yaml`` entry (``recipe``) searched ``conc-start`` .. ``max_concurrency``
    for ``model`` served by ``backend`` on ``system``. A row of it at a larger concurrency
    records a client concurrency the recipe never ran."""

    recipe: str
    model: str
    backend: str
    system: str
    max_concurrency: int


RECIPE_SEARCH_SPACES: tuple[RecipeSearchSpace, ...] = (
    RecipeSearchSpace("gptoss-fp4-h100-vllm", "openai/gpt-oss-120b", "vllm", "h100_sxm", 64),
)
"""Checked in SemiAnalysisAI/InferenceX: ``gptoss-fp4-h100-vllm`` from its first version
(17d5e204f, 2025-11-03) to its last (9d59b9ef9, 2026-06-24) searched concurrency 4 to 64 at
every sequence length and TP (16 for TP8 at 8K/1K), and its script
(``benchmarks/gptoss_fp4_h100*.sh``) sets ``--max-num-seqs`` to the concurrency. The
sample's nine rows of it at concurrency 512 (2025-12-05 and -08, vLLM 0.11.2 or no version)
measured TPOTs below the same deployment's concurrency-8 rows with TTFTs of 20-460 s: not
512 requests running at once. Only recipes whose rows were checked against their search
space are listed."""


@dataclass(frozen=True)
class ExpertParallelRecipe:
    """An InferenceMAX vLLM recipe whose script passed ``--enable-expert-parallel`` whatever
    its ``EP_SIZE`` (``if [ "$EP_SIZE" -ge 1 ]``, true for the default 1) while it was on
    InferenceX's main branch from ``first_day`` to ``last_day``: rows of ``model`` in
    ``quant`` on ``system`` measured in those days ran TP ``tp`` with the experts over the
    ``tp`` GPUs (vLLM's EP = TP x DP), though the sample records ``moe_ep_size`` 1."""

    recipe: str
    model: str
    system: str
    quant: str
    first_day: str
    last_day: str


VLLM_EP_ALWAYS_RECIPES: tuple[ExpertParallelRecipe, ...] = (
    ExpertParallelRecipe("minimaxm2.5-fp8-h200-vllm", "MiniMaxAI/MiniMax-M2.5", "h200_sxm",
                         "fp8", "2026-03-13", "2026-05-25"),
    ExpertParallelRecipe("minimaxm2.5-fp8-b200-vllm", "MiniMaxAI/MiniMax-M2.5", "b200_sxm",
                         "fp8", "2026-03-11", "2026-04-02"),
)
"""Read in SemiAnalysisAI/InferenceX's first-parent history of
``benchmarks/single_node/minimaxm2.5_fp8_{h200,b200}.sh``: the H200 script gained the
``-ge 1`` test in 5e2c705d3 (2026-03-13, PR #869) and kept it to 8014ee637 (2026-05-26, PR
#1354, ``-gt 1``); its first version (a36346339, 2026-03-01) passed no EP flag. The B200
script had it from its first version (f342df18e, 2026-03-11, PR #757, with
``VLLM_USE_FLASHINFER_MOE_FP8=0`` and ``VLLM_MOE_USE_DEEP_GEMM=0``) to bddbf4031
(2026-04-03, PR #947, the v0.19 upgrade, ``-gt 1``). ``nvidia-master.yaml`` at 626932a11
(2026-03-27) searched ``{tp: 8}`` for the H200 recipe and ``{tp: 2}``, ``{tp: 4}`` for the
B200 one, no ``ep``, so ``EP_SIZE`` was 1. No other recipe script on main between 2025-10
and 2026-06 had the test. The sample's rows: H200 vLLM 0.18 measured 2026-03-27/28 (TP8),
B200 vLLM 0.17 measured 2026-03-11 and -28 (TP2, TP4); the H200 vLLM 0.16 rows of
2026-03-01 ran TP4 without it, the B200 vLLM 0.19 rows (2026-04-03 on) as recorded."""


LIKELY_MTP_RATIO = 1.5
"""A row of an MTP-capable model whose pdsim TPOT (no speculation) exceeds the measured by
this factor is flagged as likely measured with MTP (a flag for reporting, not a fit)."""

PARTITION_MIN_ROWS = 20

NO_FIT_REASON = "weights do not fit the GPUs under the backend's default memory rule"


def is_held_out(row_id: str) -> bool:
    """The fixed split: held out when sha256(id) starts with a hex digit 0-4."""
    return hashlib.sha256(row_id.encode("utf-8")).hexdigest()[0] in HELD_OUT_DIGITS


def split_of(row_id: str) -> str:
    return "held-out" if is_held_out(row_id) else "fit"


def _int(value: str, default: int = 1) -> int:
    """A parallel size: empty and 0 mean 1 (the sample writes both for 'not used')."""
    try:
        v = int(float(value))
    except ValueError:
        return default
    return v if v > 0 else default


@dataclass(frozen=True)
class SiliconRow:
    """One row of the sample, as read (strings kept as in the CSV)."""

    fields: dict[str, str]

    @property
    def id(self) -> str:
        return self.fields["id"]

    @property
    def split(self) -> str:
        return split_of(self.id)

    @property
    def partition(self) -> str:
        f = self.fields
        return f"{f['backend']} {f['mode']} {f['system']}"

    @property
    def concurrency(self) -> int | None:
        """The client's concurrency: ``silicon_concurrency`` of the source, else
        ``batch_size`` (which is per attention-DP rank where they differ)."""
        m = re.search(r"silicon_concurrency=(\d+)", self.fields["silicon_data_source"])
        if m and int(m.group(1)) > 0:
            return int(m.group(1))
        bs = self.fields.get("batch_size", "")
        return int(bs) if bs.isdigit() and int(bs) > 0 else None

    @property
    def measured_on(self) -> str:
        """The day the row was measured (``measured=YYYY-MM-DD...`` of its source), else
        ''."""
        m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", self.fields["silicon_data_source"])
        return m.group(1) if m else ""

    @property
    def ttft_ms(self) -> float:
        return float(self.fields["silicon_ttft_ms"])

    @property
    def tpot_ms(self) -> float:
        return float(self.fields["silicon_tpot_ms"])


def load_sample(path: Path = CSV_PATH) -> list[SiliconRow]:
    with path.open(newline="", encoding="utf-8") as f:
        return [SiliconRow(dict(r)) for r in csv.DictReader(f)]


def measurement_key(row: SiliconRow) -> tuple[str, str]:
    """A row's measured TTFT and TPOT as the CSV writes them, every digit kept."""
    return row.fields["silicon_ttft_ms"], row.fields["silicon_tpot_ms"]


def fit_twins(rows: Iterable[SiliconRow]) -> frozenset[str]:
    """Ids of the held-out rows whose measured TTFT and TPOT equal a fit row's digit for
    digit: one benchmark run that the sample holds under two ids (InferenceMAX's runs come
    in several exports, the db-dump and the dated CSVs, with different id schemes), one
    copy on each side of the split. What is fitted to fit rows has seen such a row's
    measurement, so the report also scores the held-out rows without one."""
    rows = list(rows)
    fitted = {measurement_key(r) for r in rows if r.split == "fit"}
    return frozenset(r.id for r in rows if r.split == "held-out" and measurement_key(r) in fitted)


# ------------------------------------------------------------------ expressibility


@dataclass(frozen=True)
class Layout:
    """One role's parallel layout, as pdsim runs it: ``instances`` engines of TP ``tp``
    sharing experts over ``ep`` GPUs (attention-DP ranks are instances; with experts over
    them, every ``dp`` instances are one attention-DP engine stepping together)."""

    instances: int
    tp: int
    ep: int
    per_rank_batch: int | None
    dp: int = 1


class NotExpressible(Exception):
    """Why pdsim cannot express a row; ``reason`` is a short category."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason if not detail else f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _layout(f: dict[str, str], prefix: str, moe: bool, workers: int) -> Layout:
    tp = _int(f[f"{prefix}tp_size"])
    pp = _int(f[f"{prefix}pp_size"])
    dp = _int(f[f"{prefix}attention_dp_size"])
    mtp = _int(f[f"{prefix}moe_tp_size"])
    mep = _int(f[f"{prefix}moe_ep_size"])
    bs_field = f.get(f"{prefix}batch_size", "")
    per_rank = int(bs_field) if bs_field.isdigit() and int(bs_field) > 0 else None
    if pp > 1:
        raise NotExpressible("pipeline parallelism (pp > 1)")
    if not moe:
        return Layout(workers * dp, tp, 1, per_rank)
    gpus = tp * dp
    if mtp > 1 and mep > 1 and dp > 1:
        raise NotExpressible("MoE hybrid tensor x expert parallelism across attention-DP "
                             "ranks (moe_tp > 1, moe_ep > 1, attention_dp > 1)")
    if mtp * mep != gpus:
        raise NotExpressible("inconsistent MoE parallel sizes (moe_tp x moe_ep != tp x "
                             "attention_dp)")
    if mep == 1:
        if dp > 1:
            raise NotExpressible("MoE tensor parallelism across attention-DP ranks")
        return Layout(workers, tp, 1, per_rank)
    if mtp > 1:
        # the hybrid layout inside one TP group: experts over moe_ep groups of moe_tp GPUs
        # (expert_parallel_size a divisor of tensor_parallel_size)
        return Layout(workers, tp, mep, per_rank)
    return Layout(workers * dp, tp, mep, per_rank, dp)


@dataclass(frozen=True)
class Plan:
    """What pdsim runs for a row: model and hardware profiles, dtypes, one or two roles."""

    row_id: str
    model: str
    hardware: str
    weight_dtype: str
    expert_weight_dtype: str
    mode: str
    concurrency: int
    isl: int
    osl: int
    block_tokens: int
    roles: dict[str, Layout] = field(default_factory=dict)
    backend: str = ""
    kv_dtype: str = "bf16"
    protocol: str = "aiperf"
    mtp_drafts: int = 0
    """MTP draft tokens per step where the row's recipe proves MTP ran (``MTP_RECIPES``)."""
    measured_on: str = ""
    """The day the row was measured (``measured=`` of its source, YYYY-MM-DD); '' if not
    given."""
    backend_version: str = ""
    """The serving engine's version as the row records it ('' if not given)."""
    source: str = ""
    """The row's ``silicon_data_source`` (the run it comes from)."""


def _dtype(quant: str, precision: str, default: str) -> str:
    if quant:
        if quant not in QUANT_DTYPES:
            raise NotExpressible("unknown quant mode", quant)
        return QUANT_DTYPES[quant]
    return PRECISION_DTYPES.get(precision, default)


_HEADS: dict[str, int] = {}
_WEIGHT_DTYPES: dict[str, str] = {}


def profile_weight_dtype(model: str) -> str:
    """The weight dtype of a shipped model profile's checkpoint (a row whose quant modes and
    precision are empty ran the checkpoint as released)."""
    if model not in _WEIGHT_DTYPES:
        from pdsim.perf.profiles import load_model_architecture

        _WEIGHT_DTYPES[model] = load_model_architecture(model, "model").weight_dtype
    return _WEIGHT_DTYPES[model]


def attention_heads(model: str) -> int:
    """Query heads of a shipped model profile's attention layers (the largest count)."""
    if model not in _HEADS:
        from pdsim.perf.profiles import load_model_architecture

        arch = load_model_architecture(model, "model")
        _HEADS[model] = max(int(getattr(b.mixer, "num_heads", 1)) for b in arch.blocks)
    return _HEADS[model]


def ep_always_recipe(row: SiliconRow) -> ExpertParallelRecipe | None:
    """The ``VLLM_EP_ALWAYS_RECIPES`` entry an InferenceMAX agg row without recorded expert
    or attention data parallelism ran under, else None."""
    f = row.fields
    if (f["backend"] != "vllm" or f["mode"] != "agg" or row_protocol(row) != "inferencemax"
            or _int(f["moe_ep_size"]) != 1
            or _int(f["attention_dp_size"]) != 1 or _int(f["tp_size"]) == 1):
        return None
    for rec in VLLM_EP_ALWAYS_RECIPES:
        if ((f["model_path"], f["system"], f["gemm_quant_mode"])
                == (rec.model, rec.system, rec.quant)
                and rec.first_day <= row.measured_on <= rec.last_day):
            return rec
    return None


def recipe_layout_fields(row: SiliconRow) -> dict[str, str]:
    """The row's fields with the layout its recipe ran, where the InferenceMAX exports
    multiplied it out.

    InferenceMAX's agg recipes with expert parallelism ran ``tp`` GPUs on one node with
    ``ep`` = ``tp`` (SemiAnalysisAI/InferenceX ``nvidia-master.yaml``: ``dsr1-fp8-h200-trt``
    at 2026-01-14 searched ``{tp: 8, ep: 8}`` only, "EP=TP"; ``gptoss-fp4-h200-trt`` at
    2025-12-15 ``tp = ep`` in 1, 2, 4, 8, its TP8 entry to concurrency 8;
    ``dsr1-fp4-b200-sglang`` at 2026-03-25 ``{tp: 4, ep: 4}`` and ``{tp: 8, ep: 8}``;
    ``minimaxm2.5-fp8-b200-vllm`` at 2026-04-22 ``{tp: 2, ep: 2}`` and ``{tp: 4, ep: 4}``;
    ``minimaxm2.5-fp8-h100-vllm`` ``{tp: 4, ep: 4}``). The sample records such a run, for
    k = tp = ep > 1, in one of three multiplied-out forms (tp_size, attention_dp_size,
    moe_tp_size, moe_ep_size), each k^2 GPUs where k ran; the dated CSVs' ids name the
    recipe's ``tp`` and ``ep`` (``..._tp8_ep8_1517``) and agree with the reading here:

    - (k^2, 1, k, k), TensorRT-LLM and SGLang: TP k with experts over k GPUs;
    - (1, k^2, k, k), TensorRT-LLM with attention DP: k attention-DP ranks, experts over
      k, ``batch_size`` (the concurrency over k^2) scaled to the k ranks;
    - (k, k, 1, k^2), vLLM's ``--enable-expert-parallel``: TP k, experts over k, one rank,
      so ``batch_size`` (the concurrency over k) becomes the concurrency.

    And a vLLM recipe whose script enabled expert parallelism whatever ``EP_SIZE``
    (``VLLM_EP_ALWAYS_RECIPES``) ran (tp, 1, 1, tp) where the sample records (tp, 1, tp, 1).

    Any other row, or a row of another harness, is returned as recorded."""
    f = row.fields
    if f["mode"] != "agg" or row_protocol(row) != "inferencemax":
        return f
    if ep_always_recipe(row) is not None:
        return {**f, "moe_tp_size": "1", "moe_ep_size": f["tp_size"]}
    tp, dp, mtp, mep = (_int(f[k]) for k in
                        ("tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size"))
    bs = f.get("batch_size", "")
    if mtp == mep > 1 and (tp, dp) == (mep * mep, 1):
        return {**f, "tp_size": str(mep), "moe_tp_size": "1"}
    if mtp == mep > 1 and (tp, dp) == (1, mep * mep):
        per_rank = str(int(bs) * mep) if bs.isdigit() and int(bs) > 0 else bs
        return {**f, "attention_dp_size": str(mep), "moe_tp_size": "1",
                "batch_size": per_rank}
    if mtp == 1 and tp == dp > 1 and mep == tp * tp:
        return {**f, "attention_dp_size": "1", "moe_ep_size": str(tp),
                "batch_size": str(row.concurrency or bs)}
    return f


def _check_recipe(row: SiliconRow, concurrency: int) -> None:
    """``NotExpressible`` where an InferenceMAX row's recorded mode or concurrency is not one
    its recipes ran (``INFERENCEMAX_DISAGG_ONLY_SYSTEMS``, ``RECIPE_SEARCH_SPACES``)."""
    f = row.fields
    if f["mode"] == "agg" and f["system"] in INFERENCEMAX_DISAGG_ONLY_SYSTEMS:
        raise NotExpressible("InferenceMAX ran only disaggregated recipes on the system "
                             "(an agg row is a disaggregated run without its P/D split)",
                             f["system"])
    for space in RECIPE_SEARCH_SPACES:
        if ((f["model_path"], f["backend"], f["system"])
                == (space.model, space.backend, space.system)
                and concurrency > space.max_concurrency):
            raise NotExpressible("concurrency outside the recipe's search space",
                                 f"{space.recipe}: at most {space.max_concurrency}")


def plan_row(row: SiliconRow) -> Plan:
    """The pdsim plan of a row, or ``NotExpressible`` with the reason."""
    f = recipe_layout_fields(row)
    model = MODEL_PROFILES.get(f["model_path"])
    if model is None:
        raise NotExpressible("no pdsim model profile", f["model_path"])
    hardware = HARDWARE_PROFILES.get(f["system"])
    if hardware is None:
        raise NotExpressible("no pdsim hardware profile", f["system"])
    if f["mode"] not in ("agg", "disagg"):
        raise NotExpressible("unknown mode", f["mode"])
    c = row.concurrency
    if c is None:
        raise NotExpressible("no concurrency in the row")
    if row_protocol(row) == "inferencemax":
        _check_recipe(row, c)
    moe = model in MOE_PROFILES
    default = profile_weight_dtype(model)
    wd = _dtype(f["gemm_quant_mode"], f["precision"], default)
    ed = _dtype(f["moe_quant_mode"], f["precision"], wd) if moe else wd
    roles: dict[str, Layout] = {}
    if f["mode"] == "agg":
        roles["colocated"] = _layout(f, "", moe, 1)
    else:
        pw, dw = f["prefill_num_workers"], f["decode_num_workers"]
        if not (pw.isdigit() and dw.isdigit() and int(pw) > 0 and int(dw) > 0):
            raise NotExpressible("disagg row without worker counts")
        roles["prefill"] = _layout(f, "prefill_", moe, int(pw))
        roles["decode"] = _layout(f, "decode_", moe, int(dw))
    heads = attention_heads(model)
    for lay in roles.values():
        if heads % lay.tp:
            # e.g. DeepSeek's 128 MLA heads at tp 48 or 72: no engine shards attention so;
            # the row's recorded layout cannot be the one that ran
            raise NotExpressible("tensor parallel size does not divide the attention heads",
                                 f"{model}: {heads} heads, tp {lay.tp}")
    kv = "fp8" if wd in FP8_KV_PRECISIONS else "bf16"
    attention_dp = any(lay.dp > 1 for lay in roles.values())
    plan = Plan(row.id, model, hardware, wd, ed, f["mode"], c, int(f["isl"]), int(f["osl"]),
                BLOCK_TOKENS.get(f["backend"], 16), roles, f["backend"], kv,
                row_protocol(row), mtp_drafts(row, attention_dp), row.measured_on,
                f["backend_version"], f["silicon_data_source"])
    for lay in roles.values():
        if not _weights_fit(plan, lay):
            raise NotExpressible(NO_FIT_REASON, f"{plan.backend} on {plan.hardware}")
    return plan


_FITS: dict[tuple[str, ...], bool] = {}


def _weights_fit(plan: Plan, lay: Layout) -> bool:
    """Whether the weights leave KV memory under the backend's rule (its default
    fractions: the sample does not record a deployment's own)."""
    st = _step_time(plan, lay)
    key = tuple(str(v) for v in st.values())
    if key not in _FITS:
        from pdsim.perf.config import RooflineStepTimeConfig

        try:
            RooflineStepTimeConfig.model_validate(st)
        except ValueError as exc:
            if "does not fit" not in str(exc):
                raise
            _FITS[key] = False
        else:
            _FITS[key] = True
    return _FITS[key]


def measured_rounds(plan: Plan) -> int:
    """Rounds of C requests simulated: the protocol's (aiperf 20, InferenceMAX 10) when the
    run stays within the output-token budget, else as many as fit, at least 2 (the burst
    and one more)."""
    by_budget = OUTPUT_TOKEN_BUDGET // max(1, plan.concurrency * plan.osl)
    rounds = PROTOCOLS[plan.protocol].rounds
    return int(min(rounds, max(MIN_MEASURED_ROUNDS, by_budget)))


def reuses_prompts(plan: Plan) -> bool:
    """Whether the row's client repeats prompts (``prompt_pool``) to a deployment that
    reuses their KV (``PREFIX_CACHING``)."""
    return (PROTOCOLS[plan.protocol].prompt_pool is not None
            and PREFIX_CACHING.get(plan.backend, False)
            and not any(run in plan.source for run in AIPERF_RUNS_PREFILL_PAID))


def warmup_requests(plan: Plan) -> int:
    """Warm-up requests simulated before the measured phase: the protocol's
    ``warmup_rounds`` x C where they fill the prefix cache the measured requests hit
    (``reuses_prompts``), else none (pdsim has no other cold-start effect to warm up)."""
    return PROTOCOLS[plan.protocol].warmup_rounds * plan.concurrency if reuses_prompts(
        plan) else 0


def cost(plan: Plan) -> int:
    """Output tokens a row's run generates (what its run time grows with)."""
    return (measured_rounds(plan) * plan.concurrency + warmup_requests(plan)) * plan.osl


def aiperf_mean(values: np.ndarray, concurrency: int, rounds: int = AIPERF_ROUNDS) -> float:
    """The mean over a measured phase of ``rounds`` rounds from ``values`` in request
    order: the first round (the burst of C requests on an idle server) weighs 1/rounds,
    the later rounds the rest (with all rounds simulated this is the plain mean)."""
    first, rest = values[:concurrency], values[concurrency:]
    if not len(rest):
        return float(np.mean(first))
    return float((np.mean(first) + (rounds - 1) * np.mean(rest)) / rounds)


def _lengths(tokens: int, protocol: BenchmarkProtocol) -> dict[str, Any]:
    """A length distribution of the protocol: fixed, or integers uniform in
    ``[int(ratio x tokens), tokens]`` (bench_serving's ``np.random.randint(int(L * ratio),
    L + 1)``) as one histogram bin."""
    if protocol.range_ratio is None:
        return {"kind": "fixed", "tokens": tokens}
    low = max(1, int(tokens * protocol.range_ratio))
    return {"kind": "empirical", "bin_edges": [low, tokens + 1], "weights": [1.0]}


def _round_up(n: int, k: int) -> int:
    return (n + k - 1) // k * k


def _step_time(plan: Plan, lay: Layout) -> dict[str, Any]:
    st: dict[str, Any] = {
        "kind": "roofline", "model": plan.model, "hardware": plan.hardware,
        "tensor_parallel_size": lay.tp, "expert_parallel_size": lay.ep,
        "weight_dtype": plan.weight_dtype, "expert_weight_dtype": plan.expert_weight_dtype,
        "kv_cache_dtype": plan.kv_dtype,
        "memory_rule": MEMORY_RULES.get(plan.backend, "pdsim")}
    if plan.backend in CPU_COST_RULES:
        st["cpu_cost_rule"] = CPU_COST_RULES[plan.backend]
    if plan.backend in KERNEL_RULES:
        st["kernel_rule"] = KERNEL_RULES[plan.backend]
        if plan.backend_version:
            # the engine's kernels of the row's version (fitted per version where the
            # hardware profile has them: kernels.fp8_moe_efficiency_by_engine)
            st["kernel_version"] = plan.backend_version
    if plan.backend == "trtllm":
        st["free_gpu_memory_fraction"] = TRTLLM_FREE_GPU_MEMORY_FRACTION
    if schedules_async(plan):
        st["async_scheduling"] = True
    return st


VLLM_ASYNC_SCHEDULING_SINCE = "0.14"
"""The first vLLM release whose engine schedules asynchronously by default (vLLM PR
#27614, the last item of the async scheduling plan, vllm-project/vllm issue #27679, merged
for v0.14; before it ``--async-scheduling`` was opt-in, and AIConfigurator's generator
and the InferenceMAX recipes do not pass it)."""


def schedules_async(plan: Plan) -> bool:
    """Whether the row's engine ran with async scheduling: vLLM rows whose recorded version
    is at least ``VLLM_ASYNC_SCHEDULING_SINCE`` or a nightly build (rows without a version
    keep the synchronous loop the vLLM CPU costs were fitted to)."""
    if plan.backend != "vllm" or not plan.backend_version:
        return False
    v = plan.backend_version
    if v.startswith("nightly"):
        return True
    if not re.match(r"\d", v):
        return False
    return version_key(v) >= version_key(VLLM_ASYNC_SCHEDULING_SINCE)


def _group(plan: Plan, role: str, lay: Layout) -> dict[str, Any]:
    """An instance group with AIConfigurator's generated engine limits: max_num_tokens
    ISL + 1500 (+ the batch for agg), the batch for decode; the batch per rank unbounded
    (the concurrency) unless the row gives it."""
    c = plan.concurrency
    rank_batch = lay.per_rank_batch or math.ceil(c / lay.instances)
    seqs = min(MAX_BATCH_PER_RANK, max(rank_batch, math.ceil(c / lay.instances)))
    if role == "prefill":
        tokens = plan.isl + 1500
        seqs = min(seqs, MAX_BATCH_PER_RANK)
    elif role == "decode":
        tokens = rank_batch
    else:
        tokens = rank_batch + plan.isl + 1500
    tokens = _round_up(tokens, plan.block_tokens)
    st = _step_time(plan, lay)
    sched: dict[str, Any] = {"max_num_seqs": seqs, "max_num_batched_tokens": tokens,
                             "block_size": plan.block_tokens,
                             "prefill_policy": PREFILL_POLICIES[plan.backend]}
    if role != "decode" and reuses_prompts(plan):
        sched["enable_prefix_caching"] = True
    recv = sglang_recv_interval(plan, lay)
    if recv > 1:
        sched["recv_interval_steps"] = recv
    wait = batch_wait_recipe(plan, lay) if role == "colocated" else None
    if wait is not None:
        sched.update(max_num_batched_tokens=recipe_max_num_tokens(wait, plan),
                     batch_wait_steps=wait.wait_steps,
                     batch_wait_max_tokens_ratio=wait.max_tokens_ratio)
    if plan.backend == "trtllm":
        sched["max_num_seqs"] = _no_evict_seqs(plan, role, st, sched)
    group: dict[str, Any] = {"count": lay.instances, "kv_cache_gib": None, "step_time": st,
                             "scheduler": sched}
    if lay.dp > 1:
        group.update(attention_dp_size=lay.dp, attention_dp_balance=DP_BALANCE[plan.backend])
        if (plan.backend == "trtllm" and role == "colocated"
                and plan.protocol == "inferencemax"):
            group["attention_dp_context_wait_steps"] = TRTLLM_ADP_CONTEXT_WAIT_STEPS
    return group


def _length_values(tokens: int, protocol: BenchmarkProtocol) -> np.ndarray:
    """Every length the protocol draws for a nominal ``tokens``, each equally likely."""
    if protocol.range_ratio is None:
        return np.array([tokens])
    return np.arange(max(1, int(tokens * protocol.range_ratio)), tokens + 1)


def request_blocks(plan: Plan, role: str) -> float:
    """The KV blocks one request reserves to completion under GUARANTEED_NO_EVICT, on
    average over the protocol's lengths: ``ceil((prompt + output) / block)`` (a prefill
    instance holds the prompt and its first token). With fixed lengths every request
    reserves the same; with InferenceMAX's uniform lengths the mean of the exact
    distribution of the sum (the convolution of the two uniform laws)."""
    protocol = PROTOCOLS[plan.protocol]
    prompts = _length_values(plan.isl, protocol)
    outputs = (np.array([1]) if role == "prefill"
               else _length_values(plan.osl, protocol))
    weights = np.convolve(np.ones(len(prompts)), np.ones(len(outputs)))
    totals = np.arange(len(weights)) + prompts[0] + outputs[0]
    blocks = -(-totals // plan.block_tokens)
    return float(np.dot(weights, blocks) / weights.sum())


def _no_evict_seqs(plan: Plan, role: str, st: dict[str, Any], sched: dict[str, Any]) -> int:
    """TensorRT-LLM's default capacity policy, GUARANTEED_NO_EVICT, admits a request only
    when the blocks of its whole length (prompt + maximum output) can be reserved next to
    what the running requests reserve to their completion, so it never preempts. pdsim
    runs it as a cap on the running requests: the pool's blocks over what one request
    reserves (``request_blocks``: with fixed lengths exactly the rule; with
    InferenceMAX's drawn lengths the mean reservation, what the sum over the C running
    requests of their own reservations settles at). The pool is sized as pdsim sizes it;
    a pool that does not fit is left to pdsim's error."""
    from pdsim.errors import ConfigError
    from pdsim.perf.config import RooflineStepTimeConfig
    from pdsim.perf.memory import kv_blocks_per_instance

    try:
        cfg = RooflineStepTimeConfig.model_validate(st)
        blocks = kv_blocks_per_instance(
            cfg.resolved_model(), cfg.resolved_hardware(), cfg.tensor_parallel_size,
            cfg.gpu_memory_utilization, plan.block_tokens,
            expert_parallel_size=cfg.expert_parallel_size,
            runtime_reserve_gib=cfg.runtime_reserve_gib, batch_seqs=sched["max_num_seqs"],
            **cfg.memory_rule_kwargs(sched["max_num_batched_tokens"]))
    except (ConfigError, ValueError):
        return int(sched["max_num_seqs"])
    per_request = request_blocks(plan, role)
    return int(max(1, min(sched["max_num_seqs"], math.floor(blocks / per_request))))


def speculative(plan: Plan) -> dict[str, Any]:
    """The row's speculation: MTP where its recipe ran it (``MTP_RECIPES``), at the public
    acceptance (``MTP_ACCEPTANCE_RATES``); else none."""
    if not plan.mtp_drafts:
        return {"method": "none"}
    return {"method": "mtp", "num_speculative_tokens": plan.mtp_drafts,
            "acceptance": {"kind": "per_position",
                           "rates": list(MTP_ACCEPTANCE_RATES[:plan.mtp_drafts])}}


def router(plan: Plan) -> dict[str, Any]:
    """Round-robin routing, the backend's costs on the way in and its first-response
    rule. The rule's delay counts the request's engine steps (as the streams it stands
    for, e.g. TensorRT-LLM's ``stream_interval``, count iterations), so an MTP row needs
    no conversion: pdsim counts the steps its own drafts and acceptances make."""
    rule = RESPONSE_RULES.get(plan.backend, "pdsim")
    out: dict[str, Any] = {"policy": "round_robin",
                           "frontend_latency_s": FRONTEND_LATENCY_S.get(plan.backend, 0.0),
                           "frontend_latency_per_prompt_token_s":
                               FRONTEND_LATENCY_PER_PROMPT_TOKEN_S.get(plan.backend, 0.0),
                           "response_rule": rule}
    return out


def build_config(plan: Plan) -> dict[str, Any]:
    """The pdsim config mapping of a plan (closed loop at C, the protocol's request count and
    lengths, no speculation)."""
    c = plan.concurrency
    n = measured_rounds(plan) * c
    if plan.mode == "agg":
        lay = plan.roles["colocated"]
        cluster: dict[str, Any] = {"mode": "colocated",
                                   "colocated": _group(plan, "colocated", lay)}
        root = _step_time(plan, lay)
    else:
        cluster = {"mode": "disaggregated",
                   "prefill": _group(plan, "prefill", plan.roles["prefill"]),
                   "decode": _group(plan, "decode", plan.roles["decode"])}
        root = _step_time(plan, plan.roles["decode"])
    protocol = PROTOCOLS[plan.protocol]
    workload: dict[str, Any] = {
        "num_requests": n + warmup_requests(plan),
        "arrivals": {"kind": "closed_loop", "concurrency": c},
        "prompt_tokens": _lengths(plan.isl, protocol),
        "output_tokens": _lengths(plan.osl, protocol)}
    if reuses_prompts(plan) and protocol.prompt_pool is not None:
        # every prompt one of the pool's, whole: all but its last token shared (the
        # engine computes at least that one), in the engine's KV blocks
        workload["prompt_tokens"] = {"kind": "fixed", "tokens": 1}
        workload["shared_prefix"] = {"num_groups": protocol.prompt_pool,
                                     "prefix_tokens": plan.isl - 1, "zipf_exponent": 0.0,
                                     "hash_block_tokens": plan.block_tokens}
    return {
        "name": plan.row_id[:64], "seed": 0,
        "model": {"profile": plan.model},
        "speculative": speculative(plan),
        "step_time": root,
        "router": router(plan),
        "cluster": cluster,
        "workload": workload,
    }


# ---------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Score:
    """pdsim's mean TTFT and TPOT for a row against the measured."""

    row_id: str
    split: str
    partition: str
    model: str
    concurrency: int
    isl: int
    osl: int
    measured_ttft_ms: float
    measured_tpot_ms: float
    pdsim_ttft_ms: float
    pdsim_tpot_ms: float
    preemptions: int
    likely_mtp: bool
    elapsed_s: float
    error: str = ""
    pdsim_tokens_per_step: float = 1.0
    """The measured requests' mean output tokens per engine step that emitted output (1
    without speculation): what turns a first-response delay in steps into tokens
    (``silicon_gap.response_ttft_ms``)."""

    @property
    def ttft_ape(self) -> float:
        return abs(self.pdsim_ttft_ms - self.measured_ttft_ms) / self.measured_ttft_ms * 100

    @property
    def tpot_ape(self) -> float:
        return abs(self.pdsim_tpot_ms - self.measured_tpot_ms) / self.measured_tpot_ms * 100

    @property
    def ok(self) -> bool:
        return not self.error and math.isfinite(self.pdsim_ttft_ms) and math.isfinite(
            self.pdsim_tpot_ms)


def score_row(row: SiliconRow) -> Score:
    """Simulate one expressible row (``NotExpressible`` if it is not) and score it."""
    import pdsim
    from pdsim.errors import ConfigError
    from pdsim.results import RecordTable

    plan = plan_row(row)
    start = time.perf_counter()
    try:
        cfg = pdsim.load_config(build_config(plan))
    except ConfigError as exc:
        text = str(exc)
        if "does not fit" in text:
            raise NotExpressible(NO_FIT_REASON, f"{plan.backend} on {plan.hardware}") from None
        raise NotExpressible("pdsim rejects the config", text.splitlines()[0][:120]) from None
    res = pdsim.simulate(cfg)
    records = res.records
    if not isinstance(records, RecordTable):
        raise TypeError("pdsim returned records without columns")
    cols = records.columns
    order = np.argsort(np.asarray(cols["request_id"]), kind="stable")
    finished = np.asarray(cols["status"])[order] == "finished"
    err = "" if finished.all() else f"{int((~finished).sum())} requests did not finish"
    warm = warmup_requests(plan)  # the warm-up is not measured
    finished = finished[warm:]
    ttft = np.asarray(cols["ttft_s"], dtype=float)[order][warm:]
    tpot = np.asarray(cols["tpot_s"], dtype=float)[order][warm:]
    steps = np.asarray(cols["num_chunks"], dtype=float)[order][warm:]
    tokens = np.asarray(cols["output_tokens"], dtype=float)[order][warm:]
    per_step = float(tokens.sum() / steps.sum()) if steps.sum() > 0 else 1.0
    rounds = PROTOCOLS[plan.protocol].rounds
    p_ttft = aiperf_mean(ttft, plan.concurrency, rounds) * 1e3 if finished.all() else math.nan
    p_tpot = aiperf_mean(tpot, plan.concurrency, rounds) * 1e3 if finished.all() else math.nan
    preemptions = int(res.summary["preemptions"])
    likely = (plan.model in MTP_PROFILES and not plan.mtp_drafts and preemptions == 0
              and math.isfinite(p_tpot)
              and p_tpot > LIKELY_MTP_RATIO * row.tpot_ms)
    return Score(row.id, row.split, row.partition, row.fields["model_path"], plan.concurrency,
                 plan.isl, plan.osl, row.ttft_ms, row.tpot_ms, p_ttft, p_tpot,
                 preemptions, likely, time.perf_counter() - start, err, per_step)


def _score_or_reason(row: SiliconRow) -> Score | NotExpressible:
    try:
        return score_row(row)
    except NotExpressible as exc:
        return exc


# ---------------------------------------------------------------------- sampling


def _hash_key(row_id: str) -> str:
    return hashlib.sha256(("sample:" + row_id).encode("utf-8")).hexdigest()


def stratified_sample(rows: Sequence[SiliconRow], n: int | None) -> list[SiliconRow]:
    """``n`` rows spread over the strata (partition x split) in proportion to their size,
    at least one per stratum, each stratum's rows taken in a fixed hash order (so a sample
    is the same on every machine). ``None``: every row."""
    if n is None or n >= len(rows):
        return list(rows)
    strata: dict[tuple[str, str], list[SiliconRow]] = {}
    for r in rows:
        strata.setdefault((r.partition, r.split), []).append(r)
    total = len(rows)
    out: list[SiliconRow] = []
    for key in sorted(strata):
        members = sorted(strata[key], key=lambda r: _hash_key(r.id))
        take = max(1, round(n * len(members) / total))
        out.extend(members[:take])
    return sorted(out, key=lambda r: r.id)


CI_ROWS_PER_SPLIT = 10
CI_COST_LIMIT = 300_000
CI_MEASURED_ON = ("2026-12-07 on issue 25's sixteenth round (expert popularity skew "
                  "load_cv 1.5, fitted on the MoE fit rows; first-response delays re-fitted)")
CI_MEASURED_MEAN_APE: dict[tuple[str, str], float] = {
    ("fit", "ttft"): 29.6, ("fit", "tpot"): 9.1,
    ("held-out", "ttft"): 32.7, ("held-out", "tpot"): 15.5,
}
"""The CI slice's mean absolute percentage errors as measured (``CI_MEASURED_ON``) by
scoring ``ci_slice(load_sample())`` with ``score_row``; the test fails 5 points above."""
CI_TOLERANCE_PP = 5.0
"""The CI slice: 10 fit and 10 held-out rows whose run generates at most 300k output
tokens."""


def ci_slice(rows: Sequence[SiliconRow]) -> list[SiliconRow]:
    """The fixed small slice the test scores: per split, one row per partition in turn
    (the partitions with most cheap rows first, rows in hash order), among cheap
    expressible rows."""
    out: list[SiliconRow] = []
    for split in ("fit", "held-out"):
        by_part: dict[str, list[SiliconRow]] = {}
        for r in rows:
            if r.split != split:
                continue
            try:
                plan = plan_row(r)
            except NotExpressible:
                continue
            if cost(plan) <= CI_COST_LIMIT:
                by_part.setdefault(r.partition, []).append(r)
        queues = [sorted(v, key=lambda r: _hash_key(r.id))
                  for _, v in sorted(by_part.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
        taken: list[SiliconRow] = []
        depth = 0
        while len(taken) < CI_ROWS_PER_SPLIT and any(depth < len(q) for q in queues):
            for q in queues:
                if depth < len(q) and len(taken) < CI_ROWS_PER_SPLIT:
                    taken.append(q[depth])
            depth += 1
        out.extend(taken)
    return out


# ---------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Stats:
    count: int
    ttft_mean: float
    ttft_median: float
    tpot_mean: float
    tpot_median: float


def stats(scores: Iterable[Score]) -> Stats:
    ok = [s for s in scores if s.ok]
    if not ok:
        return Stats(0, math.nan, math.nan, math.nan, math.nan)
    t1 = [s.ttft_ape for s in ok]
    t2 = [s.tpot_ape for s in ok]
    return Stats(len(ok), statistics.fmean(t1), statistics.median(t1), statistics.fmean(t2),
                 statistics.median(t2))


# ---------------------------------------------------------------------- running


@dataclass
class Outcome:
    rows: list[SiliconRow]
    scored: list[Score]
    not_expressible: list[tuple[SiliconRow, NotExpressible]]
    considered: list[SiliconRow]
    elapsed_s: float
    ci: list[Score] = field(default_factory=list)


def run(rows: Sequence[SiliconRow], sample: int | None, workers: int = 1,
        with_ci: bool = True) -> Outcome:
    """Plan every row, simulate a stratified sample of the expressible ones (and the CI
    slice, ``ci_slice``, unless ``with_ci`` is false)."""
    start = time.perf_counter()
    expressible: list[SiliconRow] = []
    rejected: list[tuple[SiliconRow, NotExpressible]] = []
    for r in rows:
        try:
            plan_row(r)
        except NotExpressible as exc:
            rejected.append((r, exc))
        else:
            expressible.append(r)
    chosen = stratified_sample(expressible, sample)
    ci_rows = ci_slice(rows) if with_ci else []
    chosen_ids = {r.id for r in chosen}
    extra = [r for r in ci_rows if r.id not in chosen_ids]
    # the longest runs first, so the workers finish together
    order = sorted(chosen + extra, key=lambda r: (-cost(plan_row(r)), r.id))
    if workers > 1:
        with Pool(workers) as pool:
            done = pool.map(_score_or_reason, order, chunksize=1)
    else:
        done = [_score_or_reason(r) for r in order]
    by_id = {r.id: res for r, res in zip(order, done, strict=True)}
    results = [by_id[r.id] for r in chosen]
    scored: list[Score] = []
    for r, res in zip(chosen, results, strict=True):
        if isinstance(res, NotExpressible):
            rejected.append((r, res))
        else:
            scored.append(res)
    ci = [res for r in ci_rows if isinstance(res := by_id[r.id], Score)]
    return Outcome(list(rows), scored, rejected, chosen, time.perf_counter() - start, ci)


# ---------------------------------------------------------------------- report


def _pct(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v:.1f}%"


def _stats_cells(st: Stats) -> str:
    return (f"{st.count} | {_pct(st.ttft_mean)} | {_pct(st.ttft_median)} | "
            f"{_pct(st.tpot_mean)} | {_pct(st.tpot_median)}")


STATS_HEAD = ("| rows | split | scored | TTFT mean | TTFT median | TPOT mean | TPOT median |\n"
              "|---|---|---:|---:|---:|---:|---:|")


@dataclass(frozen=True)
class Meta:
    date: str
    commit: str
    sample: int | None
    elapsed_s: float


_META_RE = re.compile(r"<!-- silicon-meta date=(\S+) commit=(\S+) sample=(\S+) "
                      r"elapsed_s=(\S+) -->")


def parse_meta(text: str) -> Meta | None:
    m = _META_RE.search(text)
    if not m:
        return None
    sample = None if m.group(3) == "all" else int(m.group(3))
    return Meta(m.group(1), m.group(2), sample, float(m.group(4)))


TTFT_GAP_SECTION = "\n".join((
    ("## Why TTFT is short"),
    "",
    ("Analysis of fit rows only (`python -m validation.silicon_gap SCORES.json` on the "
     "scores of a full run of 2026-12-01, before the not-expressible rules of 22700b1, "
     "rows without preemptions; held-out rows were looked at only after each choice "
     "below was made). Measured on 2026-12-02 on branch fid2."),
    "",
    ("- **An overhead more than queueing.** At concurrency <= 8, where queueing and "
     "waves are smallest, measured TTFT already exceeds pdsim's by an amount that grows "
     "little with the prompt: TensorRT-LLM DeepSeek-R1 on B200 +160 ms at ISL 1024 and "
     "+170 ms at 8192 (pdsim 35 and 116 ms), on H200 +276/+338 ms; SGLang DeepSeek-R1 on"
     " H200 +184/+265 ms; TensorRT-LLM Llama-3.1-70B on B200 +47/+108 ms; vLLM "
     "Llama-3.1-70B on H100 and H200 +9 and +10 ms at 1024 (why vLLM on Hopper is "
     "close). At each fixed deployment's lowest concurrency measured / pdsim is 4.2 "
     "(TensorRT-LLM agg, 81 deployments), 6.5 (SGLang agg, 24), 1.6 (vLLM agg, 33). "
     "Within a deployment measured TTFT grows with concurrency about as pdsim's does "
     "(TTFT ~ C^b: b 0.40 measured vs 0.43 pdsim for TensorRT-LLM agg, 0.49 vs 0.33 "
     "SGLang agg, 0.39 vs 0.28 vLLM agg), so the gap is mostly not waves of queued "
     "prompts. Its cause is not in the sample (HTTP, tokenization, the Dynamo frontend "
     "and first-step costs are not separated), and its size differs by model within one "
     "backend."),
    ("- **A cost on the way in does not reproduce it.** `router.frontend_latency_s` (a "
     "per-request delay before dispatch) fitted as the median gap at C <= 8 of fit rows "
     "is SGLang 0.241 s (56 rows), TensorRT-LLM 0.160 s (126), vLLM 0.056 s (67) "
     "(`python -m validation.silicon_gap --fit-frontend`). Added to pdsim's TTFT after "
     "the fact it would take the TTFT mean error from 65% to 45% (fit) and 67% to 46% "
     "(held-out) on an earlier full run's scores; run inside the closed loop it does "
     "not: fixed-length requests finish in adjacent decode steps, so their replacements,"
     " delayed alike, arrive as a burst and every round becomes a wave (TTFT grew by "
     "1-8x the delay). On the CI slice the TTFT error rose from 63.2% to 80.6% (fit) and"
     " 54.2% to 94.4% (held-out); on a stratified 62 fit / 44 held-out rows of at most "
     "300k output tokens from 62.0% to 86.4% and 61.5% to 105.1%. It is not applied. The"
     " data fit a delay on the first token only (after the engine, not holding the next "
     "request back)."),
    ("- **The gap is a delay of the first response, in engine steps.** Three tests on "
     "fit rows of the stratified samples of 150 and 400 rows (103 and 271 fit rows; "
     "2026-12-02, branch ttft) place it. (1) It does not slow the engine: pricing it "
     "as a cost of every step that carries prompt tokens (CUDA graphs only for decode "
     "batches, so an eager prefill; 0.12 s TensorRT-LLM, 0.25 s SGLang, 0.03 s vLLM "
     "on 103 fit rows) took the TTFT median error from 73.8% to 30.1% but the TPOT "
     "median from 13.2% to 20.9% (TensorRT-LLM agg 12.8% to 36.0%): the measured TPOT "
     "has no such stall. (2) It does not hold the next request back (the closed-loop "
     "waves above). (3) It grows with the step time: measured - pdsim divided by "
     "pdsim's TPOT is about 10-25 steps for TensorRT-LLM at every concurrency, and a "
     "delay of k output tokens at the request's own inter-token time fits the fit "
     "rows better than a constant (on 103 fit rows, best per-backend constant: median "
     "error 39.6%; best k: 31.2%; both together no better than k alone). pdsim models "
     "it where it acts, after the engine: `router.response_rule` names the serving "
     "stack and the client's first streamed response comes `first_response_steps` "
     "of the request's engine steps after its first token (one step a token without "
     "speculation; pdsim.results.first_response_s; "
     "TTFT ends there, TPOT is (e2e - TTFT) / (n - 1) as the benchmarks compute it; "
     "the engine and its facts do not change). Fitted per backend as the whole number "
     "of tokens minimising the mean TTFT error of the fit rows (`python -m "
     "validation.silicon_gap --fit-response N`): TensorRT-LLM 11 (159 fit rows, mean "
     "93.4% to 72.6%), SGLang 26 (57, 81.2% to 44.7%), vLLM 3 (52, 40.8% to 30.2%), "
     "under aiperf's protocol for every row; re-fitted on the same 400-row sample under "
     "each row's own protocol (\"How a row is run\"): TensorRT-LLM 11 (159, 85.8% to "
     "63.8%), SGLang 26 (59, 79.7% to 45.1%), vLLM 5 (52, 48.9% to 24.6%), the values "
     "used. The figures that follow are the first fit's. "
     "On the 400-row sample, fit rows: TTFT mean 80.1% to 58.3%, median 69.7% to "
     "34.2%, median ratio 0.32 to 0.76, TPOT mean 23.1% to 23.0%; reported after the "
     "choice, held-out rows (131): TTFT mean 65.3% to 46.4%, median 71.6% to 37.4%, "
     "TPOT mean 23.2% to 23.5%. Still short at high concurrency (TensorRT-LLM C > 128 "
     "median ratio 0.34, SGLang C > 32 0.50): queueing there is not explained by this "
     "delay."),
    ("- **Where the delay comes from (public evidence, not separated by the "
     "sample).** The dated rows (images `lmsysorg/sglang`, `vllm/vllm-openai`, "
     "TensorRT-LLM and Dynamo runtimes; ISL/OSL 1024/1024, 1024/8192, 8192/1024) look "
     "like runs of SemiAnalysis InferenceMAX's public recipes (the same grid, models "
     "and images; the sample does not name its harness), whose servers stream in "
     "intervals: TensorRT-LLM `stream_interval: 10` (DeepSeek-R1) or 4 (Llama-70B), "
     "SGLang `--stream-interval 10` and, for DeepSeek on B200, "
     "`--scheduler-recv-interval` 10 (C < 16) or 30 (the scheduler takes new requests "
     "every 10-30 iterations), vLLM `async-scheduling` (the output of a step is "
     "handled during the next). Their client (kimbochen/bench_serving "
     "`benchmark_serving.py`) ends TTFT at the first SSE chunk with choices. The "
     "engines send the first token at once (TensorRT-LLM's PyTorch executor responds "
     "at `py_decoding_iter == 1`, SGLang's scheduler when `len(output_ids) == 1`), so "
     "a stream interval alone would not delay it; the scheduler's receive interval, "
     "the one-step-late output of overlapped scheduling and the serving layer's first "
     "chunk remain, and the sample does not separate them. The fitted delays are of "
     "their size (vLLM 5, TensorRT-LLM 11, SGLang 26 iterations; 5, 13 and 17 after the "
     "admission rules below). That client also "
     "runs CONC x 10 prompts with lengths drawn by `--random-range-ratio`, not "
     "aiperf's 20 rounds of fixed lengths; the suite now runs these rows so (\"How a "
     "row is run\"), which on the same 127-row sample moved the TTFT mean error from "
     "82.5% to 73.4% (fit) and 51.3% to 44.7% (held-out) and the TPOT mean by under 1 "
     "point; with vLLM's delay re-fitted under it (5), TTFT 71.6% and 43.6%, median "
     "33.7% to 29.7% and 40.6% to 36.5%."),
    ("- **SGLang's waves.** SGLang's default scheduler runs a prefill batch alone while "
     "prompts wait (no mixed chunk), which keeps a closed loop of fixed-length requests "
     "in waves; pdsim models it as `scheduler.prefill_policy: prefill_first`. On 65 fit "
     "SGLang rows it moved the median TTFT ratio from 0.18 to 0.51, but the mean TTFT "
     "error from 82.1% to 83.6% (B200 90.9% to 66.9%; H200 73.6% to 115.8%, the H200 "
     "rows are not in waves) and the mean TPOT error from 20.4% to 22.5%, so the suite "
     "keeps mixed steps for SGLang (`PREFILL_POLICIES`). Reported afterwards on 30 "
     "held-out SGLang rows: TTFT 81.2% to 68.7%, TPOT 21.3% to 24.9%."),
    ("- **The recipes' admission rules (2026-12-02, branch ttft3).** Three rules of "
     "the engines decide when a prompt is admitted, and the public recipes set them "
     "(docs/step-time.md, \"Admission rules of the recipes\", with sources). "
     "TensorRT-LLM's default GUARANTEED_NO_EVICT reserves each request's whole length; "
     "with InferenceMAX's drawn lengths the running requests' reservations sum to C "
     "times the mean, not the maximum, and capping on the maximum had left 16 rows "
     "queueing for a whole request (the 10-20x rows: Llama-3.1-70B on TensorRT-LLM at "
     "C 64-128, DeepSeek-R1 at C 256 TP 4): on the 9 fit rows it moves, the TTFT error "
     "sum 3,916 to 2,951 points. TensorRT-LLM's attention-DP context balance "
     "(`enable_balance`, `timeout_iters: 60` in every DeepSeek-R1 recipe with "
     "attention DP) holds prompts until every rank has one: it explains most of the "
     "gap at high concurrency (the agg attention-DP rows needed 40-120 steps of delay "
     "against about 20 elsewhere); on those 16 fit rows TTFT mean 69.4% to 37.1% and "
     "TPOT mean 54.7% to 23.9% (prompts let in on every rank together stall the "
     "lockstep decode once). SGLang's `--scheduler-recv-interval` (30 at C >= 16, 10 "
     "below, on the DeepSeek B200 recipes only) explains why a single SGLang delay was "
     "too long on H200 (median ratio 1.22) and too short on B200 (0.61): the B200 rows "
     "needed 17-48 steps (the nvfp4 rows at 5-9 s aside), the H200 rows 10-20. With it "
     "run and the first-response "
     "delays re-fitted as before (whole tokens minimising the mean TTFT error of all fit "
     "rows without preemptions: SGLang 26 to 17, TensorRT-LLM 11 to 13, vLLM 5), the "
     "fit rows of the full run (rows a rule changes re-simulated, the others moved to "
     "the new delays as `silicon_gap.response_ttft_ms` does): TTFT mean 43.0% to 39.5%, "
     "median 35.5% to 31.6%, TPOT mean 15.3% to 14.7%; held-out, after the choices: "
     "TTFT 49.8% to 39.8%, median 39.2% to 35.6%, TPOT 17.0% to 16.8% (median 10.1% "
     "to 9.9%). Seen and not modelled: TensorRT-LLM's batch waiting "
     "(`batch_wait_timeout_iters` 20-40, single ISL/OSL/C cells of two recipes; "
     "Llama-3.1-70B at 1024/1024 needs 23 steps of delay on B200 against 13 at "
     "8192/1024), the recipes' `max_num_tokens`, TensorRT-LLM's unchunked prefill "
     "(pdsim's scheduler needs chunking below `max_model_len` tokens a step), and "
     "vLLM on B200, short by a gap that grows with the prompt (7-9 steps at ISL 1024, "
     "19-21 at 8192): a prefill-efficiency matter of the step-time model. "
     "vLLM's aiperf rows, which hit the prefix cache (TPOT shows no prefill), still "
     "have a TTFT that grows with the prompt (about 45 us a prompt token at TP 1): "
     "the suite gives vLLM a cost per prompt token on the way in "
     "(`router.frontend_latency_per_prompt_token_s`, 22.5 us) fitted with its "
     "first-response delay (5 to 3 tokens) on all 167 vLLM fit rows of both "
     "harnesses: TTFT mean 25.4% to 19.6% (aiperf 53.3% to 23.1%); on B200 it also "
     "covers part of the prefill gap above, on H100/H200 at ISL 8192 it is 10-30% "
     "too large (docs/step-time.md, \"A cost per prompt token on the way in "
     "(vLLM)\")."),
    ("- **Prefill priced as the kernels measure (2026-12-02, branch fid7).** Part of "
     "what the first-response delays had absorbed was prefill priced too fast: the "
     "roofline ran fp8 and fp4 GEMMs at the bf16 efficiency of their peaks and grouped "
     "MoE layers at their GEMMs' FLOPs alone, 1.4-2x and 2-5x faster than "
     "AIConfigurator's measured kernels (docs/step-time.md, \"Low-precision GEMMs reach "
     "less of their peak\" and \"Per-pair handling of routed tokens\"; fitted to those "
     "kernel tables, not to this sample). It showed in TPOT: on fit rows at C > 16, "
     "prefill-heavy aggregated rows ran at 0.56-0.88 of the measured TPOT (DeepSeek fp8 "
     "on B200 0.56) where decode-heavy ones were at 0.9-1.0, and disaggregated decode, "
     "which mixes no prefill in, was right. With the kernels re-priced the delays and "
     "vLLM's cost per prompt token were re-fitted as before (whole tokens minimising the "
     "mean TTFT error of the fit rows without preemptions; vLLM's two jointly, on a grid "
     "of scores, then simulated): TensorRT-LLM 13 to 10, SGLang 17 to 12, vLLM 3 tokens "
     "+ 22.5 us to 1 token + 12.5 us a prompt token. Fit rows, full run: TTFT mean 37.1% "
     "to 37.2%, median 29.4% to 28.8%, TPOT mean 14.3% to 12.6%, median 10.2% to 8.7%; "
     "held-out, after the choices: TTFT 38.0% to 36.8%, median 33.8% to 31.9%, TPOT "
     "15.6% to 14.4%, median 10.8% to 9.6%. What is left of the TTFT gap differs by "
     "model within one backend, which one delay per backend cannot follow: on TensorRT-LLM "
     "at C <= 64 (fit rows, median pdsim / measured) Llama-3.1-70B is 1.22-1.25 on H200 "
     "and B200 while DeepSeek is 0.55-0.89 on H200 and 0.74-1.04 on B200."),
    ("- **TensorRT-LLM's batch waiting, and the delay re-fitted (2026-12-03, branch "
     "fid9).** The InferenceMAX recipes that set `batch_wait_timeout_iters` (\"How a row "
     "is run\") now run it: a prompt that arrives while others decode waits up to 20 "
     "(Llama-3.1-70B) or 40 (DeepSeek-R1 fp8 on B200, C >= 64) steps. On the 62 rows it "
     "runs on, fit TTFT median ratio 0.70 to 1.35 (mean error 30.6% to 33.5%), held-out "
     "0.67 to 1.29 (34.3% to 26.5%): the delay of 10 had stood in for the wait. Whole "
     "sample at delay 10: fit TTFT mean 37.0% to 37.2%, median 28.6% to 28.8%; held-out "
     "36.5% to 36.2%, median 30.5% to 29.9%. The delay re-fitted on the 563 TensorRT-LLM "
     "fit rows (whole steps minimising their mean TTFT error, each row re-priced at its "
     "own step time) is 9 (43.1% to 42.9%); run, fit rows TTFT mean 37.2% to 37.1%, median "
     "28.8% to 29.2%; held-out, after the choice, 36.2% to 36.1%, median 29.9% to 31.3%. "
     "Per model the fit rows want 1-3 steps on Llama-3.1-70B (what TensorRT-LLM's "
     "response code implies: the first token at `py_decoding_iter == 1`, a step late "
     "under the overlap scheduler), 11-20 on aggregated DeepSeek and 13 on the H100 "
     "Llama-3.1-8B aiperf rows, while disaggregated DeepSeek on B200 wants 2. The "
     "aggregated DeepSeek rows' extra 0.1-0.25 s a request does not grow with the prompt "
     "(B200 at C 4: about 150 ms at ISL 1024 and 8192 alike) and is absent from the same "
     "model's disaggregated rows, so it is not prefill pricing; a step that mixes a "
     "prompt into a decode batch (run without the decode's CUDA graph) explains at most "
     "about 20 ms of it (the 1k/1k TPOT ratios at C 32-256 are some 8% below the "
     "1k/8k ones), so its source is not found."),
    ("- **The first response per backend and model (2026-12-03, branch fid10).** The "
     "delay the fit rows want differs by model within one backend (TensorRT-LLM: "
     "Llama-3.1-70B 3 steps, DeepSeek 13), so `RESPONSE_RULE_PROFILES` "
     "(pdsim.config_sections) now holds one per backend and shipped model profile, "
     "fitted on that model's fit rows alone (every expressible fit row scored with no "
     "delay, 984 without preemptions; `python -m validation.silicon_gap --fit-response "
     "100000`): TensorRT-LLM deepseek-v3 13, llama-3.1-70b 3, llama-3.1-8b 13 (the H100 "
     "aiperf dump, below); SGLang deepseek-v3 12, llama-3.1-8b 15; vLLM llama-3.1-70b 1, "
     "llama-3.1-8b 3; a model without its own value keeps its backend's (9, 12, 1). The "
     "grouping was chosen on fit rows only, by 5-fold cross-validation with folds by "
     "deployment (partition, model, ISL, OSL): one delay per backend, TTFT mean 37.4% / "
     "median 28.7% on rows fitted elsewhere; one per backend and model, 33.7% / 23.0%. "
     "Run: fit rows TTFT mean 37.1% to 33.2%, median 29.2% to 22.0% (TPOT mean 12.5% to "
     "12.8%); held-out, after the choice, TTFT mean 36.1% to 32.5%, median 31.3% to "
     "21.6%, TPOT mean 14.4% to 14.6%, median 9.7% to 9.9%. The values are fits: what "
     "DeepSeek's first response waits for on TensorRT-LLM and SGLang is still not found."),
    ("- **TensorRT-LLM's steps without a CUDA graph (2026-12-03, branch fid11).** "
     "TensorRT-LLM replays CUDA graphs for generation-only batches, so a step with a "
     "context request launches every kernel of the forward from the host. Each "
     "`cpu_cost_rule` now holds `eager_kernel_s`, a host cost per kernel of such a step "
     "(pdsim.perf.config.CPU_COST_RULES; an attention-DP engine is eager on every rank when "
     "any rank has a context); `trtllm` 16 us, the others 0. Fitted on the 563 "
     "TensorRT-LLM fit rows without preemptions, scored with no first-response delay on "
     "a grid (0, 8, 16, 24, 32 us), the per-model delays re-fitted at each value and the "
     "grouping's cross-validation re-run: at 16 us the TPOT mean is lowest (12.8% to "
     "12.3%) and so is the cross-validated TTFT mean (37.2% to 36.9%; median 24.7% to "
     "23.0%). The delays fall with it: deepseek-v3 13 to 10, llama-3.1-70b 3 to 1, "
     "llama-3.1-8b 13 to 11, the backend's 9 to 7. The cross-validation of the groupings, "
     "re-run on every fit row: one delay per backend 37.6% / 28.8%, one per backend and "
     "model 33.5% / 21.3%. A DeepSeek forward has 1,146 kernels, so its context step pays "
     "18.3 ms, which TensorRT-LLM tech blog 3's CUDA-graph ablation (22% of end-to-end "
     "throughput at maximum throughput on B200) implies too, from pdsim's own step prices "
     "(16-21 ms; a check, not a fit). An eager prefill large enough to be the whole TTFT "
     "gap (0.12 s a step, tried on 2026-12-02, above) broke the TPOT; 4.7-18.3 ms a step "
     "is what the fit rows' TPOT supports. Run: fit rows TTFT mean 33.2% to 33.1%, median "
     "22.0% to 21.2%, TPOT mean 12.8% to 12.1%, median 9.0% to 8.3%; held-out, after the "
     "choice, TTFT mean 32.5% to 32.2%, median 21.6% to 21.3%, TPOT mean 14.6% to 14.3%, "
     "median 9.9% to 9.2%."),
    ("- **Not the recipes' stream interval (checked, not adopted; 2026-12-02, branch "
     "fid7).** Per group of aggregated InferenceMAX fit rows, the delay that minimises the "
     "mean TTFT error is 4 for TensorRT-LLM Llama-3.1-70B (144 rows), 1 for vLLM (153), 12 "
     "for SGLang DeepSeek-R1 (192; 17 on the fp8 B200 recipe alone) and 13 for "
     "TensorRT-LLM DeepSeek-R1 (216). The recipes' stream intervals at the rows' measurement "
     "dates (SemiAnalysisAI/InferenceX history: the Llama-3.1-70B rows were measured in "
     "October 2025, when `benchmarks/70b_*_trt_slurm.sh` set `stream_interval: 10`, 4 only "
     "before 2025-09-18; DeepSeek-R1 TensorRT-LLM 10; SGLang `--stream-interval` 10, 30 on "
     "the fp8 B200 recipe; vLLM none) do not follow it: a delay equal to the interval fits "
     "vLLM and roughly DeepSeek, but not Llama-3.1-70B (4 against 10) or SGLang fp8 on B200 "
     "(17 against 30). Run with an interval table that took 4 for Llama-3.1-70B, it gave "
     "held-out TTFT 34.5% mean and 26.2% median; that table misread the recipe, so it is "
     "not used, and the per-backend delays stay."),
    ("- **One request in C held back for a whole request (measured, not adopted; "
     "2026-12-02, seventh round).** The older TensorRT-LLM H100 dump (AIConfigurator's "
     "gap-analysis runs of TensorRT-LLM 1.0.0rc3, Llama-3.1-8B, aiperf; 177 rows, 12% of "
     "the scored rows) has a TTFT that grows with the output length. Question 3 of "
     "`python -m validation.silicon_gap SCORES.json` fits, per concurrency, the gap "
     "(measured - pdsim) against lifetime / C (lifetime = OSL x measured TPOT): on its fit "
     "rows the slope is 1.07 at C 8 (21 rows, R^2 0.86), 0.89 at C 16 (24, 0.87), 0.74 at "
     "C 32 (26, 0.48), none at C 64-128 (R^2 <= 0.07); on the InferenceMAX rows of every "
     "backend it is 0.00 +- 0.1 with R^2 <= 0.13. A slope of 1 is what a server running "
     "only C - 1 of the C requests would show: every round one request waits out a whole "
     "lifetime, and the round's mean TTFT grows by a lifetime over C. Run so (TensorRT-LLM "
     "aiperf rows capped at C - 1 running requests), the fit rows' TTFT mean error moves "
     "61.2% -> 14.2% at C 8, 38.5% -> 17.8% at C 16, 29.1% -> 26.7% at C 32, but 30.6% -> "
     "41.7% at C 64 (119 fit rows: mean 41.4% -> 30.5%, median 39.3% -> 21.4%; TPOT mean "
     "+1-3 points). It is not adopted: nothing found in the sources says where the missing "
     "slot goes (aiperf starts a request's clock when it sends it, "
     "`credit_processor_mixin.py`, and releases its concurrency semaphore on every credit "
     "return; TensorRT-LLM's PyExecutor admits up to `max_num_active_requests` less the "
     "active ones; AIConfigurator's template for this version writes `max_batch_size` from "
     "its build config, which the sample does not record, with `enable_padding: false` "
     "and `disable_overlap_scheduler: true`), and a cap chosen because it fits would be a "
     "knob for one dump. The fits and the experiment read fit rows only."),
    ("- **Not explained.** The same dump at C 64-128 (TTFT 2-10x pdsim's at TP4-8, "
     "TPOT up to 1.5x: a CPU-bound loop without overlap is one candidate). SGLang "
     "DeepSeek nvfp4 rows without a version at 5-9 s, and TensorRT-LLM disagg rows at "
     "concurrency <= 7 with 5-39 s TTFT: the recorded layout or protocol is probably "
     "not what ran."),
))


def render(out: Outcome, meta: Meta) -> str:
    """docs/validation-silicon.md from an outcome (pure: the same outcome and meta give the
    same text)."""
    scored = sorted(out.scored, key=lambda s: s.row_id)
    lines: list[str] = []
    add = lines.append
    sample = "all" if meta.sample is None else str(meta.sample)
    add("# Validation on AIConfigurator's silicon sample")
    add("")
    add(f"<!-- silicon-meta date={meta.date} commit={meta.commit} sample={sample} "
        f"elapsed_s={meta.elapsed_s:.0f} -->")
    how = ("every expressible row" if meta.sample is None
           else f"`--sample {meta.sample}`, a stratified sample")
    add(f"Generated on {meta.date} from pdsim commit `{meta.commit}` by `{COMMAND}` ({how}; "
        f"{len(scored)} rows simulated in {meta.elapsed_s:.0f} s). Do not edit by hand; "
        "`python -m validation.silicon --check` compares without writing.")
    add("")
    add("The data: `validation/data/aic-silicon/silicon_sample.csv`, AIConfigurator's silicon "
        "sample (ai-dynamo/aiconfigurator at commit 095f58a, Apache License 2.0, attribution "
        "and licence beside it): 5,221 measured TTFT/TPOT points of TensorRT-LLM, SGLang and "
        "vLLM deployments. A row is **held out** when the first hex digit of sha256(id) is "
        "0-4 (fixed by the data's README); held-out rows are never used to fit, choose or "
        "tune anything and are reported apart from the fit rows. One set of constants is "
        "fitted to fit rows: each backend's first-response delay, per model profile where "
        "its fit rows have one (`router.response_rule`, \"Why TTFT is short\") and "
        "vLLM's cost per prompt token on the way in; held-out "
        "rows stay out-of-sample.")
    add("")
    add("*Error* is the absolute percentage error |pdsim - measured| / measured of the mean "
        "TTFT and of the mean TPOT; a partition is backend x mode x system.")
    add("")
    add("## How a row is run")
    add("")
    add("- **Protocol, per row from its source** (`PROTOCOLS`, `row_protocol`). Two "
        "harnesses produced the rows; each row runs as its harness ran it. The row's "
        "concurrency C is `silicon_concurrency` in `silicon_data_source` (`batch_size` is "
        "per attention-DP rank where the two differ).")
    add("  - `inferencemax` (4,250 rows: `source_file=2026-03-25.csv`, "
        "`source_file=2026-04-06.csv`, `db-dump/2026-04-27`): SemiAnalysis InferenceMAX's "
        "public benchmark runs. The sample does not name the harness; the evidence is its "
        "ISL/OSL grid (1024/1024, 1024/8192, 8192/1024), its images (`lmsysorg/sglang`, "
        "`vllm/vllm-openai`, the Dynamo TensorRT-LLM runtimes), its model prefixes in the "
        "ids (`dsr1_`, `minimaxm2_5_`, `qwen3_5_`), GitHub Actions `workflow_run_id`s in "
        "the db-dump, and disagg concurrencies no other grid has (1214, 1365, 1606, 1691, "
        "2192, 2222, 10860: the srt-slurm recipes of InferenceMAX's "
        "`.github/configs/nvidia-master.yaml`). Its client, `benchmarks/benchmark_lib.sh` "
        "`run_benchmark_serving`, runs `utils/bench_serving/benchmark_serving.py` (kimbochen/"
        "bench_serving, a fork of vLLM's benchmark_serving.py) with `--dataset-name random "
        "--num-prompts 10C --max-concurrency C --request-rate inf --ignore-eos "
        "--num-warmups 2C --random-range-ratio 0.8`; the multi-node disagg recipes run the "
        "same client through srt-slurm's `sa-bench` with the same defaults "
        "(`src/srtctl/benchmarks/sa_bench.py`: `DEFAULT_NUM_PROMPTS_MULT = 10`, "
        "`DEFAULT_NUM_WARMUP_MULT = 2`, `DEFAULT_RANDOM_RANGE_RATIO = 0.8`). Its "
        "`sample_random_requests` draws every input and output length as "
        "`np.random.randint(int(L * ratio), L + 1)`, integers uniform in [int(0.8 L), L] "
        "(mean 0.9 L; not the centred [L(1 - r), L(1 + r)] of later vLLM), and "
        "`--ignore-eos` makes each output exactly its drawn length. The warm-up sends 2C "
        "copies of the first prompt through the same concurrency limit and awaits them all "
        "before the measured run. TTFT runs from sending to the first streamed chunk; "
        "`mean_ttft_ms` is the plain mean over requests and `mean_tpot_ms` the plain mean "
        "of each request's (latency - TTFT) / (output tokens - 1), not weighted by tokens "
        "(`calculate_metrics`). pdsim runs 10 rounds of C requests with lengths uniform in "
        "[int(0.8 L), L] (an `empirical` length of one bin) and takes the same means. "
        "InferenceMAX's results keep the mean, median and p99 of each metric "
        "(`utils/process_result.py`); the sample holds one value and does not say which, "
        "so the suite compares means. Its master config runs DeepSeek-R1 recipes both "
        "with and without `spec-decoding: mtp` (e.g. `dsr1-fp8-b200-dynamo-trt`), so "
        "some of these rows ran MTP (\"MTP\" below).")
    add("  - `aiperf` (971 rows: AIConfigurator's own gap-analysis runs, "
        "`source_file=.../aic-auto-gap-analysis/...`, `kimi-k2.5-gap-analysis.csv`, "
        "`qwen3.5-397b-gap-analysis.csv`): AIConfigurator's generated benchmark "
        "(`backend_templates/benchmark/bench_run.sh.j2`), aiperf in a closed loop at C, "
        "`--num-requests 20C --warmup-request-count 2C`, fixed ISL/OSL with `ignore_eos`, "
        "streaming. aiperf waits for the warm-up requests to return before its profiling "
        "phase starts (`aiperf/timing/credit_issuing_strategy.py`); its TTFT runs from "
        "sending the request to its first token and its TPOT is (latency - TTFT) / "
        "(OSL - 1) per request, both means over the phase. pdsim runs 20 rounds of C "
        "requests of fixed lengths. The template gives no `--num-dataset-entries`, so "
        f"aiperf draws every request from its default {AIPERF_DATASET_ENTRIES} synthetic "
        "prompts (`InputDefaults.NUM_DATASET_ENTRIES`, shuffled): a deployment that caches "
        "prefixes computes little of a repeated prompt. Where the backend's deployment "
        "does (`PREFIX_CACHING`: vLLM, whose v1 engine caches by default; not TensorRT-LLM, "
        "whose template writes `enable_block_reuse: false`; not SGLang, whose fit rows show "
        "the prefill paid, docs/step-time.md \"Repeated prompts in the aiperf rows\") pdsim "
        f"draws the prompts from {AIPERF_DATASET_ENTRIES} shared ones, caches prefixes, "
        "and runs the 2C warm-up requests before the measured ones (not scored), as the "
        "warm-up fills the cache. One vLLM run is the exception "
        "(`AIPERF_RUNS_PREFILL_PAID`, issue 25's fourteenth round): the Qwen3-32B run on "
        "H100 measured TPOTs that grow with ISL / OSL as computed prompts do (99 ms at "
        "4096/128, C 128, TP8), its fit rows at TPOT 26.9% mean with reuse and 7.1% "
        "without, so its rows run without reuse.")
    add("  - Both: the measured phase starts from an idle server with a burst of C requests "
        "and TTFT includes server-side queueing, the prompts batched with it and (disagg) "
        "the KV transfer. pdsim has no cold-start effects to warm up (but the prefix "
        "cache above), so it runs the measured phase alone, from an idle cluster; where "
        "C x OSL x rounds would pass "
        f"{OUTPUT_TOKEN_BUDGET:,} output tokens it runs as many rounds as fit, at least "
        f"{MIN_MEASURED_ROUNDS}, and weighs the first round (the burst) 1/rounds as the "
        "full run would. Mirrored from the InferenceMAX recipes' own server settings "
        "(SemiAnalysisAI/InferenceX `benchmarks/single_node/*.sh` at the dumps' dates; "
        "docs/step-time.md, \"Admission rules of the recipes\"): TensorRT-LLM's "
        "attention-DP context balance (`attention_dp_config` `enable_balance`, "
        f"`timeout_iters` {TRTLLM_ADP_CONTEXT_WAIT_STEPS}) on the agg attention-DP rows and "
        "SGLang's `--scheduler-recv-interval` (30 at C >= 16, else 10) on the agg DeepSeek "
        "rows on B200; TensorRT-LLM's batch waiting (`batch_wait_timeout_iters`, "
        "`batch_wait_max_tokens_ratio`: `scheduler.batch_wait_steps`) with the recipe's "
        "`max_num_tokens` on the agg rows whose recipe set it (`BATCH_WAIT_RECIPES`: "
        "Llama-3.1-70B fp8/fp4 on B200 and H200 at 1k/1k and TP < 8, measured 2025-09-18 to "
        "2025-10-29, 20 steps and 0.9 of 16,384 tokens; DeepSeek-R1 fp8 on B200 at 1k/1k "
        "and C >= 64 from 2026-01-29, 40 steps and 0.8 of max(8192, C + ISL + 64 rounded "
        "up to 64); never with attention DP, which TensorRT-LLM skips). Not mirrored: the "
        "recipes' other server settings (e.g. TensorRT-LLM `max_num_tokens` where no batch "
        "waiting reads it, CUDA-graph batch sizes, SGLang `--max-running-requests`; the "
        "suite keeps AIConfigurator's generator limits) and `--use-chat-template` on some "
        "recipes (the "
        "template's tokens are taken off the drawn input, so the prompt length is "
        "unchanged).")
    add("- **Deployment**: one agg instance type (`count` = attention-DP ranks, each TP "
        "`tp_size`, experts over `moe_ep_size` GPUs), or P and D pools of "
        "`num_workers x attention_dp` instances each; with experts over the attention-DP "
        "ranks (`moe_ep_size` > 1) every `attention_dp_size` instances are one attention-DP "
        "engine stepping together (`attention_dp_size`, docs/step-time.md; requests to ranks "
        "by the backend's balance, `attention_dp_balance`: TensorRT-LLM's, vLLM's, SGLang's "
        "round robin); `model` and `hardware` from the shipped "
        "profiles (`MODEL_PROFILES`: DeepSeek-R1/V3/V3.1, Llama-3.1-70B and -8B, Qwen3-32B, "
        "Qwen3-235B-A22B, MiniMax-M2.5, Kimi-K2.5 and gpt-oss-120b, each from its "
        "checkpoint's config.json; one set of constants for all of them, none fitted per "
        "model but the first-response delay), the MoE layers at the backend's own kernels "
        "(`kernel_rule`: the "
        "per-pair cost fitted to that engine's measured MoE layers, `KERNEL_RULES`, "
        "docs/step-time.md) of the row's engine version (`kernel_version`: block-scaled fp8 "
        "experts stream their weights at the share of the bandwidth that engine's version "
        "reached on AIConfigurator's measured decode-sized fp8 MoE layers, "
        "`kernels.fp8_moe_efficiency_by_engine`, the newest fitted version not newer than "
        "the row's); weight and expert dtypes from `gemm_quant_mode` / `moe_quant_mode` "
        "(fp8 and fp8_block: fp8; nvfp4; int4_wo: int4; empty: the `precision` column, else "
        "the profile's); KV cache fp8 for fp8 and nvfp4 deployments, else bf16 (the sample "
        "does not give it: AIConfigurator's fp8 and nvfp4 quant profiles, "
        "`sdk/task_v1_compat.py`, and its checkpoint inference, `sdk/models/helpers.py`, "
        "run an fp8 KV cache; bf16 and int4 weight-only keep bf16); KV memory by the "
        "backend's own rule (`memory_rule`, docs/step-time.md): vLLM's "
        "gpu_memory_utilization 0.9 less weights, the activation peak at "
        "max_num_batched_tokens and non-torch memory; SGLang's mem_fraction_static derived "
        "from the GPU's memory as SGLang derives it; TensorRT-LLM's free_gpu_memory_fraction "
        f"{TRTLLM_FREE_GPU_MEMORY_FRACTION:g} (AIConfigurator's generator default) of the "
        "memory free after weights and activations. A row whose weights leave no KV memory "
        "under its backend's default fraction is listed as not expressible (it ran with a "
        "fraction the sample does not record). TensorRT-LLM rows admit as its default "
        "GUARANTEED_NO_EVICT capacity policy does: at most the pool's blocks over what "
        "one request reserves to completion (prompt + output) run at once, so they never "
        "preempt (with InferenceMAX's drawn lengths the mean reservation over the drawn "
        "lengths, `request_blocks`: the sum of C requests' own reservations settles at C "
        "times it); vLLM and SGLang rows preempt as pdsim's scheduler does. Engine limits "
        "as AIConfigurator's generator writes them (max tokens per step ISL + 1500, + the "
        "batch for agg; the batch for decode); no per-rank batch cap unless "
        "the row gives one; round-robin routing; no speculation. A row whose tensor-parallel "
        "size does not divide the model's attention heads (DeepSeek's 128 MLA heads at TP "
        "48 or 72) is not expressible: no engine shards attention so, so the row's recorded "
        "layout is not the one that ran. **The recipe's layout, where the InferenceMAX "
        "exports multiplied it out** (`recipe_layout_fields`, issue 25's fourteenth round): "
        "InferenceMAX's agg recipes with expert parallelism ran k = tp = ep GPUs on one node "
        "(`nvidia-master.yaml`: `dsr1-fp8-h200-trt` searched `{tp: 8, ep: 8}` only, "
        "`gptoss-fp4-h200-trt` tp = ep in 1, 2, 4, 8, `dsr1-fp4-b200-sglang` `{tp: 4, ep: 4}` "
        "and `{tp: 8, ep: 8}`, `minimaxm2.5-fp8-b200-vllm` `{tp: 2, ep: 2}` and "
        "`{tp: 4, ep: 4}`), but the sample records them as k^2 GPUs: (tp_size, "
        "attention_dp_size, moe_tp_size, moe_ep_size) = (k^2, 1, k, k) for TensorRT-LLM and "
        "SGLang, (1, k^2, k, k) with attention DP, (k, k, 1, k^2) for vLLM's expert "
        "parallelism. The dated CSVs' ids name the recipe's tp and ep (`..._tp8_ep8_...`) "
        "and agree with the reading in every rewritten row, so such a row runs as k GPUs "
        "with experts over k (its per-rank batch scaled back), not as the 16 or 64 GPUs, "
        "across nodes, that earlier rounds priced. Two vLLM recipes passed "
        "`--enable-expert-parallel` whatever their `EP_SIZE` (`if [ \"$EP_SIZE\" -ge 1 ]`; "
        "`VLLM_EP_ALWAYS_RECIPES`, issue 25's fifteenth round): `minimaxm2.5-fp8-h200-vllm` "
        "from 2026-03-13 to 2026-05-25 and `minimaxm2.5-fp8-b200-vllm` from 2026-03-11 to "
        "2026-04-02 (InferenceX main-branch history of their scripts), so their rows of those "
        "days, recorded with `moe_ep_size` 1, run with the experts over the TP GPUs. "
        "An InferenceMAX row marked agg on GB200 "
        "is not expressible: every GB200 recipe of InferenceMAX was a multi-node Dynamo "
        "disaggregated one (`INFERENCEMAX_DISAGG_ONLY_SYSTEMS`), and those rows' TP of 12-72 "
        "is the run's whole GPU count. Nor is a row whose concurrency its recipe's search "
        "space never reached (`RECIPE_SEARCH_SPACES`: `gptoss-fp4-h100-vllm` searched 4-64 "
        "in every version from 2025-11-03 to 2026-06-24 with `--max-num-seqs` = the "
        "concurrency; its nine rows at 512 measured TPOTs below the same deployment's at "
        "concurrency 8). vLLM rows of v0.14 or later (and nightly builds) "
        "run with async scheduling, as those releases do by default "
        "(`VLLM_ASYNC_SCHEDULING_SINCE`, `step_time.async_scheduling`: the loop's CPU costs "
        "overlap the GPU's step instead of adding to it); earlier and unversioned vLLM rows "
        "keep the synchronous loop the vLLM CPU costs were fitted to.")
    add(f"- **MTP.** The sample has no speculative-decoding column. A row whose recorded "
        f"serving image only MTP recipes used (`MTP_RECIPES`) runs MTP: InferenceMAX's "
        f"`nvidia-master.yaml` gave `tensorrt-llm/release:1.2.0rc6.post3` from 2026-02-05 to "
        f"2026-04-10 only to `dsr1-fp4-b200-trt-mtp` and `dsr1-fp8-b200-trt-mtp` (every "
        f"entry `spec-decoding: mtp`; the STP recipes ran `1.2.0rc6.post2`), whose scripts "
        f"set `num_nextn_predict_layers` 3, or 1 with attention DP; on H200 "
        f"`dsr1-fp8-h200-trt-mtp` (InferenceX PR #392, merged 2026-01-15, MTP 3 or 1 with "
        f"attention DP) shared the STP recipe's image `1.1.0rc2.post2`, and the TensorRT-LLM "
        f"DeepSeek-R1 rows measured on 2026-01-14 are exactly its search space, ten of them "
        f"at points the STP recipe never searched (issue 25's fourteenth round), so that "
        f"day's rows run MTP too. pdsim runs them so, at "
        f"the per-position acceptance {list(MTP_ACCEPTANCE_RATES)} of TensorRT-LLM's "
        f"DeepSeek-R1 B200 blog (acceptance lengths 1.92 and 2.82 for 1 and 3 drafts; "
        f"measured on the blog's dataset, not on these random prompts); their first "
        f"response comes the backend's rule's number of engine steps after the first "
        f"token (the rule's tokens x the acceptance length, `router()`). Every other row "
        f"runs without speculation (as AIConfigurator's prediction inputs also do). Of "
        f"those, a row is "
        f"flagged *likely MTP* when its model ships an MTP head (DeepSeek-V3/R1), pdsim's run "
        f"has no preemptions (which inflate TPOT for another reason) and pdsim's "
        f"no-speculation TPOT is more than {LIKELY_MTP_RATIO}x the measured one: no "
        f"non-speculative engine beats pdsim's roofline by that much at small batch, while "
        f"MTP (about 2-2.5 tokens per step on DeepSeek) does. Flagged rows stay in every "
        f"figure below; the summary also gives the figures without them. The flag is a "
        f"reporting aid, not a correction and not a fit.")
    add("")

    add("## Summary")
    add("")
    add(STATS_HEAD)
    for label, sel in (("all", scored),
                       ("all but likely-MTP", [s for s in scored if not s.likely_mtp]),
                       ("runs without preemptions", [s for s in scored if s.preemptions == 0]),
                       ("both of the above", [s for s in scored
                                              if s.preemptions == 0 and not s.likely_mtp])):
        for split in ("fit", "held-out"):
            add(f"| {label} | {split} | "
                f"{_stats_cells(stats(s for s in sel if s.split == split))} |")
        add(f"| {label} | both | {_stats_cells(stats(sel))} |")
    twins = fit_twins(out.rows)
    untwinned = [s for s in scored if s.split == "held-out" and s.row_id not in twins]
    add(f"| held-out rows without a fit twin | held-out | {_stats_cells(stats(untwinned))} |")
    add("")
    groups = Counter(measurement_key(r) for r in out.rows)
    n_held = sum(r.split == "held-out" for r in out.rows)
    add(f"*Fit twins.* The sample holds some benchmark runs more than once: "
        f"{sum(n for n in groups.values() if n > 1):,} of its {len(out.rows):,} rows share "
        f"their measured TTFT and TPOT, digit for digit, with another row "
        f"({sum(1 for n in groups.values() if n > 1):,} such measurements), mostly one "
        "InferenceMAX run in two exports (the db-dump's `..._cfgN` ids and the dated CSVs' "
        "ids), sometimes under the model names of two checkpoints. Where the split put one "
        f"copy in fit and another in held-out, the held-out copy is a *fit twin*: "
        f"{len(twins):,} of the {n_held:,} held-out rows "
        f"({sum(s.row_id in twins for s in scored if s.split == 'held-out')} of those "
        "simulated here). The fixed split is kept as the data's README defines it; what "
        "pdsim fits to fit rows (the first-response delays, vLLM's prompt cost, the kernel "
        "and CPU constants checked on fit rows) has seen a twin's measurement, so the last "
        "line of the table scores only the held-out rows without one.")
    add("")
    add("Direction: the median of pdsim / measured, and the share of rows pdsim puts below "
        "the measurement.")
    add("")
    add("| split | TTFT median ratio | TTFT below | TPOT median ratio | TPOT below |")
    add("|---|---:|---:|---:|---:|")
    for split in ("fit", "held-out"):
        sel = [s for s in scored if s.split == split and s.ok]
        if not sel:
            continue
        r1 = [s.pdsim_ttft_ms / s.measured_ttft_ms for s in sel]
        r2 = [s.pdsim_tpot_ms / s.measured_tpot_ms for s in sel]
        add(f"| {split} | {statistics.median(r1):.2f} | "
            f"{sum(r < 1 for r in r1) / len(sel):.0%} | {statistics.median(r2):.2f} | "
            f"{sum(r < 1 for r in r2) / len(sel):.0%} |")
    add("")
    pre = [s for s in scored if s.preemptions > 0]
    add(f"{len(pre)} of {len(scored)} simulated rows preempt in pdsim (vLLM and SGLang rows "
        "whose concurrency outgrows the KV pool their backend's memory rule leaves; they "
        "preempt as the engines do), which multiplies their TTFT; "
        f"{sum(s.likely_mtp for s in scored)} are flagged likely MTP.")
    add("")
    # AIConfigurator's own estimates of the same rows, from the committed CSV
    from validation.aic_side_by_side import doc_section

    lines.extend(doc_section(scored, out.rows))
    add("")

    add("## By partition")
    add("")
    add(f"Partitions with at least {PARTITION_MIN_ROWS} sampled rows in a split are marked "
        "with **bold** counts. *TPOT ratio* is the median pdsim / measured TPOT; *TPOT mean "
        "w/o MTP* the mean error without the rows flagged likely MTP.")
    add("")
    add("| partition | split | scored | TTFT mean | TTFT median | TPOT mean | TPOT median "
        "| TPOT ratio | TPOT mean w/o MTP |")
    add("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for part in sorted({s.partition for s in scored}):
        for split in ("fit", "held-out"):
            st = stats(s for s in scored if s.partition == part and s.split == split)
            if st.count == 0:
                continue
            cells = _stats_cells(st)
            if st.count >= PARTITION_MIN_ROWS:
                cells = f"**{st.count}**" + cells[len(str(st.count)):]
            ok = [s for s in scored if s.partition == part and s.split == split and s.ok]
            ratio = statistics.median(s.pdsim_tpot_ms / s.measured_tpot_ms for s in ok)
            no_mtp = stats(s for s in ok if not s.likely_mtp)
            add(f"| {part} | {split} | {cells} | {ratio:.2f} | "
                f"{_pct(no_mtp.tpot_mean) if no_mtp.count else '-'} |")
    add("")

    add("## Worst rows")
    add("")
    for split in ("fit", "held-out"):
        sel = [s for s in scored if s.split == split and s.ok]
        for metric in ("TTFT", "TPOT"):
            key = (lambda s: s.ttft_ape) if metric == "TTFT" else (lambda s: s.tpot_ape)
            worst = sorted(sel, key=lambda s, k=key: (-k(s), s.row_id))[:10]  # type: ignore[misc]
            add(f"### {split}, {metric}")
            add("")
            add("| row | C | ISL/OSL | measured TTFT ms | pdsim TTFT ms | measured TPOT ms | "
                "pdsim TPOT ms | error | preemptions | likely MTP |")
            add("|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
            for s in worst:
                err = s.ttft_ape if metric == "TTFT" else s.tpot_ape
                add(f"| `{s.row_id}` | {s.concurrency} | {s.isl}/{s.osl} | "
                    f"{s.measured_ttft_ms:.1f} | {s.pdsim_ttft_ms:.1f} | "
                    f"{s.measured_tpot_ms:.2f} | {s.pdsim_tpot_ms:.2f} | {err:.0f}% | "
                    f"{s.preemptions} | {'yes' if s.likely_mtp else ''} |")
            add("")

    lines.extend(TTFT_GAP_SECTION.split("\n"))
    add("")
    add("## The CI slice")
    add("")
    add(f"`tests/validation/test_silicon.py` scores a fixed slice (`ci_slice`: "
        f"{CI_ROWS_PER_SPLIT} fit and {CI_ROWS_PER_SPLIT} held-out rows, one per partition "
        f"in turn among rows whose run generates at most {CI_COST_LIMIT:,} output tokens, "
        "so mostly low concurrency) and fails when a split's mean error rises more than 5 "
        f"percentage points above the figure measured on {CI_MEASURED_ON} (fit: TTFT "
        f"{CI_MEASURED_MEAN_APE[('fit', 'ttft')]:.1f}%, TPOT "
        f"{CI_MEASURED_MEAN_APE[('fit', 'tpot')]:.1f}%; held-out: TTFT "
        f"{CI_MEASURED_MEAN_APE[('held-out', 'ttft')]:.1f}%, TPOT "
        f"{CI_MEASURED_MEAN_APE[('held-out', 'tpot')]:.1f}%). This run "
        "scores it at:")
    add("")
    add(STATS_HEAD)
    for split in ("fit", "held-out"):
        add(f"| CI slice | {split} | "
            f"{_stats_cells(stats(s for s in out.ci if s.split == split))} |")
    add("")
    add("## Rows pdsim cannot express")
    add("")
    reasons = Counter(exc.reason for _, exc in out.not_expressible)
    simulated = {r.id for r in out.considered}
    planned_out = [(r, e) for r, e in out.not_expressible if r.id not in simulated]
    n_expr = len(out.rows) - len(planned_out)
    n_held = sum(1 for r in out.rows if r.split == "held-out") - sum(
        1 for r, _ in planned_out if r.split == "held-out")
    add(f"Of {len(out.rows):,} rows, {n_expr:,} are expressible by the rules above "
        f"({n_expr - n_held:,} fit, {n_held:,} held out; {len(out.considered):,} were "
        "simulated); the others, by reason (first reason "
        "met; a row the simulation itself rejects is counted among the simulated sample "
        "only):")
    add("")
    add("| reason | rows | fit | held-out | examples |")
    add("|---|---:|---:|---:|---|")
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        hits = [(r, e) for r, e in out.not_expressible if e.reason == reason]
        details = Counter(e.detail for _, e in hits if e.detail)
        ex = ", ".join(f"{d} ({c})" for d, c in sorted(details.items(),
                                                         key=lambda kv: (-kv[1], kv[0]))[:6])
        if not ex:
            ex = f"`{min(r.id for r, _ in hits)}`"
        held = sum(1 for r, _ in hits if r.split == "held-out")
        add(f"| {reason} | {count} | {count - held} | {held} | {ex} |")
    add("")
    add("The disagg rows without worker counts (older dumps) give each role's parallelism "
        "but not how many P and D workers ran; AIConfigurator's own scoring cannot run them "
        "either (`cli_estimate` requires `prefill_num_workers` and `decode_num_workers`), "
        "so they are not guessed here. The recipe rules are in \"How a row is run\" "
        "(Deployment). MoE hybrid TP x EP inside one TP group runs as "
        "pdsim's hybrid layout (`expert_parallel_size` a divisor of `tensor_parallel_size`: "
        "experts over EP groups, each slicing its own); hybrid TP x EP and MoE TP across "
        "attention-DP ranks have no pdsim layout (attention-DP ranks run as the ranks of one "
        "engine sharing whole experts).")
    add("")
    return "\n".join(lines)


# ---------------------------------------------------------------------- CLI


def pdsim_commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                "pdsim", "validation"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _print_summary(out: Outcome) -> None:
    twins = fit_twins(out.rows)
    held = [s for s in out.scored if s.split == "held-out"]
    for label, sel in (("fit", [s for s in out.scored if s.split == "fit"]),
                       ("held-out", held),
                       ("held-out without a fit twin", [s for s in held if s.row_id not in twins])):
        st = stats(sel)
        print(f"{label:8} scored {st.count:5}  TTFT mean {_pct(st.ttft_mean):>7} median "
              f"{_pct(st.ttft_median):>7}  TPOT mean {_pct(st.tpot_mean):>7} median "
              f"{_pct(st.tpot_median):>7}")
    reasons = Counter(e.reason for _, e in out.not_expressible)
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  not expressible: {count:5}  {reason}")


DEFAULT_SAMPLE = 150


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation.silicon", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=DEFAULT_SAMPLE,
                    help=f"simulate a stratified sample of N expressible rows (default "
                         f"{DEFAULT_SAMPLE}); 0: every expressible row")
    ap.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--write", action="store_true", help=f"regenerate {DOC.name}")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the doc differs from this run")
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--csv", type=Path, default=CSV_PATH)
    ap.add_argument("--json", type=Path, help="also write every scored row as JSON here")
    ap.add_argument("--commit", help="pdsim commit to record (default: git HEAD)")
    args = ap.parse_args(argv)
    sample = None if args.sample == 0 else args.sample
    out = run(load_sample(args.csv), sample, max(1, args.workers))
    _print_summary(out)
    print(f"{len(out.scored)} rows simulated in {out.elapsed_s:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(
            [{**asdict(s), "ttft_ape": s.ttft_ape, "tpot_ape": s.tpot_ape}
             for s in sorted(out.scored, key=lambda s: s.row_id)], indent=1) + "\n",
            encoding="utf-8")
    if args.check:
        old = args.doc.read_text(encoding="utf-8") if args.doc.exists() else ""
        meta = parse_meta(old)
        if meta is None or meta.sample != sample or render(out, meta) != old:
            print(f"{args.doc} is stale: run {COMMAND}"
                  + ("" if sample == DEFAULT_SAMPLE else f" --sample {args.sample}"))
            return 1
        return 0
    if args.write:
        meta = Meta(datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
                    args.commit or pdsim_commit(), sample, out.elapsed_s)
        args.doc.write_text(render(out, meta), encoding="utf-8")
        print(f"wrote {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
