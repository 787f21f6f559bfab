"""The Pareto front of output tokens/s per GPU against tokens/s per user, and its ties.

A point dominates another when it is at least as good on both axes and better on one. The
front is every feasible point no other point dominates. The chosen point is the front's
highest output tokens/s per GPU (the most SLO-meeting throughput the GPUs give; ties to the
higher tokens/s per user, then to the candidate's order). Two points are *tied* when both
figures differ by less than ``VALIDATION_ERROR``: pdsim's own error on measured absolute
figures, so it cannot tell them apart.
"""

from __future__ import annotations

from collections.abc import Sequence

VALIDATION_ERROR = 0.231
"""Median |error| of pdsim on the held-out absolute rows of the validation suite
(docs/validation.md, "holdout, absolute": 23.1%); a test keeps it equal to the docs."""
VALIDATION_SOURCE = "docs/validation.md, holdout absolute rows, median |error|"

Point = tuple[float, float]


def dominates(a: Point, b: Point) -> bool:
    """``a`` is at least as good as ``b`` on both axes (higher is better) and better on
    one."""
    return a[0] >= b[0] and a[1] >= b[1] and (a[0] > b[0] or a[1] > b[1])


def pareto_front(points: Sequence[Point]) -> list[int]:
    """Indices of the points no other point dominates, in input order (O(n^2): a plan's
    front is over hundreds of points at most)."""
    return [i for i, p in enumerate(points)
            if not any(dominates(q, p) for j, q in enumerate(points) if j != i)]


def close(a: float, b: float, rel: float = VALIDATION_ERROR) -> bool:
    """``a`` and ``b`` differ by less than ``rel`` of the larger."""
    top = max(abs(a), abs(b))
    return top == 0 or abs(a - b) < rel * top


def tied(a: Point, b: Point, rel: float = VALIDATION_ERROR) -> bool:
    """Both coordinates closer than ``rel``: the model cannot rank the two."""
    return close(a[0], b[0], rel) and close(a[1], b[1], rel)


def choose(points: Sequence[Point], front: Sequence[int]) -> int | None:
    """The front point with the highest first coordinate (then second, then first index)."""
    if not front:
        return None
    return min(front, key=lambda i: (-points[i][0], -points[i][1], i))


__all__ = ["VALIDATION_ERROR", "VALIDATION_SOURCE", "choose", "close", "dominates",
           "pareto_front", "tied"]
