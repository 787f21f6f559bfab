"""Fit the collective constants of ``pdsim.perf.collectives`` and ``pdsim.perf.kernels`` to
published kernel timings, and print the fitted values and their errors.

Data (figures only, transcribed with their sources; docs/step-time.md, "Collectives from
placement"):

- custom all-reduce: SGLang PR #2904 (github.com/sgl-project/sglang/pull/2904,
  2025-01-15), "unit test performance in H100 (without cuda graph)", the custom
  all-reduce table: latency at TP 2/4/8 for 512 B to 1 MiB on 8 x H100 SXM.
  Law: ``latency + bytes x 2 (g - 1) / g / (450 GB/s x efficiency)``.
- DeepEP low-latency dispatch and combine: github.com/deepseek-ai/DeepEP, docs/legacy.md at
  commit 0297fc8 (the V1 tables): H800 (~160 GB/s NVLink, CX7 400 Gb/s per GPU), 128
  tokens per rank, hidden 7168, top-8, FP8 dispatch, BF16 combine, EP 8-256.
  Law: ``fixed + max(NVLink bytes / (160 GB/s x e_nvl), RDMA bytes / (50 GB/s x e_rdma))``
  with a GPU's copies to the 7 other GPUs of its node over NVLink, the rest over RDMA.

Run: ``python tools/fit_collectives.py`` (needs numpy; least squares on log time by a
coarse-to-fine grid search, no scipy).
"""

from __future__ import annotations

import itertools

import numpy as np

H100_NVLINK = 450e9
SIZES = np.array([512, 4096, 32768, 262144, 524288, 1048576], dtype=float)
CUSTOM_AR_US = {2: [3.7, 3.9, 4.5, 7.9, 12.5, 19.9],
                4: [4.8, 3.7, 4.8, 13.9, 20.2, 31.1],
                8: [5.9, 5.7, 7.8, 16.7, 22.1, 33.8]}

EP = np.array([8, 16, 32, 64, 128, 256], dtype=float)
LL_DISPATCH_US = np.array([77, 118, 155, 173, 192, 194], dtype=float)
LL_COMBINE_US = np.array([114, 195, 273, 314, 369, 360], dtype=float)
H800_NVLINK_MEASURED = 160e9  # "~160 GB/s NVLink maximum bandwidth" (DeepEP)
H800_NVLINK_NOMINAL = 200e9  # 400 GB/s both directions
NIC = 50e9
TOKENS, TOP_K, HIDDEN = 128, 8, 7168
DISPATCH_BYTES = HIDDEN * (1 + 4 / 128)  # fp8 + one fp32 scale per 128 channels
COMBINE_BYTES = HIDDEN * 2.0


def grid_min(f, ranges, rounds=4, n_points=25):  # type: ignore[no-untyped-def]
    """Minimise ``f`` over a box by repeated grid refinement."""
    lo = np.array([r[0] for r in ranges], dtype=float)
    hi = np.array([r[1] for r in ranges], dtype=float)
    best = None
    for _ in range(rounds):
        axes = [np.linspace(a, b, n_points) for a, b in zip(lo, hi, strict=True)]
        for p in itertools.product(*axes):
            v = f(np.array(p))
            if best is None or v < best[0]:
                best = (v, np.array(p))
        assert best is not None
        step = (hi - lo) / (n_points - 1)
        lo = np.maximum(lo, best[1] - 2 * step)
        hi = best[1] + 2 * step
    assert best is not None
    return best[1]


def custom_allreduce() -> None:
    g = np.repeat([2, 4, 8], 6).astype(float)
    b = np.tile(SIZES, 3)
    t = np.concatenate([CUSTOM_AR_US[2], CUSTOM_AR_US[4], CUSTOM_AR_US[8]]) * 1e-6

    def pred(p: np.ndarray) -> np.ndarray:
        return p[0] * 1e-6 + b * 2 * (g - 1) / g / (H100_NVLINK * p[1])

    p = grid_min(lambda p: float(np.sum(np.log(pred(p) / t) ** 2)), [(1, 10), (0.02, 0.6)])
    err = np.abs(pred(p) / t - 1)
    print(f"custom all-reduce (H100, {len(t)} timings): custom_allreduce_latency_s "
          f"{p[0]:.3g} us, custom_allreduce_efficiency {p[1]:.3g}; error median "
          f"{np.median(err):.1%}, worst {err.max():.1%}")


def deepep_low_latency() -> None:
    n = np.minimum(EP, 8)
    intra = TOKENS * TOP_K * (n - 1) / EP
    inter = TOKENS * TOP_K * (EP - n) / EP

    def pred(p: np.ndarray, per: float, fixed_us: float) -> np.ndarray:
        return fixed_us * 1e-6 + np.maximum(intra * per / (H800_NVLINK_MEASURED * p[0]),
                                            inter * per / (NIC * p[1]))

    def loss(p: np.ndarray) -> float:
        d = np.log(pred(p[1:], DISPATCH_BYTES, p[0]) / (LL_DISPATCH_US * 1e-6))
        # the combine's fixed cost: the best for these efficiencies (1-D grid)
        c = min(float(np.sum(np.log(pred(p[1:], COMBINE_BYTES, f) / (LL_COMBINE_US * 1e-6))
                             ** 2)) for f in np.linspace(0, 80, 81))
        return float(np.sum(d ** 2)) + c

    p = grid_min(loss, [(0, 80), (0.3, 1.0), (0.3, 1.0)], rounds=4, n_points=13)
    fc = min(np.linspace(0, 80, 801), key=lambda f: float(np.sum(
        np.log(pred(p[1:], COMBINE_BYTES, f) / (LL_COMBINE_US * 1e-6)) ** 2)))
    err = np.abs(np.concatenate([pred(p[1:], DISPATCH_BYTES, p[0]) / (LL_DISPATCH_US * 1e-6),
                                 pred(p[1:], COMBINE_BYTES, fc) / (LL_COMBINE_US * 1e-6)]) - 1)
    print(f"DeepEP low-latency (H800, 12 timings): dispatch fixed {p[0]:.3g} us, combine "
          f"fixed {fc:.3g} us, NVLink efficiency {p[1]:.3g} of the measured 160 GB/s "
          f"({p[1] * H800_NVLINK_MEASURED / H800_NVLINK_NOMINAL:.3g} of the nominal 200), "
          f"RDMA efficiency {p[2]:.3g}; error median {np.median(err):.1%}, worst "
          f"{err.max():.1%}")


if __name__ == "__main__":
    custom_allreduce()
    deepep_low_latency()
