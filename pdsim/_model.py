"""The strict, frozen pydantic base every config section derives from."""

from __future__ import annotations

from typing import Any

from pydantic import AfterValidator, BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Frozen and strict: unknown keys are errors, values are never coerced from strings."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True,
                              use_attribute_docstrings=True)


# Upper bounds on counts and sizes: each keeps a run within the memory and time one machine
# has (measured figures in docs/reliability.md), and every float derived from them finite.
MAX_REQUESTS = 5_000_000
MAX_INSTANCES = 1024
MAX_BATCH_SEQS = 65_536
MAX_TOKENS = 2**24
MAX_KV_CACHE_GIB = 2.0**20
MAX_BLOCKS = 2**48
MIN_RATE_PER_S = 1e-9
MAX_SECONDS = 1e9  # about 32 years
MIN_BANDWIDTH_GB_PER_S = 1e-6


def seconds_bound() -> AfterValidator:
    """Durations and per-unit costs: at most ``MAX_SECONDS``, so every simulated time and
    latency statistic (squares included) stays finite."""
    return at_most(MAX_SECONDS, "about 32 years; larger times overflow the latency "
                                "statistics")


def at_most(limit: float, reason: str) -> AfterValidator:
    """A validator refusing values above ``limit``, with the reason in the message."""

    def check(value: Any) -> Any:
        if value is not None and value > limit:
            raise ValueError(f"at most {_shown(limit)} ({reason})")
        return value

    return AfterValidator(check)


def at_least(limit: float, reason: str) -> AfterValidator:
    """A validator refusing values below ``limit``, with the reason in the message."""

    def check(value: Any) -> Any:
        if value is not None and value < limit:
            raise ValueError(f"at least {_shown(limit)} ({reason})")
        return value

    return AfterValidator(check)


def _shown(limit: float) -> str:
    return f"{int(limit):,}" if float(limit).is_integer() and limit >= 1 else f"{limit:g}"
