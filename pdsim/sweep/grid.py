"""The sweep's grid language: ``key=v1,v2`` lists, ``key=start:stop:step`` ranges, sweep
files (``base_overrides``, ``grid``, ``points``), and their expansion into points (ordered
mappings of dotted config keys to values; see ``pdsim.sweep``)."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

from pdsim.errors import ConfigError, InputFileError
from pdsim.loader import YamlShapeError, parse_override, parse_yaml, read_yaml

Point = dict[str, Any]

MAX_RANGE_VALUES = 10_000
MAX_SWEEP_POINTS = 10_000
"""The most points one sweep may ask for: the product of the axes (and the explicit
points), checked before anything is expanded."""
SWEEP_FILE_KEYS = ("base_overrides", "grid", "points")


_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"^\s*({_NUMBER})\s*:\s*({_NUMBER})\s*:\s*({_NUMBER})\s*$")


def parse_range(text: str) -> list[int | float] | None:
    """``start:stop:step`` as its values, stop included within 1e-9 steps; None if not one.

    Integers when all three are integers, floats otherwise. Decimal arithmetic keeps
    ``0.5:0.95:0.05`` at ``0.55``, not ``0.5500000000000002``.
    """
    m = _RANGE.match(text)
    if m is None:
        return None
    try:
        start, stop, step = (Decimal(g) for g in m.groups())
    except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
        return None
    if step == 0:
        raise ConfigError(text, "a range step must not be zero")
    span = (stop - start) / step
    if span < -Decimal("1e-9"):
        raise ConfigError(text, "the range is empty: the step's sign must lead from start "
                                "to stop")
    count = math.floor(span + Decimal("1e-9")) + 1
    if count > MAX_RANGE_VALUES:
        raise ConfigError(text, f"the range has {count} values; at most {MAX_RANGE_VALUES}")
    integral = all(re.fullmatch(r"[-+]?\d+", g) for g in m.groups())
    values = [start + i * step for i in range(count)]
    return [int(v) for v in values] if integral else [float(v) for v in values]


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets, braces and quotes."""
    parts: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_values(text: str, key: str = "") -> list[Any]:
    """``v1,v2,...`` (each a YAML value; ranges ``start:stop:step`` expand in place)."""
    values: list[Any] = []
    for item in _split_top_level(text):
        if not item.strip():
            raise ConfigError(key or text, f"empty value in {text!r}")
        rng = parse_range(item)
        if rng is not None:
            values.extend(rng)
            continue
        try:
            values.append(parse_yaml(item))
        except yaml.constructor.ConstructorError as exc:
            raise ConfigError(key or text, str(exc.problem)) from None
        except yaml.YAMLError:  # not YAML: keep the text as a string
            values.append(item.strip())
        except (RecursionError, YamlShapeError):
            raise ConfigError(key or text, f"value {item[:40]!r}... is nested too deeply or "
                              f"too large") from None
    return values


def _check_key(key: str, where: str) -> str:
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(where, "a sweep key must be a non-empty dotted path (e.g. "
                                 "workload.arrivals.rate_per_s)")
    return key


def parse_grid(text: str) -> tuple[str, list[Any]]:
    """One ``--grid`` axis: ``dotted.key=v1,v2,...`` or ``dotted.key=start:stop:step``."""
    if "=" not in text:
        raise ConfigError(text, "a grid axis must look like dotted.key=v1,v2,... or "
                                "dotted.key=start:stop:step")
    key, raw = text.split("=", 1)
    key = _check_key(key, text)
    return key, parse_values(raw, key)


@dataclass
class SweepSpec:
    """What to sweep: base overrides, grid axes (in order) and explicit points."""

    base_overrides: list[tuple[str, Any]] = field(default_factory=list)
    grid: list[tuple[str, list[Any]]] = field(default_factory=list)
    points: list[Point] | None = None

    def expand(self) -> list[Point]:
        """Every point, in order: explicit points outermost, then the grid (first axis
        outermost, last axis varying fastest)."""
        return expand_points(self.grid, self.points)


def expand_points(grid: Sequence[tuple[str, Sequence[Any]]],
                  points: Sequence[Mapping[str, Any]] | None = None) -> list[Point]:
    """The cartesian grid, crossed with the explicit points when there are any."""
    keys = [k for k, _ in grid]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ConfigError(dup[0], "the grid sets this key twice")
    for k, vals in grid:
        if not len(vals):
            raise ConfigError(k, "a grid axis needs at least one value")
    asked = math.prod(len(v) for _, v in grid) * (1 if points is None else len(points))
    if asked > MAX_SWEEP_POINTS:
        sizes = " x ".join(str(len(v)) for _, v in grid)
        if points is not None:
            sizes += f" x {len(points)} explicit points"
        raise ConfigError("--grid", f"the sweep asks for {asked:,} points ({sizes}); at "
                                    f"most {MAX_SWEEP_POINTS:,}: sweep fewer values per axis")
    combos = [dict(zip(keys, vals, strict=True))
              for vals in itertools.product(*(v for _, v in grid))]
    if points is None:
        return combos
    out: list[Point] = []
    for p in points:
        both = sorted(set(p) & set(keys))
        if both:
            raise ConfigError(both[0], "set by both the grid and an explicit point")
        out.extend({**p, **c} for c in combos)
    return out


def load_sweep_file(path: str | Path) -> SweepSpec:
    """Read a sweep file (YAML: ``base_overrides``, ``grid``, ``points``; docs/sweeps.md)."""
    data = read_yaml(path)
    where = str(path)
    unknown = sorted(set(data) - set(SWEEP_FILE_KEYS))
    if unknown:
        raise InputFileError(where, None, f"unknown key {unknown[0]!r}; allowed: "
                                          f"{', '.join(SWEEP_FILE_KEYS)}")
    spec = SweepSpec()
    base = data.get("base_overrides") or []
    if isinstance(base, Mapping):
        spec.base_overrides = [(_check_key(str(k), where), v) for k, v in base.items()]
    elif isinstance(base, list):
        for item in base:
            if not isinstance(item, str):
                raise InputFileError(where, None, "base_overrides items must be "
                                                  "'dotted.key=value' strings")
            parts, value = parse_override(item)
            spec.base_overrides.append((".".join(parts), value))
    else:
        raise InputFileError(where, None, "base_overrides must be a list of 'key=value' or "
                                          "a mapping")
    grid = data.get("grid") or {}
    if not isinstance(grid, Mapping):
        raise InputFileError(where, None, "grid must be a mapping of dotted key to values")
    for k, v in grid.items():
        key = _check_key(str(k), where)
        if isinstance(v, list):
            vals = list(v)
        elif isinstance(v, str):
            vals = parse_values(v, key)
        else:
            vals = [v]
        spec.grid.append((key, vals))
    pts = data.get("points")
    if pts is not None:
        if not isinstance(pts, list) or not all(isinstance(p, Mapping) for p in pts):
            raise InputFileError(where, None, "points must be a list of mappings of dotted "
                                              "key to value")
        spec.points = [{_check_key(str(k), where): v for k, v in p.items()} for p in pts]
    return spec
