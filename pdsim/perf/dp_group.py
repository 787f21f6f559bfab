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
  rank's, idle ranks priced as the one-token dummy forward; a rank that cannot replay a
  CUDA graph (a prefill chunk, a batch without a captured graph) makes every rank's forward
  an eager one (``eager_kernel_s`` per kernel), as the ranks must run one graph or none;
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

Padding to the largest rank. An engine replaying CUDA graphs runs every rank's step at
one shape, so the ranks first agree on a token count and each pads its batch up to the
largest rank's. The padded rows then run through the dense layers, the LM head, the
drafter, the all-to-alls and the experts (the busiest rank's count on every rank) but read
no KV (their context is empty). Which steps pad is the backend's rule (``DP_PADDINGS``,
named by the pool's ``attention_dp_padding``, by default the rule of its balance's backend):

- ``vllm``: ``coordinate_batch_across_dp`` in ``vllm/v1/worker/dp_utils.py`` all-reduces
  every rank's token count and pads each rank to the maximum whenever the step runs a CUDA
  graph (full or piecewise) on every rank, decode and mixed steps alike; a step larger than
  the largest captured size runs eagerly and is not padded. The capture limit is vLLM's
  default ``max_cudagraph_capture_size``: ``min(max_num_seqs * (1 + num_speculative_tokens)
  * 2, 512)``, and at most ``max_num_batched_tokens`` (``_set_cudagraph_sizes`` in
  ``vllm/config/vllm.py``; ``vllm_capture_tokens``).
- ``sglang``: with DP attention, decode batches gather the ranks' tokens padded to the
  largest rank's length (``DpPaddingMode.MAX_LEN``, the CUDA-graph mode, in
  ``python/sglang/srt/layers/dp_attention.py``) and the graph runner runs every rank at the
  largest rank's batch; a step with a prefill (extend) anywhere gathers at the sum of the
  lengths (``SUM_LEN``), no padding.
- ``trtllm``: ``_get_padded_batch`` in ``tensorrt_llm/_torch/pyexecutor/model_engine.py``
  all-gathers the ranks' batch sizes and, when every rank runs a generation-only CUDA-graph
  batch, pads each to the largest (with ``cuda_graph_config.enable_padding``, set by the
  recipes for DeepSeek attention DP); a context request on any rank runs eagerly, unpadded.
- ``none``: no padding (eager engines); the pricing above alone.

The capture-size limits of SGLang (``cuda_graph_max_bs``) and TensorRT-LLM
(``cuda_graph_config.max_batch_size``) and the rounding up to the next captured size are
not modelled (they also pad a lone instance's batch, which pdsim does not price either).
Padded rows count as decode rows of the engine's query width: their per-request CPU cost
is charged too, a small overstatement.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

from pdsim.perf.base import StepBatch, StepTimeModel
from pdsim.perf.roofline import RooflineStepTime

# vLLM's dummy forward of an idle rank: one token (``_dummy_run(1)``) of no real request
DUMMY_BATCH = StepBatch(0, 0.0, 1, 1, 1)


# the cap of vLLM's default ``max_cudagraph_capture_size`` (tokens of a step)
VLLM_CUDAGRAPH_CAPTURE_TOKENS = 512


def vllm_capture_tokens(max_num_seqs: int, num_speculative_tokens: int,
                        max_num_batched_tokens: int) -> int:
    """vLLM's default largest CUDA-graph step, in tokens (module docstring)."""
    size = min(max_num_seqs * (1 + num_speculative_tokens) * 2,
               VLLM_CUDAGRAPH_CAPTURE_TOKENS)
    return min(size, max_num_batched_tokens)


PaddingRule = Callable[[Sequence[StepBatch], int], bool]
"""Whether a step of these rank batches (idle ranks as ``DUMMY_BATCH``) pads every rank
to the largest rank's token count, given the engine's largest CUDA-graph step in tokens."""


def _tokens(b: StepBatch) -> float:
    return b.prefill_tokens + b.decode_tokens


def _pad_never(batches: Sequence[StepBatch], capture_tokens: int) -> bool:
    return False


def _pad_in_vllm_graphs(batches: Sequence[StepBatch], capture_tokens: int) -> bool:
    return max(_tokens(b) for b in batches) <= capture_tokens


def _pad_decode_only(batches: Sequence[StepBatch], capture_tokens: int) -> bool:
    return not any(b.prefill_tokens for b in batches)


DP_PADDINGS: dict[str, PaddingRule] = {
    "none": _pad_never,
    "vllm": _pad_in_vllm_graphs,
    "sglang": _pad_decode_only,
    "trtllm": _pad_decode_only,
}
"""The padding rules a pool's ``attention_dp_padding`` can name (module docstring)."""

BALANCE_PADDING = {"vllm": "vllm", "sglang_round_robin": "sglang", "trtllm": "trtllm"}
"""The padding rule of the backend whose rank balance a pool names (its default)."""


def pad_to_largest(batches: Sequence[StepBatch]) -> list[StepBatch]:
    """Each batch with padding rows added up to the largest batch's token count: decode
    rows of the engine's query width (tokens per decode request) with no context."""
    top = max(_tokens(b) for b in batches)
    width = max((b.decode_tokens / b.decode_requests for b in batches
                 if b.decode_requests), default=1.0)
    out = []
    for b in batches:
        pad = top - _tokens(b)
        out.append(b if pad <= 0 else StepBatch._make((
            b.prefill_tokens, b.prefill_attention_pairs, b.decode_requests + pad / width,
            b.decode_tokens + pad, b.decode_context_tokens, b.drafter_repair_tokens)))
    return out


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

    ``model``: the step-time model of one rank (every rank of an engine has the same);
    ``padding``: the name of the engine's padding rule (``DP_PADDINGS``);
    ``capture_tokens``: its largest CUDA-graph step in tokens (read by the ``vllm`` rule).
    """

    __slots__ = ("_bare", "_capture", "_model", "_pads", "ranks")

    def __init__(self, model: StepTimeModel, ranks: int, padding: str = "none",
                 capture_tokens: int = VLLM_CUDAGRAPH_CAPTURE_TOKENS) -> None:
        if ranks < 1:
            raise ValueError(f"an attention-DP engine has at least one rank, not {ranks}")
        if padding not in DP_PADDINGS:
            raise ValueError(f"unknown attention-DP padding rule {padding!r}")
        self.ranks = ranks
        self._pads = DP_PADDINGS[padding]
        self._capture = capture_tokens
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
        moe = real
        if self._pads(priced, self._capture):
            # every rank, idle ones too, computes the largest rank's token count
            priced = pad_to_largest(priced)
            moe = pad_to_largest([b if b is not None else DUMMY_BATCH for b in batches])
        if bare is None:
            return max(model.step_time_s(b) for b in priced)
        assert isinstance(model, RooflineStepTime)
        # a rank that cannot replay a graph (a prefill chunk, an uncaptured batch) makes
        # every rank's forward an eager one
        eager = any(model.runs_eager(b) for b in priced)
        rank_s = max(bare.step_time_s(b, eager) for b in priced)
        mean = mean_batch(moe, self.ranks)
        return rank_s + model.step_time_s(mean, eager) - bare.step_time_s(mean, eager)


def mean_batch(batches: Sequence[StepBatch], ranks: int) -> StepBatch:
    """Each field of ``batches`` summed and divided over ``ranks`` (idle ranks count
    zero): the batch whose roofline MoE term is the group's. Fields become floats."""
    sums = [0.0] * len(StepBatch._fields)
    for b in batches:
        for i, v in enumerate(b):
            sums[i] += v
    return StepBatch._make(s / ranks for s in sums)


__all__ = [
    "BALANCE_PADDING",
    "DP_PADDINGS",
    "DUMMY_BATCH",
    "VLLM_CUDAGRAPH_CAPTURE_TOKENS",
    "DPGroupStepTime",
    "mean_batch",
    "pad_to_largest",
    "vllm_capture_tokens",
]
