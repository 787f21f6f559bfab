"""Build the step-time model an instance uses, from the root config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdsim.errors import ConfigError
from pdsim.perf.base import StepTimeModel
from pdsim.perf.config import (
    MeasuredStepTimeConfig,
    RooflineStepTimeConfig,
    SimpleStepTimeConfig,
)
from pdsim.perf.simple import SimpleStepTime

if TYPE_CHECKING:
    from pdsim.config import InstanceGroupConfig, Role, SimConfig

# which drafter section of a model profile each speculative method runs
_DRAFTER_KINDS: dict[str, frozenset[str]] = {
    "mtp": frozenset({"mtp"}),
    "eagle": frozenset({"eagle", "eagle3"}),
    "eagle3": frozenset({"eagle3"}),
}


def drafter_passes(cfg: SimConfig) -> tuple[int, int]:
    """(sequential drafter passes per decode step, drafter modules per prefill token)."""
    n = cfg.speculative.num_speculative_tokens
    if not cfg.speculative.enabled:
        return 0, 0
    if cfg.speculative.method == "ngram":
        return 0, 0  # n-gram lookup runs on the CPU between steps: no GPU pass
    return n, cfg.num_drafter_modules


def build_step_time_model(cfg: SimConfig, role: Role,
                          group: InstanceGroupConfig | None = None) -> StepTimeModel:
    """The step-time model of an instance of ``role`` in ``group`` under ``cfg``: the
    group's own step time (``cfg.step_time_of(group)``), else the root's.

    Raises ``ConfigError`` when a roofline model cannot cost the configured drafter
    (no drafter in the model profile, a method the profile's drafter does not serve,
    a separate draft model) or when target plus drafter weights do not fit.
    """
    st = cfg.step_time_of(group)
    passes, modules = drafter_passes(cfg)
    if isinstance(st, SimpleStepTimeConfig):
        return SimpleStepTime(st, passes, modules)
    if isinstance(st, RooflineStepTimeConfig):
        path = ("step_time" if group is None or group.step_time is None
                else f"{cfg.pool(group).path}.step_time")
        _check_roofline_drafter(cfg, st, path)
        from pdsim.perf.roofline import RooflineStepTime

        return RooflineStepTime(st, passes, modules)
    if isinstance(st, MeasuredStepTimeConfig):
        from pdsim.perf.measured import MeasuredStepTime

        return MeasuredStepTime(st)
    raise NotImplementedError(f"step_time kind {st.kind}")  # pragma: no cover


def _check_roofline_drafter(cfg: SimConfig, st: RooflineStepTimeConfig, path: str) -> None:
    from pdsim.perf.memory import kv_cache_bytes_per_gpu

    method = cfg.speculative.method
    arch = st.resolved_model()
    modules = 0
    if method == "draft_model":
        raise ConfigError("speculative.method", (
            "the roofline step-time model cannot cost a separate draft model; use an "
            "eagle/eagle3/mtp drafter from the model profile, or step_time kind simple or "
            "measured"))
    if method in _DRAFTER_KINDS:
        d = arch.drafter
        if d is None:
            raise ConfigError("speculative.method", (
                f"{method} needs a drafter, but model profile {arch.name} has none; use a "
                f"profile with a drafter section or step_time kind simple"))
        if d.kind not in _DRAFTER_KINDS[method]:
            raise ConfigError("speculative.method", (
                f"model profile {arch.name} ships a {d.kind} drafter, not {method}"))
        if d.kind == "mtp" and cfg.num_drafter_modules > d.num_modules:
            raise ConfigError("speculative.num_speculative_tokens", (
                f"multi-module MTP needs {cfg.num_drafter_modules} modules but "
                f"{arch.name} ships {d.num_modules}"))
        modules = cfg.num_drafter_modules
    kv_cache_bytes_per_gpu(arch, st.resolved_hardware(), st.tensor_parallel_size,
                           st.gpu_memory_utilization,
                           expert_parallel_size=st.expert_parallel_size,
                           drafter_modules=modules,
                           runtime_reserve_gib=st.runtime_reserve_gib, path=path,
                           **st.memory_rule_kwargs())
