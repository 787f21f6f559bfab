"""``vllm serve`` command lines, read as vLLM's argument parser would read them. The lines
are vLLM's own (the pages are named at each)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdsim.errors import ConfigError
from pdsim.importers.vllm_args import parse_serve_command

# https://docs.vllm.ai/en/latest/features/nixl_connector_usage.html, "Producer (Prefiller)
# Configuration"
NIXL_PREFILLER = """\
CUDA_VISIBLE_DEVICES=0 \\
UCX_NET_DEVICES=all \\
VLLM_NIXL_SIDE_CHANNEL_PORT=5600 \\
vllm serve Qwen/Qwen3-0.6B \\
  --port 8100 \\
  --enforce-eager \\
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both",\
"kv_load_failure_policy":"fail"}'
"""

# same page, "Selecting a NIXL transport backend": JSON keys as dotted arguments
NIXL_DOTTED = """\
vllm serve <MODEL> \\
  --kv-transfer-config.kv_connector NixlConnector \\
  --kv-transfer-config.kv_role kv_both \\
  --kv-transfer-config.kv_connector_extra_config.backends+ LIBFABRIC
"""

# https://docs.vllm.ai/en/latest/features/speculative_decoding/mtp.html, "Online Example"
MTP_ONLINE = """\
vllm serve XiaomiMiMo/MiMo-7B-Base \\
    --tensor-parallel-size 1 \\
    --speculative-config '{"method":"mtp","num_speculative_tokens":1}'
"""

# https://docs.vllm.ai/en/latest/features/speculative_decoding/draft_model.html
DRAFT_MODEL = """\
vllm serve Qwen/Qwen3-4B-Thinking-2507 \\
    --host 0.0.0.0 \\
    --port 8000 \\
    --seed 42 \\
    -tp 1 \\
    --max-model-len 2048 \\
    --gpu-memory-utilization 0.8 \\
    --speculative-config '{"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 5, \
"method": "draft_model"}'
"""


def test_nixl_prefiller_line() -> None:
    a = parse_serve_command(NIXL_PREFILLER)
    assert a.model == "Qwen/Qwen3-0.6B"
    assert a.kv_transfer_config == {"kv_connector": "NixlConnector", "kv_role": "kv_both",
                                    "kv_load_failure_policy": "fail"}
    assert a.ignored == ("--port 8100", "--enforce-eager")


def test_dotted_json_options_build_the_object() -> None:
    a = parse_serve_command(NIXL_DOTTED)
    assert a.kv_transfer_config == {"kv_connector": "NixlConnector", "kv_role": "kv_both",
                                    "kv_connector_extra_config": {"backends": ["LIBFABRIC"]}}


def test_mtp_and_draft_model_lines() -> None:
    a = parse_serve_command(MTP_ONLINE)
    assert (a.tensor_parallel_size, a.speculative_config) == (
        1, {"method": "mtp", "num_speculative_tokens": 1})
    b = parse_serve_command(DRAFT_MODEL)
    assert (b.max_model_len, b.gpu_memory_utilization) == (2048, 0.8)
    assert b.speculative_config is not None and b.speculative_config["method"] == "draft_model"
    assert b.ignored == ("--host 0.0.0.0", "--port 8000", "--seed 42")


def test_every_spelling_vllm_accepts() -> None:
    a = parse_serve_command(
        "vllm serve m -tp 4 -dp=2 --enable-expert-parallel --max_num_seqs 32 "
        "--max-num-batched-tokens=4096 --block-size 32 --kv-cache-dtype fp8 "
        "--max-model-len 32k --no-enable-prefix-caching --enable-chunked-prefill=false "
        "--dtype bfloat16 --quantization fp8 --served-model-name served -O3")
    assert (a.tensor_parallel_size, a.data_parallel_size, a.enable_expert_parallel) == (
        4, 2, True)
    assert (a.max_num_seqs, a.max_num_batched_tokens, a.block_size) == (32, 4096, 32)
    assert (a.kv_cache_dtype, a.max_model_len, a.dtype, a.quantization) == (
        "fp8", 32000, "bfloat16", "fp8")
    assert a.enable_prefix_caching is False and a.enable_chunked_prefill is False
    assert a.name == "served" and a.ignored == ("-O3",)


def test_an_option_repeated_with_the_same_value_reads_once() -> None:
    a = parse_serve_command("vllm serve m -tp 4 --tensor-parallel-size=4 --enforce-eager")
    assert a.tensor_parallel_size == 4


def test_the_api_server_module_form() -> None:
    a = parse_serve_command("python3 -m vllm.entrypoints.openai.api_server --model m -tp 2")
    assert (a.model, a.tensor_parallel_size) == ("m", 2)


@pytest.mark.parametrize(("command", "message"), [
    ("vllm serve m --frobnicate 3", r"cmd: --frobnicate: unknown vllm serve option"),
    ("vllm serve m --kv-transfer-config '{bad'", r"cmd: --kv-transfer-config: not valid JSON"),
    ("vllm serve m --kv-transfer-config '[1]'", r"--kv-transfer-config: expected a JSON obj"),
    ("vllm serve m --max-num-seqs", r"cmd: --max-num-seqs: needs a value"),
    ("vllm serve m --max-num-seqs lots", r"--max-num-seqs: 'lots' is not a whole number"),
    ("vllm serve m --max-num-seqs 0", r"--max-num-seqs: 0 must be at least 1"),
    ("vllm serve m --gpu-memory-utilization 1.5", r"--gpu-memory-utilization: 1.5 must be"),
    ("vllm serve --port 8000", r"cmd: no model"),
    ("vllm serve a b", r"more than one model given: a, b"),
    ("vllm bench serve --model m", r"expected `vllm serve ...`"),
    ("vllm serve m --speculative-config '{\"method\": \"mtp\"", r"cannot split the command"),
    ("vllm serve m --tensor-parallel-size 2 -tp 4",
     r"cmd: --tensor-parallel-size: given twice with different values "
     r"\('--tensor-parallel-size 2', then '-tp 4'\)"),
    ("vllm serve m --max-num-seqs=8 --max_num_seqs 16", r"--max-num-seqs: given twice"),
    ("vllm serve m --enable-prefix-caching --no-enable-prefix-caching",
     r"--enable-prefix-caching: given twice"),
    ("vllm serve m --speculative-config '{\"method\": \"mtp\"}' "
     "--speculative-config '{\"method\": \"eagle\"}'", r"--speculative-config: given twice"),
])
def test_bad_lines_name_the_option(command: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_serve_command(command, "cmd")


_NUMERIC = {"tensor-parallel-size": "tensor_parallel_size", "data-parallel-size":
            "data_parallel_size", "max-num-seqs": "max_num_seqs", "max-num-batched-tokens":
            "max_num_batched_tokens", "block-size": "block_size"}


@given(values=st.dictionaries(st.sampled_from(sorted(_NUMERIC)),
                              st.integers(min_value=1, max_value=10**6)),
       flags=st.dictionaries(st.sampled_from(["enable-prefix-caching",
                                              "enable-chunked-prefill",
                                              "enable-expert-parallel"]), st.booleans()),
       spelling=st.lists(st.sampled_from(["space", "equals", "underscore"]), min_size=8,
                         max_size=8),
       order=st.randoms(use_true_random=False))
def test_any_spelling_and_order_reads_the_same_values(
        values: dict[str, int], flags: dict[str, bool], spelling: list[str],
        order: Any) -> None:
    parts = []
    for (name, v), how in zip(values.items(), spelling, strict=False):
        opt = "--" + (name.replace("-", "_") if how == "underscore" else name)
        parts.append(f"{opt}={v}" if how == "equals" else f"{opt} {v}")
    parts += [f"--{'' if on else 'no-'}{name}" for name, on in flags.items()]
    order.shuffle(parts)
    a = parse_serve_command(" ".join(["vllm", "serve", "org/model", *parts]))
    assert a.model == "org/model"
    for name, v in values.items():
        assert getattr(a, _NUMERIC[name]) == v
    for name, on in flags.items():
        assert getattr(a, name.replace("-", "_")) is on
