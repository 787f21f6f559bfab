"""Per-instance and per-link time series, time-weighted (never averages of samples).

Every series is piecewise constant in simulated time, built from facts a run records:

- **Instance state** (``kv_used_blocks``, ``kv_usage``, ``running``, ``waiting``,
  ``receiving``): an engine step logs these counts at its end, and they hold for the step
  (as ``pdsim.results.summarize`` counts them, so a series' mean over the run equals the
  summary's ``mean_kv_usage`` and ``mean_running``). An idle gap between steps counts as 0
  by default (``idle="zero"``): the counts are observed only at step ends, and holding them
  through the gap (``idle="hold"``) overstates a prefill instance, whose last count still
  includes the blocks of the request it just prefilled, freed when the decode side pulls
  them a few milliseconds later. Zero in turn misses blocks held while idle (pinned on P
  for a pending pull, allocated on D for a pending receive). Before an instance's first
  step every count is 0.
- **Batch composition** (``batch_prefill_tokens``, ``batch_decode_requests``) and ``busy``
  hold only during their step; an idle gap is 0.
- **Link** (``link_gb_per_s``): the bandwidth in use on a P->D link (full bandwidth while
  any transfer is active, 0 otherwise) or, with ``connector.topology``, on a NIC direction
  or NVLink port (the sum of its flows' rates), from ``Results.links``: each sample's value
  holds until the next sample. ``link_busy`` is 1 while the link or port is active.
- **Cluster** (``output_tok_s``): output tokens per second. Each request's first token
  counts at its first-token time and its other ``output_tokens - 1`` are spread evenly
  over ``[first_token_s, finish_s]`` (records do not say how many tokens each chunk held).
  ``in_system``: requests in the system, from the records: a request counts from
  ``arrival_s`` to ``finish_s`` (to the end of the run while still in flight; a failed or
  rejected request, whose leaving time is not recorded, not at all). It includes what the
  per-instance counts miss under P/D (requests pinned on P or in transfer, and requests
  inside a step, which the step-end counts no longer hold), so Little's law holds on it.
- **Prefill instances** (``running``, and ``prefilling``, the same values under the name
  earlier versions wrote): requests holding a prefill slot, from the records'
  ``[p_start_s, p_end_s)`` (``pdsim.metrics.prefill_slot_intervals``, as the summary's
  ``mean_running`` counts them). P's step log counts its batch at step ends, after the
  step's prefilled requests have left it, which would read near 0 whatever P does.

``timeseries(res)`` averages every series over equal time bins (exact integrals, not
samples) and returns a ``TimeSeries``; ``write_timeseries`` writes it as
``timeseries.csv``, one row per (bin, track), and ``read_timeseries`` reads it back.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pdsim.errors import InputFileError
from pdsim.metrics import (
    prefill_slot_intervals_by_instance,
    record_floats,
    record_values,
)
from pdsim.output import write_atomic_chunks

if TYPE_CHECKING:
    import pandas as pd

    from pdsim.facts import InstanceFacts
    from pdsim.results import Results

#: Bins a run is cut into by default (at most); the bin width is rounded up to 1, 2 or 5
#: times a power of ten seconds.
DEFAULT_MAX_BINS = 500

INSTANCE_METRICS = ("kv_used_blocks", "kv_usage", "running", "waiting", "receiving",
                    "batch_prefill_tokens", "batch_decode_requests", "busy")
#: per-instance series built from the request records, not the step log
PREFILL_RECORD_METRICS = ("prefilling",)
LINK_METRICS = ("link_gb_per_s", "link_busy")
CLUSTER_METRICS = ("output_tok_s", "in_system")
TIMESERIES_FIELDS = ("time_s", "end_s", "track", "kind", *INSTANCE_METRICS,
                     *PREFILL_RECORD_METRICS, *LINK_METRICS, *CLUSTER_METRICS)
CLUSTER_TRACK = "cluster"



@dataclass(frozen=True)
class StepSeries:
    """A piecewise-constant function of time: ``values[i]`` holds on
    ``[times_s[i], times_s[i + 1])`` and the last value holds onward; 0 before
    ``times_s[0]``. ``times_s`` is non-decreasing (a repeated time means the earlier
    value held for no time)."""

    times_s: np.ndarray
    values: np.ndarray

    def integral(self, t_s: np.ndarray) -> np.ndarray:
        """The integral of the series from 0 to each time in ``t_s``."""
        t = np.asarray(t_s, dtype=np.float64)
        if not len(self.times_s):
            return np.zeros_like(t)
        seg = np.diff(self.times_s) * self.values[:-1]
        cum = np.concatenate(([0.0], np.cumsum(seg)))
        i = np.searchsorted(self.times_s, t, side="right") - 1
        inside = i >= 0
        j = np.clip(i, 0, None)
        out = cum[j] + self.values[j] * (t - self.times_s[j])
        return np.where(inside, out, 0.0)

    def bin_means(self, edges_s: np.ndarray) -> np.ndarray:
        """Time-weighted mean over each bin ``[edges_s[k], edges_s[k + 1])``."""
        edges = np.asarray(edges_s, dtype=np.float64)
        width = np.diff(edges)
        area = np.diff(self.integral(edges))
        return np.divide(area, width, out=np.zeros_like(area), where=width > 0)

    def mean(self, start_s: float, end_s: float) -> float:
        """Time-weighted mean over ``[start_s, end_s]`` (0 for an empty interval)."""
        if end_s <= start_s:
            return 0.0
        return float(self.bin_means(np.array([start_s, end_s]))[0])


def instance_series(facts: InstanceFacts, idle: str = "zero") -> dict[str, StepSeries]:
    """One instance's series (``INSTANCE_METRICS``) from its step log.

    ``idle``: what the state counts are between steps, ``"zero"`` (the default, as the
    summary counts them) or ``"hold"`` (the count after the last step).
    """
    if idle not in ("zero", "hold"):
        raise ValueError(f"idle must be 'zero' or 'hold', got {idle!r}")
    steps = facts.steps
    if not len(steps):
        empty = StepSeries(np.empty(0), np.empty(0))
        return dict.fromkeys(INSTANCE_METRICS, empty)
    start, end = steps.start_s(), steps.end_s
    # a value held during its step only: breakpoints at every start and end, 0 after the end
    t = np.empty(2 * len(steps))
    t[0::2], t[1::2] = start, end

    def col(name: str) -> np.ndarray:
        return steps.column(name).astype(np.float64)

    def during(values: np.ndarray) -> StepSeries:
        v = np.zeros(2 * len(steps))
        v[0::2] = values
        return StepSeries(t, v)

    def state(values: np.ndarray) -> StepSeries:
        return StepSeries(start.copy(), values.copy()) if idle == "hold" else during(values)

    kv = col("kv_used_blocks")
    out = {
        "kv_used_blocks": state(kv),
        "kv_usage": state(kv / max(facts.num_blocks, 1)),
        "running": state(col("running")),
        "waiting": state(col("waiting")),
        "receiving": state(col("receiving")),
        "batch_prefill_tokens": during(col("prefill_tokens")),
        "batch_decode_requests": during(col("decode_requests")),
        "busy": during(np.ones(len(steps))),
    }
    return {k: out[k] for k in INSTANCE_METRICS}


def link_series(samples: Sequence[tuple[float, float]]) -> dict[str, StepSeries]:
    """A link's series (``LINK_METRICS``) from its ``(time_s, bandwidth_bytes_per_s)``
    samples, taken whenever its set of active transfers changes."""
    if not samples:
        empty = StepSeries(np.empty(0), np.empty(0))
        return dict.fromkeys(LINK_METRICS, empty)
    arr = np.asarray(samples, dtype=np.float64).reshape(-1, 2)
    t = arr[:, 0]
    return {"link_gb_per_s": StepSeries(t, arr[:, 1] / 1e9),
            "link_busy": StepSeries(t, (arr[:, 1] > 0).astype(np.float64))}


def output_tokens_integral(first_token_s: np.ndarray, finish_s: np.ndarray,
                           output_tokens: np.ndarray, t_s: np.ndarray) -> np.ndarray:
    """Output tokens emitted by time ``t_s`` (each time in the array), cluster-wide.

    A request's first token counts at ``first_token_s``; the rest are spread evenly over
    ``[first_token_s, finish_s]`` (all at ``finish_s`` if the two coincide). Requests
    without a first token count nothing; requests without a finish time (still decoding
    or failed) count only their first token.
    """
    first = np.asarray(first_token_s, dtype=np.float64)
    fin = np.asarray(finish_s, dtype=np.float64)
    n_out = np.asarray(output_tokens, dtype=np.float64)
    t = np.asarray(t_s, dtype=np.float64)
    has_first = np.isfinite(first) & (n_out >= 1)
    firsts = np.sort(first[has_first])
    total = np.searchsorted(firsts, t, side="right").astype(np.float64)
    spread = has_first & np.isfinite(fin) & (n_out > 1)
    a, b, rest = first[spread], fin[spread], n_out[spread] - 1.0
    point = b <= a
    if point.any():
        order = np.argsort(b[point], kind="stable")
        pts, w = b[point][order], np.cumsum(rest[point][order])
        k = np.searchsorted(pts, t, side="right")
        total += np.where(k > 0, w[np.clip(k - 1, 0, None)], 0.0)
    a, b, rest = a[~point], b[~point], rest[~point]
    if len(a):
        # the sum of box-shaped rates, integrated: a piecewise-linear function of t
        rate = rest / (b - a)
        times = np.concatenate((a, b))
        delta = np.concatenate((rate, -rate))
        order = np.argsort(times, kind="stable")
        times, delta = times[order], delta[order]
        series = StepSeries(times, np.cumsum(delta))
        total += series.integral(t)
    return total


def nice_bin_s(horizon_s: float, max_bins: int = DEFAULT_MAX_BINS) -> float:
    """The smallest of 1, 2 or 5 times a power of ten seconds giving at most ``max_bins``."""
    if horizon_s <= 0:
        return 1.0
    raw = horizon_s / max_bins
    exp = math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        step = m * 10.0 ** exp
        if step >= raw * (1 - 1e-12):
            return step
    return 10.0 ** (exp + 1)  # pragma: no cover - the loop always returns


def horizon_s(res: Results) -> float:
    """The end of a run in simulated time: its last engine step or link change."""
    ends = [float(f.step_end_s[-1]) for f in res.instances if len(f.step_end_s)]
    ends += [float(s[-1][0]) for s in res.links.values() if s]
    return max(ends, default=0.0)


def bin_edges(horizon: float, bin_s: float | None = None,
              max_bins: int = DEFAULT_MAX_BINS) -> np.ndarray:
    """Edges 0, bin, 2 bin, ... ending exactly at ``horizon`` (the last bin may be short)."""
    if horizon <= 0:
        return np.array([0.0, 1.0])
    width = bin_s if bin_s is not None else nice_bin_s(horizon, max_bins)
    if not width > 0:
        raise ValueError(f"bin_s must be positive, got {bin_s}")
    n = max(1, math.ceil(horizon / width - 1e-9))
    edges = np.arange(n + 1, dtype=np.float64) * width
    edges[-1] = horizon
    return edges


@dataclass(frozen=True)
class Track:
    """One row of a timeline: an instance, a link or the cluster, with its binned series."""

    name: str
    kind: str  # prefill, decode, colocated, link or cluster
    values: dict[str, np.ndarray]


@dataclass(frozen=True)
class TimeSeries:
    """Time-weighted means per bin ``[edges_s[k], edges_s[k + 1])`` for every track."""

    edges_s: np.ndarray
    tracks: dict[str, Track]

    @property
    def start_s(self) -> np.ndarray:
        return self.edges_s[:-1]

    @property
    def end_s(self) -> np.ndarray:
        return self.edges_s[1:]

    def of_kind(self, *kinds: str) -> list[Track]:
        """Tracks of the given kinds, in order."""
        return [t for t in self.tracks.values() if t.kind in kinds]

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per (bin, track), keys ``TIMESERIES_FIELDS``; None = not
        applicable (an instance has no link metrics and so on)."""
        out = []
        start, end = self.start_s.tolist(), self.end_s.tolist()
        for track in self.tracks.values():
            cols = {k: v.tolist() for k, v in track.values.items()}
            for k in range(len(start)):
                row: dict[str, Any] = dict.fromkeys(TIMESERIES_FIELDS)
                row.update(time_s=start[k], end_s=end[k], track=track.name, kind=track.kind)
                for name, vals in cols.items():
                    row[name] = vals[k]
                out.append(row)
        return out

    def to_pandas(self) -> pd.DataFrame:
        """The rows as a DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame.from_records(self.rows(), columns=list(TIMESERIES_FIELDS))


def timeseries(res: Results, bin_s: float | None = None,
               max_bins: int = DEFAULT_MAX_BINS, idle: str = "zero") -> TimeSeries:
    """Every instance's, link's and the cluster's series, averaged over time bins.

    ``bin_s`` defaults to ``nice_bin_s(horizon, max_bins)``; ``idle`` as in
    ``instance_series``. Tracks come in instance order, then links, then ``cluster``.
    """
    edges = bin_edges(horizon_s(res), bin_s, max_bins)
    return TimeSeries(edges, {t.name: t for t in iter_tracks(res, edges, idle)})


def iter_tracks(res: Results, edges: np.ndarray, idle: str = "zero") -> Iterator[Track]:
    """The tracks of ``timeseries`` over bins ``edges``, made one at a time (a writer holds
    one track's arrays, not every instance's)."""
    slots = prefill_slot_intervals_by_instance(res.records)
    for f in res.instances:
        track = Track(f.name, f.role, {
            k: s.bin_means(edges) for k, s in _instance_series(f, idle, slots).items()})
        if f.role == "prefill":  # the name earlier versions wrote P's running under
            track.values["prefilling"] = track.values["running"].copy()
        yield track
    for name, samples in res.links.items():
        yield Track(name, "link", {
            k: s.bin_means(edges) for k, s in link_series(samples).items()})
    yield Track(CLUSTER_TRACK, "cluster", {
        "output_tok_s": _throughput_bins(res.records, edges),
        "in_system": in_system_series(res.records, float(edges[-1])).bin_means(edges)})


def _instance_series(f: InstanceFacts, idle: str,
                     slots: Mapping[str, tuple[np.ndarray, np.ndarray]]
                     ) -> dict[str, StepSeries]:
    """``instance_series``, with ``running`` on a prefill instance counted as the summary
    counts it: requests holding a prefill slot (``slots``, from
    ``prefill_slot_intervals_by_instance``)."""
    out = instance_series(f, idle)
    if f.role == "prefill":
        empty = np.zeros(0, dtype=np.float64)
        out["running"] = count_series(*slots.get(f.name, (empty, empty)))
    return out


def count_series(starts_s: np.ndarray, ends_s: np.ndarray) -> StepSeries:
    """How many intervals ``[starts_s[i], ends_s[i])`` hold at each time."""
    times = np.concatenate((starts_s, ends_s))
    delta = np.concatenate((np.ones(len(starts_s)), -np.ones(len(ends_s))))
    order = np.argsort(times, kind="stable")
    return StepSeries(times[order], np.cumsum(delta[order]))


def in_system_series(records: Sequence[Mapping[str, Any]], end_s: float) -> StepSeries:
    """Requests in the system over time (see the module docstring)."""
    arrival, finish = record_floats(records, "arrival_s"), record_floats(records, "finish_s")
    status = np.asarray(record_values(records, "status"), dtype=object)
    gone = (status == "failed") | (status == "rejected")
    finish = np.where(np.isfinite(finish), finish, end_s)
    keep = np.isfinite(arrival) & ~gone
    return count_series(arrival[keep], np.maximum(finish[keep], arrival[keep]))


def _throughput_bins(records: Sequence[Mapping[str, Any]], edges: np.ndarray) -> np.ndarray:
    return throughput_bins(record_floats(records, "first_token_s"),
                           record_floats(records, "finish_s"),
                           record_floats(records, "output_tokens"), edges)


def throughput_bins(first_token_s: np.ndarray, finish_s: np.ndarray,
                    output_tokens: np.ndarray, edges_s: np.ndarray) -> np.ndarray:
    """Output tokens per second in each bin (see ``output_tokens_integral``)."""
    edges = np.asarray(edges_s, dtype=np.float64)
    width = np.diff(edges)
    # a token exactly at the run's end belongs to the last bin
    upper = edges.copy()
    upper[-1] = np.nextafter(upper[-1], np.inf)
    tokens = np.diff(output_tokens_integral(first_token_s, finish_s, output_tokens, upper))
    return np.divide(tokens, width, out=np.zeros_like(tokens), where=width > 0)


def time_weighted_means(res: Results, idle: str = "zero") -> dict[str, dict[str, float]]:
    """Each instance's and link's series averaged over the whole run ``[0, horizon]``
    (``idle`` as in ``instance_series``)."""
    h = horizon_s(res)
    out: dict[str, dict[str, float]] = {}
    slots = prefill_slot_intervals_by_instance(res.records)
    for f in res.instances:
        out[f.name] = {k: s.mean(0.0, h) for k, s in _instance_series(f, idle, slots).items()}
    for name, samples in res.links.items():
        out[name] = {k: s.mean(0.0, h) for k, s in link_series(samples).items()}
    return out


def timeseries_csv_chunks(edges_s: np.ndarray, tracks: Iterable[Track]) -> Iterator[str]:
    """CSV text of the rows of ``tracks`` over bins ``edges_s`` (as ``TimeSeries.rows``),
    one chunk per track, so a writer holds one track's text at a time however many
    instances the run had; a metric that does not apply to a track is empty."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(TIMESERIES_FIELDS)
    start, end = edges_s[:-1].tolist(), edges_s[1:].tolist()
    metrics = TIMESERIES_FIELDS[4:]
    for track in tracks:
        cols = [track.values[m].tolist() if m in track.values else None for m in metrics]
        for k in range(len(start)):
            w.writerow([start[k], end[k], track.name, track.kind, *(
                "" if c is None else _cell(c[k]) for c in cols)])
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    yield buf.getvalue()


def _cell(v: Any) -> Any:
    return repr(v) if isinstance(v, float) else v


def timeseries_csv(ts: TimeSeries) -> str:
    """CSV text of ``ts.rows()``."""
    return "".join(timeseries_csv_chunks(ts.edges_s, ts.tracks.values()))


def write_timeseries(res: Results, path: str | Path, bin_s: float | None = None) -> Path:
    """Write ``timeseries.csv`` (atomically), each track made and written in turn: the
    writer's memory is one track's, whatever the number of instances."""
    edges = bin_edges(horizon_s(res), bin_s)
    return write_atomic_chunks(path, timeseries_csv_chunks(edges, iter_tracks(res, edges)))


def read_timeseries(path: str | Path) -> TimeSeries:
    """Read a ``timeseries.csv`` written by ``write_timeseries``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(str(p), None, f"cannot read: {exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in ("time_s", "end_s", "track", "kind") if c not in (reader.fieldnames
                                                                             or [])]
    if missing:
        raise InputFileError(str(p), 1, f"missing column(s) {', '.join(missing)}")
    metrics = [c for c in reader.fieldnames or [] if c in TIMESERIES_FIELDS[4:]]
    kinds: dict[str, str] = {}
    cols: dict[str, dict[str, list[float]]] = {}
    times: dict[str, list[tuple[float, float]]] = {}
    for line, row in enumerate(reader, start=2):
        try:
            t0, t1 = float(row["time_s"]), float(row["end_s"])
            vals = {m: float(row[m]) for m in metrics if row.get(m)}
        except (TypeError, ValueError) as exc:
            raise InputFileError(str(p), line, f"not a number: {exc}") from None
        name = row["track"]
        kinds.setdefault(name, row["kind"])
        times.setdefault(name, []).append((t0, t1))
        track = cols.setdefault(name, {})
        for m, v in vals.items():
            track.setdefault(m, []).append(v)
    if not times:
        raise InputFileError(str(p), None, "no rows")
    first = next(iter(times.values()))
    edges = np.array([first[0][0]] + [b for _, b in first])
    tracks = {}
    for name, spans in times.items():
        if spans != first:
            raise InputFileError(str(p), None, f"track {name}: bins differ from the first "
                                               "track's")
        values = {}
        for m, column in cols[name].items():
            if len(column) != len(spans):
                raise InputFileError(str(p), None, f"track {name}: column {m} has "
                                                   f"{len(column)} values for {len(spans)} "
                                                   "bins")
            values[m] = np.asarray(column)
        tracks[name] = Track(name, kinds[name], values)
    return TimeSeries(edges, tracks)
