"""Fuzzing the loader: whatever the YAML, ``load_config`` returns a ``SimConfig`` or raises
``ConfigError`` / ``InputFileError``, never anything else, and every error is located by a
dotted path the user wrote (no pydantic union tags or validator names).

The trees are built from the real schema's vocabulary (every field name, every ``kind``,
the shipped profile names) so that they reach deep into the config, and from mutations
of valid configs (the shipped ones and the small test config), which get past the first
layer of validation and exercise the cross-field checks.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rel_support import SMALL, examples

from pdsim.config import SimConfig
from pdsim.errors import ConfigError, InputFileError
from pdsim.loader import apply_overrides, dump_config, load_config, parse_yaml
from pdsim.perf.profiles import hardware_names, model_names

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "configs").glob("*.yaml"))


def _schema_vocabulary() -> tuple[list[str], list[str]]:
    fields: set[str] = set()
    kinds: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, sub in node.get("properties", {}).items():
                fields.add(name)
                if name == "kind" and isinstance(sub, dict):
                    kinds.update(str(v) for v in [sub.get("const"), *sub.get("enum", [])] if v)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(SimConfig.model_json_schema())
    return sorted(fields), sorted(kinds)


FIELDS, KINDS = _schema_vocabulary()
FIELD_SET = frozenset(FIELDS)
WORDS = sorted({*KINDS, *model_names(), *hardware_names(), "auto", "off", "pull", "push",
                "disaggregated", "colocated", "round_robin", "least_loaded", "fp8", "bf16",
                "pkg:traces/mooncake_sample.jsonl"})

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 5), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-2.0, 2.0),
    st.sampled_from(WORDS), st.text(max_size=8),
)
keys = st.one_of(st.sampled_from(FIELDS), st.sampled_from(KINDS), st.text(max_size=6),
                 st.integers(-2, 3))


def trees(max_leaves: int = 25) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda children: st.one_of(st.lists(children, max_size=4),
                                   st.dictionaries(keys, children, max_size=5)),
        max_leaves=max_leaves)


def _valid_bases() -> list[dict[str, Any]]:
    bases = [copy.deepcopy(SMALL)]
    for path in SHIPPED:
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict):
            bases.append(data)
    return bases


BASES = _valid_bases()


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_configs(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = data
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["replace", "replace", "delete", "add_key", "scalar"]))
        leaf = path[-1]
        if op == "delete":
            if isinstance(parent, dict):
                del parent[leaf]
            else:
                parent.pop(leaf)
        elif op == "add_key" and isinstance(parent, dict):
            parent[draw(keys)] = draw(trees(6))
        elif op == "scalar":
            parent[leaf] = draw(scalars)
        else:
            parent[leaf] = draw(trees(8))
    return data


@st.composite
def overrides(draw: st.DrawFn) -> str:
    base = draw(st.sampled_from(BASES))
    if draw(st.booleans()):
        parts = [str(p) for p in draw(st.sampled_from(_paths(base)[1:]))]
    else:
        parts = draw(st.lists(st.sampled_from([*FIELDS, "0", "1", "x"]), min_size=1,
                              max_size=5))
    key = ".".join(parts) if draw(st.integers(0, 9)) else draw(st.text(max_size=10))
    value = draw(st.one_of(
        st.sampled_from(["1", "0", "-1", "0.5", "true", "null", "[1, 2]", "{kind: gamma}",
                         "{a: 1}", "off", ".nan", "2024-01-01", "[", "'x", "!!binary aGk=",
                         *WORDS]),
        st.text(max_size=12)))
    sep = "=" if draw(st.integers(0, 19)) else ""
    return f"{key}{sep}{value}"


# ----------------------------------------------------------------- properties


def _as_key(key: Any) -> str:
    """A YAML key as the config (JSON) sees it: null -> "null", true -> "true", 1 -> "1"."""
    return key if isinstance(key, str) else json.dumps(key) if key is None or isinstance(
        key, bool) else str(key)


def _resolves(data: Any, path: list[str]) -> bool:
    """Whether ``path`` names a node of ``data``; a part may match several keys that print
    alike (``0`` and ``'0'``), so every such branch is tried."""
    if not path:
        return True
    p, rest = path[0], path[1:]
    if isinstance(data, dict):
        return any(_resolves(v, rest) for k, v in data.items() if k == p or _as_key(k) == p)
    if isinstance(data, list) and p.isdigit() and int(p) < len(data):
        return _resolves(data[int(p)], rest)
    return False


def split_dotted(path: str) -> list[str]:
    """Inverse of the loader's dotted paths: plain parts, or JSON strings for odd keys."""
    parts = [m.group(0) for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[^.]+', path)]
    assert ".".join(parts) == path, f"{path!r} is not a well-formed dotted path"
    return [json.loads(p) if p.startswith('"') else p for p in parts]


def check_located(exc: ConfigError, data: Any) -> None:
    """Every issue: a message, and a dotted path of schema field names, list indices, or
    keys the user wrote (so no union tag like ``gamma`` or ``str`` leaks in)."""
    assert exc.issues
    for path, message in exc.issues:
        assert message.strip(), exc.issues
        assert "Traceback" not in message
        if not path:
            continue
        parts = split_dotted(path)
        for i, part in enumerate(parts):
            ok = (part in FIELD_SET or part.isdigit()
                  or (isinstance(data, dict) and _resolves(data, parts[: i + 1])))
            assert ok, f"{path!r}: {part!r} is neither a field nor the user's key ({message})"


def load_or_error(source: Any, overrides: list[str] | None = None,
                  data: Any = None) -> SimConfig | None:
    """load_config's result, or None after checking the error is a documented one."""
    try:
        cfg = load_config(source, overrides or [])
    except ConfigError as exc:
        check_located(exc, data if data is not None else source)
        return None
    except InputFileError as exc:
        assert exc.message
        return None
    assert isinstance(cfg, SimConfig)
    return cfg


FUZZ = settings(max_examples=examples(150), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@FUZZ
@given(st.dictionaries(keys, trees(), max_size=6))
@example({"0": None, 0: {"attention": float("inf")}})  # two keys that print alike
def test_random_trees(data: dict[Any, Any]) -> None:
    load_or_error(data)


@FUZZ
@given(mutated_configs())
def test_mutated_valid_configs(data: dict[str, Any]) -> None:
    cfg = load_or_error(data)
    if cfg is not None:  # what show-config prints loads back to the same config
        assert load_config(parse_yaml(dump_config(cfg))) == cfg


@FUZZ
@given(st.sampled_from(range(len(BASES))), st.lists(overrides(), min_size=1, max_size=3))
def test_random_overrides(base: int, sets: list[str]) -> None:
    data = BASES[base]
    try:
        applied: Any = apply_overrides(data, sets)
    except ConfigError as exc:
        # a malformed override is located by the override's own key
        assert exc.message and any(s.startswith(exc.path) for s in sets), exc.issues
        with pytest.raises(ConfigError):
            load_config(data, sets)
        return
    load_or_error(data, sets, data=applied)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.filter_too_much])
@given(st.one_of(st.dictionaries(keys, trees(), max_size=6), mutated_configs()))
def test_yaml_files(tmp_path_factory: pytest.TempPathFactory, data: dict[Any, Any]) -> None:
    """The same trees through a YAML file (dump, then read back by the loader)."""
    path = tmp_path_factory.mktemp("fuzz") / "cfg.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    # YAML folds some whitespace in keys (a lone CR becomes a space): locate against
    # what the file holds
    try:
        held = parse_yaml(path.read_text(encoding="utf-8"))
    except yaml.constructor.ConstructorError as exc:  # an integer beyond 2^63
        assert "too large" in str(exc.problem)
        with pytest.raises(InputFileError, match="too large"):
            load_config(path)
        return
    load_or_error(path, data=held)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=60),
                 st.text(alphabet=":-[]{}#&*!|>'\"%@` \n\tab1", max_size=60)))
def test_random_text_files(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "cfg.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    load_or_error(path, data=data)


def test_profile_with_bad_kv_cache_dtype_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        load_config({"model": {"profile": "deepseek-v3"},
                     "step_time": {"kind": "roofline", "hardware": "h200",
                                   "kv_cache_dtype": "fp9"}})
