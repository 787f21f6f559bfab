"""Sweep points resolved against the base config: each validated into a ``SimConfig`` and
given a cache id before anything runs."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pdsim._version import __version__
from pdsim.config import SimConfig
from pdsim.errors import ConfigError
from pdsim.loader import config_from_dict, inert_setting_issues, list_item_error
from pdsim.sweep.grid import Point


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c`` in a YAML-shaped mapping (list items by index); missing sections
    become mappings, so an unknown key reaches validation and is reported there."""
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        here = ".".join(parts[: i + 1])
        if isinstance(node, dict):
            if last:
                node[part] = copy.deepcopy(value)
                return
            if not isinstance(node.get(part), dict | list):
                if node.get(part) is not None:
                    raise ConfigError(here, f"is a value ({node[part]!r}), not a section; "
                                            f"cannot set {key}")
                node[part] = {}
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            if last:
                node[int(part)] = copy.deepcopy(value)
                return
            node = node[int(part)]
        else:
            raise list_item_error(parts, i, len(node))


@dataclass(frozen=True)
class SweepPoint:
    """One resolved point: its position, its settings, its config and its cache id."""

    index: int
    params: Point
    config: SimConfig
    point_id: str


def point_id(cfg: SimConfig) -> str:
    """16 hex digits of sha256 over the resolved config, the pdsim version and the seed."""
    doc = {"config": cfg.model_dump(mode="json"), "pdsim_version": __version__,
           "seed": cfg.seed}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def describe(params: Mapping[str, Any]) -> str:
    """A point's settings as ``key=value, ...`` for messages."""
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in params.items()) or "the base config"


def resolve_points(base: SimConfig, points: Sequence[Mapping[str, Any]]) -> list[SweepPoint]:
    """Validate every point's config before anything runs.

    Raises ``ConfigError`` naming the offending key (and the point) for a key the config
    does not have or a value it does not accept.
    """
    base_data = base.model_dump(mode="json")
    out = []
    for i, params in enumerate(points):
        data = copy.deepcopy(base_data)
        try:
            for key, value in params.items():
                set_dotted(data, key, value)
            cfg = config_from_dict(data)
            inert = inert_setting_issues(cfg, params)
            if inert:
                raise ConfigError("", issues=inert)
        except ConfigError as exc:
            raise ConfigError("", issues=[
                (p or "config", f"{m} (sweep point {i}: {describe(params)})")
                for p, m in exc.issues]) from None
        out.append(SweepPoint(i, dict(params), cfg, point_id(cfg)))
    return out


def apply_base_overrides(base: SimConfig, overrides: Iterable[tuple[str, Any]]) -> SimConfig:
    """``base`` with ``(dotted key, value)`` pairs applied and validated again."""
    data = base.model_dump(mode="json")
    items = list(overrides)
    for key, value in items:
        set_dotted(data, key, value)
    try:
        cfg = config_from_dict(data)
        inert = inert_setting_issues(cfg, [key for key, _ in items])
        if inert:
            raise ConfigError("", issues=inert)
        return cfg
    except ConfigError as exc:
        raise ConfigError("", issues=[(p, f"{m} (base overrides)") for p, m in exc.issues]) \
            from None
