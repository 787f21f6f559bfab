"""Workload section of the config: arrivals and lengths (extended by the workload module)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from pdsim._model import StrictModel


class PoissonArrivals(StrictModel):
    """Open-loop Poisson arrivals at ``rate_per_s`` requests per second."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: Annotated[float, Field(gt=0)]


Arrivals = Annotated[PoissonArrivals, Field(discriminator="kind")]


class FixedLength(StrictModel):
    """Every request has exactly ``tokens`` tokens."""

    kind: Literal["fixed"] = "fixed"
    tokens: Annotated[int, Field(ge=1)]


LengthDist = Annotated[FixedLength, Field(discriminator="kind")]


class WorkloadConfig(StrictModel):
    """Which requests arrive, when, and how long their prompts and outputs are."""

    num_requests: Annotated[int, Field(ge=1)] | None = 200
    duration_s: Annotated[float, Field(gt=0)] | None = None
    arrivals: Arrivals = PoissonArrivals(rate_per_s=4.0)
    prompt_tokens: LengthDist = FixedLength(tokens=1024)
    output_tokens: LengthDist = FixedLength(tokens=256)

    @model_validator(mode="after")
    def _bounded(self) -> WorkloadConfig:
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s (or both)")
        return self
