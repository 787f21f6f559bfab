"""Roofline step time: per operator group, max(FLOPs / peak, bytes / bandwidth), summed,
with the kernel laws of ``pdsim.perf.kernels`` (fitted per hardware) for GEMMs and
collectives, and CPU costs of the serving loop.

Operator groups of one forward pass (per GPU of the instance):

- dense linear layers (attention projections, dense MLPs, shared experts, routers, LM
  head): FLOPs ``2 x params x (tokens + gemm_half_tokens)`` (a thin GEMM runs below the
  peak), weights read once per step;
- routed experts: FLOPs ``2 x expert params x (top_k x tokens + gemm_half_tokens x
  experts touched)`` (each touched expert is a thin GEMM of its own tokens), weight bytes
  of the experts the batch touches under skewed, correlated routing
  (``pdsim.perf.routing``), both for the busiest expert-parallel rank (its excess load,
  and the most experts one rank's share touches); plus ``moe_pair_s`` per routed
  (token, expert) pair the GPU handles, per byte of an expert weight (routing,
  permutation, quantisation, thin-slice GEMM rows, the combine; fitted per GPU to measured
  MoE layers), added to the experts' compute;
- attention, per layer group: FLOPs per (query, key) pair, KV bytes read and written;
  prefill and decode are separate kernels;
- recurrent layers (Mamba-2, Gated DeltaNet): state-update FLOPs, state read and write
  per decoding request;
- sampling: the logits of every position that needs one written and read again (the
  target's rejection sampler sees N + 1 rows per speculating request);
- fixed: ``kernel_latency_s`` per kernel of the forward;
- collectives from placement (``pdsim.perf.collectives``): an all-reduce of the hidden
  state after every TP-sliced sublayer (the lesser of the custom and the NCCL kernel inside
  a node, NCCL's hierarchical one across nodes), an all-to-all dispatch and combine around
  expert-parallel MoE layers with their real bytes (low-latency kernels in decode steps,
  normal ones with node-limited routing in steps with prefill);
- CPU: ``overhead_s + overhead_per_request_s x requests`` per step, and in a step the
  engine runs without a CUDA graph (one with a prefill chunk, or a decode batch with no
  captured graph, ``cuda_graph_batch_sizes``) ``eager_kernel_s`` per kernel of its
  forwards, the host's launches a graph replay would have spared (TensorRT-LLM replays
  graphs for generation-only batches; 0 for the other rules); under ``async_scheduling``
  the per-step and per-request CPU costs overlap the GPU's work, so the step lasts the
  longer of the two.

The drafter adds its forwards: the first over every position the target computed this
step (the verified positions and the prefill chunk), further ones of one token per
decoding request (N passes in all, each waiting for the previous one's token), plus, for
multi-module MTP, every module over the prefill and repair positions. Every drafter
forward pays ``drafter_pass_overhead_s`` of CPU work, its own kernels' latencies and its
sampling on top of its roofline. Everything is precomputed into seconds-per-unit
coefficients in ``__init__`` so ``step_time_s`` is plain float arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import expm1

from pdsim.errors import ConfigError
from pdsim.perf.architecture import (
    DTYPE_BYTES,
    GEMM_PRECISION,
    AnyFFN,
    AnyMixer,
    AttentionMixer,
    DenseFFN,
    MLAMixer,
    ModelArchitecture,
    MoEFFN,
    NoMixer,
)
from pdsim.perf.base import StepBatch
from pdsim.perf.collectives import DISPATCH_BYTES, Line, allreduce_lines, alltoall_lines
from pdsim.perf.config import RooflineStepTimeConfig
from pdsim.perf.hardware import HardwareSpec
from pdsim.perf.kernels import MOE_PAIR_HIDDEN_SIZE
from pdsim.perf.routing import (
    effective_tokens,
    expected_max_standard_normal,
    log_miss_per_token,
    straggler_factor,
)
from pdsim.perf.sizes import (
    attention_flops_per_pair,
    expert_params,
    ffn_dense_params,
    kv_bytes_per_token_per_layer,
    mixer_params,
    recurrent_flops_per_token,
    state_bytes_per_layer,
)

Layer = tuple[int, AnyMixer, AnyFFN]  # (num_layers, mixer, ffn)

# Kernels one layer launches in vLLM's forward (norms, rotary, attention, projections,
# activation; for MoE the router, top-k, permutation, grouped GEMMs and combine; shared
# experts 3 more): counted from vLLM's model code, an estimate, not a measurement.
MIXER_KERNELS = {"attention": 5, "mla": 9, "mamba2": 6, "gated_deltanet": 7, "none": 0}
FFN_KERNELS = {"dense": 4, "moe": 7, "none": 0}
SHARED_EXPERT_KERNELS = 3
FORWARD_KERNELS = 5  # embedding, final norm, LM head, sampling (2)
DRAFTER_EXTRA_KERNELS = 3  # MTP/EAGLE: two input norms and the fusing projection
QK_NORM_PARTIAL_BYTES = 8.0  # per token: the fp32 sums of squares of its query and its key
QK_NORM_KERNELS = 2  # a QK norm (per head or across heads): one fused norm of q, one of k
QK_NORM_SPLIT_KERNELS = 2  # across heads under TP: each split around the all-reduce (sums
# of squares before it, the scaling after), counted from vLLM's MiniMaxText01RMSNormTP
LOGIT_BYTES = 4.0  # fp32 logits
LOGIT_PASSES = 3.0  # written by the head, read and written by softmax / argmax


def gemm_rate(hw: HardwareSpec, cfg: RooflineStepTimeConfig, dtype: str) -> float:
    """FLOP/s a large GEMM of ``dtype`` weights reaches: the chip's peak for the dtype's
    precision times that precision's fitted efficiency (bf16's where the chip lacks the
    precision and runs it at its bf16 peak)."""
    precision = GEMM_PRECISION[dtype]
    if precision not in hw.dense_tflops:
        precision = "bf16"
    eff = {"bf16": cfg.compute_efficiency, "fp8": cfg.fp8_compute_efficiency,
           "fp4": cfg.fp4_compute_efficiency}[precision]
    return hw.peak_flops(precision) * eff


def _allreduce_s(lines: tuple[Line, Line], tokens: float) -> float:
    """One all-reduce of ``tokens`` tokens: the lesser of its custom-kernel and NCCL lines
    (``allreduce_lines``)."""
    (c_lat, c_tok), (n_lat, n_tok) = lines
    return min(c_lat + tokens * c_tok, n_lat + tokens * n_tok)


def _layer_kernels(mixer: AnyMixer, ffn: AnyFFN) -> int:
    k = MIXER_KERNELS[mixer.kind] + FFN_KERNELS[ffn.kind]
    if isinstance(mixer, AttentionMixer) and mixer.qk_norm != "none":
        k += QK_NORM_KERNELS
    if isinstance(ffn, MoEFFN) and ffn.num_shared_experts:
        k += SHARED_EXPERT_KERNELS
    return k


class _Stack:
    """Per-GPU cost coefficients of one forward through some layers (+ an LM head)."""

    __slots__ = (
        "a2a_count",
        "a2a_latency_s",
        "a2a_prefill_latency_s",
        "a2a_prefill_s_per_token",
        "a2a_s_per_token",
        "ar_count",
        "ar_lines",
        "attn",
        "dense_half_tokens",
        "dense_s_per_token",
        "dense_weight_s",
        "ep_ranks",
        "fixed_s",
        "kernels",
        "lm_s_per_token",
        "lm_weight_s",
        "moe",
        "norm_ar_count",
        "norm_ar_lines",
        "rec_s_per_token",
        "sample_s_per_row",
        "state_s_per_request",
        "token_reuse",
    )

    def __init__(self, arch: ModelArchitecture, hw: HardwareSpec,
                 cfg: RooflineStepTimeConfig, layers: Sequence[Layer], *,
                 weight_dtype: str, expert_dtype: str, lm_head_rows: int,
                 replicated_params: float, fixed_s: float, extra_kernels: int) -> None:
        tp, ep = cfg.tensor_parallel_size, cfg.expert_parallel_size
        # each GPU holds 1/shard of the experts: EP GPUs with EP >= TP, else TP (experts
        # sliced by TP, or the hybrid layout: EP groups each slicing its experts TP/EP ways)
        shard = max(ep, tp)
        h = arch.hidden_size
        bw = hw.hbm_bandwidth_bytes_per_s * cfg.memory_efficiency
        gemm = gemm_rate(hw, cfg, weight_dtype)
        gemm_e = gemm_rate(hw, cfg, expert_dtype) * cfg.moe_efficiency
        # block-scaled fp8 experts stream their weights at the engine's fitted share of the
        # bandwidth (fitted at decode sizes, where the layer is the weight read; prefill-
        # sized layers are compute and moe_pair_s, fitted apart)
        bw_e = bw * cfg.moe_efficiency * (cfg.fp8_moe_efficiency if expert_dtype == "fp8"
                                          else 1.0)
        attn_peak = hw.peak_flops("bf16") * cfg.attention_efficiency
        w, we = DTYPE_BYTES[weight_dtype], DTYPE_BYTES[expert_dtype]
        act = DTYPE_BYTES[arch.activation_dtype]
        half = cfg.gemm_half_tokens
        routing = arch.routing

        dense_params = replicated_params
        moe: dict[tuple[int, int, float], list[float]] = {}
        attn: list[tuple[float, float, float, float]] = []
        rec_flops = state_bytes = 0.0
        allreduces = alltoalls = norm_allreduces = 0
        kernels = FORWARD_KERNELS + extra_kernels
        for n, mixer, ffn in layers:
            kernels += n * _layer_kernels(mixer, ffn)
            _, mixer_gpu = mixer_params(mixer, h, tp)
            router = float(h * ffn.num_experts) if isinstance(ffn, MoEFFN) else 0.0
            shared = ffn_dense_params(ffn, h) - router
            dense_params += n * (mixer_gpu + shared / tp + router)
            if isinstance(ffn, MoEFFN):
                eb = expert_params(ffn, h)
                key = (ffn.num_experts, ffn.top_k, eb)
                moe.setdefault(key, [0.0])[0] += n
            if isinstance(mixer, AttentionMixer | MLAMixer):
                window = (float(mixer.sliding_window_tokens or 0)
                          if isinstance(mixer, AttentionMixer) else 0.0)
                kv = kv_bytes_per_token_per_layer(mixer, arch.kv_cache_dtype, tp)
                attn.append((
                    window,
                    n * attention_flops_per_pair(mixer, decode=False) / tp / attn_peak,
                    n * attention_flops_per_pair(mixer, decode=True) / tp / attn_peak,
                    n * kv / bw,
                ))
            rec_flops += n * recurrent_flops_per_token(mixer) / tp
            state_bytes += n * state_bytes_per_layer(mixer, arch.state_dtype, tp)
            if not isinstance(mixer, NoMixer):
                allreduces += n
            if isinstance(mixer, AttentionMixer) and mixer.qk_norm == "across_heads" and tp > 1:
                # each rank holds a slice of the heads: the per-token sums of squares of
                # the query and the key are all-reduced before the norm can scale them
                norm_allreduces += n
                kernels += n * QK_NORM_SPLIT_KERNELS
            if isinstance(ffn, MoEFFN) and ep > tp:
                # the EP group spans attention-DP ranks: tokens move to their experts'
                # ranks and back; with EP <= TP (EP = TP, or the hybrid layout) every GPU
                # already holds every token and an all-reduce combines the experts'
                # outputs, as for sliced experts
                alltoalls += n
            elif isinstance(ffn, DenseFFN | MoEFFN):
                allreduces += n

        self.dense_s_per_token = 2.0 * dense_params / gemm
        self.dense_half_tokens = half
        self.dense_weight_s = dense_params * w / bw
        emb = DTYPE_BYTES[arch.embedding_dtype]
        lm_gemm = gemm_rate(hw, cfg, arch.embedding_dtype)
        self.lm_s_per_token = 2.0 * lm_head_rows * h / tp / lm_gemm
        self.lm_weight_s = lm_head_rows * h * emb / tp / bw
        self.sample_s_per_row = lm_head_rows * LOGIT_BYTES * LOGIT_PASSES / tp / bw
        # per MoE group: (seconds to read every local expert, per-popularity-class log miss
        # per token, tokens routed in the EP group / T, compute seconds per token (expert
        # GEMMs and the per-pair handling of ``moe_pair_s``), compute
        # seconds per touched fraction: each touched expert's GEMM runs `half` tokens short)
        # ... and, with EP > 1, the busiest rank's excess: (z of the EP ranks, squared
        # popularity CV of a rank's experts, token-expert pairs per rank per routed token,
        # experts per rank or hybrid group), and seconds of pair handling per token: a GPU
        # handles every pair of its tokens when TP slices the experts, 1/EP of them when
        # EP <= TP shards them, its rank's share (k / TP per token) when EP spans ranks;
        # moe_pair_s is per byte of an expert weight (fp8's), so 4-bit experts pay about
        # half and bf16 ones twice; and it is per row of the fit's hidden width
        # (MOE_PAIR_HIDDEN_SIZE), so a narrower model pays proportionally less
        z = expected_max_standard_normal(ep) if ep > 1 else 0.0
        pair_split = tp if ep > tp else ep
        pair_s = cfg.moe_pair_s * h / MOE_PAIR_HIDDEN_SIZE
        self.ep_ranks = ep
        self.moe = tuple(
            (n * (e / shard) * eb * we / bw_e,
             log_miss_per_token(e, k, routing.load_cv),
             shard / tp,
             n * (2.0 * k * eb / tp / gemm_e + k / pair_split * pair_s * we),
             n * 2.0 * eb * half * (e / shard) / gemm_e,
             z,
             routing.load_cv ** 2 * ep / e,
             k / ep,
             e / ep if ep > 1 else 0.0)
            for (e, k, eb), (n,) in moe.items())
        self.token_reuse = routing.token_reuse
        self.attn = tuple(attn)
        self.rec_s_per_token = rec_flops / attn_peak
        self.state_s_per_request = 2.0 * state_bytes / bw  # read and write back
        # collectives from placement: per all-reduce the lesser of two lines (custom and
        # NCCL kernel), per MoE layer one dispatch + combine line (decode / prefill kernels)
        def lines(bytes_per_token: float) -> tuple[Line, Line]:
            return allreduce_lines(
                tp, hw, bytes_per_token, nccl_latency_s=cfg.collective_latency_s,
                nccl_efficiency=cfg.communication_efficiency,
                custom_latency_s=cfg.custom_allreduce_latency_s,
                custom_efficiency=cfg.custom_allreduce_efficiency)

        self.ar_count = allreduces if tp > 1 else 0
        self.ar_lines = lines(h * act)
        self.norm_ar_count = norm_allreduces
        self.norm_ar_lines = lines(QK_NORM_PARTIAL_BYTES)
        # a2a_count counts dispatch and combine apart; each line is one of the pair, and
        # per token of the instance (each of its TP GPUs sends 1/TP of them)
        self.a2a_count = 2 * alltoalls
        top_k = max((k for (_, k, _) in moe), default=0)
        decode_line, prefill_line = alltoall_lines(
            ep, hw, top_k=top_k, hidden=h, dispatch_bytes=DISPATCH_BYTES[cfg.dispatch_dtype],
            combine_bytes=act, max_nodes_per_token=routing.max_nodes_per_token)
        self.a2a_latency_s = decode_line[0] / 2.0
        self.a2a_s_per_token = decode_line[1] / 2.0 / tp
        self.a2a_prefill_latency_s = prefill_line[0] / 2.0
        self.a2a_prefill_s_per_token = prefill_line[1] / 2.0 / tp
        self.kernels = kernels
        self.fixed_s = fixed_s + kernels * cfg.kernel_latency_s

    def time_s(self, tokens: float, logit_tokens: float, prefill_tokens: float,
               prefill_pairs: float, decode_requests: float, decode_queries: float,
               decode_context: float) -> float:
        """Seconds of one forward over ``tokens`` positions (> 0)."""
        half = self.dense_half_tokens
        t = self.fixed_s + max((tokens + half) * self.dense_s_per_token
                               + (logit_tokens + half) * self.lm_s_per_token,
                               self.dense_weight_s + self.lm_weight_s)
        t += logit_tokens * self.sample_s_per_row
        if self.moe:
            independent = effective_tokens(tokens, decode_requests, decode_queries,
                                           self.token_reuse)
            for (weights_s, log_miss, group_scale, compute_s, touched_s, z, rank_cv2,
                 pairs_per_token, local) in self.moe:
                routed = independent * group_scale
                touched = 0.0
                for lm in log_miss:
                    touched -= expm1(routed * lm)
                touched /= len(log_miss)
                compute = tokens * compute_s + touched * touched_s
                read = touched
                if z:  # the busiest rank computes the most pairs and reads the most
                    # experts: of its `local` experts each is touched with probability
                    # `touched` (binomial), the busiest of the EP ranks z standard
                    # deviations above the mean, at most all of them
                    compute *= straggler_factor(z, rank_cv2, routed * pairs_per_token,
                                                self.ep_ranks)
                    read = min(1.0, touched + z * (touched * (1.0 - touched) / local) ** 0.5)
                t += max(compute, weights_s * read)
        if prefill_tokens:
            mean_pairs = prefill_pairs / prefill_tokens
            kv_read = mean_pairs + 0.5 * prefill_tokens  # exact for one chunk
            for window, prefill_s, _, kv_s in self.attn:
                pairs, read = prefill_pairs, kv_read
                if window:
                    pairs = min(pairs, prefill_tokens * window)
                    read = min(read, window + prefill_tokens)
                t += max(pairs * prefill_s, (read + prefill_tokens) * kv_s)
        if decode_requests:
            mean_ctx = decode_context / decode_requests
            for window, _, decode_s, kv_s in self.attn:
                ctx = min(mean_ctx, window) if window else mean_ctx
                t += max(decode_queries * ctx * decode_s,
                         (decode_requests * ctx + decode_queries) * kv_s)
        if self.rec_s_per_token:
            t += max(tokens * self.rec_s_per_token,
                     decode_requests * self.state_s_per_request)
        if self.ar_count:
            t += self.ar_count * _allreduce_s(self.ar_lines, tokens)
        if self.norm_ar_count:
            t += self.norm_ar_count * _allreduce_s(self.norm_ar_lines, tokens)
        if self.a2a_count:
            if prefill_tokens:
                t += self.a2a_count * (self.a2a_prefill_latency_s
                                       + tokens * self.a2a_prefill_s_per_token)
            else:
                t += self.a2a_count * (self.a2a_latency_s + tokens * self.a2a_s_per_token)
        return t


class RooflineStepTime:
    """The roofline ``StepTimeModel`` of one instance (see the module docstring).

    ``draft_passes_decode``: sequential drafter passes per decode step (N for MTP/EAGLE,
    0 without a GPU drafter); ``draft_modules_prefill``: drafter modules that process each
    prefill (and repair) token (N for multi-module MTP, 1 for one module or head).
    """

    __slots__ = (
        "_cpu_overlaps",
        "_cpu_per_request_s",
        "_cpu_s",
        "_draft",
        "_draft_eager_s",
        "_draft_modules",
        "_draft_passes",
        "_eager_s",
        "_replays_graph",
        "_target",
        "arch",
        "hardware",
    )

    def __init__(self, cfg: RooflineStepTimeConfig, draft_passes_decode: int = 0,
                 draft_modules_prefill: int = 0) -> None:
        arch = cfg.resolved_model()
        hw = cfg.resolved_hardware()
        self.arch, self.hardware = arch, hw
        wd = arch.weight_dtype
        we = arch.expert_weight_dtype or wd
        layers = [(b.num_layers, b.mixer, b.ffn) for b in arch.blocks]
        head_rows = arch.vocab_size
        self._target = _Stack(
            arch, hw, cfg, layers, weight_dtype=wd, expert_dtype=we, lm_head_rows=head_rows,
            replicated_params=0.0, fixed_s=0.0, extra_kernels=0)
        self._cpu_s = cfg.overhead_s
        self._cpu_per_request_s = cfg.overhead_per_request_s
        self._cpu_overlaps = cfg.async_scheduling
        self._eager_s = self._target.kernels * cfg.eager_kernel_s
        self._replays_graph = cfg.replays_graph
        self._draft_eager_s = 0.0
        self._draft_passes = draft_passes_decode
        self._draft_modules = draft_modules_prefill
        self._draft: _Stack | None = None
        if draft_passes_decode or draft_modules_prefill:
            d = arch.drafter
            if d is None:
                raise ConfigError("step_time.model", (
                    f"speculative decoding needs the drafter's shape, but model profile "
                    f"{arch.name} has no drafter section (mtp or eagle3)"))
            dwd = d.weight_dtype or wd
            dwe = d.weight_dtype or we
            self._draft = _Stack(
                arch, hw, cfg, [(1, d.mixer, d.ffn)], weight_dtype=dwd, expert_dtype=dwe,
                lm_head_rows=d.draft_vocab_size or arch.vocab_size,
                replicated_params=float(d.input_projection_factor * arch.hidden_size ** 2),
                fixed_s=cfg.drafter_pass_overhead_s, extra_kernels=DRAFTER_EXTRA_KERNELS)
            self._draft_eager_s = self._draft.kernels * cfg.eager_kernel_s

    def runs_eager(self, batch: StepBatch) -> bool:
        """Whether the engine runs ``batch`` without a CUDA graph: a step with a prefill
        chunk, or a decode batch with no captured graph (``cuda_graph_batch_sizes``)."""
        return bool(batch.prefill_tokens) or not self._replays_graph(batch.decode_requests)

    def step_time_s(self, batch: StepBatch, eager: bool | None = None) -> float:
        """Seconds of one engine step computing ``batch`` (see the module docstring).
        ``eager``: the step runs without a CUDA graph (None: ``runs_eager``; an
        attention-DP engine runs every rank eagerly when any rank must)."""
        p = batch.prefill_tokens
        r = batch.decode_requests
        q = batch.decode_tokens
        ctx = batch.decode_context_tokens
        pairs = batch.prefill_attention_pairs
        tokens = p + q
        if eager is None:
            eager = self.runs_eager(batch)
        # CPU work of the serving loop: per step, and per request scheduled in it; with
        # async scheduling it runs beside the GPU's work of the step before
        cpu = self._cpu_s + self._cpu_per_request_s * (r + (1 if p else 0))
        t = 0.0 if self._cpu_overlaps else cpu
        if eager:
            t += self._eager_s
        if tokens:
            t += self._target.time_s(tokens, q + (1 if p else 0), p, pairs, r, q, ctx)
        if self._draft is not None:
            t = self._add_draft_s(t, batch, eager)
        return max(cpu, t) if self._cpu_overlaps else t

    def _add_draft_s(self, t: float, batch: StepBatch, eager: bool) -> float:
        """``t`` plus the seconds of the drafter's forwards in a step computing ``batch``
        (added one forward at a time)."""
        draft = self._draft
        assert draft is not None
        p = batch.prefill_tokens
        r = batch.decode_requests
        q = batch.decode_tokens
        ctx = batch.decode_context_tokens
        pairs = batch.prefill_attention_pairs
        pre = p + batch.drafter_repair_tokens
        passes = self._draft_passes if r else 0
        modules = self._draft_modules if pre else 0
        if not max(passes, modules):
            return t
        if eager:  # each drafter forward launches its kernels from the host too
            t += max(passes, modules) * self._draft_eager_s
        # forward 0: every position the target computed (+ repairs)
        first_q = q if passes else 0
        first_r = r if passes else 0
        first_pre = pre if modules else 0
        t += draft.time_s(first_q + first_pre, first_r + (1 if p and modules else 0),
                          first_pre, pairs if modules else 0.0, first_r, first_q,
                          ctx if passes else 0)
        # forwards 1 .. modules-1: further modules over the prefill/repair positions, each
        # also drafting one token per decoding request while passes last
        both = min(modules, passes) - 1
        if both > 0:
            t += both * draft.time_s(r + pre, r + (1 if p else 0), pre, pairs, r, r, ctx)
        only_pre = modules - max(passes, 1)
        if only_pre > 0:
            t += only_pre * draft.time_s(pre, 1 if p else 0, pre, pairs, 0, 0, 0)
        only_decode = passes - max(modules, 1)
        if only_decode > 0:
            t += only_decode * draft.time_s(r, r, 0, 0.0, r, r, ctx)
        return t
