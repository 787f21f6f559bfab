"""The vectorized decode step times used by decode runs agree with step-by-step pricing."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import pdsim
from pdsim.config import Role
from pdsim.perf.base import StepBatch, decode_step_times_s
from pdsim.perf.build import build_step_time_model


def _batches(seed: int, n: int = 64) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    reqs = rng.integers(0, 128, n)
    return reqs, reqs * 4, rng.integers(0, 2_000_000, n), rng.integers(0, 16, n)


def _scalar(model: object, reqs: np.ndarray, toks: np.ndarray, ctx: np.ndarray,
            rep: np.ndarray) -> np.ndarray:
    return np.array([model.step_time_s(StepBatch(0, 0.0, int(r), int(t), int(c), int(x)))  # type: ignore[attr-defined]
                     for r, t, c, x in zip(reqs, toks, ctx, rep, strict=True)])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), method=st.sampled_from(["none", "mtp", "eagle3", "ngram"]))
def test_simple_model_vectorized_equals_scalar(seed: int, method: str) -> None:
    n = 0 if method == "none" else 3
    cfg = pdsim.load_config("configs/mtp3.yaml", [f"speculative.method={method}",
                                                  f"speculative.num_speculative_tokens={n}"])
    model = build_step_time_model(cfg, Role.DECODE)
    assert hasattr(model, "decode_step_times_s")
    batches = _batches(seed)
    # bit for bit: a decode run must price steps exactly as single steps would
    np.testing.assert_array_equal(decode_step_times_s(model, *batches),
                                  _scalar(model, *batches))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31),
       coef=st.tuples(st.floats(1e-6, 0.05), *(st.floats(0, 0.05, allow_subnormal=False)
                                                for _ in range(2)),
                      st.floats(0, 1e-4), st.floats(0, 1e-8), st.floats(0, 2.0)))
def test_simple_model_vectorized_equals_scalar_for_any_coefficients(
        seed: int, coef: tuple[float, ...]) -> None:
    """The vectorized path reads count terms from tables the scalar terms fill: equal bit
    for bit whatever the coefficients, for counts past the tables' first size too."""
    overhead, floor, drafter_floor, per_token, per_ctx, ratio = coef
    cfg = pdsim.load_config("configs/mtp3.yaml", [
        "step_time.kind=simple", f"step_time.overhead_s={overhead!r}",
        f"step_time.weights_floor_s={floor!r}",
        f"step_time.drafter_floor_s={drafter_floor!r}", f"step_time.per_token_s={per_token!r}",
        f"step_time.per_context_token_s={per_ctx!r}",
        f"step_time.drafter_token_cost_ratio={ratio!r}"])
    model = build_step_time_model(cfg, Role.DECODE)
    rng = np.random.default_rng(seed)
    reqs = rng.integers(0, 600, 40)
    batches = (reqs, reqs * 4, rng.integers(0, 5_000_000, 40), rng.integers(0, 1500, 40))
    np.testing.assert_array_equal(decode_step_times_s(model, *batches),
                                  _scalar(model, *batches))


def test_models_without_a_vectorized_path_fall_back_to_step_by_step() -> None:
    cfg = pdsim.load_config("configs/inkling_small_pd_mtp8.yaml")
    model = build_step_time_model(cfg, Role.DECODE)
    batches = _batches(7, 16)
    np.testing.assert_array_equal(decode_step_times_s(model, *batches),
                                  _scalar(model, *batches))
