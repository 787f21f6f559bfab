"""Facts an instance leaves behind: what the engine hands over and metrics read.

Per engine step an instance records (``STEP_COLUMNS``): when the step started and ended,
the prefill tokens and decode requests in its batch, and after it the KV blocks in use and
the requests running, waiting and receiving. They are kept by column (``StepColumns``):
the end times as doubles, the start times as the few steps that did not start where the
one before ended (an engine idle in between), the counts as 16-bit integers (32-bit once
one does not fit). A run keeps every column (``record_steps: full``, what time series
and timelines read) or only the ones its summary needs (``aggregates``: end times,
starts, KV blocks in use and running).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import numpy as np

#: every per-step fact, in the order of the ``step_log`` matrix
STEP_COLUMNS = ("start_s", "end_s", "prefill_tokens", "decode_requests", "kv_used_blocks",
                "running", "waiting", "receiving")
#: the integer columns a run keeps in each mode (start and end times are always kept)
COUNT_COLUMNS: dict[str, tuple[str, ...]] = {
    "full": STEP_COLUMNS[2:],
    "aggregates": ("kv_used_blocks", "running"),
}
StepMode = Literal["full", "aggregates"]


class StepLogNotKept(LookupError):
    """A per-step column the run did not keep (it recorded aggregates only)."""


@dataclass(frozen=True)
class StepColumns:
    """One instance's per-step facts by column (read-only arrays, one entry per step).

    ``end_s``: every step's end. ``gap_steps`` / ``gap_start_s``: the steps that did not
    start at the previous step's end (always step 0), and their starts; every other step
    started where the one before ended. ``counts``: the integer columns kept (``mode``).
    """

    mode: StepMode
    end_s: np.ndarray
    gap_steps: np.ndarray
    gap_start_s: np.ndarray
    counts: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.end_s)

    @classmethod
    def from_matrix(cls, log: np.ndarray, mode: StepMode = "full") -> StepColumns:
        """The columns of a ``(steps, 8)`` matrix in ``STEP_COLUMNS`` order."""
        log = np.asarray(log, dtype=np.float64).reshape(-1, len(STEP_COLUMNS))
        end = log[:, 1].copy()
        gaps = start_gaps(log[:, 0], end, np.nan)
        counts = {k: to_counts(log[:, STEP_COLUMNS.index(k)], k) for k in COUNT_COLUMNS[mode]}
        return cls(mode, end, gaps, log[gaps, 0].copy(), counts)

    def start_s(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Every step's start (built from the end times and the gaps), or those of steps
        ``lo`` to ``hi`` (exclusive)."""
        end = self.end_s
        hi = len(end) if hi is None else hi
        start = np.empty(hi - lo)
        start[1:] = end[lo:hi - 1]
        if 0 < lo < hi:
            start[0] = end[lo - 1]
        gaps = self.gap_steps
        a, b = np.searchsorted(gaps, (lo, hi))
        start[gaps[a:b] - lo] = self.gap_start_s[a:b]
        return start

    def duration_s(self) -> np.ndarray:
        """Every step's length, ``end - start``."""
        out: np.ndarray = self.end_s - self.start_s()
        return out

    def column(self, name: str) -> np.ndarray:
        """One column of ``STEP_COLUMNS`` (times as doubles, counts as integers)."""
        if name == "start_s":
            return self.start_s()
        if name == "end_s":
            return self.end_s
        if name not in STEP_COLUMNS:
            raise KeyError(f"no step column {name!r}; the columns are {STEP_COLUMNS}")
        if name not in self.counts:
            raise StepLogNotKept(
                f"the run kept per-step aggregates only (engine.record_steps: {self.mode}), "
                f"not {name!r}; simulate with engine.record_steps: full for time series "
                f"and timelines")
        return self.counts[name]

    def matrix(self) -> np.ndarray:
        """The ``(steps, 8)`` matrix of doubles in ``STEP_COLUMNS`` order (a new array;
        needs every column)."""
        out = np.empty((len(self), len(STEP_COLUMNS)))
        for j, name in enumerate(STEP_COLUMNS):
            out[:, j] = self.column(name)
        return out


def start_gaps(start_s: np.ndarray, end_s: np.ndarray, prev_end_s: float) -> np.ndarray:
    """Indices of the steps that did not start where the one before ended (the first
    step compares with ``prev_end_s``)."""
    prev = np.empty_like(end_s)
    prev[1:] = end_s[:-1]
    if len(prev):
        prev[0] = prev_end_s
    return np.flatnonzero(start_s != prev)


def to_counts(values: np.ndarray, name: str) -> np.ndarray:
    """A count column as 32-bit integers (it must hold whole numbers that fit)."""
    out = values.astype(np.int32)
    if not np.array_equal(out, values):
        raise ValueError(f"step column {name} holds values that are not 32-bit counts")
    return out


@dataclass
class InstanceFacts:
    """What one instance did: its steps (``steps``; ``step_end_s`` is their end times),
    its busy time and its preemptions."""

    name: str
    role: str
    num_blocks: int
    steps: StepColumns
    busy_s: float
    preemptions: int
    pool: str = ""
    """The instance's pool name ('' for a role's one unnamed group)."""

    @property
    def step_end_s(self) -> np.ndarray:
        return self.steps.end_s

    @property
    def step_log(self) -> np.ndarray:
        """Every per-step fact as a ``(steps, 8)`` matrix of doubles (``STEP_COLUMNS``;
        built on each call: read columns with ``steps.column`` instead where it matters)."""
        return self.steps.matrix()


class SegmentTable(Mapping[int, list[list[int]]]):
    """Every request's output segments (``[instance_index, first_step, last_step]``, in
    the order the request emitted them) by request id, held as arrays: ``rows`` a
    ``(segments, 4)`` int64 array ``(request id, instance, first step, last step)`` in
    request-id order, ``offsets`` where each request's rows start (``offsets[rid]`` to
    ``offsets[rid + 1]``). Reads like the dict of lists it replaces (a lookup builds
    that request's list); a run keeps about 40 bytes a request instead of a dict entry
    and two lists."""

    __slots__ = ("offsets", "rows")

    def __init__(self, rows: np.ndarray, offsets: np.ndarray) -> None:
        self.rows = rows
        self.offsets = offsets

    @classmethod
    def from_flat(cls, flat: np.ndarray, num_requests: int) -> SegmentTable:
        """From ``(segments, 4)`` rows ``(request id, instance, first, last)``, each
        request's in the order it emitted them (requests in any order: sorted here,
        stably, unless they already are)."""
        flat = np.asarray(flat, dtype=np.int64).reshape(-1, 4)
        rid = flat[:, 0]
        if len(rid) > 1 and not bool(np.all(rid[1:] >= rid[:-1])):
            flat = flat[np.argsort(rid, kind="stable")]
            rid = flat[:, 0]
        offsets = np.zeros(num_requests + 1, dtype=np.int64)
        np.cumsum(np.bincount(rid, minlength=num_requests), out=offsets[1:])
        return cls(flat, offsets)

    @classmethod
    def from_dict(cls, segments: Mapping[int, list[list[int]]]) -> SegmentTable:
        """From a dict of request id to segment lists (ids ``0 .. len - 1``)."""
        if isinstance(segments, SegmentTable):
            return segments
        flat = [(rid, *seg) for rid in sorted(segments) for seg in segments[rid]]
        return cls.from_flat(np.array(flat, dtype=np.int64).reshape(-1, 4), len(segments))

    def request_ids(self) -> np.ndarray:
        """Each row's request id."""
        out: np.ndarray = self.rows[:, 0]
        return out

    def chunks_per_request(self) -> np.ndarray:
        """Each request's output chunks: the steps its segments span (int64)."""
        rows = self.rows
        out = np.zeros(len(self), dtype=np.int64)
        np.add.at(out, rows[:, 0], rows[:, 3] - rows[:, 2] + 1)
        return out

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self)))

    def __contains__(self, rid: object) -> bool:
        return isinstance(rid, (int, np.integer)) and 0 <= int(rid) < len(self)

    def __getitem__(self, rid: int) -> list[list[int]]:
        if rid not in self:
            raise KeyError(rid)
        a, b = self.offsets[rid], self.offsets[rid + 1]
        out: list[list[int]] = self.rows[a:b, 1:].tolist()
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SegmentTable):
            return (np.array_equal(self.offsets, other.offsets)
                    and np.array_equal(self.rows, other.rows))
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


class RateSamples(Sequence[tuple[float, float]]):
    """A link's (or port's) ``(time s, bytes/s in use)`` samples, taken on each change,
    stored as one flat array of doubles (16 bytes a sample, not a tuple and two float
    objects: a light-load run takes two samples a request). Reads like the list of
    tuples it replaces; ``append`` takes one sample."""

    __slots__ = ("_data",)

    def __init__(self, samples: Iterable[tuple[float, float]] = ()) -> None:
        self._data = array("d")
        for sample in samples:
            self._data.extend(sample)

    def append(self, sample: tuple[float, float]) -> None:
        self._data.extend(sample)

    def __len__(self) -> int:
        return len(self._data) // 2

    @overload
    def __getitem__(self, i: int) -> tuple[float, float]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[float, float]]: ...

    def __getitem__(self, i: int | slice) -> tuple[float, float] | list[tuple[float, float]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._data[2 * i], self._data[2 * i + 1]

    def __iter__(self) -> Iterator[tuple[float, float]]:
        it = iter(self._data)
        return zip(it, it, strict=False)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.array(self._data, dtype=np.float64).reshape(-1, 2)
        return out if dtype is None else out.astype(dtype)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RateSamples):
            return self._data == other._data
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RateSamples({list(self)!r})"
