"""Step-time section of the config: kinds simple, roofline and measured.

See docs/step-time.md for the formulas, the defaults and where they come from.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from pdsim._model import StrictModel, at_most, seconds_bound
from pdsim.perf.architecture import DType, ModelArchitecture
from pdsim.perf.hardware import HardwareSpec
from pdsim.perf.kernels import DEFAULT_KERNELS, KernelFit, KernelRule
from pdsim.perf.memory import DEFAULT_FREE_GPU_MEMORY_FRACTION, MemoryRule

# CPU costs of the serving loop, fitted by tools/fit_cpu_costs.py to the validation
# suite's fit rows (docs/step-time.md, "CPU costs fitted to the validation suite")
CPU_OVERHEAD_S = 2.0e-4
CPU_OVERHEAD_PER_REQUEST_S = 4.0e-6
DRAFTER_PASS_OVERHEAD_S = 6.5e-4

TRTLLM_EAGER_KERNEL_S = 16e-6
"""Host time per kernel of a TensorRT-LLM forward that runs without a CUDA graph (a step
with a context request), fitted to the silicon sample's TensorRT-LLM fit rows
(docs/step-time.md, "Steps without a CUDA graph")."""

CpuCostRule = Literal["pdsim", "vllm", "sglang", "trtllm"]
CPU_COST_RULES: dict[str, tuple[float, float, float]] = {
    "pdsim": (CPU_OVERHEAD_S, CPU_OVERHEAD_PER_REQUEST_S, 0.0),
    "trtllm": (CPU_OVERHEAD_S, CPU_OVERHEAD_PER_REQUEST_S, TRTLLM_EAGER_KERNEL_S),
    "vllm": (1.6e-3, 32e-6, 0.0),
    "sglang": (1.2e-3, 26e-6, 0.0),
}
"""Per serving loop (``cpu_cost_rule``), the CPU cost per step and per request in the
step, and per kernel of a step run without a CUDA graph, in seconds (``overhead_s``,
``overhead_per_request_s``, ``eager_kernel_s``). pdsim: fitted to the 38-row validation
table's fit rows (tools/fit_cpu_costs.py). vllm and sglang (Python schedulers): fitted to
the fit rows of AIConfigurator's silicon sample of each engine; trtllm (the C++ executor):
the same fit found no increment per step or request over pdsim's, which it keeps; its
eager steps' launch cost is fitted to its fit rows (docs/step-time.md, "Engine CPU costs:
the cpu_cost_rule" and "Steps without a CUDA graph"). vLLM's piecewise CUDA graphs cover
mixed steps; SGLang's eager extend steps, checked on its fit rows, want none (0)."""
CPU_COST_FIELDS = ("overhead_s", "overhead_per_request_s", "eager_kernel_s")

KERNEL_FIELDS = ("compute_efficiency", "fp8_compute_efficiency", "fp4_compute_efficiency",
                 "gemm_half_tokens", "memory_efficiency",
                 "kernel_latency_s", "communication_efficiency", "collective_latency_s",
                 "custom_allreduce_latency_s", "custom_allreduce_efficiency", "moe_pair_s",
                 "fp8_moe_efficiency")

NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False), seconds_bound()]
Efficiency = Annotated[float, Field(gt=0, le=1)]
PositiveInt = Annotated[int, Field(ge=1)]


# Expert weight dtypes whose GEMMs take fp8 (or lower) inputs, so engines dispatch fp8
# (int4 weight-only GEMMs take bf16 activations)
LOW_PRECISION_DISPATCH = frozenset({"fp8", "nvfp4", "mxfp4"})

# The least time a step of the simple model may cost: one nanosecond.
MIN_STEP_S = 1e-9


class SimpleStepTimeConfig(StrictModel):
    """A linear, memory-floor model good enough to run without hardware profiles.

    target_s = overhead_s + max(weights_floor_s, target_tokens * per_token_s)
               + decode_context_tokens * per_context_token_s
               + prefill_attention_pairs * per_attention_pair_s
    drafter_s = drafter passes, each max(drafter_floor_s, tokens * per_token_s *
                drafter_token_cost_ratio)
    """

    kind: Literal["simple"] = "simple"
    """Selects this variant: A linear, memory-floor model good enough to run without hardware
    profiles."""
    overhead_s: Annotated[float, Field(ge=0), seconds_bound()] = 0.003
    """Fixed time per step, in seconds."""
    weights_floor_s: Annotated[float, Field(ge=0), seconds_bound()] = 0.012
    """Least time of a target forward (reading the weights), in seconds."""
    per_token_s: Annotated[float, Field(ge=0), seconds_bound()] = 4.0e-5
    """Target seconds per token in the step."""
    per_context_token_s: Annotated[float, Field(ge=0), seconds_bound()] = 2.0e-9
    """Seconds per context token of decode requests (attention reads)."""
    per_attention_pair_s: Annotated[float, Field(ge=0), seconds_bound()] = 2.0e-12
    """Seconds per (query, key) pair of prefill attention."""
    drafter_floor_s: Annotated[float, Field(ge=0), seconds_bound()] = 0.0006
    """Least time of one drafter pass, in seconds."""
    drafter_token_cost_ratio: Annotated[float, Field(ge=0), at_most(
        1000, "a drafter token costing more than 1,000 target tokens")] = 0.04
    """A drafter token's cost as a fraction of a target token's."""

    @model_validator(mode="after")
    def _costs_time(self) -> SimpleStepTimeConfig:
        # A step that costs no time lets the simulated clock stand still while work
        # repeats (a request preempted and readmitted forever): every step must cost some.
        if self.overhead_s + self.weights_floor_s < MIN_STEP_S:
            raise ValueError(f"overhead_s + weights_floor_s is below {MIN_STEP_S:g} s, so a "
                             f"step could take (almost) no time and the simulated clock "
                             f"stand still; give either a value of at least {MIN_STEP_S:g}")
        return self

    @property
    def parameter_provenance(self) -> str:
        """The simple model's constants are round illustrative values, fitted to nothing."""
        changed = self != SimpleStepTimeConfig()
        return ("simple: constants set in the config" if changed else
                "simple: illustrative defaults, not fitted to a measurement (use roofline "
                "with a hardware profile, or measured step times)")


def _profile_kernels(name: str) -> KernelFit | None:
    """The fitted kernel constants of a shipped hardware profile (None if not shipped)."""
    from pdsim.perf.profiles import hardware_names, load_hardware

    if name not in hardware_names():
        return None
    return load_hardware(name, "step_time.hardware").kernels or DEFAULT_KERNELS


def _hardware_kernels(hardware: object) -> tuple[KernelFit, str] | None:
    """The fitted kernel constants of a hardware profile name or inline spec, and the
    spec's name (None when it does not resolve: the field validators report that)."""
    if isinstance(hardware, HardwareSpec):
        return hardware.kernels or DEFAULT_KERNELS, hardware.name
    if isinstance(hardware, str):
        fit = _profile_kernels(hardware)
        return None if fit is None else (fit, hardware)
    if isinstance(hardware, dict):
        kernels = hardware.get("kernels")
        label = str(hardware.get("name", "inline"))
        if kernels is None:
            return DEFAULT_KERNELS, label
        try:
            return KernelFit.model_validate(kernels), label
        except ValueError:
            return None
    return None


def _rule_values(fit: KernelFit, field: str) -> set[float]:
    """The values a kernel field takes from ``fit`` under any ``kernel_rule``."""
    values = {getattr(fit, field)}
    if field == "moe_pair_s":
        values |= set(fit.moe_pair_s_by_engine.values())
    if field == "fp8_moe_efficiency":
        values |= {v for table in fit.fp8_moe_efficiency_by_engine.values()
                   for v in table.values()}
    return values


def _check_profile_name(value: object, kind: str, shipped: Sequence[str],
                        inline: str) -> None:
    """A profile named by a string must be a shipped one or (models) a profile file."""
    from pdsim.errors import ConfigError
    from pdsim.perf.profiles import check_profile_file, is_profile_file

    if kind == "model" and is_profile_file(value):
        assert isinstance(value, str)
        try:
            check_profile_file(value, "")
        except ConfigError as exc:
            raise ValueError(exc.message) from None
        return
    if isinstance(value, str) and value not in shipped:
        raise ValueError(f"unknown {kind} profile {value!r}; shipped: "
                         f"{', '.join(shipped)} (or give {inline} inline)")


#: False while ``SimConfig`` validates a root step time that no pool runs on (every pool has
#: its own): its weights need not fit a GPU, nothing runs there. Set and reset around that
#: one validation (``SimConfig._root_step_time``), so it never outlives it.
CHECK_WEIGHTS_FIT: ContextVar[bool] = ContextVar("pdsim_check_weights_fit", default=True)


def expert_layout_problem(tensor_parallel_size: int, expert_parallel_size: int) -> str:
    """Why ``expert_parallel_size`` is no layout for ``tensor_parallel_size`` ('' if it is
    one): 1, a multiple of TP (attention-DP ranks sharing the experts) or a divisor of it
    (the hybrid layout)."""
    tp, ep = tensor_parallel_size, expert_parallel_size
    if ep > 1 and ep % tp and tp % ep:
        return (f"expert_parallel_size ({ep}) must be 1, a multiple of tensor_parallel_size "
                f"({tp}) (attention-DP ranks sharing the experts) or a divisor of it "
                f"(experts over {ep} groups, each slicing its own)")
    return ""


class RooflineStepTimeConfig(StrictModel):
    """Step time from a model profile and a hardware profile (a roofline per operator group).

    ``model`` / ``hardware``: a shipped profile name (``pdsim profile`` lists them) or an
    inline spec. An instance runs on ``tensor_parallel_size`` GPUs. ``expert_parallel_size``
    > 1 shards MoE experts over that many GPUs instead of slicing each expert: equal to
    ``tensor_parallel_size`` is vLLM's ``--enable-expert-parallel``; a multiple of it
    means ``expert_parallel_size / tensor_parallel_size`` data-parallel attention ranks
    (instances) share one expert pool, each assumed to run a batch like this one; a
    divisor of it (between 1 and ``tensor_parallel_size``) is the hybrid MoE layout of
    TensorRT-LLM's ``--tp T --ep E`` and SGLang's ``--ep-size``: the experts are split
    over ``expert_parallel_size`` groups of ``tensor_parallel_size / expert_parallel_size``
    GPUs, each group slicing its experts as tensor parallelism does.

    The dtype fields override the model profile's. Kernel constants (``KERNEL_FIELDS``)
    default to the hardware profile's fitted ``kernels`` section (``pdsim.perf.kernels``):
    ``compute_efficiency`` and ``gemm_half_tokens`` (a GEMM of m tokens per weight, or per
    expert, runs at ``compute_efficiency x m / (m + gemm_half_tokens)`` of the peak;
    ``fp8_compute_efficiency`` / ``fp4_compute_efficiency`` in place of
    ``compute_efficiency`` for fp8 and fp4 GEMMs on chips with those peaks),
    ``memory_efficiency`` (HBM), ``kernel_latency_s`` (per kernel),
    ``communication_efficiency`` and ``collective_latency_s`` (NCCL all-reduce),
    ``custom_allreduce_latency_s`` and ``custom_allreduce_efficiency`` (the small-message
    all-reduce inside a node; ``pdsim.perf.collectives``);
    ``kernels_from`` names the hardware spec the fields not given were taken from ("" when
    the config gives them all).
    ``attention_efficiency``: fraction of the bf16 peak attention kernels reach;
    ``moe_efficiency``: an extra factor on routed experts (1 = grouped GEMMs price like
    dense ones at the same tokens per expert). CPU costs: ``overhead_s`` per step plus
    ``overhead_per_request_s`` per request in it (scheduling, input preparation, output
    processing); ``drafter_pass_overhead_s`` per drafter forward (its CPU scheduling,
    metadata and graph launch, proposal bookkeeping); ``eager_kernel_s`` per kernel of a
    step the engine runs without a CUDA graph (a prefill chunk, or a decode batch with no
    captured graph: ``cuda_graph_batch_sizes``, ``cuda_graph_padding``).
    ``gpu_memory_utilization`` and ``runtime_reserve_gib`` size the KV cache
    (``pdsim.perf.memory``); weights that do not fit are a config error.
    """

    kind: Literal["roofline"] = "roofline"
    """Selects this variant: Step time from a model profile and a hardware profile (a roofline
    per operator group)."""
    model: str | ModelArchitecture
    """A shipped model profile name, a model profile file (a path ending in .yaml, relative to
    the config file) or an inline architecture; defaults to model.profile."""
    hardware: str | HardwareSpec
    """A shipped hardware profile name (e.g. h200) or an inline spec."""
    tensor_parallel_size: PositiveInt = 1
    """GPUs per instance (tensor parallelism)."""
    expert_parallel_size: PositiveInt = 1
    """GPUs (or, below tensor_parallel_size, GPU groups) MoE experts are sharded over (1:
    experts sliced by tensor parallelism; a divisor of tensor_parallel_size: the hybrid
    layout, each of the groups slicing its experts over tensor_parallel_size / this)."""
    weight_dtype: DType | None = None
    """Overrides the model profile's weight dtype."""
    expert_weight_dtype: DType | None = None
    """Overrides the model profile's MoE expert weight dtype."""
    kv_cache_dtype: DType | None = None
    """Overrides the model profile's KV cache dtype."""
    activation_dtype: DType | None = None
    """Overrides the model profile's activation dtype."""
    compute_efficiency: Efficiency = DEFAULT_KERNELS.compute_efficiency
    """Fraction of the dense peak a large GEMM reaches (default: the hardware profile's fit)."""
    fp8_compute_efficiency: Efficiency = DEFAULT_KERNELS.fp8_compute_efficiency
    """Fraction of the fp8 dense peak a large fp8 GEMM reaches (default: the hardware's
    fit)."""
    fp4_compute_efficiency: Efficiency = DEFAULT_KERNELS.fp4_compute_efficiency
    """Fraction of the fp4 dense peak a large fp4 GEMM reaches (default: the hardware's
    fit)."""
    gemm_half_tokens: NonNegFloat = DEFAULT_KERNELS.gemm_half_tokens
    """Tokens per GEMM at which it reaches half of compute_efficiency (default: the hardware's
    fit)."""
    memory_efficiency: Efficiency = DEFAULT_KERNELS.memory_efficiency
    """Fraction of HBM bandwidth a weight-streaming kernel reaches (default: the hardware's
    fit)."""
    kernel_latency_s: Seconds = DEFAULT_KERNELS.kernel_latency_s
    """Fixed time of one kernel, in seconds (default: the hardware's fit)."""
    communication_efficiency: Efficiency = DEFAULT_KERNELS.communication_efficiency
    """Fraction of link bandwidth an all-reduce reaches (default: the hardware's fit)."""
    collective_latency_s: Seconds = DEFAULT_KERNELS.collective_latency_s
    """Fixed time of one all-reduce, in seconds (default: the hardware's fit)."""
    custom_allreduce_latency_s: Seconds = DEFAULT_KERNELS.custom_allreduce_latency_s
    """Fixed time of one small-message (custom, peer-memory) all-reduce inside a node, in
    seconds (default: the hardware's fit)."""
    custom_allreduce_efficiency: Efficiency = DEFAULT_KERNELS.custom_allreduce_efficiency
    """Fraction of link bandwidth the custom all-reduce reaches (default: the hardware's
    fit)."""
    moe_pair_s: Seconds = DEFAULT_KERNELS.moe_pair_s
    """Seconds per routed (token, expert) pair a GPU handles in a grouped MoE layer beyond
    its expert GEMMs' roofline (routing, permutation, activation quantisation, thin-slice
    GEMM rows, the combine; default: the hardware's fit for the kernel_rule)."""
    fp8_moe_efficiency: Efficiency = DEFAULT_KERNELS.fp8_moe_efficiency
    """Fraction of the weight-read bandwidth a grouped MoE layer of block-scaled fp8
    experts reaches at decode sizes (default: the hardware's fit for the kernel_rule and
    kernel_version, ``kernels.fp8_moe_efficiency_by_engine``)."""
    kernel_version: str = ""
    """The engine version whose kernels the kernel_rule prices where the hardware profile
    fits them per version ('': the newest fitted)."""
    kernel_rule: KernelRule = "pdsim"
    """Whose kernels the MoE layers run: pdsim (moe_pair_s fitted over every engine's
    measured MoE layers) or trtllm, sglang, vllm (the hardware profile's fit to that
    engine's own layers, ``kernels.moe_pair_s_by_engine``; a profile without one for the
    engine keeps the pdsim value); sets moe_pair_s where the config does not give it."""
    moe_dispatch_dtype: Literal["fp8", "bf16"] | None = None
    """Dtype of tokens dispatched to expert-parallel ranks (combine uses the activation
    dtype); null: fp8 when the experts run fp8 or 4-bit weights (DeepEP's FP8 dispatch),
    else the activation dtype."""
    kernels_from: str = ""
    """The hardware spec the kernel constants not given were taken from (filled in; '' when all
    are given)."""
    attention_efficiency: Efficiency = 0.5
    """Fraction of the bf16 peak attention kernels reach."""
    moe_efficiency: Efficiency = 1.0
    """Extra factor on routed-expert GEMMs (1: priced like dense GEMMs)."""
    cpu_cost_rule: CpuCostRule = "pdsim"
    """Whose serving loop the CPU costs are (``CPU_COST_RULES``): pdsim (fitted to the
    validation table), vllm, sglang or trtllm (fitted to the silicon sample's fit rows);
    sets overhead_s, overhead_per_request_s and eager_kernel_s where the config does not
    give them."""
    overhead_s: Seconds = CPU_OVERHEAD_S
    """CPU time per step (scheduling, input preparation), in seconds (default: the
    cpu_cost_rule's)."""
    overhead_per_request_s: Seconds = CPU_OVERHEAD_PER_REQUEST_S
    """CPU time per request in a step, in seconds (default: the cpu_cost_rule's)."""
    drafter_pass_overhead_s: Seconds = DRAFTER_PASS_OVERHEAD_S
    """CPU time per drafter forward, in seconds."""
    cuda_graph_batch_sizes: Annotated[tuple[PositiveInt, ...], Field(min_length=1)] | None = None
    """The decode batch sizes (requests per step) the engine captured CUDA graphs for
    (TensorRT-LLM's ``cuda_graph_config.batch_sizes``); a decode-only step whose batch has
    no graph runs eagerly and pays ``eager_kernel_s`` per kernel. null: every decode-only
    step replays a graph (the engines' defaults capture up to their batch limits)."""
    cuda_graph_padding: bool = True
    """Whether a decode batch is padded up to the next captured size
    (``cuda_graph_config.enable_padding``): with padding every batch up to the largest
    size replays a graph, without it only the sizes listed do. Read only with
    cuda_graph_batch_sizes. The padded rows' compute is not priced."""
    eager_kernel_s: Seconds = 0.0
    """Host time per kernel of a step the engine runs without a CUDA graph (a step with a
    prefill chunk: TensorRT-LLM replays graphs for generation-only batches; a decode batch
    with no captured graph, cuda_graph_batch_sizes), in seconds, on top of
    kernel_latency_s (default: the cpu_cost_rule's; 0 but for trtllm)."""
    async_scheduling: bool = False
    """Whether the serving loop prepares step N + 1 on the CPU while the GPU runs step N
    (vLLM's ``--async-scheduling``, on by default from v0.14): the step's CPU costs
    (overhead_s, overhead_per_request_s) then hide under its GPU time, and a step lasts the
    longer of the two instead of their sum."""
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    """Fraction of GPU memory vLLM may use (sizes the KV cache)."""
    runtime_reserve_gib: NonNegFloat = 2.0
    """GPU memory kept for activations and the runtime, in GiB (the pdsim memory rule)."""
    memory_rule: MemoryRule = "pdsim"
    """How the KV cache is sized: pdsim (gpu_memory_utilization of HBM less weights and
    runtime_reserve_gib), vllm (gpu_memory_utilization less weights, the activation peak at
    max_num_batched_tokens and non-torch memory), sglang (mem_fraction_static of HBM less
    weights) or trtllm (free_gpu_memory_fraction of what weights, activations and runtime
    leave free); docs/step-time.md."""
    mem_fraction_static: Annotated[float, Field(gt=0, le=1)] | None = None
    """SGLang's mem_fraction_static (memory_rule sglang); null: derived from the GPU's memory
    as SGLang derives it."""
    free_gpu_memory_fraction: Annotated[float, Field(gt=0, le=1)] = (
        DEFAULT_FREE_GPU_MEMORY_FRACTION)
    """TensorRT-LLM's free_gpu_memory_fraction (memory_rule trtllm)."""

    @model_validator(mode="before")
    @classmethod
    def _cpu_cost_rule_defaults(cls, data: object) -> object:
        """CPU costs not given take the ``cpu_cost_rule``'s values, so the resolved config
        shows the numbers the model runs on; a value the config gives wins."""
        if not isinstance(data, dict):
            return data
        sizes = data.get("cuda_graph_batch_sizes")
        if isinstance(sizes, list):  # a YAML list, read as the tuple the field holds
            data = {**data, "cuda_graph_batch_sizes": tuple(sizes)}
        rule = CPU_COST_RULES.get(data.get("cpu_cost_rule", "pdsim"))
        if rule is None:  # an unknown name: the field's own validation says so
            return data
        missing = {f: v for f, v in zip(CPU_COST_FIELDS, rule, strict=True) if f not in data}
        return {**data, **missing} if missing else data

    @model_validator(mode="before")
    @classmethod
    def _hardware_kernel_defaults(cls, data: object) -> object:
        """Kernel constants not given take the hardware profile's fitted values, so the
        resolved config shows the numbers the model runs on; ``kernels_from`` names that
        profile. A config dumped for one profile and loaded with another (a sweep over
        ``hardware``) takes the new profile's values for every field still holding the old
        profile's."""
        if not isinstance(data, dict):
            return data
        resolved = _hardware_kernels(data.get("hardware"))
        if resolved is None:
            return data
        fit, label = resolved
        rule = data.get("kernel_rule", "pdsim")
        version = data.get("kernel_version", "")
        fit = (fit.for_rule(rule, version if isinstance(version, str) else "")
               if isinstance(rule, str) else fit)
        out = dict(data)
        previous = out.get("kernels_from") or ""
        if previous:
            # a value still holding the profile's own fit (under any rule) is re-resolved
            old = _profile_kernels(previous) if previous != label else resolved[0]
            for f in KERNEL_FIELDS:
                if old is not None and f in out and out[f] in _rule_values(old, f):
                    del out[f]
        missing = [f for f in KERNEL_FIELDS if f not in out]
        out.update({f: getattr(fit, f) for f in missing})
        out["kernels_from"] = label if missing else (previous if previous == label else "")
        return out

    @property
    def parameter_provenance(self) -> str:
        """Where the step-time constants in force come from: the hardware profile's kernel
        fit (or the fit it borrows), the CPU costs fitted to the validation suite, or the
        config."""
        fit = _hardware_kernels(self.hardware)
        kernels = (fit[0] if fit is not None else DEFAULT_KERNELS).for_rule(
            self.kernel_rule, self.kernel_version)
        if not self.kernels_from or any(getattr(self, f) != getattr(kernels, f)
                                        for f in KERNEL_FIELDS):
            kernel_src = "kernel constants set in the config"
        elif kernels.transferred_from and 0 < len(kernels.borrowed) < len(KERNEL_FIELDS):
            kernel_src = (f"kernel constants fitted to {kernels.fitted_to}, except "
                          f"{', '.join(kernels.borrowed)} borrowed from another GPU's fit "
                          f"({kernels.transferred_from})")
        elif kernels.transferred_from:
            kernel_src = (f"kernel constants of {self.kernels_from} borrowed from another GPU's "
                          f"fit ({kernels.transferred_from})")
        else:
            kernel_src = f"kernel constants fitted to {kernels.fitted_to}"
        if (self.kernel_rule in kernels.moe_pair_s_by_engine
                and kernel_src != "kernel constants set in the config"):
            kernel_src += f" (moe_pair_s: {self.kernel_rule}'s own MoE kernels)"
        if (self.kernel_rule in kernels.fp8_moe_efficiency_by_engine
                and kernel_src != "kernel constants set in the config"):
            kernel_src += (f" (fp8_moe_efficiency: {self.kernel_rule}"
                           f"{' ' + self.kernel_version if self.kernel_version else ''}'s "
                           f"measured fp8 MoE layers)")
        cpu = (self.overhead_s, self.overhead_per_request_s, self.eager_kernel_s,
               self.drafter_pass_overhead_s)
        rule = CPU_COST_RULES[self.cpu_cost_rule]
        if cpu != (*rule, DRAFTER_PASS_OVERHEAD_S):
            cpu_src = "CPU costs set in the config"
        elif rule == CPU_COST_RULES["pdsim"]:
            cpu_src = ("CPU costs fitted to the validation suite's fit rows "
                       "(tools/fit_cpu_costs.py)")
        else:
            cpu_src = (f"CPU costs fitted to the silicon sample's {self.cpu_cost_rule} fit "
                       f"rows (cpu_cost_rule {self.cpu_cost_rule})")
        return f"roofline: {kernel_src}; {cpu_src}; attention_efficiency a judgement"

    @property
    def borrowed_fit(self) -> str:
        """The hardware whose kernel fit this config's hardware borrows ("" if none), with
        each borrowed value still in force (name=value)."""
        fit = _hardware_kernels(self.hardware)
        if fit is None or not self.kernels_from or not fit[0].transferred_from:
            return ""
        kernels = fit[0].for_rule(self.kernel_rule, self.kernel_version)
        names = kernels.borrowed or KERNEL_FIELDS
        values = [f"{f}={getattr(self, f):g}" for f in names
                  if f in KERNEL_FIELDS and getattr(self, f) == getattr(kernels, f)]
        if not values:
            return ""
        return f"{kernels.transferred_from}; borrowed values: {', '.join(values)}"

    @property
    def dispatch_dtype(self) -> str:
        """The dtype tokens are dispatched to expert-parallel ranks in (see
        ``moe_dispatch_dtype``)."""
        if self.moe_dispatch_dtype is not None:
            return self.moe_dispatch_dtype
        arch = self.resolved_model()
        experts = arch.expert_weight_dtype or arch.weight_dtype
        return "fp8" if experts in LOW_PRECISION_DISPATCH else "bf16"

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

    def replays_graph(self, decode_requests: float) -> bool:
        """Whether a decode-only step of ``decode_requests`` requests replays a captured
        CUDA graph (``cuda_graph_batch_sizes``, ``cuda_graph_padding``)."""
        sizes = self.cuda_graph_batch_sizes
        if sizes is None:
            return True
        if self.cuda_graph_padding:
            return decode_requests <= max(sizes)
        return decode_requests in sizes

    @model_validator(mode="after")
    def _check(self) -> RooflineStepTimeConfig:
        from pdsim.errors import ConfigError
        from pdsim.perf.memory import kv_cache_bytes_per_gpu

        ep, tp = self.expert_parallel_size, self.tensor_parallel_size
        problem = expert_layout_problem(tp, ep)
        if problem:
            raise ValueError(problem)
        # the target alone must fit; drafter modules are checked when the model is built
        if not CHECK_WEIGHTS_FIT.get():
            return self
        try:
            kv_cache_bytes_per_gpu(self.resolved_model(), self.resolved_hardware(), tp,
                                   self.gpu_memory_utilization, expert_parallel_size=ep,
                                   runtime_reserve_gib=self.runtime_reserve_gib,
                                   **self.memory_rule_kwargs())
        except ConfigError as exc:
            raise ValueError(exc.message) from None
        return self

    def memory_rule_kwargs(self, max_num_batched_tokens: int = 0) -> dict[str, Any]:
        """The memory-rule arguments of ``pdsim.perf.memory`` (one place): the rule, its
        fractions, and the attention-DP ranks sharing the expert pool; the activation peak
        is sized by the pool's ``max_num_batched_tokens``."""
        ep, tp = self.expert_parallel_size, self.tensor_parallel_size
        out: dict[str, Any] = {
            "rule": self.memory_rule, "mem_fraction_static": self.mem_fraction_static,
            "free_gpu_memory_fraction": self.free_gpu_memory_fraction,
            "attention_dp_size": max(1, ep // tp),
            "max_num_batched_tokens": max_num_batched_tokens}
        return out

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
    """Selects this variant: step times interpolated from a CSV of measurements."""
    csv_path: str
    """CSV of measured step times (format: docs/step-time.md); relative to the working
    directory."""
    extrapolation: Literal["linear", "clamp"] = "linear"
    """Beyond the measured range: linear continues the last segment, clamp holds the edge value."""
    mixed_overlap_s: Seconds = 0.0
    """Fixed cost subtracted once from a step with both prefill and decode, in seconds."""
    drafter_repair_token_s: Seconds = 0.0
    """Seconds per drafter re-prefill (repair) token."""

    @property
    def parameter_provenance(self) -> str:
        return f"measured: step times interpolated from {self.csv_path}"


StepTimeConfig = Annotated[
    SimpleStepTimeConfig | RooflineStepTimeConfig | MeasuredStepTimeConfig,
    Field(discriminator="kind"),
]
