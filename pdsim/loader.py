"""YAML -> frozen ``SimConfig``, with ``--set dotted.key=value`` overrides.

Every problem comes out as a ``ConfigError`` (a dotted path and what is wrong and allowed)
or an ``InputFileError`` (file, line and column); nothing else escapes ``load_config``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pdsim.config import SimConfig
from pdsim.config_errors import deepest_path, unrepresentable, validation_issues
from pdsim.errors import ConfigError, InputFileError, read_text_file


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false, so ``off`` stays a string."""


# YAML 1.1's implicit types that YAML 1.2's core schema dropped: yes/no/on/off booleans,
# base-60 numbers (``10:20`` is 620 in 1.1), ``017`` as octal, ``1_000``, timestamps and
# ``=``. They are replaced below by the core schema's booleans, integers and floats.
_YAML11_ONLY = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"}
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"))
# An exponent needs no dot (``4e-6``), which YAML 1.1 reads as a string.
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def _construct_unique_mapping(loader: _Yaml12Loader, node: yaml.MappingNode,
                              deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line "
                    f"{seen[key].start_mark.line + 1})", key_node.start_mark)
            seen[key] = key_node
        except TypeError:
            continue  # unhashable keys are reported by validation
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Yaml12Loader.add_constructor("tag:yaml.org,2002:map", _construct_unique_mapping)

# Integers beyond a signed 64-bit value hold no count or size pdsim can use; longer than
# Python's 4,300-digit conversion limit they would not even parse.
_MAX_INT_DIGITS = 19


def _construct_bounded_int(loader: _Yaml12Loader, node: yaml.ScalarNode) -> Any:
    digits = sum(ch.isdigit() for ch in str(node.value))
    if digits > _MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {digits} digits is too large (pdsim's counts and "
            f"sizes stay below 2^63)", node.start_mark)
    text = str(loader.construct_scalar(node))
    value: int | None
    try:  # the core schema's forms only: no base 60, no underscores, 017 is seventeen
        if text.startswith(("0o", "0x")):
            value = int(text[2:], 8 if text[1] == "o" else 16)
        else:
            value = int(text, 10) if text.lstrip("+-").isdigit() else None
    except ValueError:
        value = None
    if value is None:  # an explicit !!int tag on something that is no integer
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not an integer", node.start_mark)
    if isinstance(value, int) and abs(value) >= 2**63:
        raise yaml.constructor.ConstructorError(
            None, None, f"integer {value} is too large (pdsim's counts and sizes stay "
            f"below 2^63)", node.start_mark)
    return value


_Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _construct_bounded_int)

# Aliases share one parsed value; expanded, a few lines can stand for billions of values
# ("billion laughs"). A config is a few hundred values, nested a few levels.
MAX_YAML_VALUES = 1_000_000
MAX_YAML_DEPTH = 100


class YamlShapeError(ValueError):
    """YAML that parses but is too big once its aliases are expanded, or nested too deep
    (``too_deep``)."""

    def __init__(self, message: str, too_deep: bool = False) -> None:
        super().__init__(message)
        self.too_deep = too_deep


def check_yaml_shape(data: Any) -> None:
    """Raise ``YamlShapeError`` if ``data`` holds more than ``MAX_YAML_VALUES`` values with
    every alias expanded, or nests lists and mappings deeper than ``MAX_YAML_DEPTH``.

    Iterative and memoized per shared object, so a bomb is measured without expanding it
    (and a cycle, reported later as a value a config cannot hold, ends the walk)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)] if isinstance(data, dict | list) else []
    while stack:
        node, done = stack.pop()
        children = list(node.values()) if isinstance(node, dict) else node
        key = id(node)
        if done:
            open_.discard(key)
            kids = [c for c in children if isinstance(c, dict | list)]
            size[key] = 1 + len(children) - len(kids) + sum(size.get(id(c), 1) for c in kids)
            depth[key] = 1 + max((depth.get(id(c), 1) for c in kids), default=0)
            if size[key] > MAX_YAML_VALUES:
                raise YamlShapeError(
                    f"more than {MAX_YAML_VALUES:,} values once its aliases are expanded "
                    f"(an alias bomb?); a config needs a few hundred")
            if depth[key] > MAX_YAML_DEPTH:
                raise YamlShapeError(f"nested more than {MAX_YAML_DEPTH} levels deep", True)
            continue
        if key in size or key in open_:
            continue
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children
                     if isinstance(c, dict | list) and id(c) not in size)


def parse_yaml(text: str) -> Any:
    """Parse YAML text with YAML 1.2 booleans (``on``/``off``/``yes``/``no`` are strings).

    Raises ``YamlShapeError`` for an alias bomb or nesting deeper than ``MAX_YAML_DEPTH``
    (``RecursionError`` when the parser itself gives up on the nesting)."""
    data = yaml.load(text, Loader=_Yaml12Loader)
    check_yaml_shape(data)
    return data


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Parse a YAML mapping from ``path``; errors name the file, line and column."""
    p = Path(path)
    text = read_text_file(p, "a YAML file")
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
    except RecursionError:
        raise InputFileError(str(p), None, "YAML nested too deeply") from None
    except YamlShapeError as exc:
        raise InputFileError(str(p), None, f"YAML {exc}") from None
    if data is None or data == {}:
        raise InputFileError(str(p), None, "the file is empty (nothing but blanks, comments "
                             "or {}); write at least one section (a config: start from "
                             "configs/mtp3.yaml)")
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
    except yaml.constructor.ConstructorError as exc:
        raise ConfigError(key.strip(), f"{exc.problem}") from None
    except yaml.YAMLError:
        value = raw
    except RecursionError:
        raise ConfigError(key.strip(), f"the value is nested more than {MAX_YAML_DEPTH} "
                          f"levels deep") from None
    except YamlShapeError as exc:
        raise ConfigError(key.strip(), f"the value has {exc}") from None
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
                if isinstance(node, list):
                    raise list_item_error(parts, i, len(node))
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
        parts = path.split(".")
        raise list_item_error(parts, len(parts) - 1, len(node))


def list_item_error(parts: Sequence[str], i: int, length: int) -> ConfigError:
    """The error for ``parts[i]`` naming no item of a list of ``length`` (an override or
    sweep key into, say, a role's list of pools): which positions exist, and how to write
    the key when a name was given where a position belongs."""
    parent, part = ".".join(parts[:i]), parts[i]
    if not length:
        return ConfigError(".".join(parts[: i + 1]), f"{parent} is an empty list")
    if part.isdigit():
        return ConfigError(".".join(parts[: i + 1]),
                           f"{parent} has {length} item(s), {parent}.0 .. "
                           f"{parent}.{length - 1}; there is no item {part}")
    rest = ".".join(parts[i:])
    return ConfigError(".".join(parts[: i + 1]),
                       f"{parent} is a list of {length} item(s): name one by its position, "
                       f"e.g. {parent}.0.{rest}")


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
        if kv_dtype is not None and not isinstance(kv_dtype, str):
            raise ConfigError("step_time.kv_cache_dtype", f"expected a dtype name, got "
                              f"{kv_dtype!r}")
        try:
            fields = model_config_fields(profile, kv_cache_dtype=kv_dtype,  # type: ignore[arg-type]
                                         path="model.profile")
        except KeyError as exc:
            raise ConfigError("step_time.kv_cache_dtype",
                              f"unknown dtype {exc.args[0]!r}") from None
        out["model"] = {**fields, **(model if isinstance(model, dict) else {})}
        if isinstance(st, dict) and st.get("kind") == "roofline" and "model" not in st:
            out["step_time"] = {**st, "model": profile}
        if "cluster" in out:
            out["cluster"] = _pools_with_profile(out["cluster"], profile)
    return out


def _pools_with_profile(cluster: Any, profile: str) -> Any:
    """``cluster`` with each pool's own roofline step time defaulting its ``model`` to the
    profile (its KV dtype is checked by the step time's own validation)."""
    if not isinstance(cluster, dict):
        return cluster

    def fill(group: Any) -> Any:
        st = group.get("step_time") if isinstance(group, dict) else None
        if isinstance(st, dict) and st.get("kind") == "roofline" and "model" not in st:
            return {**group, "step_time": {**st, "model": profile}}
        return group

    out = dict(cluster)
    for role in ("prefill", "decode", "colocated"):
        value = out.get(role)
        if role in out:
            out[role] = [fill(g) for g in value] if isinstance(value, list) else fill(value)
    return out


def _step_time_sections(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The root step_time and every instance group's own (a group or a list of groups)."""
    out = [data.get("step_time")]
    cluster = data.get("cluster")
    if isinstance(cluster, dict):
        for role in ("prefill", "decode", "colocated"):
            groups = cluster.get(role)
            for g in groups if isinstance(groups, list) else [groups]:
                if isinstance(g, dict):
                    out.append(g.get("step_time"))
    return [s for s in out if isinstance(s, dict)]


def resolve_profile_files(data: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
    """A copy of ``data`` with every relative model profile file (``model.profile`` and each
    roofline ``step_time.model`` that is a path ending in .yaml) made absolute against
    ``base_dir``, the folder of the config file that names it."""
    from pdsim.perf.profiles import is_profile_file

    def absolute(value: Any) -> Any:
        if is_profile_file(value) and not Path(value).is_absolute():
            return str((base_dir / value).resolve())
        return value

    out: dict[str, Any] = copy.deepcopy(dict(data))
    model = out.get("model")
    if isinstance(model, dict) and "profile" in model:
        model["profile"] = absolute(model["profile"])
    for st in _step_time_sections(out):
        if "model" in st:
            st["model"] = absolute(st["model"])
    return out


def config_from_dict(data: Mapping[str, Any]) -> SimConfig:
    """Validate a plain mapping (YAML-shaped) into a ``SimConfig``."""
    data = expand_profiles(data)
    try:
        payload = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(*unrepresentable(data, exc)) from None
    try:
        return SimConfig.model_validate_json(payload)
    except ValidationError as exc:
        raise ConfigError("", issues=validation_issues(exc, data)) from None
    except RecursionError:
        raise ConfigError("", "the config is nested too deeply") from None


def load_config(source: str | Path | Mapping[str, Any],
                overrides: Iterable[str] = (), seed: int | None = None) -> SimConfig:
    """Load a config from a YAML path (or a mapping), apply overrides, validate it.

    Model profile files a file names are read from its folder (from the working directory
    for a mapping).

    Raises ``ConfigError`` or ``InputFileError``; never another exception for bad input.
    """
    if isinstance(source, Mapping):
        try:
            check_yaml_shape(source)
        except YamlShapeError as exc:
            if exc.too_deep:
                raise ConfigError(deepest_path(source), "nested too deeply") from None
            raise ConfigError("", f"the config has {exc}") from None
        data = dict(source)
    else:
        data = read_yaml(source)
    overrides = list(overrides)
    data = apply_overrides(data, overrides)
    if not isinstance(source, Mapping):
        data = resolve_profile_files(data, Path(source).parent)
    if seed is not None:
        data["seed"] = seed
    cfg = config_from_dict(data)
    inert = inert_setting_issues(cfg, [".".join(parse_override(t)[0]) for t in overrides])
    if inert:
        raise ConfigError("", issues=inert)
    return cfg


def inert_setting_issues(cfg: SimConfig, keys: Iterable[str]) -> list[tuple[str, str]]:
    """Problems with dotted ``keys`` the user set (``--set``, a sweep's axes) that ``cfg``
    makes inert: a root ``step_time.*`` when every pool has its own step time."""
    issues = []
    if not cfg.root_step_time_users:
        pools = cfg.cluster.pools()
        own = [f"{p.path}.step_time" for p in pools]
        # the model section's KV is derived at the root's KV dtype, which a pool with a
        # step time other than the roofline stores as written
        kv_dtype_used = any(getattr(p.group.step_time, "kind", None) != "roofline"
                            for p in pools)
        for key in dict.fromkeys(keys):
            if key == "step_time.kv_cache_dtype" and kv_dtype_used:
                continue
            if key == "step_time" or key.startswith("step_time."):
                issues.append((key, "would change nothing: every pool has its own step time "
                                    f"({', '.join(own)}), which overrides the root "
                                    f"step_time; set it there (e.g. {own[0]}"
                                    f"{key.removeprefix('step_time')})"))
    return issues


def dump_config(cfg: SimConfig) -> str:
    """The resolved config as YAML (round-trips through ``load_config``)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def derived_values(cfg: SimConfig) -> dict[str, Any]:
    """The config's derived values, for ``show-config`` and results."""
    out: dict[str, Any] = {
        "use_multi_module_mtp": cfg.use_multi_module_mtp,
        "num_prefill_lookahead_tokens": cfg.num_prefill_lookahead_tokens,
        "prefill_backoff_tokens": cfg.prefill_backoff_tokens,
        "num_drafter_modules": cfg.num_drafter_modules,
        "d_first_step_prompt_tokens": cfg.d_first_step_prompt_tokens,
        "d_first_step_padded_when_busy": cfg.d_first_step_padded_when_busy,
        "kv_bytes_per_token": cfg.kv_bytes_per_token,
        "has_mamba": cfg.model.has_mamba,
    }
    out["step_time_parameters"] = cfg.step_time.parameter_provenance
    if cfg.first_response_steps:  # what the response rule (or the override) gives
        out["first_response_steps"] = cfg.first_response_steps
    if cfg.stale_kv_provenance:
        out["stale_kv_parameters"] = cfg.stale_kv_provenance
    for pool in cfg.cluster.pools():
        g = pool.group
        if g.step_time is not None:
            out[f"{pool.label}.step_time_parameters"] = g.step_time.parameter_provenance
            out[f"{pool.label}.kv_bytes_per_token"] = cfg.kv_bytes_per_token_of(g)
        out[f"{pool.label}.num_blocks"] = cfg.num_blocks(g)
    return out


SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "urn:pdsim:config"
SCHEMA_FILE = "schema/pdsim.schema.json"


def config_schema() -> dict[str, Any]:
    """The JSON Schema of the config files users write, before ``expand_profiles`` fills
    them: a roofline ``step_time.model`` may be left out, because the loader defaults it
    to ``model.profile``. Every property carries the description of its field."""
    from pdsim.perf.config import RooflineStepTimeConfig

    schema = SimConfig.model_json_schema()
    roofline = schema["$defs"][RooflineStepTimeConfig.__name__]
    roofline["required"] = [k for k in roofline.get("required", []) if k != "model"]
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID, **schema}


def config_schema_json() -> str:
    """``config_schema()`` as the text of ``schema/pdsim.schema.json``."""
    return json.dumps(config_schema(), indent=2) + "\n"
