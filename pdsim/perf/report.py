"""``pdsim profile MODEL HARDWARE``: the derived numbers of a profile, as rich tables.

Prints what the roofline model and the memory model derive from a model profile on a
hardware profile, so a user can sanity-check both before running a simulation: weights
(whole and per GPU), KV bytes per token per layer group, KV blocks, FLOPs per token, and
step times for a few batch shapes with and without the drafter.
"""

from __future__ import annotations

from rich.table import Table

from pdsim._model import MAX_TOKENS
from pdsim.errors import ConfigError
from pdsim.perf import sizes as S
from pdsim.perf.architecture import DType, ModelArchitecture
from pdsim.perf.base import StepBatch
from pdsim.perf.config import RooflineStepTimeConfig, expert_layout_problem
from pdsim.perf.hardware import HardwareSpec
from pdsim.perf.memory import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_RUNTIME_RESERVE_GIB,
    GIB,
    kv_blocks_per_instance,
    kv_cache_bytes_per_gpu,
)
from pdsim.perf.profiles import (
    load_hardware,
    load_model_architecture,
    model_config_fields,
    with_dtypes,
)
from pdsim.perf.roofline import RooflineStepTime

PREFILL_CHUNKS = (1024, 8192)
DECODE_BATCHES = (1, 16, 64, 256)
DECODE_CONTEXTS = (1024, 8192, 32768)


def default_num_speculative_tokens(arch: ModelArchitecture) -> int:
    """Drafts per step the report assumes: every MTP module, or 3 for one module/head."""
    d = arch.drafter
    if d is None:
        return 0
    if d.kind == "mtp":
        return d.num_modules
    return 3


def drafter_shape(arch: ModelArchitecture, n: int) -> tuple[int, int]:
    """(decode passes, modules per prefill token) of ``n`` drafts with ``arch``'s drafter.

    Multi-module MTP (more than one module shipped and ``n > 1``) runs ``n`` distinct
    modules; a single module or head is reused for every pass.
    """
    d = arch.drafter
    if d is None or n < 1:
        return 0, 0
    multi = d.kind == "mtp" and min(d.num_modules, n) > 1
    return n, (n if multi else 1)


def _kv_split_note(arch: ModelArchitecture, tp: int) -> str:
    if tp == 1:
        return "one GPU holds it all"
    kinds = {b.mixer.kind for b in arch.blocks}
    notes = []
    if "mla" in kinds:
        notes.append("MLA latent replicated on every rank")
    if "attention" in kinds:
        notes.append("GQA KV heads split over ranks (replicated below one head per rank)")
    return "; ".join(notes)


def _gib(x: float) -> str:
    return f"{x / GIB:,.2f} GiB"


def _fmt_params(x: float) -> str:
    return f"{x / 1e9:,.2f} B"


def _check_options(values: dict[str, tuple[int | None, int]]) -> None:
    """Each option's integer is at least its minimum and at most ``MAX_TOKENS``."""
    for option, (value, low) in values.items():
        if value is not None and not low <= value <= MAX_TOKENS:
            raise ConfigError(option, f"must be an integer in {low}..{MAX_TOKENS:,} "
                              f"(got {value})")


def profile_report(model: str, hardware: str, tensor_parallel_size: int = 1, *,
                   expert_parallel_size: int = 1, weight_dtype: DType | None = None,
                   kv_cache_dtype: DType | None = None,
                   num_speculative_tokens: int | None = None, block_size: int = 64,
                   gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                   max_num_seqs: int = 256) -> list[Table]:
    """Tables describing ``model`` on ``hardware`` (profile names or inline-spec files'
    names are resolved by ``load_model_architecture`` / ``load_hardware``).

    Returns [summary, KV layout, step times]; the step-time table is left out, with the
    reason in the summary, when the weights do not fit. Raises ``ConfigError`` for an
    unknown profile.
    """
    _check_options({"--tp": (tensor_parallel_size, 1), "--ep": (expert_parallel_size, 1),
                    "--spec": (num_speculative_tokens, 0), "--block-size": (block_size, 1),
                    "max_num_seqs": (max_num_seqs, 1)})
    problem = expert_layout_problem(tensor_parallel_size, expert_parallel_size)
    if problem:
        raise ConfigError("--ep", problem)
    if not 0 < gpu_memory_utilization <= 1:  # NaN fails too
        raise ConfigError("--gpu-memory-utilization", f"must be in (0, 1] (got "
                          f"{gpu_memory_utilization})")
    arch = with_dtypes(load_model_architecture(model, "model"),
                       weight_dtype=weight_dtype, kv_cache_dtype=kv_cache_dtype)
    hw = load_hardware(hardware, "hardware")
    tp, ep = tensor_parallel_size, expert_parallel_size
    n = default_num_speculative_tokens(arch) if num_speculative_tokens is None \
        else num_speculative_tokens
    passes, modules = drafter_shape(arch, n)

    summary = Table(title=f"{arch.display_name or arch.name} on "
                          f"{hw.display_name or hw.name}, tensor_parallel_size={tp}"
                          + (f", expert_parallel_size={ep}" if ep > 1 else ""))
    summary.add_column("quantity")
    summary.add_column("value", justify="right")
    summary.add_column("note")
    total, active = S.total_params(arch), S.active_params(arch)
    pub_t = arch.published_total_params_b
    pub_a = arch.published_active_params_b
    summary.add_row("parameters (total)", _fmt_params(total),
                    f"published {pub_t:g} B" if pub_t else "")
    summary.add_row("parameters (active per token)", _fmt_params(active),
                    f"published {pub_a:g} B" if pub_a else "")
    summary.add_row("layers", str(arch.num_layers),
                    ", ".join(f"{b.num_layers} x {b.mixer.kind}+{b.ffn.kind}"
                              for b in arch.blocks))
    summary.add_row("dtypes", f"w {arch.weight_dtype}",
                    f"experts {arch.expert_weight_dtype or arch.weight_dtype}, embedding "
                    f"{arch.embedding_dtype}, KV {arch.kv_cache_dtype}, state "
                    f"{arch.state_dtype}")
    d = arch.drafter
    if d is not None:
        summary.add_row("drafter", f"{d.kind} x {d.num_modules}",
                        f"{_fmt_params(S.drafter_module_params(arch))} per module; "
                        f"report uses {n} drafts ({modules} module(s) loaded)")
    summary.add_row("weights (whole model)", _gib(S.weight_bytes(arch)), "target only")
    summary.add_row("weights per GPU", _gib(S.weight_bytes(arch, tp, ep, modules)),
                    f"target + {modules} drafter module(s)")
    summary.add_row("KV bytes per token (whole model)",
                    f"{S.kv_bytes_per_token(arch, 1, modules):,.0f} B",
                    f"target {S.kv_bytes_per_token(arch):,.0f} B + drafter "
                    f"{modules} x {S.drafter_kv_bytes_per_token(arch):,.0f} B")
    summary.add_row("KV bytes per token per GPU",
                    f"{S.kv_bytes_per_token(arch, tp, modules):,.0f} B",
                    _kv_split_note(arch, tp))
    state = S.state_bytes_per_request(arch)
    if state:
        summary.add_row("recurrent state per request", f"{state / 2**20:,.2f} MiB",
                        f"{state / tp / 2**20:,.2f} MiB per GPU")
    summary.add_row("FLOPs per token (context 0)", f"{S.flops_per_token(arch, 0):.3e}",
                    "2 x active params + LM head")
    summary.add_row("FLOPs per token (context 8k)", f"{S.flops_per_token(arch, 8192):.3e}",
                    "plus attention over 8,192 tokens")
    budget = hw.hbm_capacity_bytes * gpu_memory_utilization - DEFAULT_RUNTIME_RESERVE_GIB * GIB
    summary.add_row("memory budget per GPU", _gib(budget),
                    f"{hw.hbm_capacity_gib:g} GiB x {gpu_memory_utilization:g} - "
                    f"{DEFAULT_RUNTIME_RESERVE_GIB:g} GiB reserve")
    fits = True
    try:
        kv = kv_cache_bytes_per_gpu(arch, hw, tp, gpu_memory_utilization,
                                    expert_parallel_size=ep, drafter_modules=modules,
                                    path="profile")
        blocks = kv_blocks_per_instance(arch, hw, tp, gpu_memory_utilization, block_size,
                                        expert_parallel_size=ep, drafter_modules=modules,
                                        max_num_seqs=max_num_seqs if state else None,
                                        path="profile")
        summary.add_row("KV cache per GPU", _gib(kv), "")
        summary.add_row(f"KV blocks (block_size {block_size})", f"{blocks:,}",
                        f"{blocks * block_size:,} tokens"
                        + (f"; states of {max_num_seqs} requests reserved" if state else ""))
    except ConfigError as exc:
        fits = False
        summary.add_row("KV cache", "does not fit", exc.message)

    layout = Table(title="KV layout (whole model, per layer)")
    for col in ("group", "layers", "KV bytes/token/layer", "window", "state bytes/layer"):
        layout.add_column(col, justify="left" if col == "group" else "right")
    fields = model_config_fields(arch)
    for g in fields["layer_groups"]:
        layout.add_row(g["kind"], str(g["num_layers"]),
                       f"{g['kv_bytes_per_token_per_layer']:,}",
                       str(g["window_tokens"] or "-"), f"{g['state_bytes_per_layer']:,}")
    if d is not None:
        layout.add_row(f"drafter ({d.kind})", f"{modules} loaded",
                       f"{fields['mtp_kv_bytes_per_token_per_module']:,}", "-", "0")
    tables = [summary, layout]
    if fits:
        tables.append(_step_table(arch, hw, tp, ep, n, passes, modules,
                                  gpu_memory_utilization))
    return tables


def _step_table(arch: ModelArchitecture, hw: HardwareSpec, tp: int, ep: int, n: int,
                passes: int, modules: int, gpu_memory_utilization: float) -> Table:
    cfg = RooflineStepTimeConfig(model=arch, hardware=hw, tensor_parallel_size=tp,
                                 expert_parallel_size=ep,
                                 gpu_memory_utilization=gpu_memory_utilization)
    plain = RooflineStepTime(cfg)
    spec = RooflineStepTime(cfg, passes, modules) if passes else None
    table = Table(title="Roofline step times (fitted kernel constants, default CPU costs)")
    table.add_column("batch")
    table.add_column("step ms", justify="right")
    table.add_column("tokens/s", justify="right")
    if spec is not None:
        d = arch.drafter
        label = f"{d.kind if d else ''} N={n}"
        table.add_column(f"step ms, {label}", justify="right")
        table.add_column("ms per verified position", justify="right")
    for chunk in PREFILL_CHUNKS:
        if chunk > arch.max_model_len:
            continue
        b = StepBatch(chunk, chunk * (chunk + 1) / 2, 0, 0, 0, 0)
        t = plain.step_time_s(b)
        row = [f"prefill {chunk:,} tokens", f"{t * 1e3:,.2f}", f"{chunk / t:,.0f}"]
        if spec is not None:
            ts = spec.step_time_s(b)
            row += [f"{ts * 1e3:,.2f}", "-"]
        table.add_row(*row)
    for ctx in DECODE_CONTEXTS:
        if ctx > arch.max_model_len:
            continue
        for batch in DECODE_BATCHES:
            b = StepBatch(0, 0.0, batch, batch, batch * ctx, 0)
            t = plain.step_time_s(b)
            row = [f"decode {batch} x {ctx:,} context", f"{t * 1e3:,.2f}",
                   f"{batch / t:,.0f}"]
            if spec is not None:
                bs = StepBatch(0, 0.0, batch, batch * (1 + n), batch * ctx, 0)
                ts = spec.step_time_s(bs)
                row += [f"{ts * 1e3:,.2f}", f"{ts * 1e3 / (1 + n):,.2f}"]
            table.add_row(*row)
    return table
