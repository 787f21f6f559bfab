"""Step time of an attention-DP engine: its ranks' batches priced as one lockstep step.

An attention-data-parallel engine (vLLM's ``--data-parallel-size`` with expert
parallelism, SGLang's ``--enable-dp-attention``, TensorRT-LLM's ``enable_attention_dp``)
runs one forward on every rank at once: each rank computes attention and the dense
layers of its own batch, then every MoE layer's dispatch and combine all-to-alls join
the ranks, and each GPU computes its experts on the tokens routed to it from all ranks.
A rank with nothing scheduled still runs a dummy forward (vLLM's ``execute_dummy_batch``,
one token) so the collectives complete. Per layer the ranks wait for each other, so:

- the rank part (attention, dense layers, LM head, sampling, all-reduces, the
  all-to-alls' share of the rank's own tokens, CPU and kernel costs) is the slowest
  rank's, idle ranks priced as the one-token dummy forward;
- the MoE part (expert GEMMs and expert weight reads) is the roofline's MoE term of the
  mean batch over the ranks: the roofline prices a rank's MoE as if every rank of the
  expert-parallel group carried its batch (``routed tokens = tokens x ep / tp``), so at
  the mean batch it sees the tokens of all ranks, spread over the experts with the
  busiest expert-parallel rank's excess (``pdsim.perf.routing.straggler_factor``).

The split reads ``RooflineStepTime``'s precomputed terms: a copy of the model with its
MoE terms removed gives the rank part, the full model minus that copy the MoE part. With
equal batches on every rank the group's step equals the one rank's step (the model's
old assumption); other step-time models (simple, measured) have no MoE term and take the
slowest rank's step.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from pdsim.perf.base import StepBatch, StepTimeModel
from pdsim.perf.roofline import RooflineStepTime

# vLLM's dummy forward of an idle rank: one token (``_dummy_run(1)``) of no real request
DUMMY_BATCH = StepBatch(0, 0.0, 1, 1, 1)


def _without_moe(model: RooflineStepTime) -> RooflineStepTime:
    """A copy of ``model`` whose forwards skip the routed experts' GEMMs and weight reads
    (the all-to-alls around them stay: each rank sends and receives its own tokens)."""
    out = copy.copy(model)
    for name in ("_target", "_draft"):
        stack = getattr(model, name)
        if stack is not None:
            bare = copy.copy(stack)
            bare.moe = ()
            setattr(out, name, bare)
    return out


class DPGroupStepTime:
    """Prices one lockstep step of ``ranks`` attention-DP ranks from their batches.

    ``model``: the step-time model of one rank (every rank of an engine has the same).
    """

    __slots__ = ("_bare", "_model", "ranks")

    def __init__(self, model: StepTimeModel, ranks: int) -> None:
        if ranks < 1:
            raise ValueError(f"an attention-DP engine has at least one rank, not {ranks}")
        self.ranks = ranks
        self._model = model
        self._bare = _without_moe(model) if isinstance(model, RooflineStepTime) else None

    def step_time_s(self, batches: Sequence[StepBatch | None]) -> float:
        """Seconds of one step in which rank ``i`` computes ``batches[i]`` (None: idle,
        a dummy forward). At least one batch must be given (else no step runs)."""
        if len(batches) != self.ranks:
            raise ValueError(f"{len(batches)} batches for {self.ranks} ranks")
        real = [b for b in batches if b is not None]
        if not real:
            raise ValueError("a step with every rank idle is not run")
        model, bare = self._model, self._bare
        if len(real) == self.ranks and real.count(real[0]) == self.ranks:
            return model.step_time_s(real[0])  # equal batches: the one rank's step
        priced = real if len(real) == self.ranks else [*real, DUMMY_BATCH]
        if bare is None:
            return max(model.step_time_s(b) for b in priced)
        rank_s = max(bare.step_time_s(b) for b in priced)
        mean = mean_batch(real, self.ranks)
        return rank_s + model.step_time_s(mean) - bare.step_time_s(mean)


def mean_batch(batches: Sequence[StepBatch], ranks: int) -> StepBatch:
    """Each field of ``batches`` summed and divided over ``ranks`` (idle ranks count
    zero): the batch whose roofline MoE term is the group's. Fields become floats."""
    sums = [0.0] * len(StepBatch._fields)
    for b in batches:
        for i, v in enumerate(b):
            sums[i] += v
    return StepBatch._make(s / ranks for s in sums)


__all__ = ["DUMMY_BATCH", "DPGroupStepTime", "mean_batch"]
