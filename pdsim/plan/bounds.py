"""Bounds that prune candidates without simulating them, and may never be wrong.

``layout_fits``: the weights of a layout fit its GPUs (the simulator's own memory rule,
``pdsim.perf.memory``); a layout that does not is refused by the simulator itself, so
dropping it loses nothing.

``tpot_lower_bound_s``: no request of the candidate can have a TPOT below it. A decode
step of one request with a one-token context and one query token is the cheapest step any
decode-running instance can take (the roofline's terms only grow with requests, tokens and
context), and a step emits at most ``1 + N`` tokens (all ``N`` drafts accepted plus the
bonus token). After a request's first token, its ``out - 1`` remaining tokens need at least
``(out - 1 - N) / (1 + N)`` further steps (the step of the first token may already have
emitted ``N`` more), so

    TPOT >= t_min * (out_min - 1 - N) / ((1 + N) * (out_min - 1))

with ``out_min`` the workload's shortest output (a bound of 0, which prunes nothing, when
the workload does not bound it). When that exceeds ``slo.tpot_s`` every request misses the
TPOT target, so the SLO percentile does too, at every rate: the candidate has no goodput.
"""

from __future__ import annotations

from pdsim.config import Role, SimConfig
from pdsim.errors import ConfigError
from pdsim.perf.base import StepBatch
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.plan.space import Layout
from pdsim.workload.config import FixedLength, UniformLength


def layout_fits(st: RooflineStepTimeConfig, layout: Layout, drafter_modules: int) -> str | None:
    """None when ``layout``'s weight shard (and ``drafter_modules`` drafter modules) fits
    its GPUs, else the simulator's reason."""
    from pdsim.perf.memory import kv_cache_bytes_per_gpu

    try:
        kv_cache_bytes_per_gpu(st.resolved_model(), st.resolved_hardware(), layout.tp,
                               st.gpu_memory_utilization,
                               expert_parallel_size=layout.expert_parallel_size,
                               drafter_modules=drafter_modules,
                               runtime_reserve_gib=st.runtime_reserve_gib,
                               path=layout.label)
    except ConfigError as exc:
        return str(exc)
    return None


def min_output_tokens(cfg: SimConfig) -> int | None:
    """The shortest output the workload can draw (None when it does not bound it)."""
    if cfg.workload.trace is not None:
        return None
    out = cfg.workload.output_tokens
    if isinstance(out, FixedLength):
        return out.tokens
    if isinstance(out, UniformLength):
        return out.low_tokens
    return None


def tpot_lower_bound_s(cfg: SimConfig) -> float:
    """A TPOT no request of ``cfg`` can beat, in seconds (0 when unbounded)."""
    from pdsim.perf.build import build_step_time_model

    out = min_output_tokens(cfg)
    n = cfg.speculative.num_speculative_tokens if cfg.speculative.enabled else 0
    if out is None or out - 1 - n <= 0:
        return 0.0
    cheapest = StepBatch(prefill_tokens=0, prefill_attention_pairs=0.0, decode_requests=1,
                         decode_tokens=1, decode_context_tokens=1)
    roles = (Role.COLOCATED,) if cfg.cluster.mode == "colocated" else (Role.DECODE,)
    t_min = min(build_step_time_model(cfg, p.role, p.group).step_time_s(cheapest)
                for role in roles for p in cfg.cluster.pools(role))
    return t_min * (out - 1 - n) / ((1 + n) * (out - 1))


__all__ = ["layout_fits", "min_output_tokens", "tpot_lower_bound_s"]
