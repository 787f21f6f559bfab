"""``calibrate``: recovers known parameters from results simulated with them.

Each "real" result is pdsim's own run (written as a vLLM bench result in memory) under
known parameter values; calibration starts from perturbed values and must find them
again. With common random numbers the objective is exactly zero at the truth, but it is
only piecewise smooth around it, so recovery is checked within a stated tolerance.
"""

from __future__ import annotations

import math

import pytest
import yaml
from calibration_support import result_of, small_config

from pdsim import load_config
from pdsim.config import StaleKVConfig
from pdsim.errors import ConfigError
from pdsim.loader import config_from_dict, dump_config
from pdsim.perf.profiles import model_config_fields
from pdsim.realdata.calibrate import (
    SIMPLE_PARAMS,
    STALE_KV_PARAMS,
    calibrate,
    default_bounds,
    default_params,
    standalone_variant,
    with_values,
)

RECOVERY = 0.05  # relative


def _value(cfg: object, path: str) -> float:
    node: object = cfg
    for part in path.split("."):
        node = getattr(node, part)
    assert isinstance(node, float)
    return node


def test_recovers_simple_step_time_factors() -> None:
    truth = {"step_time.per_token_s": 6e-5, "step_time.weights_floor_s": 0.02}
    base = small_config()
    real = result_of(with_values(base, truth), "truth")
    start = with_values(base, {"step_time.per_token_s": 3e-5,
                               "step_time.weights_floor_s": 0.012})
    rep = calibrate(start, [real], list(truth), max_evals=40)
    assert rep.method == "least_squares"
    assert rep.evaluations <= 40
    for p in rep.parameters:
        assert p.fitted == pytest.approx(truth[p.path], rel=RECOVERY), p
        assert _value(rep.config, p.path) == p.fitted
    assert rep.fit_rms("before") > 0.2
    assert rep.fit_rms("after") < 0.02
    assert rep.final_cost < rep.initial_cost


def test_recovers_roofline_efficiencies() -> None:
    data = {
        "model": model_config_fields("llama-3.1-8b"),
        "speculative": {"method": "eagle3", "num_speculative_tokens": 2,
                        "acceptance": {"kind": "constant", "rate": 0.7}},
        # fixed costs off: the two efficiencies alone set the timings, as the test intends
        "step_time": {"kind": "roofline", "model": "llama-3.1-8b", "hardware": "h100-sxm",
                      "kernel_latency_s": 0.0, "overhead_per_request_s": 0.0},
        "cluster": {"mode": "colocated", "colocated": {"count": 1, "kv_cache_gib": None}},
        "workload": {"num_requests": 100, "arrivals": {"kind": "poisson", "rate_per_s": 8},
                     "prompt_tokens": {"kind": "uniform", "mean_tokens": 1024,
                                       "range_ratio": 0.5},
                     "output_tokens": {"kind": "uniform", "mean_tokens": 64,
                                       "range_ratio": 0.5}},
    }
    base = config_from_dict(data)
    truth = {"step_time.compute_efficiency": 0.5, "step_time.memory_efficiency": 0.6}
    real = result_of(with_values(base, truth), "truth")
    start = with_values(base, {"step_time.compute_efficiency": 0.7,
                               "step_time.memory_efficiency": 0.85})
    rep = calibrate(start, [real], list(truth), max_evals=50)
    for p in rep.parameters:
        assert (p.lower, p.upper) == (1e-3, 1.0)
        assert p.fitted == pytest.approx(truth[p.path], rel=RECOVERY), p
    assert rep.fit_rms("after") < 0.02


def test_recovers_stale_kv_sensitivity_from_pd_and_standalone() -> None:
    # Before the fix every excess stale slot on D is an unverified draft, so P/D
    # acceptance depends on the sensitivity alone; the standalone run has no stale KV.
    # Eight modules: with three, P's few wrong drafts leave too little to identify it.
    base = small_config("connector.prefill_backoff=off", "model.num_mtp_modules=8",
                        "speculative.num_speculative_tokens=8",
                        "speculative.acceptance={kind: constant, rate: 0.8}")
    path = "speculative.stale_kv.sensitivity_per_slot"
    truth = with_values(base, {path: 1.0})
    pd = result_of(truth, "pd")
    alone = result_of(standalone_variant(truth), "standalone")
    assert pd.spec_decode is not None and alone.spec_decode is not None
    assert pd.spec_decode.acceptance_length < alone.spec_decode.acceptance_length - 0.2
    rep = calibrate(base, [pd], [path], standalone=[alone], max_evals=40)
    assert rep.method == "nelder_mead"  # auto: a speculative parameter is fitted
    assert "acceptance_length" in rep.metrics and "acceptance_rate_pos2" in rep.metrics
    (p,) = rep.parameters
    assert p.initial == StaleKVConfig().sensitivity_per_slot  # the shipped default
    assert abs(p.initial - 1.0) > 0.5
    assert p.fitted == pytest.approx(1.0, rel=RECOVERY)
    roles = [(d.role, d.deployment) for d in rep.datasets]
    assert roles == [("fit", "config"), ("fit", "standalone")]
    st = rep.datasets[1]
    assert st.after.simulation is not None
    assert st.after.simulation.config.cluster.mode == "colocated"


def test_default_parameters() -> None:
    cfg = small_config()
    assert default_params(cfg) == SIMPLE_PARAMS
    assert default_params(cfg, with_stale_kv=True) == (*SIMPLE_PARAMS, *STALE_KV_PARAMS)
    roof = config_from_dict({"step_time": {"kind": "roofline", "model": "llama-3.1-8b",
                                           "hardware": "h100-sxm",
                                           "tensor_parallel_size": 2}})
    assert "step_time.communication_efficiency" in default_params(roof)
    assert "step_time.compute_efficiency" in default_params(roof)
    measured = config_from_dict({"step_time": {"kind": "measured", "csv_path": "x.csv"}})
    with pytest.raises(ConfigError, match="--param"):
        default_params(measured)
    assert default_bounds("step_time.moe_efficiency", 0.7) == (1e-3, 1.0)
    assert default_bounds("step_time.per_token_s", 4e-5) == pytest.approx((4e-7, 4e-3))


def test_stale_kv_joins_the_defaults_with_both_kinds_of_result() -> None:
    cfg = small_config("workload.num_requests=20")
    pd = result_of(cfg, "pd")
    alone = result_of(standalone_variant(cfg), "standalone")
    only_pd = calibrate(cfg, [pd], max_evals=1)
    assert [p.path for p in only_pd.parameters] == list(SIMPLE_PARAMS)
    both = calibrate(cfg, [pd], standalone=[alone], max_evals=1)
    assert [p.path for p in both.parameters] == [*SIMPLE_PARAMS, *STALE_KV_PARAMS]


def test_budget_held_out_and_round_trip() -> None:
    base = small_config()
    truth = with_values(base, {"step_time.weights_floor_s": 0.02})
    real = result_of(truth, "fit")
    other = result_of(with_values(truth, {"workload.arrivals.rate_per_s": 3.0}), "other")
    start = with_values(base, {"step_time.weights_floor_s": 0.015})
    rep = calibrate(start, [real], ["step_time.weights_floor_s"], held_out=[other],
                    max_evals=4)
    assert rep.evaluations <= 4
    assert "max_evals = 4" in rep.message
    assert rep.final_cost <= rep.initial_cost
    assert [(d.source, d.role) for d in rep.datasets] == [("fit", "fit"),
                                                         ("other", "held-out")]
    held = rep.datasets[1]
    assert held.after.rms_error(rep.metrics) < held.before.rms_error(rep.metrics)
    assert load_config(yaml.safe_load(dump_config(rep.config))) == rep.config
    doc = rep.to_dict()
    assert doc["parameters"][0]["path"] == "step_time.weights_floor_s"
    assert doc["datasets"][1]["role"] == "held-out"


def test_trimmed_replay_and_seed() -> None:
    cfg = small_config()
    real = result_of(cfg, "full")
    rep = calibrate(cfg, [real], ["step_time.weights_floor_s"], max_requests=30,
                    max_evals=2, seed=cfg.seed)
    assert rep.datasets[0].source == "full[:30]"
    assert rep.datasets[0].before.num_requests == 30
    assert math.isfinite(rep.fit_rms("before"))


def test_parameter_errors() -> None:
    cfg = small_config("workload.num_requests=10")
    real = result_of(cfg)
    with pytest.raises(ConfigError, match="no such config value") as err:
        calibrate(cfg, [real], ["step_time.per_tokens_s"], max_evals=1)
    assert err.value.path == "step_time.per_tokens_s"
    with pytest.raises(ConfigError, match="not a number"):
        calibrate(cfg, [real], ["name"], max_evals=1)
    zero = with_values(cfg, {"step_time.per_context_token_s": 0.0})
    with pytest.raises(ConfigError, match="positive start"):
        calibrate(zero, [real], ["step_time.per_context_token_s"], max_evals=1)
    rep = calibrate(zero, [real], ["step_time.per_context_token_s"], max_evals=1,
                    bounds={"step_time.per_context_token_s": (1e-10, 1e-8)})
    assert rep.parameters[0].initial == 1e-10  # a start outside the bounds is clamped
    with pytest.raises(ConfigError, match="lower < upper"):
        calibrate(cfg, [real], ["step_time.overhead_s"], max_evals=1,
                  bounds={"step_time.overhead_s": (0.01, 0.001)})
    with pytest.raises(ConfigError, match="twice"):
        calibrate(cfg, [real], ["step_time.overhead_s", "step_time.overhead_s"])
    with pytest.raises(ConfigError, match="nothing to fit"):
        calibrate(cfg, [real], ["step_time.overhead_s"], metrics=["p99.9_ttft_ms"])
    with pytest.raises(ValueError):
        calibrate(cfg, [])
