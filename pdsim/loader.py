"""YAML -> frozen ``SimConfig``, with ``--set dotted.key=value`` overrides.

Every problem comes out as a ``ConfigError`` (a dotted path and what is wrong and allowed)
or an ``InputFileError`` (file, line and column); nothing else escapes ``load_config``.
"""

from __future__ import annotations

import copy
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pdsim.config import SimConfig
from pdsim.errors import ConfigError, InputFileError


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false, so ``off`` stays a string."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))


def parse_yaml(text: str) -> Any:
    """Parse YAML text with YAML 1.2 booleans (``on``/``off``/``yes``/``no`` are strings)."""
    return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Parse a YAML mapping from ``path``; errors name the file, line and column."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(str(p), None, "no such file") from None
    except IsADirectoryError:
        raise InputFileError(str(p), None, "is a directory, not a YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(str(p), None, f"cannot be read: {exc}") from None
    try:
        data = parse_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        col = mark.column + 1 if mark is not None else None
        what = exc.problem or exc.context or "invalid YAML"
        raise InputFileError(str(p), line, f"YAML syntax error: {what}", column=col) from None
    except yaml.YAMLError as exc:
        raise InputFileError(str(p), None, f"YAML error: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputFileError(str(p), 1, "the top level must be a mapping of sections")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value``; the value is parsed as YAML (``0.5``, ``true``, ``[1, 2]``)."""
    if "=" not in text:
        raise ConfigError(text, "an override must look like dotted.key=value")
    key, raw = text.split("=", 1)
    parts = [k for k in key.strip().split(".")]
    if not key.strip() or any(not k for k in parts):
        raise ConfigError(key, "an override key must be a non-empty dotted path")
    try:
        value = parse_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``dotted.key=value`` applied in order."""
    out: dict[str, Any] = copy.deepcopy(dict(data))
    for text in overrides:
        parts, value = parse_override(text)
        node: Any = out
        for i, part in enumerate(parts[:-1]):
            nxt = _child(node, part)
            if nxt is None:
                nxt = {}
                _set_child(node, part, nxt, ".".join(parts[: i + 1]))
            elif not isinstance(nxt, dict | list):
                raise ConfigError(".".join(parts[: i + 1]),
                                  f"is a value ({nxt!r}), not a section; cannot set "
                                  f"{'.'.join(parts)}")
            node = nxt
        _set_child(node, parts[-1], value, ".".join(parts))
    return out


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return None


def _set_child(node: Any, part: str, value: Any, path: str) -> None:
    if isinstance(node, dict):
        node[part] = value
    elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
        node[int(part)] = value
    else:
        raise ConfigError(path, "cannot set an item of this list (index out of range)")


def expand_profiles(data: Mapping[str, Any]) -> dict[str, Any]:
    """Fill ``model`` from ``model.profile`` (explicit keys win) and default a roofline
    step time's ``model`` to the same profile, so the profile is named once."""
    out = dict(data)
    model = out.get("model")
    profile = model.get("profile") if isinstance(model, dict) else None
    if isinstance(profile, str):
        from pdsim.perf.profiles import model_config_fields

        st = out.get("step_time")
        kv_dtype = st.get("kv_cache_dtype") if isinstance(st, dict) else None
        fields = model_config_fields(profile, kv_cache_dtype=kv_dtype, path="model.profile")
        out["model"] = {**fields, **model}
        if isinstance(st, dict) and st.get("kind") == "roofline" and "model" not in st:
            out["step_time"] = {**st, "model": profile}
    return out


def config_from_dict(data: Mapping[str, Any]) -> SimConfig:
    """Validate a plain mapping (YAML-shaped) into a ``SimConfig``."""
    data = expand_profiles(data)
    try:
        payload = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError("", f"the config holds a value YAML/JSON cannot represent: {exc}") \
            from None
    try:
        return SimConfig.model_validate_json(payload)
    except ValidationError as exc:
        raise ConfigError("", issues=_issues(exc, data)) from None
    except RecursionError:
        raise ConfigError("", "the config is nested too deeply") from None


def load_config(source: str | Path | Mapping[str, Any],
                overrides: Iterable[str] = (), seed: int | None = None) -> SimConfig:
    """Load a config from a YAML path (or a mapping), apply overrides, validate it.

    Raises ``ConfigError`` or ``InputFileError``; never another exception for bad input.
    """
    data = dict(source) if isinstance(source, Mapping) else read_yaml(source)
    data = apply_overrides(data, overrides)
    if seed is not None:
        data["seed"] = seed
    return config_from_dict(data)


def dump_config(cfg: SimConfig) -> str:
    """The resolved config as YAML (round-trips through ``load_config``)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def derived_values(cfg: SimConfig) -> dict[str, Any]:
    """The config's derived values, for ``show-config`` and results."""
    from pdsim.engine.connector import prefill_backoff

    out: dict[str, Any] = {
        "use_multi_module_mtp": cfg.use_multi_module_mtp,
        "num_prefill_lookahead_tokens": cfg.num_prefill_lookahead_tokens,
        "prefill_backoff_tokens": prefill_backoff(cfg),
        "num_drafter_modules": cfg.num_drafter_modules,
        "kv_bytes_per_token": cfg.kv_bytes_per_token,
        "has_mamba": cfg.model.has_mamba,
    }
    for role, group in cfg.cluster.groups():
        out[f"{role.value}.num_blocks"] = cfg.num_blocks(role)
    return out


# ----------------------------------------------------------- error formatting


def _issues(exc: ValidationError, data: Mapping[str, Any]) -> list[tuple[str, str]]:
    issues = []
    for err in exc.errors(include_url=False):
        loc = _data_path(err["loc"], data)
        path = ".".join(str(p) for p in loc)
        issues.append((path, _message(err, loc)))
    return issues


def _data_path(loc: tuple[Any, ...], data: Any) -> list[Any]:
    """The loc with pydantic's union tags and validator markers dropped."""
    out: list[Any] = []
    node = data
    for i, elem in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict) and elem in node:
            out.append(elem)
            node = node[elem]
        elif isinstance(node, list) and isinstance(elem, int) and elem < len(node):
            out.append(elem)
            node = node[elem]
        elif last and isinstance(elem, str) and not elem.startswith(("function-", "tagged")):
            out.append(elem)
        else:
            continue
    return out


def _message(err: Any, loc: list[Any]) -> str:
    kind = err["type"]
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        return ("unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else ""))
    if kind == "missing":
        return "required field is missing"
    if kind == "union_tag_invalid":
        return msg.replace("Input tag", "kind")
    inp = err.get("input")
    if kind not in ("model_type",) and not isinstance(inp, dict | list) and inp is not None:
        msg += f" (got {inp!r})"
    return msg


def _allowed_keys(loc: list[Any]) -> list[str]:
    model: Any = SimConfig
    for elem in loc:
        if isinstance(elem, int):
            model = _item_type(model)
            continue
        fields = getattr(model, "model_fields", None)
        if not fields or elem not in fields:
            return []
        model = _model_in(fields[elem].annotation)
        if model is None:
            return []
    fields = getattr(model, "model_fields", None)
    return sorted(fields) if fields else []


def _model_in(tp: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            found = _model_in(arg)
            if found is not None:
                return found
    if origin in (tuple, list):
        return tp
    return None


def _item_type(tp: Any) -> Any:
    args = typing.get_args(tp)
    return _model_in(args[0]) if args else None
