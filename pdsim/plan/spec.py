"""What ``pdsim plan`` searches: the ``plan:`` section of a config, as frozen strict data.

The section sits beside the simulation config's own sections in the YAML and is read (and
removed) before the rest is validated as a ``SimConfig``: the config names the model, the
hardware, the workload and the SLOs; ``plan:`` (and the command's flags) narrows the space.
Every field left out means "everything the model and the GPU allow" (``None``) or the
config's own value, as each field's docstring says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from pdsim._model import MAX_BATCH_SEQS, MAX_TOKENS, StrictModel

Mode = Literal["colocated", "disaggregated"]
Objective = Literal["goodput", "workload"]

PositiveInt = Annotated[int, Field(ge=1)]
SeqCount = Annotated[int, Field(ge=1, le=MAX_BATCH_SEQS)]
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
IntList = tuple[PositiveInt, ...]

DEFAULT_PLAN_TOL = 0.05
"""The plan's rate bisection stops within 5% (``pdsim search`` uses 2%): a front point's
figures carry the model's validation error of about a quarter anyway (``VALIDATION_ERROR``)."""


class RoleSpace(StrictModel):
    """The scheduler limits searched for one role (None: the config's value only)."""

    max_num_seqs: tuple[SeqCount, ...] | None = None
    """vLLM --max-num-seqs values to try; null: the role's configured value."""
    max_num_batched_tokens: tuple[TokenCount, ...] | None = None
    """vLLM --max-num-batched-tokens values to try; null: the role's configured value."""


class PlanSpec(StrictModel):
    """The search space and how each candidate is judged."""

    gpus: PositiveInt | None = None
    """The GPU budget; every candidate uses all of it (``--gpus`` overrides)."""
    modes: tuple[Mode, ...] = ("colocated", "disaggregated")
    """Deployment modes to compare."""
    tensor_parallel_sizes: IntList | None = None
    """TP sizes per instance to try; null: every power of two that divides the heads."""
    data_parallel_sizes: IntList | None = None
    """Attention data-parallel ranks sharing one expert pool (MoE models); null: every power
    of two the budget holds. 1 is plain tensor parallelism."""
    expert_parallel: tuple[bool, ...] = (False, True)
    """With and/or without expert parallelism (MoE models; ignored for dense ones)."""
    num_speculative_tokens: tuple[Annotated[int, Field(ge=0)], ...] | None = None
    """Draft tokens per step to try; null: 0 up to the model's maximum (its MTP modules, or
    for a one-module or non-MTP drafter the depths the acceptance gives rates for)."""
    prefill: RoleSpace = RoleSpace()
    """Scheduler limits of prefill instances (disaggregated)."""
    decode: RoleSpace = RoleSpace()
    """Scheduler limits of decode instances (disaggregated)."""
    colocated: RoleSpace = RoleSpace()
    """Scheduler limits of colocated instances."""
    routers: tuple[str, ...] | None = None
    """Routing policies to try where a role has more than one instance; null: the config's."""
    objective: Objective = "goodput"
    """goodput: each candidate at its highest SLO-meeting rate; workload: at the config's
    rate."""
    tol: Annotated[float, Field(gt=0, lt=1)] = DEFAULT_PLAN_TOL
    """Rate bisection tolerance (fraction of the upper end), goodput objective."""
    min_requests: PositiveInt = 1000
    """Requests per simulated rate at least (goodput objective; pdsim search's default)."""
    served_model: str | None = None
    """The model argument of the exported ``vllm serve`` lines (e.g. deepseek-ai/DeepSeek-V3);
    null: the model profile's name."""
    hf_config: str | None = None
    """The model's Hugging Face config.json (relative to the config file), written into the
    exported deployment files so ``pdsim import-vllm --deployment`` reads them back."""

    @model_validator(mode="after")
    def _check(self) -> PlanSpec:
        if not self.modes:
            raise ValueError("modes: give at least one of colocated, disaggregated")
        if not self.expert_parallel:
            raise ValueError("expert_parallel: give true, false or both")
        if self.routers is not None:
            from pdsim.policies import ROUTERS

            unknown = [r for r in self.routers if r not in ROUTERS]
            if unknown or not self.routers:
                raise ValueError(f"routers: unknown {unknown or 'empty list'}; "
                                 f"registered: {', '.join(sorted(ROUTERS))}")
        return self


def read_plan_config(path: str | Path, overrides: list[str] | None = None,
                     seed: int | None = None) -> tuple[Any, PlanSpec]:
    """``(SimConfig, PlanSpec)`` from a YAML file with an optional ``plan:`` section.

    ``overrides`` (``--set key=value``) apply to the simulation config, not to ``plan``.
    Raises ``ConfigError`` (naming ``plan.<field>`` for the plan section) or
    ``InputFileError``; never another exception for bad input.
    """
    from pdsim.errors import ConfigError
    from pdsim.loader import load_config, read_yaml, resolve_profile_files

    data = read_yaml(path)
    raw = data.pop("plan", None)
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError("plan", f"must be a mapping, not {type(raw).__name__}")
    spec = plan_spec(raw or {}, "plan")
    if spec.hf_config is not None and not Path(spec.hf_config).is_absolute():
        spec = spec.model_copy(update={
            "hf_config": str((Path(path).parent / spec.hf_config).resolve())})
    data = resolve_profile_files(data, Path(path).parent)
    cfg = load_config(data, overrides or [], seed=seed)
    return cfg, spec


def plan_spec(raw: dict[str, Any], where: str = "plan") -> PlanSpec:
    """Validate a YAML-shaped ``plan`` mapping (as JSON: lists become tuples). Raises
    ``ConfigError`` naming ``<where>.<field>``."""
    import json

    from pydantic import ValidationError

    from pdsim.config_errors import validation_issues
    from pdsim.errors import ConfigError

    try:
        return PlanSpec.model_validate_json(json.dumps(raw))
    except ValidationError as exc:
        raise ConfigError("", issues=[(f"{where}.{p}" if p else where, m) for p, m in
                                      validation_issues(exc, raw)]) from None
