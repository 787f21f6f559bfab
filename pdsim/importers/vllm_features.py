"""The vLLM features an import maps beyond plain numbers: quantization, speculative
decoding (``--speculative-config``) and the KV connector (``--kv-transfer-config``).

Each function reads the parsed commands of every role, checks them against each other and
against the model, and returns pdsim config values; assumptions go through ``assume``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pdsim.errors import ConfigError
from pdsim.importers.vllm_args import ServeArgs
from pdsim.perf.architecture import (
    AttentionMixer,
    DenseFFN,
    DrafterSpec,
    DType,
    MLAMixer,
    ModelArchitecture,
)

if TYPE_CHECKING:
    from pdsim.importers.hf_config import ImportedModel

Assume = Callable[[str], None]

# --quantization -> (weight dtype, expert weight dtype); None: what config.json says
_CLI_QUANT: dict[str, tuple[DType | None, DType | None] | None] = {
    "fp8": ("fp8", None), "ptpc_fp8": ("fp8", None), "fbgemm_fp8": ("fp8", None),
    "modelopt_fp4": ("nvfp4", None), "mxfp4": (None, "mxfp4"),
    "awq": ("int4", None), "awq_marlin": ("int4", None), "gptq": ("int4", None),
    "gptq_marlin": ("int4", None), "modelopt": None, "compressed-tensors": None,
}

# methods that read a pre-quantized checkpoint; fp8 alone also quantizes at load time
_NEEDS_QUANTIZED_CHECKPOINT = {"awq", "awq_marlin", "gptq", "gptq_marlin", "modelopt_fp4"}

# DeepSeek-V3 technical report (arXiv 2412.19437) Sec. 5.4.3: the second token predicted
# by its MTP module is accepted 85-90% of the time; the low end, as a starting point
MTP_ACCEPTANCE_DEEPSEEK_V3 = 0.85
# no published figure applies to an arbitrary drafter and model: a placeholder to replace
PLACEHOLDER_ACCEPTANCE = 0.5

_CONNECTORS = {"NixlConnector", "MooncakeConnector", "P2pNcclConnector",
               "LMCacheConnectorV1"}


def quantized_dtypes(args: ServeArgs, model: ImportedModel,
                     where: str) -> tuple[DType | None, DType | None]:
    """(weight, expert weight) dtypes ``--quantization`` asks for; None keeps the
    profile's (config.json's). A method that contradicts config.json is an error."""
    q = args.quantization
    if q is None:
        return None, None
    key = q.lower()
    if key not in _CLI_QUANT:
        raise ConfigError(f"{where}: --quantization", f"{q!r} is not a method pdsim reads "
                          f"({', '.join(_CLI_QUANT)})")
    dtypes = _CLI_QUANT[key]
    if dtypes is None:
        if model.quantization is None:
            raise ConfigError(f"{where}: --quantization", f"{q} reads the checkpoint's "
                              f"quantization_config, and config.json has none")
        return None, None
    if key in _NEEDS_QUANTIZED_CHECKPOINT and model.quantization is None:
        raise ConfigError(f"{where}: --quantization", f"{q} loads weights a quantizer already "
                          "wrote (vLLM does not quantize to it at load time), and config.json "
                          "has no quantization_config: this checkpoint is not quantized")
    arch = model.arch
    stored = (arch.weight_dtype, arch.expert_weight_dtype)
    if model.quantization is not None and (dtypes[0] or stored[0], dtypes[1] or stored[1]
                                           ) != stored:
        raise ConfigError(f"{where}: --quantization", f"{q}, but config.json says the "
                          f"checkpoint is {model.quantization}-quantized")
    return dtypes


def _method(spec: Mapping[str, Any], where: str) -> str:
    method = spec.get("method")
    if method is None:
        draft = str(spec.get("model", "")).lower()
        if not draft:
            raise ConfigError(f"{where}: --speculative-config", "needs a method (or a draft "
                              "model)")
        return "eagle3" if "eagle3" in draft else "eagle" if "eagle" in draft else (
            "draft_model")
    m = str(method).lower()
    if m.endswith("_mtp"):  # deepseek_mtp, qwen3_next_mtp, mimo_mtp: older names of mtp
        return "mtp"
    if m in ("mtp", "eagle", "eagle3", "ngram", "draft_model"):
        return m
    raise ConfigError(f"{where}: --speculative-config", f"method {method!r}: pdsim models "
                      f"mtp, eagle, eagle3, ngram and draft_model")


SPECULATIVE_KEYS_READ = ("method", "model", "num_speculative_tokens")
"""The ``--speculative-config`` keys pdsim reads; every other key is listed as ignored."""


def speculative_settings(parsed: Mapping[str, ServeArgs], arch: ModelArchitecture,
                         assume: Assume, ignored: list[str] | None = None
                         ) -> tuple[dict[str, Any], str | None] | None:
    """pdsim's ``speculative`` section from the roles' ``--speculative-config`` (None
    without one), and the EAGLE kind the model profile then needs (None if not EAGLE).
    Keys it does not read are appended to ``ignored``."""
    given = {r: a.speculative_config for r, a in parsed.items()
             if a.speculative_config is not None}
    if not given:
        return None
    settings: dict[str, tuple[str, int]] = {}
    modules = arch.drafter.num_modules if arch.drafter is not None else 0
    for role, spec in given.items():
        where = f"--{role}"
        if ignored is not None:
            ignored.extend(f"{where}: --speculative-config {key} (pdsim's drafter does not "
                           f"read it)" for key in spec if key not in SPECULATIVE_KEYS_READ)
        method = _method(spec, where)
        n = spec.get("num_speculative_tokens")
        if method == "mtp":
            if arch.drafter is None or arch.drafter.kind != "mtp":
                raise ConfigError(f"{where}: --speculative-config", "method mtp, but the "
                                  "model's config.json has no MTP layers "
                                  "(num_nextn_predict_layers / mtp_num_hidden_layers)")
            if n is None:
                n = modules
                assume(f"speculative.num_speculative_tokens: {n} (not given: vLLM runs "
                       f"the model's {n} MTP module(s))")
        if method == "draft_model":
            raise ConfigError(f"{where}: --speculative-config", "a separate draft model: "
                              "pdsim's roofline step time cannot cost one (use mtp, eagle, "
                              "eagle3 or ngram)")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"{where}: --speculative-config", "num_speculative_tokens "
                              "must be a whole number >= 1")
        if method == "mtp" and modules > 1 and n > modules:
            raise ConfigError(f"{where}: --speculative-config", f"num_speculative_tokens "
                              f"{n}, but the model ships {modules} MTP modules")
        settings[role] = (method, n)
    if len(set(settings.values())) > 1:
        roles = list(settings)
        raise ConfigError(f"--{roles[1]}: --speculative-config", f"{settings[roles[1]]} "
                          f"differs from --{roles[0]}'s {settings[roles[0]]}")
    method, n = next(iter(settings.values()))
    missing = [r for r in parsed if r not in given]
    if missing:
        assume(f"speculative: --{', --'.join(missing)} has no --speculative-config; "
               f"pdsim runs the one drafter configuration everywhere")
    if method == "mtp":
        rate, why = MTP_ACCEPTANCE_DEEPSEEK_V3, ("DeepSeek-V3's report, 85-90% for its "
                                                 "MTP module")
    else:
        rate, why = PLACEHOLDER_ACCEPTANCE, "a placeholder, not a measurement"
    assume(f"speculative.acceptance: constant {rate} ({why}); measure yours with "
           f"`pdsim import-metrics`")
    spec_cfg = {"method": method, "num_speculative_tokens": n,
                "acceptance": {"kind": "constant", "rate": rate}}
    return spec_cfg, (method if method in ("eagle", "eagle3") else None)


def eagle_head(arch: ModelArchitecture, kind: str) -> ModelArchitecture:
    """``arch`` with an assumed EAGLE head: one layer with the target's attention (reading
    2 x hidden for EAGLE-3) and a dense MLP of the target's width; EAGLE-3 fuses three
    hidden states (projection factor 3)."""
    mixer = next((b.mixer for b in arch.blocks
                  if isinstance(b.mixer, AttentionMixer | MLAMixer)), None)
    if mixer is None:
        raise ConfigError("--speculative-config", f"{kind} needs an attention layer to "
                          f"shape the head on, and this model has none")
    ffn = next((b.ffn for b in arch.blocks if isinstance(b.ffn, DenseFFN)), None)
    if ffn is None:  # an MoE model: a dense MLP as wide as one expert's total
        moe = next(b.ffn for b in arch.blocks if b.ffn.kind == "moe")
        width = getattr(moe, "expert_intermediate_size", arch.hidden_size * 4)
        ffn = DenseFFN(intermediate_size=width)
    if kind == "eagle3" and isinstance(mixer, AttentionMixer):
        mixer = mixer.model_copy(update={"input_size": 2 * arch.hidden_size,
                                         "sliding_window_tokens": None})
    drafter = DrafterSpec(kind=kind, num_modules=1, mixer=mixer, ffn=ffn,  # type: ignore[arg-type]
                          input_projection_factor=3 if kind == "eagle3" else 2)
    estimated = {**arch.estimated, "drafter": f"an assumed {kind} head shaped like one "
                 f"target layer"}
    return arch.model_copy(update={"drafter": drafter, "estimated": estimated})


def connector_settings(parsed: Mapping[str, ServeArgs], roles: Mapping[str, str],
                       assume: Assume, ignored: list[str]) -> dict[str, Any]:
    """pdsim's ``connector`` section from the pools' ``--kv-transfer-config``; ``roles``
    maps each pool's key to its role."""
    if all(r == "colocated" for r in roles.values()):
        for key, args in parsed.items():
            if args.kv_transfer_config is not None:
                ignored.append(f"--{key}: --kv-transfer-config (no P->D transfer when "
                               f"colocated)")
        return {}
    allowed = {"prefill": ("kv_producer", "kv_both"), "decode": ("kv_consumer", "kv_both")}
    names: dict[str, str] = {}
    for key, args in parsed.items():
        role = roles[key]
        where = f"--{key}: --kv-transfer-config"
        kv = args.kv_transfer_config
        if kv is None:
            raise ConfigError(where, "missing: a disaggregated instance needs a KV connector "
                              "(e.g. '{\"kv_connector\":\"NixlConnector\",\"kv_role\":"
                              "\"kv_both\"}')")
        name = kv.get("kv_connector")
        if not isinstance(name, str) or name not in _CONNECTORS:
            raise ConfigError(where, f"kv_connector {name!r}: pdsim models "
                              f"{', '.join(sorted(_CONNECTORS))}")
        role_kv = kv.get("kv_role")
        if role_kv not in allowed[role]:
            raise ConfigError(where, f"kv_role {role_kv!r} on a {role} instance; expected "
                              f"{' or '.join(allowed[role])}")
        first = next(iter(names.items()), None)
        if first is not None and first[1] != name:
            raise ConfigError(where, f"kv_connector {name} differs from --{first[0]}'s "
                              f"{first[1]}")
        names[key] = str(name)
    connector = next(iter(names.values()))
    if connector != "NixlConnector":
        assume(f"connector: {connector} modelled as pdsim's NIXL-like connector")
    decode = {k: parsed[k].kv_transfer_config or {} for k in parsed if roles[k] == "decode"}
    policies = {k: kv.get("kv_load_failure_policy") for k, kv in decode.items()}
    given = {k: v for k, v in policies.items() if v is not None}
    if len(set(given.values())) > 1:
        keys = list(given)
        raise ConfigError(f"--{keys[1]}: --kv-transfer-config", f"kv_load_failure_policy "
                          f"{given[keys[1]]!r} differs from --{keys[0]}'s {given[keys[0]]!r}")
    policy = next(iter(given.values()), None)
    if policy is None:
        policy = "fail"
        assume("connector.kv_load_failure_policy: fail (vLLM's default, NixlConnector "
               "usage guide)")
    if policy not in ("fail", "recompute"):
        raise ConfigError(f"--{next(iter(given))}: --kv-transfer-config",
                          f"kv_load_failure_policy {policy!r}: expected fail or recompute")
    out: dict[str, Any] = {"kv_load_failure_policy": policy}
    prefill = [parsed[k].kv_transfer_config or {} for k in parsed if roles[k] == "prefill"]
    extra = prefill[0].get("kv_connector_extra_config") if prefill else None
    lease = extra.get("kv_lease_duration") if isinstance(extra, dict) else None
    if lease is not None:
        out["kv_lease_s"] = float(lease)
    assume("connector: bandwidth, setup latency and handshake are pdsim's defaults (a "
           "command line does not say what the network is)")
    return out
