"""A pdsim config as ``vllm serve`` command lines: the inverse of ``pdsim import-vllm``.

Each pool becomes one command line per data-parallel group (``count / dp`` commands of
``--data-parallel-size dp``, since ``import-vllm`` counts each rank as an instance and the
ranks of one command sharing experts as one attention-DP engine), and
every setting the import would otherwise assume is written out: the parallelism, all
scheduler limits (``--max-num-seqs``, ``--max-num-batched-tokens``, ``--block-size``,
prefix caching and chunked prefill on or off), the speculative config and, for P and D,
the NIXL ``--kv-transfer-config`` with its ``kv_role``. So ``import_deployment`` on the
lines gives back the same *deployment* (``deployment_fields``).

What a command line cannot carry stays with the pdsim config: the workload, the SLOs, the
acceptance rates, the network, the kernel constants and the model profile. ``with_deployment``
puts an imported deployment into a config, which is how the round trip is checked: the
config with the imported deployment simulates to the same figures.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from pdsim.config import Role, SchedulerConfig, SimConfig
from pdsim.errors import ConfigError
from pdsim.perf.config import RooflineStepTimeConfig

_KV_DTYPE_FLAG = {"fp8": "fp8", "bf16": "bfloat16", "fp16": "float16"}
_ROLE_KV = {Role.PREFILL: "kv_producer", Role.DECODE: "kv_consumer"}
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def _roofline(cfg: SimConfig, group: Any, path: str) -> RooflineStepTimeConfig:
    st = cfg.step_time_of(group)
    if not isinstance(st, RooflineStepTimeConfig):
        raise ConfigError(f"{path}.step_time", "serve lines need a roofline step time "
                          "(the parallelism and hardware of the instances)")
    if not isinstance(st.hardware, str):
        raise ConfigError(f"{path}.step_time.hardware", "serve lines name a shipped hardware "
                          "profile; an inline spec has no name import-vllm knows")
    return st


def _flag(name: str, on: bool) -> str:
    return f"--{name}" if on else f"--no-{name}"


def pool_command(cfg: SimConfig, role: Role, group: Any, path: str,
                 served_model: str) -> tuple[int, str, list[str]]:
    """``(commands, line, not_exported)`` for one pool: how many copies of ``line`` to
    start, and the settings no ``vllm serve`` option carries."""
    st = _roofline(cfg, group, path)
    tp, ep = st.tensor_parallel_size, st.expert_parallel_size
    dp = ep // tp if ep > tp else 1
    if group.count % dp:
        raise ConfigError(f"{path}.count", f"{group.count} instances do not form whole "
                          f"data-parallel groups of {dp} (expert_parallel_size {ep} / "
                          f"tensor_parallel_size {tp})")
    s: SchedulerConfig = group.scheduler
    args = ["vllm", "serve", served_model, "--tensor-parallel-size", str(tp)]
    if dp > 1:
        args += ["--data-parallel-size", str(dp)]
    hybrid_moe = 1 < ep < tp  # experts over EP groups sliced within each: no vLLM option
    if ep > 1 and not hybrid_moe:
        args.append("--enable-expert-parallel")
    args += ["--max-num-seqs", str(s.max_num_seqs),
             "--max-num-batched-tokens", str(s.max_num_batched_tokens),
             "--block-size", str(s.block_size),
             _flag("enable-prefix-caching", s.enable_prefix_caching),
             _flag("enable-chunked-prefill", s.enable_chunked_prefill)]
    if s.long_prefill_token_threshold is not None:
        args += ["--long-prefill-token-threshold", str(s.long_prefill_token_threshold)]
    if s.num_blocks is not None:
        args += ["--num-gpu-blocks-override", str(s.num_blocks)]
    args += ["--max-model-len", str(cfg.model.max_model_len)]
    if st.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION:
        args += ["--gpu-memory-utilization", repr(st.gpu_memory_utilization)]
    if st.kv_cache_dtype is not None:
        args += ["--kv-cache-dtype", _KV_DTYPE_FLAG[st.kv_cache_dtype]]
    spec = cfg.speculative
    if spec.enabled:
        args += ["--speculative-config", json.dumps(
            {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens},
            separators=(",", ":"))]
    if role in _ROLE_KV:
        args += ["--kv-transfer-config", json.dumps(
            {"kv_connector": "NixlConnector", "kv_role": _ROLE_KV[role],
             "kv_load_failure_policy": cfg.connector.kv_load_failure_policy},
            separators=(",", ":"))]
    missing = [f"{path}.step_time.{f}" for f in ("weight_dtype", "expert_weight_dtype",
                                                "activation_dtype")
               if getattr(st, f) is not None]
    if group.kv_cache_gib is not None:
        missing.append(f"{path}.kv_cache_gib")
    if hybrid_moe:
        missing.append(f"{path}.step_time.expert_parallel_size")
    return group.count // dp, shlex.join(args), missing


def serve_commands(cfg: SimConfig, served_model: str | None = None
                   ) -> list[dict[str, Any]]:
    """One entry per pool: ``role``, ``count`` (command lines to start), ``hardware``,
    ``command`` (one line), ``instances`` (pdsim instances), ``gpus``, ``not_exported``."""
    model = served_model or cfg.model.profile or cfg.model.name
    out = []
    for pool in cfg.cluster.pools():
        n, line, missing = pool_command(cfg, pool.role, pool.group, pool.path, str(model))
        st = _roofline(cfg, pool.group, pool.path)
        entry: dict[str, Any] = {"role": pool.role.value, "count": n, "hardware": st.hardware,
                                 "command": line, "instances": pool.group.count,
                                 "gpus": pool.group.count * st.tensor_parallel_size,
                                 "not_exported": missing}
        if pool.name:
            entry["name"] = pool.name
        out.append(entry)
    return out


def deployment_document(cfg: SimConfig, hf_config: str, served_model: str | None = None
                        ) -> dict[str, Any]:
    """A ``pdsim import-vllm --deployment`` file for ``cfg``: ``hf_config`` (a path as the
    file should name it) and per role its command(s)."""
    commands = serve_commands(cfg, served_model)
    doc: dict[str, Any] = {"hf_config": hf_config, "hardware": commands[0]["hardware"]}
    for role in ("prefill", "decode", "colocated"):
        items = [{k: c[k] for k in ("name", "count", "hardware", "command") if k in c}
                 for c in commands if c["role"] == role]
        if items:
            doc[role] = items[0] if len(items) == 1 else items
    return doc


def shell_script(cfg: SimConfig, served_model: str | None = None) -> str:
    """The serve lines as a commented shell script, per role."""
    lines = [f"# vllm serve lines of {cfg.name} (written by pdsim plan; import them back "
             f"with pdsim import-vllm)"]
    for c in serve_commands(cfg, served_model):
        lines.append(f"# {c['role']}: {c['count']} command(s) on {c['hardware']}, "
                     f"{c['instances']} pdsim instance(s), {c['gpus']} GPU(s)")
        if c["not_exported"]:
            lines.append(f"#   not carried by vllm serve options: "
                         f"{', '.join(c['not_exported'])}")
        lines.append(c["command"])
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ round trip


def _pools(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    cluster = data["cluster"]
    roles = ("colocated",) if cluster.get("mode") == "colocated" else ("prefill", "decode")
    out = []
    for role in roles:
        value = cluster.get(role)
        groups = value if isinstance(value, list) else [value]
        for i, g in enumerate(groups):
            out.append((role if len(groups) == 1 else f"{role}.{i}", g))
    return out


def deployment_fields(data: dict[str, Any]) -> dict[str, Any]:
    """What ``vllm serve`` lines decide, from a YAML-shaped config (a ``model_dump`` or an
    imported config): the mode, per pool its instances, scheduler and parallelism, the
    drafter method and depth, D's KV load failure policy, the context limit."""
    root = data.get("step_time") or {}
    out: dict[str, Any] = {"mode": data["cluster"].get("mode", "disaggregated")}
    for path, g in _pools(data):
        st = g.get("step_time") or root
        sched = SchedulerConfig.model_validate(g.get("scheduler") or {}).model_dump(
            mode="json")
        out[path] = {"count": g.get("count", 1), "scheduler": sched,
                     "attention_dp_size": g.get("attention_dp_size", 1),
                     "kv_cache_gib": g.get("kv_cache_gib"),
                     "hardware": st.get("hardware"),
                     "tensor_parallel_size": st.get("tensor_parallel_size", 1),
                     "expert_parallel_size": st.get("expert_parallel_size", 1),
                     "kv_cache_dtype": st.get("kv_cache_dtype"),
                     "gpu_memory_utilization": st.get("gpu_memory_utilization",
                                                      DEFAULT_GPU_MEMORY_UTILIZATION)}
    spec = data.get("speculative") or {}
    out["speculative"] = {"method": spec.get("method", "none"),
                          "num_speculative_tokens": spec.get("num_speculative_tokens", 0)}
    if out["mode"] != "colocated":
        out["kv_load_failure_policy"] = (data.get("connector") or {}).get(
            "kv_load_failure_policy", "recompute")
    out["max_model_len"] = (data.get("model") or {}).get("max_model_len")
    return out


def with_deployment(cfg: SimConfig, imported: dict[str, Any]) -> SimConfig:
    """``cfg`` with the deployment of ``imported`` (an imported config's mapping): its
    pools, parallelism, schedulers, drafter depth, failure policy and context limit;
    everything a command line does not carry stays ``cfg``'s."""
    from pdsim.loader import config_from_dict

    fields = deployment_fields(imported)
    data = cfg.model_dump(mode="json")
    if fields["mode"] != data["cluster"]["mode"]:
        raise ConfigError("cluster.mode", f"the imported deployment is {fields['mode']}, "
                          f"the config {data['cluster']['mode']}")
    root_source: dict[str, Any] | None = None
    for path, g in _pools(data):
        if path not in fields:
            raise ConfigError(f"cluster.{path}", "the imported deployment has no such pool")
        f = fields[path]
        g["count"] = f["count"]
        g["attention_dp_size"] = f["attention_dp_size"]
        g["scheduler"] = f["scheduler"]
        g["kv_cache_gib"] = f["kv_cache_gib"]
        st = g.get("step_time")
        target = st if st is not None else data["step_time"]
        if st is None:
            root_source = f
        for key in ("tensor_parallel_size", "expert_parallel_size", "kv_cache_dtype",
                    "gpu_memory_utilization"):
            target[key] = f[key]
    if root_source is None:
        raise ConfigError("step_time", "no pool runs on the root step time")
    data["speculative"]["method"] = fields["speculative"]["method"]
    data["speculative"]["num_speculative_tokens"] = fields["speculative"][
        "num_speculative_tokens"]
    if "kv_load_failure_policy" in fields:
        data["connector"]["kv_load_failure_policy"] = fields["kv_load_failure_policy"]
    if fields["max_model_len"] is not None:
        data["model"]["max_model_len"] = fields["max_model_len"]
    return config_from_dict(data)


def import_back(cfg: SimConfig, hf_config: dict[str, Any], served_model: str | None = None
                ) -> dict[str, Any]:
    """``import_deployment`` on ``cfg``'s serve lines: the imported config's mapping."""
    from pdsim.importers.deployment import RoleCommand, import_deployment

    commands = [RoleCommand(role=c["role"], command=c["command"], count=c["count"],
                            hardware=str(c["hardware"]), hardware_assumed=False,
                            name=c.get("name"))
                for c in serve_commands(cfg, served_model)]
    return import_deployment(commands, hf_config).config


def round_trip_differences(cfg: SimConfig, imported: dict[str, Any]) -> list[str]:
    """Deployment fields that differ between ``cfg`` and ``imported`` (empty: none)."""
    mine = deployment_fields(cfg.model_dump(mode="json"))
    theirs = deployment_fields(imported)
    if theirs.get("max_model_len") is None:  # not given: the model's own, as in cfg
        theirs["max_model_len"] = mine["max_model_len"]
    return [f"{k}: {mine.get(k)!r} != {theirs.get(k)!r}"
            for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]


__all__ = ["check_round_trip", "deployment_document", "deployment_fields", "import_back",
           "pool_command",
           "round_trip_differences", "serve_commands", "shell_script", "with_deployment"]


def check_round_trip(cfg: SimConfig, figures: dict[str, Any], hf_config: dict[str, Any],
                     served_model: str | None = None) -> dict[str, Any]:
    """Import ``cfg``'s serve lines back, put the imported deployment into ``cfg``,
    simulate it afresh and compare with ``figures`` (the summary fields the plan judged
    the point by). ``ok``: no deployment field differs and the figures are equal."""
    from pdsim.plan.planner import KEEP
    from pdsim.results import summary_only
    from pdsim.simulation import simulate
    from pdsim.sweep import point_id

    imported = import_back(cfg, hf_config, served_model)
    diffs = round_trip_differences(cfg, imported)
    back = with_deployment(cfg, imported)
    summary = simulate(summary_only(back)).summary.as_dict()
    got = {k: summary.get(k) for k in KEEP}
    same = got == {k: figures.get(k) for k in KEEP}
    return {"ok": not diffs and same, "differences": diffs, "same_figures": same,
            "same_config": point_id(back) == point_id(cfg)}
