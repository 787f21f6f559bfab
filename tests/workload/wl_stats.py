"""Sampling-error tolerances for the workload tests.

A sample statistic is compared with its expectation within ``Z`` standard errors, the
standard error coming from the distribution's own moments (not a magic tolerance). With
Z = 5 a correct generator fails with probability below 1e-6 per check; the seeds are fixed
anyway, so a failure is reproducible.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from pdsim.workload.config import WorkloadConfig

Z = 5.0


def assert_mean_and_cv(x: np.ndarray, mean: float, cv: float, kurtosis: float) -> None:
    """The sample mean and variance of ``x`` match ``mean`` and ``(cv * mean)**2``.

    ``kurtosis`` is the (non-excess) kurtosis mu4 / sigma^4, which sets the standard error
    of the sample variance: sqrt((mu4 - sigma^4 (n - 3) / (n - 1)) / n).
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    var = (cv * mean) ** 2
    se_mean = np.sqrt(var / n)
    assert abs(x.mean() - mean) <= Z * se_mean, (x.mean(), mean, se_mean)
    if var == 0:
        assert np.all(x == mean)
        return
    se_var = np.sqrt((kurtosis - (n - 3) / (n - 1)) * var * var / n)
    assert abs(x.var(ddof=1) - var) <= Z * se_var, (x.var(ddof=1), var, se_var)


def pmf_moments(values: np.ndarray, probs: np.ndarray) -> tuple[float, float, float]:
    """Mean, CV and kurtosis of a finite distribution."""
    mean = float(np.sum(values * probs))
    var = float(np.sum((values - mean) ** 2 * probs))
    mu4 = float(np.sum((values - mean) ** 4 * probs))
    return mean, np.sqrt(var) / mean, mu4 / var**2 if var else 3.0


def workload(data: dict[str, Any]) -> WorkloadConfig:
    """Validate a YAML-shaped mapping the way the loader does (JSON, strict)."""
    return WorkloadConfig.model_validate_json(json.dumps(data))
