"""What calibration can fit: the default parameters per step-time model, their search
ranges, and setting them in a config (dotted paths; see ``pdsim.realdata.calibrate``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pdsim.errors import ConfigError
from pdsim.loader import config_from_dict

if TYPE_CHECKING:
    from pdsim.config import SimConfig

SIMPLE_PARAMS: tuple[str, ...] = (
    "step_time.per_token_s", "step_time.weights_floor_s", "step_time.overhead_s")
ROOFLINE_PARAMS: tuple[str, ...] = (
    "step_time.compute_efficiency", "step_time.attention_efficiency",
    "step_time.memory_efficiency", "step_time.moe_efficiency")
STALE_KV_PARAMS: tuple[str, ...] = (
    "speculative.stale_kv.sensitivity_per_slot",
    "speculative.stale_kv.residual_guess_accuracy")
# Fractions of 1 (upper bound 1); every other parameter may range over 1/100..100 x start.
_UNIT_INTERVAL_SUFFIXES = ("_efficiency", "residual_guess_accuracy")
_MIN_FRACTION = 1e-3


def check_root_step_time(cfg: SimConfig) -> None:
    """Calibration fits the root ``step_time``: a pool with a step time of its own is a
    ``ConfigError`` naming it (fitting per-pool step times is not supported)."""
    for pool in cfg.cluster.pools():
        if pool.group.step_time is not None:
            raise ConfigError(f"{pool.path}.step_time", (
                "calibration fits the root step_time only, and this pool has a step time of "
                "its own; calibrate a config without per-pool step times (e.g. one pool's "
                "hardware as the root step_time) and copy the fitted values over"))


def default_params(cfg: SimConfig, with_stale_kv: bool = False) -> tuple[str, ...]:
    """The parameters ``calibrate`` fits when none are given (module docstring)."""
    st = cfg.step_time
    if st.kind == "simple":
        out = SIMPLE_PARAMS
    elif st.kind == "roofline":
        out = ROOFLINE_PARAMS
        if st.tensor_parallel_size > 1 or st.expert_parallel_size > 1:
            out = (*out, "step_time.communication_efficiency")
    else:
        raise ConfigError("step_time.kind", f"the {st.kind} step-time model has no default "
                                            "calibration parameters; name them (--param)")
    if with_stale_kv:
        out = (*out, *STALE_KV_PARAMS)
    return out


def _get(data: Mapping[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ConfigError(path, "no such config value (see `pdsim show-config`)")
    return node


def _set(data: dict[str, Any], path: str, value: float) -> None:
    *head, last = path.split(".")
    node: Any = data
    for part in head:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def with_values(cfg: SimConfig, values: Mapping[str, float]) -> SimConfig:
    """``cfg`` with the numbers at the given dotted paths replaced (validated again)."""
    data = cfg.model_dump(mode="json")
    for path, value in values.items():
        _get(data, path)
        _set(data, path, float(value))
    return config_from_dict(data)


def default_bounds(path: str, start: float) -> tuple[float, float]:
    """Search range of a parameter: (0.001, 1] for efficiencies and probabilities, else
    1/100 to 100 times the starting value."""
    if path.endswith(_UNIT_INTERVAL_SUFFIXES):
        return _MIN_FRACTION, 1.0
    return start / 100.0, start * 100.0


@dataclass(frozen=True)
class ParameterFit:
    """One fitted parameter: where it started, where it ended, the range searched."""

    path: str
    initial: float
    fitted: float
    lower: float
    upper: float

    @property
    def change(self) -> float:
        """fitted / initial - 1."""
        return self.fitted / self.initial - 1.0 if self.initial else math.nan


def resolve_params(cfg: SimConfig, params: Sequence[str],
                   bounds: Mapping[str, tuple[float, float]]
                   ) -> list[tuple[str, float, float, float]]:
    """``(path, start, lower, upper)`` per parameter: each must be a number of the config,
    named once, with ``0 < lower < upper`` (given in ``bounds`` or ``default_bounds``);
    ``start`` is clamped into the bounds. Raises ``ConfigError`` naming the path."""
    data = cfg.model_dump(mode="json")
    out = []
    seen = set()
    for path in params:
        if path in seen:
            raise ConfigError(path, "named twice as a calibration parameter")
        seen.add(path)
        value = _get(data, path)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(path, f"is {value!r}, not a number: only numeric values can "
                                    "be calibrated")
        start = float(value)
        if path in bounds:
            lo, hi = (float(b) for b in bounds[path])
        elif start > 0:
            lo, hi = default_bounds(path, start)
        else:
            raise ConfigError(path, f"starts at {start}; calibration searches in log space, "
                                    "so give a positive start value (--set) or bounds")
        if not 0 < lo < hi:
            raise ConfigError(path, f"bounds must satisfy 0 < lower < upper, got {lo}, {hi}")
        start = min(max(start, lo), hi)
        out.append((path, start, lo, hi))
    if not out:
        raise ConfigError("", "no parameter to calibrate")
    return out
