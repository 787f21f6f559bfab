"""Workload section of the config: arrival processes, length distributions, trace replay.

Every variant is a frozen strict model selected by its ``kind``. Cross-field rules live in
``model_validator``s and raise ``ValueError`` with a message that says what to change.
See docs/workloads.md for a YAML example of every kind.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from pdsim._model import (
    MAX_REQUESTS,
    MAX_TOKENS,
    MIN_RATE_PER_S,
    StrictModel,
    at_least,
    at_most,
    seconds_bound,
)
from pdsim.workload.shared_prefix import SharedPrefixConfig

PositiveInt = Annotated[int, Field(ge=1)]
_REQUESTS_WHY = ("a run keeps every request in memory, about 2 KB each, and simulates "
                 "about 17,000 a second (measured)")
RequestCount = Annotated[int, Field(ge=1), at_most(MAX_REQUESTS, _REQUESTS_WHY)]
TokenCount = Annotated[int, Field(ge=1), at_most(
    MAX_TOKENS, "pdsim keeps token counts well inside 64-bit arrays")]
# A rate below one request in ~32 years has gaps no float time can add up
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False), at_least(
    MIN_RATE_PER_S, "smaller rates put arrivals beyond any simulated time")]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]

# ------------------------------------------------------------------------- arrivals


class PoissonArrivals(StrictModel):
    """Open-loop Poisson arrivals: exponential gaps with mean ``1 / rate_per_s`` seconds."""

    kind: Literal["poisson"] = "poisson"
    """Selects this variant: Open-loop Poisson arrivals."""
    rate_per_s: Rate
    """Mean arrival rate, requests per second."""

    @property
    def gap_cv(self) -> float:
        """Coefficient of variation of the inter-arrival gaps."""
        return 1.0


class GammaArrivals(StrictModel):
    """Open-loop renewal arrivals with gamma gaps: mean ``1 / rate_per_s``, burstiness by CV.

    Give exactly one of ``cv`` (coefficient of variation of the gaps; 1 is Poisson, > 1
    bursty, < 1 smoother) or ``burstiness`` (vLLM ``bench serve --burstiness``, the gamma
    shape; ``cv = 1 / sqrt(burstiness)``).
    """

    kind: Literal["gamma"] = "gamma"
    """Selects this variant: Open-loop renewal arrivals with gamma gaps."""
    rate_per_s: Rate
    """Mean arrival rate, requests per second."""
    cv: PositiveFloat | None = None
    """Coefficient of variation of the gaps (1: Poisson); give this or burstiness."""
    burstiness: PositiveFloat | None = None
    """vLLM bench serve --burstiness (the gamma shape, cv = 1/sqrt(burstiness)); give this or
    cv."""

    @model_validator(mode="after")
    def _one_shape(self) -> GammaArrivals:
        if (self.cv is None) == (self.burstiness is None):
            raise ValueError("gamma arrivals need exactly one of cv or burstiness "
                             "(cv = 1 / sqrt(burstiness))")
        return self

    @property
    def shape(self) -> float:
        """Gamma shape k of the gaps (vLLM's burstiness); the scale is ``1 / (k * rate)``."""
        if self.burstiness is not None:
            return self.burstiness
        assert self.cv is not None
        return 1.0 / (self.cv * self.cv)

    @property
    def gap_cv(self) -> float:
        return 1.0 / math.sqrt(self.shape)


class ConstantArrivals(StrictModel):
    """Deterministic arrivals every ``1 / rate_per_s`` seconds (the first at one gap)."""

    kind: Literal["constant"] = "constant"
    """Selects this variant: Deterministic arrivals every `1 / rate_per_s` seconds (the first at
    one gap)."""
    rate_per_s: Rate
    """Arrivals per second, evenly spaced."""

    @property
    def gap_cv(self) -> float:
        return 0.0


class ClosedLoopArrivals(StrictModel):
    """A closed loop of ``concurrency`` clients (``vllm bench serve --max-concurrency``).

    No arrival times are drawn: the engine starts ``concurrency`` requests at once and
    releases the next request each time one finishes.
    """

    kind: Literal["closed_loop"] = "closed_loop"
    """Selects this variant: A closed loop of `concurrency` clients (`vllm bench serve
    --max-concurrency`)."""
    concurrency: RequestCount
    """Clients, each sending its next request when the last finishes (vLLM --max-concurrency)."""


Arrivals = Annotated[
    PoissonArrivals | GammaArrivals | ConstantArrivals | ClosedLoopArrivals,
    Field(discriminator="kind"),
]

# -------------------------------------------------------------------------- lengths


class FixedLength(StrictModel):
    """Every request has exactly ``tokens`` tokens."""

    kind: Literal["fixed"] = "fixed"
    """Selects this variant: Every request has exactly `tokens` tokens."""
    tokens: TokenCount
    """Tokens of every request."""

    @property
    def expected_tokens(self) -> float:
        return float(self.tokens)


class UniformLength(StrictModel):
    """vLLM's random dataset: integers uniform in ``[low, high]`` inclusive.

    ``low = max(1, floor(mean_tokens * (1 - range_ratio)))`` and
    ``high = max(1, ceil(mean_tokens * (1 + range_ratio)))``, computed in floating point
    exactly as vLLM's ``RandomDataset.get_sampling_params`` does.
    """

    kind: Literal["uniform"] = "uniform"
    """Selects this variant: uniform lengths, as vLLM's random dataset draws them."""
    mean_tokens: TokenCount
    """Mean tokens (vLLM random dataset's input/output length)."""
    range_ratio: Annotated[float, Field(ge=0, lt=1)]
    """Half-width of the range as a fraction of the mean (vLLM --random-range-ratio)."""

    @property
    def low_tokens(self) -> int:
        return max(1, math.floor(self.mean_tokens * (1 - self.range_ratio)))

    @property
    def high_tokens(self) -> int:
        return max(1, math.ceil(self.mean_tokens * (1 + self.range_ratio)))

    @property
    def expected_tokens(self) -> float:
        return (self.low_tokens + self.high_tokens) / 2.0


class _SpreadLength(StrictModel):
    """Mean and spread in tokens; the spread is ``std_tokens`` or ``cv`` (exactly one, > 0;
    use ``fixed`` for no spread).

    Draws are rounded to the nearest integer and clipped to ``[1, max_tokens]``; clipping
    moves the realised mean away from ``mean_tokens`` when much mass lies outside.
    """

    kind: Literal["normal", "lognormal"]
    """Selects this variant: Mean and spread in tokens."""
    mean_tokens: PositiveFloat
    """Mean tokens."""
    std_tokens: PositiveFloat | None = None
    """Standard deviation in tokens; give this or cv."""
    cv: PositiveFloat | None = None
    """Coefficient of variation (std / mean); give this or std_tokens."""
    max_tokens: TokenCount | None = None
    """Draws are clipped to this many tokens; null: no cap."""

    @model_validator(mode="after")
    def _one_spread(self) -> _SpreadLength:
        if (self.std_tokens is None) == (self.cv is None):
            raise ValueError("give exactly one of std_tokens or cv (cv = std_tokens / "
                             "mean_tokens)")
        if self.max_tokens is not None and self.max_tokens < self.mean_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) is below mean_tokens "
                             f"({self.mean_tokens})")
        return self

    @property
    def sigma_tokens(self) -> float:
        """The standard deviation in tokens, whichever way it was given."""
        if self.std_tokens is not None:
            return self.std_tokens
        assert self.cv is not None
        return self.cv * self.mean_tokens

    @property
    def expected_tokens(self) -> float:
        """The mean before rounding and clipping."""
        return self.mean_tokens


class NormalLength(_SpreadLength):
    """Normal with ``mean_tokens`` and ``std_tokens`` (or ``cv``), rounded and clipped."""

    kind: Literal["normal"] = "normal"
    """Selects this variant: Normal with `mean_tokens` and `std_tokens` (or `cv`), rounded and
    clipped."""


class LognormalLength(_SpreadLength):
    """Lognormal whose own mean and std are ``mean_tokens`` and ``std_tokens`` (or ``cv``).

    The underlying normal has ``sigma^2 = ln(1 + cv^2)`` and ``mu = ln(mean) - sigma^2/2``.
    """

    kind: Literal["lognormal"] = "lognormal"
    """Selects this variant: Lognormal whose own mean and std are `mean_tokens` and `std_tokens`
    (or `cv`)."""

    @property
    def log_sigma(self) -> float:
        cv = self.sigma_tokens / self.mean_tokens
        return math.sqrt(math.log1p(cv * cv))

    @property
    def log_mu(self) -> float:
        return math.log(self.mean_tokens) - self.log_sigma ** 2 / 2.0


class EmpiricalLength(StrictModel):
    """A histogram: ``values`` + ``weights``, or ``bin_edges`` + ``weights``.

    With ``values``, a draw is ``values[i]`` with probability ``weights[i] / sum(weights)``.
    With ``bin_edges`` (integers, strictly increasing, first >= 1), bin i holds the
    integers ``bin_edges[i] <= x < bin_edges[i + 1]``, drawn uniformly within the bin.
    """

    kind: Literal["empirical"] = "empirical"
    """Selects this variant: A histogram."""
    values: tuple[TokenCount, ...] | None = None
    """Token counts drawn with the weights (or give bin_edges)."""
    bin_edges: tuple[TokenCount, ...] | None = None
    """Strictly increasing integer bin edges; a draw is uniform within its bin."""
    weights: tuple[Weight, ...]
    """Relative weight of each value or bin."""

    @model_validator(mode="after")
    def _check(self) -> EmpiricalLength:
        if (self.values is None) == (self.bin_edges is None):
            raise ValueError("give exactly one of values or bin_edges (with weights)")
        if self.values is not None and len(self.values) != len(self.weights):
            raise ValueError(f"values has {len(self.values)} entries and weights "
                             f"{len(self.weights)}: give one weight per value")
        if self.bin_edges is not None:
            if len(self.bin_edges) != len(self.weights) + 1:
                raise ValueError(f"bin_edges has {len(self.bin_edges)} entries and weights "
                                 f"{len(self.weights)}: give one more edge than weights")
            if any(b <= a for a, b in zip(self.bin_edges, self.bin_edges[1:], strict=False)):
                raise ValueError("bin_edges must be strictly increasing")
        if not self.weights or not sum(self.weights) > 0:
            raise ValueError("weights must sum to more than 0")
        return self

    @property
    def probabilities(self) -> tuple[float, ...]:
        total = math.fsum(self.weights)
        return tuple(w / total for w in self.weights)

    @property
    def expected_tokens(self) -> float:
        p = self.probabilities
        if self.values is not None:
            return math.fsum(pi * v for pi, v in zip(p, self.values, strict=True))
        assert self.bin_edges is not None
        mids = [(lo + hi - 1) / 2.0 for lo, hi in zip(self.bin_edges, self.bin_edges[1:],
                                                      strict=False)]
        return math.fsum(pi * m for pi, m in zip(p, mids, strict=True))


LengthDist = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength | EmpiricalLength,
    Field(discriminator="kind"),
]

# ---------------------------------------------------------------------------- traces


class _TraceBase(StrictModel):
    """Replay of a recorded trace; arrivals and lengths come from the file.

    ``path`` is relative to the current directory, or ``pkg:<path>`` for pdsim's shipped
    data (``pkg:traces/mooncake_sample.jsonl``). Rows whose time since the first row is
    below ``start_offset_s`` (trace seconds) are skipped; then at most ``max_requests``
    rows are kept; the first kept row arrives at 0 and later gaps are multiplied by
    ``time_scale`` (0.5 halves them), or scaled so the mean rate is ``target_rate_per_s``.
    Timestamps that go backwards are an error (``unsorted: error``) or sorted stably
    (``unsorted: sort``). A row with 0 input or output tokens is an error unless
    ``skip_zero_length`` drops it.
    """

    kind: Literal["mooncake", "azure"]
    """Selects this variant: Replay of a recorded trace."""
    path: Annotated[str, Field(min_length=1)]
    """Trace file, relative to the working directory, or pkg:<path> for pdsim's shipped data."""
    time_scale: PositiveFloat | None = None
    """Multiplies the trace's gaps (0.5 halves them); give this or target_rate_per_s."""
    target_rate_per_s: Rate | None = None
    """Scale the gaps so the mean rate is this many requests per second."""
    start_offset_s: Annotated[NonNegFloat, seconds_bound()] = 0.0
    """Skip rows earlier than this many trace seconds after the first."""
    max_requests: RequestCount | None = None
    """Keep at most this many rows; null: all."""
    unsorted: Literal["error", "sort"] = "error"
    """Timestamps that go backwards: error, or sort stably."""
    skip_zero_length: bool = False
    """Drop rows with 0 input or output tokens instead of failing."""

    @model_validator(mode="after")
    def _one_scaling(self) -> _TraceBase:
        if self.time_scale is not None and self.target_rate_per_s is not None:
            raise ValueError("give time_scale or target_rate_per_s, not both")
        return self


class MooncakeTrace(_TraceBase):
    """Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.

    ``hash_ids`` are the prompt's block hashes, one per ``hash_block_tokens`` tokens
    (512 in the Mooncake traces); they are passed on for prefix caching.
    """

    kind: Literal["mooncake"] = "mooncake"
    """Selects this variant: Mooncake JSONL."""
    hash_block_tokens: TokenCount = 512
    """Tokens per hash_ids block (512 in Mooncake traces)."""


class AzureTrace(_TraceBase):
    """Azure LLM inference CSV: ``TIMESTAMP`` (datetime), ``ContextTokens``,
    ``GeneratedTokens``."""

    kind: Literal["azure"] = "azure"
    """Selects this variant: Azure LLM inference CSV."""


Trace = Annotated[MooncakeTrace | AzureTrace, Field(discriminator="kind")]

# -------------------------------------------------------------------------- workload


class WorkloadConfig(StrictModel):
    """Which requests arrive, when, and how long their prompts and outputs are.

    Synthetic workloads stop after ``num_requests`` requests or at ``duration_s`` seconds,
    whichever comes first. With a ``trace``, arrivals and lengths come from the trace
    (``num_requests`` defaults to null there; cap the trace with ``trace.max_requests``),
    ``duration_s`` still cuts the replay, and ``arrivals`` is consulted only when it is
    ``closed_loop`` (the trace's requests are then released at that concurrency).
    """

    num_requests: RequestCount | None = 200
    """Stop after this many requests; null: no count limit."""
    duration_s: Annotated[PositiveFloat, seconds_bound()] | None = None
    """Stop arrivals at this simulated time, in seconds; null: no time limit."""
    arrivals: Arrivals = PoissonArrivals(rate_per_s=4.0)
    """When requests arrive: poisson, gamma, constant or closed_loop."""
    prompt_tokens: LengthDist = FixedLength(tokens=1024)
    """Prompt length distribution."""
    output_tokens: LengthDist = FixedLength(tokens=256)
    """Output length distribution."""
    trace: Trace | None = None
    """Replay a recorded trace (mooncake or azure) instead of synthetic arrivals and lengths."""
    shared_prefix: SharedPrefixConfig | None = None
    """Prefix groups (synthetic workloads): each prompt is its group's shared prefix, then a
    unique suffix of prompt_tokens tokens, with hash ids for prefix caching; null: none."""

    @property
    def shared_prefix_tokens(self) -> int:
        """Tokens every prompt carries before the length ``prompt_tokens`` draws."""
        return self.shared_prefix.prefix_tokens if self.shared_prefix is not None else 0

    @model_validator(mode="after")
    def _bounded(self) -> WorkloadConfig:
        closed = isinstance(self.arrivals, ClosedLoopArrivals)
        if closed and self.duration_s is not None:
            raise ValueError("duration_s does not apply to closed_loop arrivals (their times "
                             "depend on the engine); bound the run with num_requests")
        if self.trace is not None:
            if self.shared_prefix is not None:
                raise ValueError("shared_prefix applies to synthetic workloads; a trace "
                                 "brings its own hash_ids: remove one of them")
            if "num_requests" not in self.model_fields_set:
                # A trace bounds itself: the synthetic default of 200 must not cut it. (Set
                # here, not in a "before" validator, which would make JSON input lose
                # strict list -> tuple validation.)
                object.__setattr__(self, "num_requests", None)
            if self.num_requests is not None:
                raise ValueError("with a trace, cap the number of requests with "
                                 "trace.max_requests, not num_requests")
            if closed and (self.trace.time_scale is not None
                           or self.trace.target_rate_per_s is not None):
                raise ValueError("time_scale and target_rate_per_s have no effect under "
                                 "closed_loop arrivals; remove them")
            return self
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s (or both)")
        if closed and self.num_requests is None:
            raise ValueError("closed_loop arrivals need num_requests")
        rate = getattr(self.arrivals, "rate_per_s", None)
        if self.num_requests is None and self.duration_s is not None and rate is not None:
            expected = self.duration_s * rate
            if not expected <= MAX_REQUESTS:
                raise ValueError(
                    f"duration_s x arrivals.rate_per_s is {expected:.3g} requests; at most "
                    f"{MAX_REQUESTS:,} ({_REQUESTS_WHY}): shorten duration_s or set "
                    f"num_requests")
        if self.shared_prefix is not None:
            n = self.num_requests if self.num_requests is not None else (
                (self.duration_s or 0.0) * (rate or 0.0))
            issue = self.shared_prefix.hash_ids_issue(n, self.prompt_tokens.expected_tokens)
            if issue is not None:
                raise ValueError(issue)
        return self
