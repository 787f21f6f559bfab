"""pydantic's validation errors, rendered for people: a dotted path the user wrote, and what
is wrong and allowed there. ``pdsim.loader`` raises these as ``ConfigError``.

pydantic locates an error by a "loc" that mixes the user's keys with its own markers: the
tag of the union member it tried (``gamma`` for a discriminated union, ``str`` or
``ModelArchitecture`` for a plain one) and validator names. The helpers below walk the loc
along the config's types to keep only the keys the user wrote (the dotted path), find the
model that owns the last key (for "allowed: ..." lists), and drop the complaints of
plain-union members the input was never meant for.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from pdsim.config import SimConfig


class _Step(typing.NamedTuple):
    """One error mapped onto the user's data."""

    path: list[Any]  # keys and indices the user wrote
    owner: Any  # the model class the last path element belongs to, or None
    target: Any  # the type at the end of the loc (a model, a union, ...), or None
    branch: tuple[Any, ...] | None  # (path at a plain union, member tag) the loc went into
    depth: int  # loc elements after that plain-union tag


def validation_issues(exc: ValidationError, data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(dotted path, message)`` per pydantic error, as the user should read them."""
    errors = exc.errors(include_url=False)
    steps = [_walk(err["loc"], data, err["type"]) for err in errors]
    keep = _relevant_branches(errors, steps)
    issues: list[tuple[str, str]] = []
    merged: dict[tuple[Any, ...], int] = {}
    for err, step, ok in zip(errors, steps, keep, strict=True):
        if not ok or _consequence(err, step, steps):
            continue
        if err["type"] == "json_invalid":
            deep = _deepest_path(data)
            issues.append((_dotted(deep), "nested too deeply"))
            continue
        path = _dotted(step.path)
        msg = _message(err, step)
        if step.branch is not None and step.depth == 0:
            # every member of a plain union rejected the value's type: one line for all
            at = merged.get(step.branch[0])
            if at is not None:
                issues[at] = (path, _merge_type_messages(issues[at][1], msg))
                continue
            merged[step.branch[0]] = len(issues)
        issue = (path, msg)
        if issue not in issues:
            issues.append(issue)
    return issues


def _dotted(path: list[Any]) -> str:
    """``a.b.0.c``; a key that is empty or holds anything but letters, digits, ``_`` and
    ``-`` is written in double quotes (``workload."a.b"``) so the path stays readable."""
    return ".".join(str(p) if isinstance(p, int) or _PLAIN_KEY.fullmatch(str(p))
                    else json.dumps(str(p), ensure_ascii=False) for p in path)


_PLAIN_KEY = re.compile(r"[\w-]+")


def _walk(loc: tuple[Any, ...], data: Any, kind: str) -> _Step:
    """Map a pydantic loc onto the data: drop union tags and validator markers."""
    path: list[Any] = []
    tp: Any = SimConfig
    owner: Any = None
    node: Any = data
    branch: tuple[Any, ...] | None = None
    depth = 0
    for i, elem in enumerate(loc):
        last = i == len(loc) - 1
        members = _members(tp)
        if len(members) > 1 and isinstance(elem, str):
            chosen = _member_by_tag(members, elem)
            if chosen is not None:
                if not _is_discriminated(members):
                    branch, depth = (tuple(path), elem), -1
                tp = chosen
                depth += 1
                continue
        depth += 1
        model = next((m for m in members if _is_model(m)), None) if members else None
        if isinstance(elem, str) and model is not None and elem in model.model_fields:
            path.append(elem)
            owner = model
            tp = model.model_fields[elem].annotation
            node = node.get(elem) if isinstance(node, dict) else None
            continue
        if isinstance(elem, int):
            path.append(elem)
            owner = None
            tp = _item_type(tp, elem)
            node = node[elem] if isinstance(node, list) and 0 <= elem < len(node) else None
            continue
        # Not a field of the type we are in: a key the user wrote (an unknown key), or, if
        # the walk lost the type, a marker we only keep when the data has it.
        in_data = isinstance(node, dict) and elem in node
        if in_data or (last and kind in ("extra_forbidden", "missing") and model is not None):
            path.append(elem)
            owner = model
            node = node.get(elem) if in_data else None
        tp = None
    return _Step(path, owner, tp, branch, depth)


def _relevant_branches(errors: list[Any], steps: list[_Step]) -> list[bool]:
    """Drop a plain-union member's type complaint when another member took the value
    (``model: {name: x}`` is not "not a valid string" but a model with missing fields)."""
    deep = {s.branch[0] for s in steps if s.branch is not None and s.depth > 0}
    keep = []
    for err, step in zip(errors, steps, strict=True):
        shallow_type = (step.branch is not None and step.depth == 0
                        and str(err["type"]).endswith("_type"))
        keep.append(not (shallow_type and step.branch is not None
                         and step.branch[0] in deep))
    return keep


def _consequence(err: Any, step: _Step, steps: list[_Step]) -> bool:
    """pydantic also reports a too-short list after dropping its invalid items ("at least
    1 item after validation"): a consequence of the item errors, not a problem of its own."""
    if err["type"] != "too_short" or "after validation" not in str(err["msg"]):
        return False
    n = len(step.path)
    return any(len(s.path) > n and s.path[:n] == step.path for s in steps)


def _merge_type_messages(a: str, b: str) -> str:
    head = "Input should be "
    got = ""
    if " (got " in a:
        a, got = a.split(" (got ", 1)
        got = " (got " + got
    b = b.split(" (got ", 1)[0]
    if a.startswith(head) and b.startswith(head):
        return f"{a} or {b[len(head):]}{got}"
    return f"{a}; or {b}{got}"


def _message(err: Any, step: _Step) -> str:
    kind = err["type"]
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(step.owner)
        return "unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return "required field is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        ctx = err.get("ctx") or {}
        disc = str(ctx.get("discriminator", "'kind'")).strip("'")
        kinds = _kinds(step.target, disc)
        choices = "; allowed: " + ", ".join(kinds) if kinds else ""
        inp = err.get("input")
        if kind == "union_tag_not_found" or (isinstance(inp, dict) and inp.get(disc) is None):
            return f"{disc} is missing{choices}"
        return f"unknown {disc} {ctx.get('tag', '')!r}{choices}"
    inp = err.get("input")
    if kind not in ("model_type",) and not isinstance(inp, dict | list) and inp is not None:
        got = repr(inp)
        msg += f" (got {got if len(got) <= 80 else got[:77] + '...'})"
    return msg


def unrepresentable(data: Any, exc: Exception) -> tuple[str, str]:
    """Locate a value JSON cannot carry (a YAML date, .nan, !!binary, a cycle)."""
    seen: set[int] = set()

    def find(node: Any, path: list[Any]) -> tuple[list[Any], str] | None:
        if isinstance(node, dict | list):
            if id(node) in seen:
                return path, "refers to itself (a YAML alias cycle)"
            seen.add(id(node))
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for k, v in items:
                if isinstance(node, dict) and not _json_key(k):
                    return [*path, str(k)], f"{k!r} cannot be a key; use a string"
                found = find(v, [*path, k])
                if found is not None:
                    return found
            seen.discard(id(node))
            return None
        if isinstance(node, float) and not math.isfinite(node):
            return path, f"must be a finite number (got {node})"
        if node is None or isinstance(node, str | int | float):
            return None
        if isinstance(node, datetime.date):
            return path, (f"a date/time ({node}) is not a config value; quote it to make it "
                          f"a string")
        return path, f"a {type(node).__name__} value is not allowed in a config"

    found = find(data, [])
    if found is None:  # pragma: no cover - json.dumps failed on something find() accepts
        return "", f"the config holds a value YAML/JSON cannot represent: {exc}"
    path, msg = found
    return _dotted(path), msg


def _json_key(key: Any) -> bool:
    return (key is None or isinstance(key, str | int)
            or (isinstance(key, float) and math.isfinite(key)))


def deepest_path(data: Any) -> str:
    """The dotted path to the most deeply nested value of ``data`` (see ``_deepest_path``)."""
    return _dotted(_deepest_path(data))


def _deepest_path(data: Any) -> list[Any]:
    """The path to the most deeply nested value, cut after the first key that is not a
    config field (where the nesting leaves the schema)."""
    best: list[Any] = []
    stack: list[tuple[Any, list[Any]]] = [(data, [])]
    while stack:
        node, path = stack.pop()
        if len(path) > len(best):
            best = path
        if isinstance(node, dict):
            stack.extend((v, [*path, k]) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, [*path, i]) for i, v in enumerate(node))
    tp: Any = SimConfig
    for i, elem in enumerate(best):
        model = next((m for m in _members(tp) if _is_model(m)), None)
        if isinstance(elem, int):
            tp = _item_type(tp, elem)
        elif model is not None and elem in model.model_fields:
            tp = model.model_fields[elem].annotation
        else:
            return best[: i + 1]
    return best


def _allowed_keys(owner: Any) -> list[str]:
    fields = getattr(owner, "model_fields", None)
    return sorted(fields) if fields else []


def _members(tp: Any) -> list[Any]:
    """The types a value of annotation ``tp`` may be (Annotated and None stripped)."""
    if tp is None:
        return []
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _members(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(tp):
            if arg is not type(None):
                out.extend(_members(arg))
        return out
    return [tp]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _kind_values(model: Any, field: str = "kind") -> tuple[Any, ...]:
    info = model.model_fields.get(field) if _is_model(model) else None
    if info is None or typing.get_origin(info.annotation) is not typing.Literal:
        return ()
    return typing.get_args(info.annotation)


def _is_discriminated(members: list[Any]) -> bool:
    return all(_kind_values(m) for m in members)


def _member_by_tag(members: list[Any], tag: str) -> Any:
    """The union member pydantic names ``tag`` in a loc, or None if ``tag`` is a key."""
    if any(_is_model(m) and tag in m.model_fields for m in members):
        return None
    for m in members:
        if tag in _kind_values(m) or getattr(m, "__name__", None) == tag:
            return m
    for m in members:  # generic and constrained types: pydantic's tag starts with the name
        name = getattr(typing.get_origin(m) or m, "__name__", None)
        if name and (tag == name or tag.startswith(f"{name}[")):
            return m
    return None


def _kinds(tp: Any, field: str) -> list[str]:
    return [str(v) for m in _members(tp) for v in _kind_values(m, field)]


def _item_type(tp: Any, index: int) -> Any:
    for m in _members(tp):
        origin = typing.get_origin(m)
        args = typing.get_args(m)
        if origin in (list, tuple) and args:
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                return args[index] if index < len(args) else None
            return args[0]
    return None
