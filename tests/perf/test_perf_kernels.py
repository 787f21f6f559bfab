"""Kernel laws and their fits: bounded, monotone, and reproducing the committed data."""

from __future__ import annotations

from statistics import median

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdsim.perf.base import StepBatch
from pdsim.perf.kernel_data import kernel_rows, predict_us, relative_errors
from pdsim.perf.kernels import DEFAULT_KERNELS, KernelFit, gemm_efficiency, gemm_time_s
from pdsim.perf.profiles import hardware_names, load_hardware

# The fit errors docs/step-time.md documents (median / worst |relative error|), per
# hardware and row kind: a refit that moves past them must update the documentation.
DOCUMENTED_ERROR = {
    ("h100-sxm", "gemm"): (0.06, 0.52),
    ("h100-sxm", "collective"): (0.08, 2.9),
    ("a100-sxm", "gemm"): (0.05, 0.48),
    ("a100-sxm", "collective"): (0.13, 3.0),
}


@pytest.mark.parametrize("hw_name,kind", sorted(DOCUMENTED_ERROR))
def test_fit_reproduces_the_committed_data(hw_name: str, kind: str) -> None:
    hw = load_hardware(hw_name)
    assert hw.kernels is not None and "Vidur" in hw.kernels.fitted_to
    rows = kernel_rows(hw_name, kind)
    assert len(rows) >= 20
    errors = [abs(e) for e in relative_errors(rows, hw, hw.kernels)]
    med, worst = DOCUMENTED_ERROR[(hw_name, kind)]
    assert median(errors) <= med
    assert max(errors) <= worst


def test_fit_is_better_than_the_constant_efficiency_it_replaced() -> None:
    """The shape-dependent law beats one efficiency for every GEMM (the old defaults:
    65% of peak, 75% of bandwidth, no latency) on the same rows."""
    hw = load_hardware("h100-sxm")
    assert hw.kernels is not None
    old = KernelFit(compute_efficiency=0.65, gemm_half_tokens=0.0, memory_efficiency=0.75,
                    kernel_latency_s=0.0, collective_latency_s=2e-5,
                    communication_efficiency=0.7)
    rows = kernel_rows("h100-sxm", "gemm")
    new_err = median(abs(e) for e in relative_errors(rows, hw, hw.kernels))
    old_err = median(abs(e) for e in relative_errors(rows, hw, old))
    assert new_err < 0.5 * old_err


def test_every_hardware_profile_has_kernel_constants() -> None:
    for name in hardware_names():
        fit = load_hardware(name).kernels
        assert fit is not None
        assert fit.fitted_to
        if name not in ("h100-sxm", "a100-sxm"):
            assert fit.transferred_from  # no public kernel data of its own: says so
    h100 = load_hardware("h100-sxm").kernels
    assert h100 is not None
    assert DEFAULT_KERNELS.model_dump(exclude={"fitted_to"}) == \
        h100.model_dump(exclude={"fitted_to"})


@given(st.floats(0.0, 1e6), st.floats(0.0, 1e6))
def test_gemm_efficiency_is_bounded_and_rises_with_tokens(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    for fit in (DEFAULT_KERNELS, load_hardware("a100-sxm").kernels):
        assert fit is not None
        e_lo, e_hi = gemm_efficiency(lo, fit), gemm_efficiency(hi, fit)
        assert 0.0 <= e_lo <= e_hi < 1.0
        assert e_hi <= fit.compute_efficiency


@given(st.integers(1, 65536), st.integers(1, 65536))
def test_gemm_time_grows_with_tokens(m1: int, m2: int) -> None:
    hw = load_hardware("h100-sxm")
    kw = {"weight_bytes": 2.0, "act_bytes": 2.0, "peak_flops": hw.peak_flops("bf16"),
          "hbm_bytes_per_s": hw.hbm_bandwidth_bytes_per_s, "fit": DEFAULT_KERNELS}
    lo, hi = sorted((m1, m2))
    assert gemm_time_s(lo, 8192, 8192, **kw) <= gemm_time_s(hi, 8192, 8192, **kw)


def test_predictions_are_positive_microseconds() -> None:
    hw = load_hardware("a100-sxm")
    assert hw.kernels is not None
    for row in kernel_rows("a100-sxm")[:200]:
        assert predict_us(row, hw, hw.kernels) > 0


def test_config_takes_the_hardware_profiles_fit_and_follows_a_hardware_change() -> None:
    """Kernel fields not given come from the hardware profile (and say so); a dumped config
    reloaded with another hardware (what a sweep over ``hardware`` does) takes the new
    profile's values, keeping the ones the user gave."""
    from pdsim.perf.config import KERNEL_FIELDS, RooflineStepTimeConfig

    h100, a100 = load_hardware("h100-sxm").kernels, load_hardware("a100-sxm").kernels
    assert h100 is not None and a100 is not None
    cfg = RooflineStepTimeConfig(model="llama-3.1-8b", hardware="h100-sxm",
                                 compute_efficiency=0.6)
    assert cfg.kernels_from == "h100-sxm" and cfg.compute_efficiency == 0.6
    assert cfg.memory_efficiency == h100.memory_efficiency
    data = {**cfg.model_dump(mode="json"), "hardware": "a100-sxm"}
    moved = RooflineStepTimeConfig.model_validate(data)
    assert moved.kernels_from == "a100-sxm" and moved.compute_efficiency == 0.6
    for f in KERNEL_FIELDS[1:]:
        assert getattr(moved, f) == getattr(a100, f), f
    assert RooflineStepTimeConfig.model_validate(moved.model_dump(mode="json")) == moved
    given = dict.fromkeys(KERNEL_FIELDS, 0.5)
    assert RooflineStepTimeConfig(model="llama-3.1-8b", hardware="a100-sxm",
                                  **given).kernels_from == ""


@pytest.mark.parametrize("hw", ["h100-sxm", "h200", "b200", "gb200"])
def test_kernel_rule_runs_the_engines_own_moe_fit(hw: str) -> None:
    """kernel_rule picks the engine's per-pair MoE cost from the profile (pdsim: the fit over
    every engine); a value the config gives wins; a dumped config reloaded with another
    rule or another hardware re-resolves it, and an MoE step grows with the per-pair cost."""
    from pdsim.perf.base import StepBatch
    from pdsim.perf.config import RooflineStepTimeConfig
    from pdsim.perf.roofline import RooflineStepTime

    fit = load_hardware(hw).kernels
    assert fit is not None and set(fit.moe_pair_s_by_engine) == {"trtllm", "sglang", "vllm"}
    base = {"model": "deepseek-v3", "hardware": hw, "tensor_parallel_size": 8,
            "weight_dtype": "int4"}  # fits 8 GPUs of every profile
    assert RooflineStepTimeConfig(**base).moe_pair_s == fit.moe_pair_s
    prefill = StepBatch(8192, 8192 * 8193 / 2, 0, 0, 0)
    steps = {}
    for engine, value in fit.moe_pair_s_by_engine.items():
        cfg = RooflineStepTimeConfig(**base, kernel_rule=engine)
        assert cfg.moe_pair_s == value and cfg.kernels_from == hw
        assert f"moe_pair_s: {engine}'s own MoE kernels" in cfg.parameter_provenance
        steps[engine] = RooflineStepTime(cfg).step_time_s(prefill)
        other = "sglang" if engine != "sglang" else "vllm"
        edited = {**cfg.model_dump(mode="json"), "kernel_rule": other}
        assert (RooflineStepTimeConfig.model_validate(edited).moe_pair_s
                == fit.moe_pair_s_by_engine[other])
        moved = {**cfg.model_dump(mode="json"), "hardware": "a100-sxm"}
        a100 = load_hardware("a100-sxm").kernels
        assert a100 is not None and not a100.moe_pair_s_by_engine  # no data: pdsim's value
        assert RooflineStepTimeConfig.model_validate(moved).moe_pair_s == a100.moe_pair_s
    assert RooflineStepTimeConfig(**base, kernel_rule="trtllm", moe_pair_s=1e-9).moe_pair_s == 1e-9
    order = sorted(fit.moe_pair_s_by_engine, key=fit.moe_pair_s_by_engine.__getitem__)
    assert [steps[e] for e in order] == sorted(steps.values())


def test_low_precision_gemms_run_at_their_own_efficiency() -> None:
    """An fp8 or fp4 GEMM runs at the chip's peak for that precision times the profile's
    fitted efficiency for it; a chip without the precision runs it at its bf16 peak and
    the bf16 efficiency (4-bit weights dequantised on Hopper, fp8 on A100)."""
    from pdsim.perf.config import RooflineStepTimeConfig
    from pdsim.perf.roofline import gemm_rate

    def rate(hw: str, dtype: str) -> tuple[float, RooflineStepTimeConfig]:
        cfg = RooflineStepTimeConfig(model="llama-3.1-8b", hardware=hw)
        return gemm_rate(cfg.resolved_hardware(), cfg, dtype), cfg

    r, cfg = rate("b200", "nvfp4")
    assert r == 9000e12 * cfg.fp4_compute_efficiency
    r, cfg = rate("b200", "fp8")
    assert r == 4500e12 * cfg.fp8_compute_efficiency
    r, cfg = rate("h200", "nvfp4")
    assert r == pytest.approx(989.4e12 * cfg.compute_efficiency)
    r, cfg = rate("a100-sxm", "fp8")
    assert r == pytest.approx(312e12 * cfg.compute_efficiency)
    # the fitted low-precision efficiencies sit below bf16's, as the measured GEMMs do
    b200 = load_hardware("b200").kernels
    assert b200 is not None
    assert b200.fp4_compute_efficiency < b200.fp8_compute_efficiency < b200.compute_efficiency


def test_engine_version_entry_takes_the_newest_version_not_newer() -> None:
    from pdsim.perf.kernels import engine_version_entry, version_key

    table = {"0.19.0": 0.5, "0.22.0": 0.6, "0.24.0": 0.9}
    assert engine_version_entry(table, "0.19.0") == 0.5
    assert engine_version_entry(table, "0.23.1") == 0.6
    assert engine_version_entry(table, "0.15.1") == 0.5      # older than all: the oldest
    assert engine_version_entry(table, "0.30.0") == 0.9
    assert engine_version_entry(table, "") == 0.9            # unknown: the newest
    assert engine_version_entry(table, "nightly-5b8c30d") == 0.9
    assert version_key("1.3.0rc10") > version_key("1.3.0rc2")
    assert version_key("1.2.0") < version_key("1.3.0rc10")
    assert version_key("0.5.6.post2") > version_key("0.5.6")


@pytest.mark.parametrize("hw", ["h100-sxm", "h200", "b200", "gb200"])
def test_fp8_moe_efficiency_follows_the_engine_and_its_version(hw: str) -> None:
    """A block-scaled fp8 MoE layer runs at the engine's fitted share of the roofline for
    the configured engine version; 4-bit experts and the pdsim rule are not touched."""
    from pdsim.perf.config import RooflineStepTimeConfig
    from pdsim.perf.kernels import engine_version_entry
    from pdsim.perf.roofline import RooflineStepTime

    fit = load_hardware(hw).kernels
    assert fit is not None and fit.fp8_moe_efficiency_by_engine
    base = {"model": "deepseek-v3", "hardware": hw, "tensor_parallel_size": 8,
            "weight_dtype": "fp8", "expert_weight_dtype": "fp8"}
    if hw == "h100-sxm":
        base["tensor_parallel_size"] = 16  # fp8 DeepSeek needs two H100 nodes
    decode = StepBatch(0, 0.0, 16, 16, 16 * 2048)  # the experts' weight read dominates
    assert RooflineStepTimeConfig(**base).fp8_moe_efficiency == fit.fp8_moe_efficiency == 1.0
    for engine, table in fit.fp8_moe_efficiency_by_engine.items():
        for version, value in table.items():
            cfg = RooflineStepTimeConfig(**base, kernel_rule=engine, kernel_version=version)
            assert cfg.fp8_moe_efficiency == value == engine_version_entry(table, version)
            assert "fp8_moe_efficiency" in cfg.parameter_provenance
            # the same layer at the engine's own pair cost and efficiency 1, for comparison
            ref = RooflineStepTimeConfig(**base, kernel_rule=engine, kernel_version=version,
                                         fp8_moe_efficiency=1.0)
            t, t_ref = (RooflineStepTime(c).step_time_s(decode) for c in (cfg, ref))
            assert (t > t_ref) if value < 1.0 else (t == t_ref)
            fp4 = {**base, "expert_weight_dtype": "nvfp4"}
            assert (RooflineStepTime(RooflineStepTimeConfig(
                **fp4, kernel_rule=engine, kernel_version=version)).step_time_s(decode)
                == RooflineStepTime(RooflineStepTimeConfig(
                    **fp4, kernel_rule=engine, kernel_version=version,
                    fp8_moe_efficiency=1.0)).step_time_s(decode))


def test_fp8_moe_efficiency_tables_are_the_fit_of_the_committed_layers() -> None:
    """Each profile's ``fp8_moe_efficiency_by_engine`` is what ``tools/fit_moe_kernels.py
    --fp8-decode`` fits to ``pdsim/data/kernels/aic_moe_decode_kernels.csv`` (gb200
    borrows b200's), and the fit lowers the squared log error of every table it moves."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    try:
        import fit_moe_kernels as tool
    finally:
        sys.path.pop(0)
    fits = tool.fp8_decode_fits()
    assert fits
    for (hw, engine, version), (eff, before, _, loss_before, loss_after) in fits.items():
        fit = load_hardware(hw).kernels
        assert fit is not None
        assert fit.fp8_moe_efficiency_by_engine[engine][version] == eff, (hw, engine, version)
        assert len(before) >= 50  # four models' layers at 64-512 tokens, TP 1-8
        if eff < 1.0:
            assert loss_after < loss_before
    b200, gb200 = load_hardware("b200").kernels, load_hardware("gb200").kernels
    assert b200 is not None and gb200 is not None
    assert gb200.fp8_moe_efficiency_by_engine == b200.fp8_moe_efficiency_by_engine
    assert "fp8_moe_efficiency_by_engine" in gb200.borrowed
