"""How many routed experts a step touches, under skewed and correlated routing.

A step of T tokens routed top-k over E experts reads the weights of the experts at least
one token picked. With uniform, independent routing that is ``E (1 - (1 - k/E)^T)``.
Real routers are neither:

- **skewed load**: some experts are picked more often than others over a serving window.
  Popularity is modelled as lognormal across experts with coefficient of variation
  ``load_cv``, split into ``BUCKETS`` equal-count popularity classes; a class with
  relative popularity w (mean 1 over classes) is missed by one token with probability
  ``1 - k w / E``. Skew lowers the experts touched at a given T (popular experts absorb
  repeated picks).
- **correlated tokens of one request**: consecutive tokens of a request reuse experts
  well above chance (Mixtral of Experts, Jiang et al. 2024, Sec. 5). A request verifying
  N + 1 positions routes them as ``1 + N (1 - token_reuse)`` independent tokens, where
  ``token_reuse`` is the excess probability that a further token re-picks an expert of
  the request's earlier tokens. Prefill chunks are long enough to touch every expert
  either way and are counted as independent.

- **the slowest expert-parallel rank**: with experts sharded over EP GPUs every MoE layer
  waits for the busiest rank. A rank's token-expert pairs vary with the popularity of the
  E/EP experts it holds (coefficient of variation ``load_cv / sqrt(E/EP)``) and with
  sampling (``sqrt((1 - 1/EP) / pairs)`` for ``pairs`` per rank on average); the busiest
  of EP ranks carries ``1 + z_EP x cv`` times the mean, z_EP the expected maximum of EP
  standard normals (``straggler_factor``).

``ExpertRouting`` is a model profile's ``routing`` section (defaults in docs/step-time.md);
``touched_fraction`` is plain float arithmetic for the step-time hot path.
"""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist
from typing import Annotated

from pydantic import Field

from pdsim._model import StrictModel

BUCKETS = 4
Fraction = Annotated[float, Field(ge=0, lt=1)]
NonNegFloat = Annotated[float, Field(ge=0, le=4, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(ge=1)]

FITTED_LOAD_CV = 1.5
"""Expert popularity skew fitted once for every MoE model (``FITTED_LOAD_CV_SOURCE``)."""
FITTED_LOAD_CV_SOURCE = (
    "fitted: the lowest mean TPOT error of the silicon sample's 1,404 MoE fit rows on a "
    "grid 0.5, 1.0, 1.5, 2.0, one value for every MoE profile (docs/step-time.md, "
    "\"Expert popularity skew\"); load-balancing losses and biases even load over "
    "training batches, not over a serving batch")


class ExpertRouting(StrictModel):
    """Routing statistics of a MoE model (see the module docstring).

    ``load_cv``: coefficient of variation of per-expert load over a serving window (0 =
    uniform; default the fitted ``FITTED_LOAD_CV``); ``token_reuse``: excess probability
    that a further token of the same request re-picks one of its earlier tokens' experts
    (0 = independent);
    ``max_nodes_per_token``: node-limited routing, the most nodes a token's experts may
    span (DeepSeek-V3's group-limited gating); ``sources``: where the figures come from.
    """

    load_cv: NonNegFloat = FITTED_LOAD_CV
    """Coefficient of variation of per-expert load over a serving window (0: uniform;
    default: the value fitted for every MoE model, 1.5)."""
    token_reuse: Fraction = 0.0
    """Excess probability a later token of a request re-picks its earlier tokens' experts."""
    max_nodes_per_token: PositiveInt | None = None
    """Node-limited routing: the most nodes one token's experts may sit on (null: no
    limit); the normal expert-parallel all-to-all sends a token once per node it reaches."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Where the figures come from."""


DEFAULT_ROUTING = ExpertRouting(
    token_reuse=0.3,
    sources={
        "token_reuse": (
            "Mixtral of Experts (Jiang et al. 2024, arXiv 2401.04088), Sec. 5 routing "
            "analysis: consecutive tokens repeat their expert assignment well above chance "
            "in middle and late layers; 0.3 is the excess over chance of the top-2 "
            "repetition rate there, carried to other MoE models as an estimate"),
        "load_cv": FITTED_LOAD_CV_SOURCE,
    })
"""Routing of a model profile without a ``routing`` section."""


def popularity_weights(load_cv: float, buckets: int = BUCKETS) -> tuple[float, ...]:
    """Relative popularity of ``buckets`` equal-count expert classes (mean 1): the class
    means of a lognormal with coefficient of variation ``load_cv``."""
    if load_cv <= 0:
        return (1.0,) * buckets
    sigma = math.sqrt(math.log1p(load_cv * load_cv))
    normal = NormalDist()
    # mean of a lognormal (median 1) over the quantile slice [a, b] of its normal
    edges = [normal.inv_cdf(i / buckets) if 0 < i < buckets else (-math.inf if i == 0
             else math.inf) for i in range(buckets + 1)]
    means = []
    for a, b in itertools.pairwise(edges):
        lo = normal.cdf(a - sigma) if a != -math.inf else 0.0
        hi = normal.cdf(b - sigma) if b != math.inf else 1.0
        means.append(math.exp(sigma * sigma / 2) * (hi - lo) * buckets)
    scale = sum(means) / buckets
    return tuple(m / scale for m in means)


def log_miss_per_token(num_experts: int, top_k: int, load_cv: float) -> tuple[float, ...]:
    """Per popularity class, log of the probability one token misses a given expert."""
    out = []
    for w in popularity_weights(load_cv):
        p = min(top_k * w / num_experts, 1.0)
        out.append(math.log1p(-p) if p < 1.0 else -math.inf)
    return tuple(out)


def effective_tokens(tokens: float, decode_requests: float, decode_queries: float,
                     token_reuse: float) -> float:
    """Independent-token equivalent of a step: decode queries beyond one per request
    count ``1 - token_reuse`` each (see the module docstring)."""
    extra = decode_queries - decode_requests
    return tokens - token_reuse * extra if extra > 0 else tokens


def touched_fraction(routed_tokens: float, log_miss: tuple[float, ...]) -> float:
    """Expected fraction of experts at least one of ``routed_tokens`` tokens picks."""
    if routed_tokens <= 0:
        return 0.0
    return -sum(math.expm1(routed_tokens * lm) for lm in log_miss) / len(log_miss)


def expected_max_standard_normal(n: int) -> float:
    """Expected maximum of ``n`` independent standard normals (Blom's approximation;
    0 for one)."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def straggler_factor(z_ranks: float, rank_cv2: float, pairs_per_rank: float,
                     ranks: int) -> float:
    """Load of the busiest of ``ranks`` EP ranks over the mean (see the module docstring):
    ``z_ranks`` from ``expected_max_standard_normal``, ``rank_cv2`` the squared coefficient
    of variation of a rank's expert popularity."""
    if not z_ranks or pairs_per_rank <= 0:
        return 1.0
    return 1.0 + z_ranks * math.sqrt(rank_cv2 + (1.0 - 1.0 / ranks) / pairs_per_rank)
