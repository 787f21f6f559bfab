"""Build the step-time model an instance uses, from the root config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdsim.perf.base import StepTimeModel
from pdsim.perf.config import SimpleStepTimeConfig
from pdsim.perf.simple import SimpleStepTime

if TYPE_CHECKING:
    from pdsim.config import Role, SimConfig


def drafter_passes(cfg: SimConfig) -> tuple[int, int]:
    """(sequential drafter passes per decode step, drafter modules per prefill token)."""
    n = cfg.speculative.num_speculative_tokens
    if not cfg.speculative.enabled:
        return 0, 0
    if cfg.speculative.method == "ngram":
        return 0, 0  # n-gram lookup runs on the CPU between steps: no GPU pass
    return n, cfg.num_drafter_modules


def build_step_time_model(cfg: SimConfig, role: Role) -> StepTimeModel:
    """The step-time model of an instance of ``role`` under ``cfg``."""
    st = cfg.step_time
    passes, modules = drafter_passes(cfg)
    if isinstance(st, SimpleStepTimeConfig):
        return SimpleStepTime(st, passes, modules)
    raise NotImplementedError(f"step_time kind {st.kind}")  # pragma: no cover
