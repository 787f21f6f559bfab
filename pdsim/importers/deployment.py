"""A deployment's ``vllm serve`` command lines and its model's ``config.json``, as a pdsim
config plus a model profile.

Each command runs ``count`` times in one role (prefill, decode or colocated). vLLM options
map onto pdsim's fields (``docs/import-vllm.md`` has the table); what neither the commands
nor ``config.json`` say is assumed and listed (``ImportResult.assumed``), options that do
not change what pdsim simulates are listed as ignored, and contradictions (a decode command
with ``kv_role: kv_producer``, P and D serving different models, a speculative method the
model cannot run) are ``ConfigError``s naming the command and the option. The config is
validated before it is returned: an import never writes a config that does not load.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from pdsim.errors import ConfigError
from pdsim.importers.hf_config import TORCH_DTYPES, ImportedModel, architecture_from_hf
from pdsim.importers.vllm_args import ServeArgs, parse_serve_command
from pdsim.importers.vllm_features import (
    connector_settings,
    eagle_head,
    quantized_dtypes,
    speculative_settings,
)
from pdsim.perf.architecture import DType, ModelArchitecture, MoEFFN

ROLES = ("prefill", "decode", "colocated")

# vLLM's `vllm serve` batch defaults (EngineArgs.get_batch_defaults): GPUs of at least
# 70 GiB other than A100 get 1024 sequences and 8192 tokens, the others 256 and 2048
_BIG_GPU_GIB = 70
_KV_DTYPES: dict[str, DType] = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
                                "fp8_inc": "fp8", "bfloat16": "bf16", "float16": "fp16",
                                "half": "fp16"}


@dataclass(frozen=True)
class RoleCommand:
    """``count`` instances of one role, each started by ``command`` (a ``vllm serve``
    line); ``hardware`` names the GPU (a shipped hardware profile)."""

    role: str
    command: str
    count: int = 1
    hardware: str = "h200"
    hardware_assumed: bool = True
    name: str | None = None
    """Pool name (several pools of one role); None: unnamed."""


@dataclass(frozen=True)
class ImportResult:
    """The imported pdsim config (naming ``profile_file`` as its model profile), the
    profile, what was assumed and what was ignored."""

    config: dict[str, Any]
    profile: ModelArchitecture
    profile_file: str
    assumed: tuple[str, ...]
    ignored: tuple[str, ...]
    commands: tuple[RoleCommand, ...]


def profile_name(model: str) -> str:
    """A file-name-safe profile name from a model argument (``org/Name-7B`` -> ``name-7b``)."""
    base = PurePath(model.rstrip("/")).name or model
    return re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-.") or "imported-model"


def _check_roles(commands: Sequence[RoleCommand]) -> None:
    roles = [c.role for c in commands]
    for c in commands:
        if c.role not in ROLES:
            raise ConfigError(f"--{c.role}", f"unknown role; expected {', '.join(ROLES)}")
        if c.count < 1:
            raise ConfigError(f"--{c.role}-count", f"{c.count} must be at least 1")
    if "colocated" in roles and set(roles) != {"colocated"}:
        raise ConfigError("--colocated", "a deployment is colocated or disaggregated (--prefill "
                          "and --decode), not both")
    if not roles:
        raise ConfigError("commands", "no command: give --prefill and --decode, or "
                          "--colocated")
    if "colocated" not in roles and set(roles) != {"prefill", "decode"}:
        missing = "decode" if "prefill" in roles else "prefill"
        raise ConfigError(f"--{missing}", "a disaggregated deployment needs both --prefill "
                          "and --decode commands")


def _pool_keys(commands: Sequence[RoleCommand]) -> dict[str, RoleCommand]:
    """Each command under its pool's key: the role, or ``role[i]`` (i from 0) when the
    role has several pools."""
    out: dict[str, RoleCommand] = {}
    seen: dict[str, int] = {}
    for c in commands:
        i = seen.get(c.role, 0)
        seen[c.role] = i + 1
        several = sum(x.role == c.role for x in commands) > 1
        out[f"{c.role}[{i}]" if several else c.role] = c
    return out


def _same_model(parsed: dict[str, ServeArgs]) -> None:
    first_role, first = next(iter(parsed.items()))
    for role, args in parsed.items():
        if profile_name(args.model) != profile_name(first.model):
            raise ConfigError(f"--{role}: model", f"serves {args.model!r} but --{first_role} "
                              f"serves {first.model!r}; P and D must serve the same model")


def _agreed(parsed: dict[str, ServeArgs], attr: str, option: str) -> Any:
    """The one value all roles give for ``attr`` (None if none gives it); roles giving
    different values are an error."""
    given = {role: getattr(a, attr) for role, a in parsed.items()
             if getattr(a, attr) is not None}
    if len(set(map(repr, given.values()))) > 1:
        roles = list(given)
        raise ConfigError(f"--{roles[1]}: --{option}", f"{given[roles[1]]!r} differs from "
                          f"--{roles[0]}'s {given[roles[0]]!r}; pdsim needs one value")
    return next(iter(given.values()), None)


class _Importer:
    """Builds the config for one deployment, recording assumptions as it goes."""

    def __init__(self, commands: Mapping[str, RoleCommand], model: ImportedModel,
                 profile_file: str) -> None:
        self.commands = dict(commands)
        self.model = model
        self.arch = model.arch
        self.profile_file = profile_file
        self.assumed: list[str] = [f"model profile {k}: {v}" for k, v in model.assumed]
        self.ignored: list[str] = []
        self.has_moe = any(isinstance(b.ffn, MoEFFN) for b in self.arch.blocks)
        self.is_mla = any(b.mixer.kind == "mla" for b in self.arch.blocks)
        self.hybrid = any(b.mixer.kind in ("mamba2", "gated_deltanet")
                          for b in self.arch.blocks)

    def assume(self, what: str) -> None:
        if what not in self.assumed:
            self.assumed.append(what)

    def step_time(self, role: str, args: ServeArgs) -> dict[str, Any]:
        where = f"--{role}"
        c = self.commands[role]
        if c.hardware_assumed:
            self.assume(f"hardware: {c.hardware} (vllm serve does not say which GPU; "
                        f"give --hardware)")
        if args.pipeline_parallel_size > 1:
            raise ConfigError(f"{where}: --pipeline-parallel-size", "pdsim does not model "
                              "pipeline parallelism; use tensor or expert parallelism")
        heads = self.arch.blocks[0].mixer
        n_heads = getattr(heads, "num_heads", None) or getattr(heads, "num_value_heads", None)
        if n_heads and n_heads % args.tensor_parallel_size:
            raise ConfigError(f"{where}: --tensor-parallel-size", (
                f"{args.tensor_parallel_size} does not divide the model's {n_heads} heads "
                f"(vLLM splits them evenly over the GPUs)"))
        # vLLM's serving loop and kernels: its per-step and per-request CPU costs
        # (CPU_COST_RULES) and its MoE layers' per-pair cost (kernel_rule)
        st: dict[str, Any] = {"kind": "roofline", "hardware": c.hardware,
                              "tensor_parallel_size": args.tensor_parallel_size,
                              "cpu_cost_rule": "vllm", "kernel_rule": "vllm"}
        if args.enable_expert_parallel:
            if self.has_moe:
                st["expert_parallel_size"] = args.tensor_parallel_size * args.data_parallel_size
            else:
                self.ignored.append(f"{where}: --enable-expert-parallel (the model has no "
                                    f"MoE layers)")
        weight, expert = quantized_dtypes(args, self.model, where)
        if args.dtype not in (None, "auto"):
            dtype = TORCH_DTYPES.get(args.dtype)
            if dtype is None:
                raise ConfigError(f"{where}: --dtype", f"{args.dtype!r}: expected auto, "
                                  f"{', '.join(TORCH_DTYPES)}")
            st["activation_dtype"] = "bf16" if dtype == "fp32" else dtype
            if self.model.quantization is None and weight is None:
                weight = dtype
        if weight is not None and weight != self.arch.weight_dtype:
            st["weight_dtype"] = weight
        if expert is not None and expert != self.arch.expert_weight_dtype:
            st["expert_weight_dtype"] = expert
        if args.kv_cache_dtype not in (None, "auto"):
            kv = _KV_DTYPES.get(args.kv_cache_dtype)
            if kv is None:
                raise ConfigError(f"{where}: --kv-cache-dtype", f"{args.kv_cache_dtype!r}: "
                                  f"expected auto, {', '.join(_KV_DTYPES)}")
            if kv != self.arch.kv_cache_dtype:
                st["kv_cache_dtype"] = kv
        if args.gpu_memory_utilization is not None:
            st["gpu_memory_utilization"] = args.gpu_memory_utilization
        # vLLM schedules asynchronously by default from v0.14 (the loop's CPU costs overlap
        # the GPU's step); --no-async-scheduling, or an older vLLM, runs the synchronous loop
        st["async_scheduling"] = (True if args.async_scheduling is None
                                  else args.async_scheduling)
        if args.async_scheduling is None:
            self.assume(f"{role} step_time.async_scheduling: true (vLLM's default from "
                        f"v0.14; pass --no-async-scheduling for an earlier vLLM)")
        return st

    def scheduler(self, role: str, args: ServeArgs) -> dict[str, Any]:
        from pdsim.perf.profiles import load_hardware

        hw = load_hardware(self.commands[role].hardware, f"--{role}: hardware")
        big = hw.hbm_capacity_gib >= _BIG_GPU_GIB and "a100" not in hw.name.lower()
        seqs, tokens = (1024, 8192) if big else (256, 2048)
        sched: dict[str, Any] = {}
        for attr, default, why in (
                ("max_num_seqs", seqs, f"vLLM's `vllm serve` default on {hw.name}"),
                ("max_num_batched_tokens", tokens, f"vLLM's `vllm serve` default on "
                                                   f"{hw.name}"),
                ("block_size", 64 if self.is_mla else 16,
                 "vLLM's default on CUDA" + (" for MLA (FlashMLA's block)" if self.is_mla
                                             else "")),
                ("enable_prefix_caching", not self.hybrid,
                 "vLLM's default" + (" for hybrid models" if self.hybrid else "")),
                ("enable_chunked_prefill", True, "vLLM's default")):
            value = getattr(args, attr)
            if value is None:
                value = default
                shown = str(default).lower() if isinstance(default, bool) else default
                self.assume(f"{role} scheduler.{attr}: {shown} ({why})")
            sched[attr] = value
        if args.long_prefill_token_threshold is not None:
            sched["long_prefill_token_threshold"] = args.long_prefill_token_threshold
        if args.num_gpu_blocks_override is not None:
            sched["num_blocks"] = args.num_gpu_blocks_override
        return sched

    def group(self, role: str, args: ServeArgs) -> dict[str, Any]:
        c = self.commands[role]
        g: dict[str, Any] = {"count": c.count * args.data_parallel_size,
                             "scheduler": self.scheduler(role, args)}
        dp = args.data_parallel_size
        if dp > 1 and args.enable_expert_parallel and self.has_moe:
            # the DP ranks share the experts: vLLM runs them as one engine stepping together
            g["attention_dp_size"] = dp
            self.assume(f"{role}: {c.count} command(s) x --data-parallel-size {dp} = "
                        f"{g['count']} instances, each command one attention-DP engine of "
                        f"{dp} ranks (attention_dp_size: {dp}; vLLM's rank balance and "
                        f"padding)")
        elif dp > 1:
            self.assume(f"{role}: {c.count} command(s) x --data-parallel-size "
                        f"{dp} = {g['count']} instances (one per "
                        f"data-parallel rank)")
        if args.kv_cache_memory_bytes is not None:
            # per GPU in vLLM; MLA's latent is replicated over TP, GQA heads are split
            gpus = 1 if self.is_mla else args.tensor_parallel_size
            g["kv_cache_gib"] = args.kv_cache_memory_bytes * gpus / 2**30
        return g

    def build(self, parsed: dict[str, ServeArgs]) -> dict[str, Any]:
        """The config; ``parsed`` maps each pool's key (its role, or ``role[i]`` when a
        role has several pools) to its command."""
        _same_model(parsed)
        for key, args in parsed.items():
            self.ignored.extend(f"--{key}: {opt}" for opt in args.ignored)
        first = next(iter(parsed.values()))
        slug = profile_name(first.model)
        roles = {k: self.commands[k].role for k in parsed}
        counts = {r: sum(self.commands[k].count * a.data_parallel_size
                         for k, a in parsed.items() if roles[k] == r) for r in ROLES}
        suffix = (f"{counts['colocated']}c" if counts["colocated"]
                  else f"{counts['prefill']}p{counts['decode']}d")
        model: dict[str, Any] = {"profile": self.profile_file}
        max_len = _agreed(parsed, "max_model_len", "max-model-len")
        if max_len is not None:
            if max_len > self.arch.max_model_len:  # vLLM refuses it too, not cuts it
                who = next(k for k, a in parsed.items() if a.max_model_len is not None)
                raise ConfigError(f"--{who}: --max-model-len",
                                  f"{max_len} is longer than the model's context, "
                                  f"{self.arch.max_model_len} tokens (config.json's "
                                  f"max_position_embeddings)")
            model["max_model_len"] = max_len
        cfg: dict[str, Any] = {
            "name": f"{first.name.rstrip('/').split('/')[-1]}-{suffix}",
            "description": f"imported by pdsim import-vllm ({slug}, {suffix})",
            "model": model}
        spec = speculative_settings(parsed, self.arch, self.assume, self.ignored)
        if spec is not None:
            spec_cfg, eagle_kind = spec
            cfg["speculative"] = spec_cfg
            if eagle_kind is not None and self.arch.drafter is None:
                self.arch = eagle_head(self.arch, eagle_kind)
                self.assume(f"model profile drafter: one {eagle_kind} head shaped like a "
                            f"target layer (the draft checkpoint's config is not read)")
        steps = {key: self.step_time(key, a) for key, a in parsed.items()}
        main = next(k for k in parsed if roles[k] in ("colocated", "decode"))
        cfg["step_time"] = steps[main]
        cluster: dict[str, Any] = {"mode": "colocated" if roles[main] == "colocated"
                                   else "disaggregated"}
        for role in ROLES:
            keys = [k for k in parsed if roles[k] == role]
            groups = []
            for key in keys:
                g = self.group(key, parsed[key])
                name = self.commands[key].name
                if name is not None:
                    g = {"name": name, **g}
                if key != main and steps[key] != steps[main]:
                    # per-group step time (InstanceGroupConfig.step_time, the groups branch)
                    g["step_time"] = {**steps[key], "model": self.profile_file}
                groups.append(g)
            if groups:
                # several pools of one role: a list of groups (the groups branch)
                cluster[role] = groups[0] if len(groups) == 1 else groups
        cfg["cluster"] = cluster
        connector = connector_settings(parsed, roles, self.assume, self.ignored)
        if connector:
            cfg["connector"] = connector
        return cfg


def _validate(cfg: dict[str, Any], arch: ModelArchitecture, profile_file: str) -> None:
    """Load ``cfg`` as the written files will load: the profile written to a scratch
    folder under ``profile_file``'s name, the config read from there."""
    import tempfile
    from pathlib import Path

    from pdsim.importers.profile_text import profile_yaml
    from pdsim.loader import config_from_dict, resolve_profile_files
    from pdsim.perf.build import build_step_time_model

    with tempfile.TemporaryDirectory(prefix="pdsim-import-") as tmp:
        (Path(tmp) / PurePath(profile_file).name).write_text(profile_yaml(arch, ()),
                                                             encoding="utf-8")
        data = resolve_profile_files(
            {**cfg, "model": {**cfg["model"], "profile": PurePath(profile_file).name}},
            Path(tmp))
        try:
            sim_cfg = config_from_dict(data)
            for pool in sim_cfg.cluster.pools():  # each pool's own step time
                build_step_time_model(sim_cfg, pool.role, pool.group)
        except ConfigError as exc:
            raise ConfigError("", issues=[("", "the imported config does not load:"),
                                          *exc.issues]) from None


def import_deployment(commands: Sequence[RoleCommand], hf_config: Mapping[str, Any],
                      hf_source: str = "config.json",
                      profile_file: str | None = None, check: bool = True) -> ImportResult:
    """Import ``commands`` (one per role) serving the model ``hf_config`` describes.

    ``profile_file`` is the file name the config gives for the model profile (default
    ``<model>.model.yaml``, next to the config). Raises ``ConfigError`` naming the command
    and option for anything that cannot be imported. ``check``: load the config before
    returning it (off only to inspect one this pdsim cannot load)."""
    _check_roles(commands)
    keyed = _pool_keys(commands)
    parsed = {k: parse_serve_command(c.command, f"--{k}") for k, c in keyed.items()}
    first = next(iter(parsed.values()))
    name = profile_name(first.model)
    model = architecture_from_hf(hf_config, name, hf_source)
    file = profile_file or f"{name}.model.yaml"
    imp = _Importer(keyed, model, file)
    cfg = imp.build(parsed)
    if check:
        _validate(cfg, imp.arch, file)
    return ImportResult(config=cfg, profile=imp.arch, profile_file=file,
                        assumed=tuple(imp.assumed), ignored=tuple(imp.ignored),
                        commands=tuple(commands))
