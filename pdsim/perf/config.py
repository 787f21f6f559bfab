"""Step-time section of the config: kinds simple, roofline and measured.

See docs/step-time.md for the formulas, the defaults and where they come from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from pdsim._model import StrictModel
from pdsim.perf.architecture import DType, ModelArchitecture
from pdsim.perf.hardware import HardwareSpec

NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Efficiency = Annotated[float, Field(gt=0, le=1)]
PositiveInt = Annotated[int, Field(ge=1)]


class SimpleStepTimeConfig(StrictModel):
    """A linear, memory-floor model good enough to run without hardware profiles.

    target_s = overhead_s + max(weights_floor_s, target_tokens * per_token_s)
               + decode_context_tokens * per_context_token_s
               + prefill_attention_pairs * per_attention_pair_s
    drafter_s = drafter passes, each max(drafter_floor_s, tokens * per_token_s *
                drafter_token_cost_ratio)
    """

    kind: Literal["simple"] = "simple"
    overhead_s: Annotated[float, Field(ge=0)] = 0.003
    weights_floor_s: Annotated[float, Field(ge=0)] = 0.012
    per_token_s: Annotated[float, Field(ge=0)] = 4.0e-5
    per_context_token_s: Annotated[float, Field(ge=0)] = 2.0e-9
    per_attention_pair_s: Annotated[float, Field(ge=0)] = 2.0e-12
    drafter_floor_s: Annotated[float, Field(ge=0)] = 0.0006
    drafter_token_cost_ratio: Annotated[float, Field(ge=0)] = 0.04


def _check_profile_name(value: object, kind: str, shipped: Sequence[str],
                        inline: str) -> None:
    """A profile named by a string must be a shipped one."""
    if isinstance(value, str) and value not in shipped:
        raise ValueError(f"unknown {kind} profile {value!r}; shipped: "
                         f"{', '.join(shipped)} (or give {inline} inline)")


class RooflineStepTimeConfig(StrictModel):
    """Step time from a model profile and a hardware profile (a roofline per operator group).

    ``model`` / ``hardware``: a shipped profile name (``pdsim profile`` lists them) or an
    inline spec. An instance runs on ``tensor_parallel_size`` GPUs. ``expert_parallel_size``
    > 1 shards MoE experts over that many GPUs instead of slicing each expert: equal to
    ``tensor_parallel_size`` is vLLM's ``--enable-expert-parallel``; a multiple of it
    means ``expert_parallel_size / tensor_parallel_size`` data-parallel attention ranks
    (instances) share one expert pool, each assumed to run a batch like this one.

    The dtype fields override the model profile's. Efficiency factors scale the vendor
    peaks: ``compute_efficiency`` (GEMMs), ``attention_efficiency`` (attention kernels),
    ``memory_efficiency`` (HBM), ``moe_efficiency`` (an extra factor on both for routed
    experts: grouped MoE kernels on thin expert slices run below dense GEMMs),
    ``communication_efficiency`` (collectives). Fixed costs:
    ``overhead_s`` per step (scheduling, input preparation, sampling),
    ``per_layer_overhead_s`` per target layer (kernel launch gaps),
    ``drafter_pass_overhead_s`` per drafter forward, ``collective_latency_s`` per
    collective. ``gpu_memory_utilization`` and ``runtime_reserve_gib`` size the KV cache
    (``pdsim.perf.memory``); weights that do not fit are a config error.
    """

    kind: Literal["roofline"] = "roofline"
    model: str | ModelArchitecture
    hardware: str | HardwareSpec
    tensor_parallel_size: PositiveInt = 1
    expert_parallel_size: PositiveInt = 1
    weight_dtype: DType | None = None
    expert_weight_dtype: DType | None = None
    kv_cache_dtype: DType | None = None
    activation_dtype: DType | None = None
    compute_efficiency: Efficiency = 0.65
    attention_efficiency: Efficiency = 0.5
    memory_efficiency: Efficiency = 0.75
    moe_efficiency: Efficiency = 0.7
    communication_efficiency: Efficiency = 0.7
    collective_latency_s: NonNegFloat = 2.0e-5
    overhead_s: NonNegFloat = 1.0e-3
    per_layer_overhead_s: NonNegFloat = 1.0e-5
    drafter_pass_overhead_s: NonNegFloat = 1.0e-4
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    runtime_reserve_gib: NonNegFloat = 2.0

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str | ModelArchitecture) -> str | ModelArchitecture:
        from pdsim.perf.profiles import model_names

        _check_profile_name(v, "model", model_names(), "the architecture")
        return v

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, v: str | HardwareSpec) -> str | HardwareSpec:
        from pdsim.perf.profiles import hardware_names

        _check_profile_name(v, "hardware", hardware_names(), "the spec")
        return v

    @model_validator(mode="after")
    def _check(self) -> RooflineStepTimeConfig:
        from pdsim.errors import ConfigError
        from pdsim.perf.memory import kv_cache_bytes_per_gpu

        ep, tp = self.expert_parallel_size, self.tensor_parallel_size
        if ep > 1 and ep % tp:
            raise ValueError(f"expert_parallel_size ({ep}) must be 1 or a multiple of "
                             f"tensor_parallel_size ({tp})")
        # the target alone must fit; drafter modules are checked when the model is built
        try:
            kv_cache_bytes_per_gpu(self.resolved_model(), self.resolved_hardware(), tp,
                                   self.gpu_memory_utilization, expert_parallel_size=ep,
                                   runtime_reserve_gib=self.runtime_reserve_gib)
        except ConfigError as exc:
            raise ValueError(exc.message) from None
        return self

    def resolved_model(self) -> ModelArchitecture:
        """The model architecture, dtype overrides applied. Raises ``ConfigError``."""
        from pdsim.perf.profiles import load_model_architecture, with_dtypes

        arch = load_model_architecture(self.model, "step_time.model")
        return with_dtypes(arch, weight_dtype=self.weight_dtype,
                           expert_weight_dtype=self.expert_weight_dtype,
                           kv_cache_dtype=self.kv_cache_dtype,
                           activation_dtype=self.activation_dtype)

    def resolved_hardware(self) -> HardwareSpec:
        """The hardware spec. Raises ``ConfigError`` for an unknown profile name."""
        from pdsim.perf.profiles import load_hardware

        return load_hardware(self.hardware, "step_time.hardware")


class MeasuredStepTimeConfig(StrictModel):
    """Step times interpolated from a CSV of measurements (format: docs/step-time.md).

    ``csv_path``: the file (relative paths resolve against the working directory).
    Prefill rows are interpolated over (tokens, context_tokens), decode rows over
    (tokens, context_tokens); a step with both adds the two and subtracts
    ``mixed_overlap_s`` once (the fixed cost both measurements include).
    ``extrapolation``: beyond the measured range, ``linear`` continues the last segment,
    ``clamp`` holds the edge value. ``drafter_repair_token_s``: seconds per drafter
    re-prefill (repair) token, which step measurements do not separate out.
    """

    kind: Literal["measured"] = "measured"
    csv_path: str
    extrapolation: Literal["linear", "clamp"] = "linear"
    mixed_overlap_s: NonNegFloat = 0.0
    drafter_repair_token_s: NonNegFloat = 0.0


StepTimeConfig = Annotated[
    SimpleStepTimeConfig | RooflineStepTimeConfig | MeasuredStepTimeConfig,
    Field(discriminator="kind"),
]
