"""Shipped hardware and model profiles (package data) and what the root config needs.

Profiles live in ``pdsim/data/hardware/<name>.yaml`` and ``pdsim/data/models/<name>.yaml``.
A config names one (``hardware: h100-sxm``), gives a model profile file (a path ending in
``.yaml``, e.g. one ``pdsim import-vllm`` wrote) or gives the spec inline as a mapping; all
load through ``load_hardware`` / ``load_model_architecture``. ``model_config_fields``
turns an architecture into the fields of pdsim's ``ModelConfig`` (KV layout and drafter),
so ``model: {profile: deepseek-v3}`` needs nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from pdsim.errors import ConfigError, read_text_file
from pdsim.perf.architecture import (
    AttentionMixer,
    DType,
    GatedDeltaNetMixer,
    Mamba2Mixer,
    MLAMixer,
    ModelArchitecture,
)
from pdsim.perf.hardware import HardwareSpec
from pdsim.perf.sizes import (
    drafter_kv_bytes_per_token,
    kv_bytes_per_token_per_layer,
    state_bytes_per_layer,
)

_M = TypeVar("_M", bound=BaseModel)

_PACKAGE = "pdsim"


def _names(kind: str) -> list[str]:
    folder = resources.files(_PACKAGE).joinpath("data").joinpath(kind)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir()
                  if p.name.endswith(".yaml"))


def hardware_names() -> list[str]:
    """Names of the shipped hardware profiles."""
    return _names("hardware")


def model_names() -> list[str]:
    """Names of the shipped model profiles."""
    return _names("models")


def _validate(cls: type[BaseModel], data: Any, path: str) -> Any:
    # JSON mode, like the root config: YAML lists become tuples, ints become floats
    try:
        return cls.model_validate_json(json.dumps(data))
    except ValidationError as exc:
        issues = [(".".join([path, *(str(p) for p in e["loc"] if not str(p).startswith(
            ("function-", "tagged")))]).strip("."), str(e["msg"]).removeprefix(
                "Value error, ")) for e in exc.errors(include_url=False)]
        raise ConfigError(path, issues=issues) from None


def _check_name(kind: str, name: str, path: str) -> None:
    known = _names(kind)
    if name not in known:
        what = "hardware" if kind == "hardware" else "model"
        raise ConfigError(path, f"unknown {what} profile {name!r}; shipped: "
                                f"{', '.join(known)} (or give the spec inline as a mapping)")


@lru_cache(maxsize=64)
def _load_named(kind: str, name: str) -> Any:
    # profiles are immutable package data: caching the frozen result shares nothing mutable
    folder = resources.files(_PACKAGE).joinpath("data").joinpath(kind)
    text = folder.joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    cls: type[BaseModel] = HardwareSpec if kind == "hardware" else ModelArchitecture
    return _validate(cls, data, f"pdsim/data/{kind}/{name}.yaml")


PROFILE_FILE_SUFFIXES = (".yaml", ".yml")


def is_profile_file(value: object) -> bool:
    """A profile given as a file (a path ending in .yaml or .yml), not a shipped name."""
    return isinstance(value, str) and value.endswith(PROFILE_FILE_SUFFIXES)


def check_profile_file(value: str, path: str) -> None:
    """Raise ``ConfigError`` at ``path`` unless ``value`` names a readable file."""
    if not Path(value).is_file():
        raise ConfigError(path, f"no model profile file {value!r} (a relative path is "
                                f"read from the config file's folder)")


@lru_cache(maxsize=32)
def _load_file(kind: str, file: str, mtime_ns: int, size: int) -> Any:
    # keyed by modification time and size: an edited file is read again
    text = read_text_file(file, "a model profile (YAML)")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(file, f"YAML error: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(file, "a model profile must be a YAML mapping")
    cls: type[BaseModel] = HardwareSpec if kind == "hardware" else ModelArchitecture
    return _validate(cls, data, file)


def _resolve(kind: str, cls: type[_M], value: str | _M | Mapping[str, Any],
             path: str) -> _M:
    """A shipped profile of ``kind`` by name, a profile file, the given model, or a
    mapping validated."""
    if isinstance(value, cls):
        return value
    if is_profile_file(value):
        assert isinstance(value, str)
        check_profile_file(value, path)
        st = Path(value).stat()
        loaded: _M = _load_file(kind, str(Path(value).resolve()), st.st_mtime_ns, st.st_size)
        return loaded
    if isinstance(value, str):
        _check_name(kind, value, path)
        named: _M = _load_named(kind, value)
        return named
    out: _M = _validate(cls, dict(value), path)
    return out


def load_hardware(name_or_spec: str | HardwareSpec | Mapping[str, Any],
                  path: str = "step_time.hardware") -> HardwareSpec:
    """A hardware profile by shipped name, or the given spec (a mapping is validated).

    Raises ``ConfigError`` naming the shipped profiles when the name is unknown.
    """
    return _resolve("hardware", HardwareSpec, name_or_spec, path)


def load_model_architecture(name_or_arch: str | ModelArchitecture | Mapping[str, Any],
                            path: str = "step_time.model") -> ModelArchitecture:
    """A model profile by shipped name, from a profile file (a path ending in .yaml or
    .yml, relative to the working directory), or the given architecture (a mapping is
    validated).

    Raises ``ConfigError`` naming the shipped profiles when the name is unknown.
    """
    return _resolve("models", ModelArchitecture, name_or_arch, path)


def with_dtypes(arch: ModelArchitecture, *, weight_dtype: DType | None = None,
                expert_weight_dtype: DType | None = None,
                kv_cache_dtype: DType | None = None,
                activation_dtype: DType | None = None) -> ModelArchitecture:
    """``arch`` with the given dtypes replacing the profile's (``None`` keeps them).

    Overriding ``weight_dtype`` alone also moves the experts to it.
    """
    update: dict[str, Any] = {}
    if weight_dtype is not None:
        update["weight_dtype"] = weight_dtype
        update["expert_weight_dtype"] = expert_weight_dtype
    elif expert_weight_dtype is not None:
        update["expert_weight_dtype"] = expert_weight_dtype
    if kv_cache_dtype is not None:
        update["kv_cache_dtype"] = kv_cache_dtype
    if activation_dtype is not None:
        update["activation_dtype"] = activation_dtype
    return arch.model_copy(update=update) if update else arch


def model_config_fields(arch: str | ModelArchitecture | Mapping[str, Any],
                        kv_cache_dtype: DType | None = None,
                        path: str = "model.profile") -> dict[str, Any]:
    """The fields of pdsim's ``ModelConfig`` that the architecture determines.

    Returns ``name``, ``layer_groups`` (one dict per distinct layer layout: ``kind``
    attention | sliding_window | mamba, ``num_layers``, ``kv_bytes_per_token_per_layer``,
    ``window_tokens``, ``state_bytes_per_layer``; whole-model bytes, not per GPU),
    ``num_mtp_modules`` (MTP modules shipped; 0 for EAGLE heads and no drafter),
    ``mtp_kv_bytes_per_token_per_module`` (KV of one drafter module, MTP or EAGLE),
    ``mtp_window_tokens`` (the MTP modules' sliding window; None: full attention) and
    ``max_model_len``. Layers without a token mixer hold no cache and are left out.
    """
    a = load_model_architecture(arch, path)
    if kv_cache_dtype is not None:
        a = with_dtypes(a, kv_cache_dtype=kv_cache_dtype)
    groups: dict[tuple[str, int, int | None, int], int] = {}
    for b in a.blocks:
        m = b.mixer
        if isinstance(m, AttentionMixer | MLAMixer):
            kv = round(kv_bytes_per_token_per_layer(m, a.kv_cache_dtype))
            window = m.sliding_window_tokens if isinstance(m, AttentionMixer) else None
            key = ("sliding_window" if window is not None else "attention", kv, window, 0)
        elif isinstance(m, Mamba2Mixer | GatedDeltaNetMixer):
            key = ("mamba", 0, None, round(state_bytes_per_layer(m, a.state_dtype)))
        else:
            continue
        groups[key] = groups.get(key, 0) + b.num_layers
    layer_groups = [
        {"kind": kind, "num_layers": n, "kv_bytes_per_token_per_layer": kv,
         "window_tokens": window, "state_bytes_per_layer": state}
        for (kind, kv, window, state), n in groups.items()
    ]
    d = a.drafter
    mtp = d if d is not None and d.kind == "mtp" else None
    window = (mtp.mixer.sliding_window_tokens
              if mtp is not None and isinstance(mtp.mixer, AttentionMixer) else None)
    return {
        "name": a.name,
        "layer_groups": layer_groups,
        "num_mtp_modules": mtp.num_modules if mtp is not None else 0,
        "mtp_kv_bytes_per_token_per_module": round(drafter_kv_bytes_per_token(a)),
        "mtp_window_tokens": window,
        "max_model_len": a.max_model_len,
    }
