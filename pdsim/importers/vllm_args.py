"""One ``vllm serve`` command line, read into the settings pdsim models.

``parse_serve_command`` splits the line with ``shlex`` (backslash continuations and quotes
as a shell reads them), skips leading ``NAME=value`` environment assignments and the
``vllm serve`` words, and reads every option vLLM's argument parser would: ``--opt value``,
``--opt=value``, ``--no-opt`` for boolean flags, underscores spelt as dashes, JSON options
given whole (``--kv-transfer-config '{...}'``) or key by key
(``--kv-transfer-config.kv_role kv_both``). Options that do not change what pdsim
simulates (ports, logging, tokenizer, compilation) are read and listed as ignored; an
option pdsim does not know is an error naming it, so nothing is dropped silently.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Literal

from pdsim.errors import ConfigError

Kind = Literal["int", "float", "str", "json", "flag"]

# option -> (ServeArgs field, value kind)
_OPTIONS: dict[str, tuple[str, Kind]] = {
    "model": ("model", "str"),
    "served-model-name": ("served_model_name", "str"),
    "tensor-parallel-size": ("tensor_parallel_size", "int"),
    "data-parallel-size": ("data_parallel_size", "int"),
    "pipeline-parallel-size": ("pipeline_parallel_size", "int"),
    "enable-expert-parallel": ("enable_expert_parallel", "flag"),
    "max-num-seqs": ("max_num_seqs", "int"),
    "max-num-batched-tokens": ("max_num_batched_tokens", "int"),
    "gpu-memory-utilization": ("gpu_memory_utilization", "float"),
    "block-size": ("block_size", "int"),
    "kv-cache-dtype": ("kv_cache_dtype", "str"),
    "max-model-len": ("max_model_len", "str"),
    "enable-prefix-caching": ("enable_prefix_caching", "flag"),
    "enable-chunked-prefill": ("enable_chunked_prefill", "flag"),
    "async-scheduling": ("async_scheduling", "flag"),
    "long-prefill-token-threshold": ("long_prefill_token_threshold", "int"),
    "num-gpu-blocks-override": ("num_gpu_blocks_override", "int"),
    "kv-cache-memory-bytes": ("kv_cache_memory_bytes", "str"),
    "dtype": ("dtype", "str"),
    "quantization": ("quantization", "str"),
    "speculative-config": ("speculative_config", "json"),
    "kv-transfer-config": ("kv_transfer_config", "json"),
}

_ALIASES = {"tp": "tensor-parallel-size", "dp": "data-parallel-size",
            "pp": "pipeline-parallel-size", "ep": "enable-expert-parallel",
            "q": "quantization"}

# Options that change nothing pdsim simulates: read (with their value) and listed.
_IGNORED_WITH_VALUE = frozenset({
    "host", "port", "api-key", "seed", "tokenizer", "tokenizer-mode", "revision",
    "code-revision", "tokenizer-revision", "download-dir", "load-format", "config-format",
    "uvicorn-log-level", "distributed-executor-backend", "data-parallel-address",
    "data-parallel-rpc-port", "data-parallel-size-local", "data-parallel-start-rank",
    "data-parallel-backend", "api-server-count", "max-logprobs", "tool-call-parser",
    "reasoning-parser", "chat-template", "generation-config", "compilation-config",
    "swap-space", "max-log-len", "kv-events-config", "eplb-config", "all2all-backend",
    "scheduling-policy", "root-path", "middleware", "allowed-origins", "ssl-keyfile",
    "ssl-certfile", "worker-cls", "max-parallel-loading-workers", "hf-token",
    "cuda-graph-sizes", "max-cudagraph-capture-size", "max-seq-len-to-capture",
    "override-generation-config", "logits-processors", "model-loader-extra-config",
    "disable-log-stats-interval", "limit-mm-per-prompt", "mm-processor-kwargs",
})
_IGNORED_FLAGS = frozenset({
    "enforce-eager", "trust-remote-code", "disable-log-requests", "enable-log-requests",
    "disable-log-stats", "enable-auto-tool-choice", "headless",
    "enable-eplb", "enable-dbo", "disable-custom-all-reduce", "enable-sleep-mode",
    "disable-fastapi-docs", "enable-prompt-tokens-details", "enable-server-load-tracking",
    "enable-force-include-usage", "disable-uvicorn-access-log", "enable-request-id-headers",
    "skip-tokenizer-init", "disable-frontend-multiprocessing", "data-parallel-hybrid-lb",
    "data-parallel-external-lb", "disable-cascade-attn", "enable-log-outputs",
})


@dataclass(frozen=True)
class ServeArgs:
    """The settings of one ``vllm serve`` command that pdsim models (``None``: not given,
    vLLM's default applies) and the options it read but ignored."""

    model: str
    served_model_name: str | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    enable_expert_parallel: bool = False
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    async_scheduling: bool | None = None
    long_prefill_token_threshold: int | None = None
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    speculative_config: dict[str, Any] | None = None
    kv_transfer_config: dict[str, Any] | None = None
    ignored: tuple[str, ...] = field(default=())
    """Options read and ignored (each as written on the command line)."""

    @property
    def name(self) -> str:
        """The name clients use: --served-model-name, else the model argument."""
        return self.served_model_name or self.model


def _parse_size(text: str, where: str) -> int:
    """vLLM's human-readable sizes: ``1024``, ``32k``, ``1m`` (``K``/``M``/``G``: powers of 2
    for byte sizes, ``k``/``m``/``g``: of 10, as vLLM's ``human_readable_int`` reads them)."""
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    t = text.strip()
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except (ValueError, OverflowError):  # "infk", "nank": a float times a unit, not finite
        raise ConfigError(where, f"{text!r} is not a whole number (e.g. 32768, 32k)") from None


def _convert(value: str, kind: Kind, where: str) -> Any:
    if kind == "int":
        try:
            return int(value)
        except ValueError:
            raise ConfigError(where, f"{value!r} is not a whole number") from None
    if kind == "float":
        try:
            return float(value)
        except ValueError:
            raise ConfigError(where, f"{value!r} is not a number") from None
    if kind == "json":
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(where, f"not valid JSON ({exc.msg} at column {exc.colno})"
                              ) from None
        if not isinstance(parsed, dict):
            raise ConfigError(where, "expected a JSON object ({...})")
        return parsed
    return value


def _set_dotted(target: dict[str, Any], keys: list[str], raw: str, where: str = "") -> None:
    """``--x.a.b value``: set target[a][b]; a key ending in ``+`` appends to a list. Keys
    that contradict each other (``--x.a 3 --x.a.b 4``) are a ``ConfigError``."""
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    node = target
    for n, k in enumerate(keys[:-1]):
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(where, f"{'.'.join(keys[:n + 1])} was given the value "
                              f"{node!r}, so it has no key {keys[n + 1]!r}")
    last = keys[-1]
    if last.endswith("+"):
        items = node.setdefault(last[:-1], [])
        if not isinstance(items, list):
            raise ConfigError(where, f"{last[:-1]} was given the value {items!r}, not a "
                              "list to append to")
        items.append(value)
    elif isinstance(node.get(last), dict) and not isinstance(value, dict):
        raise ConfigError(where, f"{'.'.join(keys)} has keys set and cannot also be "
                          f"{value!r}")
    else:
        node[last] = value


def _take_value(tokens: list[str], i: int, inline: str | None,
                where: str) -> tuple[str, int]:
    """An option's value (``--opt=value`` or the next token) and the next index."""
    if inline is not None:
        return inline, i
    if i >= len(tokens) or (tokens[i].startswith("--") and len(tokens[i]) > 2):
        raise ConfigError(where, "needs a value")
    return tokens[i], i + 1


def _strip_launcher(tokens: list[str], where: str) -> list[str]:
    """Drop ``NAME=value`` environment prefixes and the ``vllm serve`` words (or
    ``python -m vllm.entrypoints.openai.api_server``)."""
    i = 0
    while i < len(tokens) and "=" in tokens[i] and not tokens[i].startswith("-"):
        i += 1
    rest = tokens[i:]
    if (len(rest) >= 3 and PurePath(rest[0]).name.startswith("python") and rest[1] == "-m"
            and rest[2].startswith("vllm.entrypoints")):
        return rest[3:]  # python -m vllm.entrypoints.openai.api_server --model ...
    if rest[:1] and PurePath(rest[0]).name == "vllm":
        if rest[1:2] != ["serve"]:
            raise ConfigError(where, f"expected `vllm serve ...`, got `vllm "
                              f"{' '.join(rest[1:2])}`")
        return rest[2:]
    return rest


def parse_serve_command(command: str, where: str = "command") -> ServeArgs:
    """Read one ``vllm serve`` command line. Raises ``ConfigError`` naming ``where`` and the
    option for anything pdsim cannot read: an unknown option, a missing or malformed
    value, two models, no model."""
    command = re.sub(r"\\\r?\n", " ", command)  # backslash continuations
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError as exc:
        raise ConfigError(where, f"cannot split the command line: {exc}") from None
    tokens = _strip_launcher(tokens, where)
    values: dict[str, Any] = {}
    written: dict[str, str] = {}  # field -> the option as first written, for conflicts
    json_parts: dict[str, dict[str, Any]] = {}
    ignored: list[str] = []
    positional: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            positional.append(tok)
            continue
        if tok.startswith("-O") and not tok.startswith("--"):  # -O3: compilation level
            ignored.append(tok)
            continue
        name, eq, inline = tok.lstrip("-").partition("=")
        name = name.replace("_", "-")
        name = _ALIASES.get(name, name)
        opt_where = f"{where}: --{name}"

        given = inline if eq else None
        base, dot, sub = name.partition(".")
        if dot and base in _OPTIONS and _OPTIONS[base][1] == "json":
            raw, i = _take_value(tokens, i, given, opt_where)
            _set_dotted(json_parts.setdefault(base, {}), sub.replace("-", "_").split("."),
                        raw, opt_where)
            continue
        negated = name.startswith("no-") and name[3:] in _OPTIONS
        key = name[3:] if negated else name
        if key in _OPTIONS:
            fld, kind = _OPTIONS[key]
            value: Any
            if kind == "flag":
                if eq:
                    if inline.lower() not in ("true", "false"):
                        raise ConfigError(opt_where, f"{inline!r}: expected true or false")
                    value = (inline.lower() == "true") != negated
                else:
                    value = not negated
                spelt = tok
            elif negated:
                raise ConfigError(f"{where}: --{name}", "unknown option (only flags take "
                                  "a --no- form)")
            else:
                raw, i = _take_value(tokens, i, given, opt_where)
                value = (_parse_size(raw, opt_where)
                         if key in ("max-model-len", "kv-cache-memory-bytes")
                         else _convert(raw, kind, opt_where))
                spelt = tok if eq else f"{tok} {raw}"
            if fld in values and values[fld] != value:
                # argparse would keep the last silently; a deployment that says two
                # things is more likely a pasting mistake than a wish
                raise ConfigError(f"{where}: --{key}",
                                  f"given twice with different values ({written[fld]!r}, "
                                  f"then {spelt!r}); give it once")
            values[fld] = value
            written.setdefault(fld, spelt)
            continue
        flag = name[3:] if name.startswith("no-") else name
        if flag in _IGNORED_FLAGS:
            ignored.append(tok)
            continue
        if name in _IGNORED_WITH_VALUE:
            raw, i = _take_value(tokens, i, given, opt_where)
            ignored.append(tok if eq else f"{tok} {raw}")
            continue
        raise ConfigError(f"{where}: --{name}",
                          "unknown vllm serve option (pdsim reads the options that change "
                          "performance and ignores known ones that do not; see "
                          "docs/import-vllm.md)")
    for base, parts in json_parts.items():
        fld = _OPTIONS[base][0]
        values[fld] = {**(values.get(fld) or {}), **parts}
    if positional:
        if len(positional) > 1 or "model" in values:
            models = [*positional, *([values["model"]] if "model" in values else [])]
            raise ConfigError(where, f"more than one model given: {', '.join(models)}")
        values["model"] = positional[0]
    if not values.get("model"):
        raise ConfigError(where, "no model: expected `vllm serve MODEL ...`")
    for fld in ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
                "max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len",
                "long_prefill_token_threshold", "num_gpu_blocks_override",
                "kv_cache_memory_bytes"):
        if fld in values and values[fld] < 1:
            raise ConfigError(f"{where}: --{fld.replace('_', '-')}",
                              f"{values[fld]} must be at least 1")
    gmu = values.get("gpu_memory_utilization")
    if gmu is not None and not 0 < gmu <= 1:
        raise ConfigError(f"{where}: --gpu-memory-utilization", f"{gmu} must be in (0, 1]")
    return ServeArgs(ignored=tuple(ignored), **values)
