"""A run as a Chrome trace-event JSON timeline, for ui.perfetto.dev or chrome://tracing.

Layout (times in integer microseconds of simulated time):

- one process per instance (``P0 (prefill)``, ``D0 (decode)``, ...), with a thread
  ``engine steps`` holding one complete slice (``ph: "X"``) per engine step, named
  ``prefill``, ``decode`` or ``mixed`` and carrying the step's batch and counts as args;
  and counter tracks (``ph: "C"``) ``kv used_blocks`` and ``queue waiting``, ``queue
  running``, ``queue receiving``, each value holding for its step and 0 between steps (as
  ``pdsim.timeseries`` counts them);
- one process per P->D link (``link P0->D0``) with one async slice (``ph: "b"``/``"e"``,
  named ``KV transfer``, the request id as async id) per KV transfer, stacked where
  transfers share the link, and a ``link gb_per_s`` counter (bandwidth in use); with a
  transfer topology one process per NIC or NVLink port direction (``link node0/nic3/tx``)
  with its counter, and the transfer slices on one process ``KV transfers``;
- one flow arrow (``ph: "s"`` on the P step that finished the prefill, ``ph: "f"`` with
  ``bp: "e"`` on the D step that emitted the first token) per transferred request, with
  the request id as flow id.

Steps on one instance never overlap, so slices within a track never do. Large runs are
capped at ``max_steps`` step slices (default ``DEFAULT_MAX_STEPS``): the timeline then
covers the run from its start up to the first step that does not fit, and
``otherData.truncated_at_s`` says where it stops. ``window_s`` selects any other span.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pdsim._version import __version__
from pdsim.output import write_atomic

if TYPE_CHECKING:
    from pdsim.results import Results

#: Step slices a timeline holds at most by default: with its counters a step takes about
#: 300 bytes, so a capped file stays near 30 MB, which ui.perfetto.dev opens in seconds.
DEFAULT_MAX_STEPS = 100_000
STEP_THREAD = 1
FLOW_CAT = "kv_transfer"

# step_log columns (pdsim.facts.STEP_COLUMNS)
_START, _END, _PREFILL, _DECODE, _KV, _RUNNING, _WAITING, _RECEIVING = range(8)


def _us(t_s: np.ndarray) -> np.ndarray:
    """Seconds to integer microseconds (rounding is monotone, so touching steps still
    touch and never overlap)."""
    return np.rint(np.asarray(t_s, dtype=np.float64) * 1e6).astype(np.int64)


def _window(res: Results, max_steps: int | None,
            window_s: tuple[float, float] | None) -> tuple[float, float, float | None]:
    """The span to export and, if the step cap cut it short, where it stops."""
    lo, hi = window_s if window_s is not None else (0.0, math.inf)
    if max_steps is None:
        return lo, hi, None
    starts = [f.steps.start_s() for f in res.instances if len(f.steps)]
    if not starts:
        return lo, hi, None
    allstarts = np.sort(np.concatenate(starts))
    allstarts = allstarts[(allstarts >= lo) & (allstarts < hi)]
    if len(allstarts) <= max_steps:
        return lo, hi, None
    cut = float(allstarts[max_steps])
    return lo, cut, cut


def _step_name(prefill_tokens: float, decode_requests: float) -> str:
    if prefill_tokens and decode_requests:
        return "mixed"
    if prefill_tokens:
        return "prefill"
    return "decode" if decode_requests else "step"


def _step_index(start_us: np.ndarray, end_us: np.ndarray, t_s: float) -> int:
    """The step that ends at ``t_s`` (chunk and prefill-done times are step ends), or -1."""
    if not math.isfinite(t_s) or not len(end_us):
        return -1
    t = int(_us(np.array([t_s]))[0])
    k = int(np.searchsorted(end_us, t, side="left"))
    if k < len(end_us) and start_us[k] <= t <= end_us[k]:
        return k
    return -1


def timeline_events(res: Results, max_steps: int | None = DEFAULT_MAX_STEPS,
                    window_s: tuple[float, float] | None = None
                    ) -> tuple[list[dict[str, Any]], float | None]:
    """The trace events of a run, and the time the step cap cut it at (None if it did
    not). ``window_s`` = (start, end) in seconds keeps only what starts in that span."""
    lo, hi, truncated = _window(res, max_steps, window_s)
    events: list[dict[str, Any]] = []
    pid_of: dict[str, int] = {}
    steps: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i, f in enumerate(res.instances):
        pid = i + 1
        pid_of[f.name] = pid
        events += [
            {"ph": "M", "pid": pid, "ts": 0, "name": "process_name",
             "args": {"name": f"{f.name} ({f.role}{', ' + f.pool if f.pool else ''})"}},
            {"ph": "M", "pid": pid, "ts": 0, "name": "process_sort_index",
             "args": {"sort_index": i}},
            {"ph": "M", "pid": pid, "tid": STEP_THREAD, "ts": 0, "name": "thread_name",
             "args": {"name": "engine steps"}},
        ]
        log = f.step_log
        start_us, end_us = _us(log[:, _START]), _us(log[:, _END])
        steps[f.name] = (start_us, end_us)
        keep = np.flatnonzero((log[:, _START] >= lo) & (log[:, _START] < hi))
        events += _step_events(pid, f.num_blocks, log, start_us, end_us, keep)
    base = len(res.instances) + 1
    link_pid: dict[str, int] = {}
    for j, (name, samples) in enumerate(res.links.items()):
        pid = base + j
        link_pid[name] = pid
        events += [
            {"ph": "M", "pid": pid, "ts": 0, "name": "process_name",
             "args": {"name": f"link {name}"}},
            {"ph": "M", "pid": pid, "ts": 0, "name": "process_sort_index",
             "args": {"sort_index": base + j}},
        ]
        last = None
        for t_s, bw in samples:
            if not lo <= t_s < hi:
                continue
            v = bw / 1e9
            if v != last:
                events.append({"ph": "C", "pid": pid, "name": "link",
                               "ts": int(_us(np.array([t_s]))[0]), "args": {"gb_per_s": v}})
                last = v
    shared_pid = None
    if res.config.connector.topology is not None:
        # links are NIC and NVLink ports, which a transfer's flows cross several of: its
        # slice goes on one process of all transfers instead of on a P->D link's
        shared_pid = base + len(res.links)
        events += [
            {"ph": "M", "pid": shared_pid, "ts": 0, "name": "process_name",
             "args": {"name": "KV transfers"}},
            {"ph": "M", "pid": shared_pid, "ts": 0, "name": "process_sort_index",
             "args": {"sort_index": shared_pid}},
        ]
    events += _transfer_events(res, lo, hi, pid_of, link_pid, steps, shared_pid)
    return events, truncated


def _step_events(pid: int, num_blocks: int, log: np.ndarray, start_us: np.ndarray,
                 end_us: np.ndarray, keep: np.ndarray) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cols = log[keep].astype(np.int64).tolist()
    starts, ends = start_us[keep].tolist(), end_us[keep].tolist()
    next_start = np.append(start_us[1:], np.iinfo(np.int64).max)[keep].tolist()
    last_kv: int | None = None
    last_q: tuple[int, int, int] | None = None
    for k, row, t0, t1, t_next in zip(keep.tolist(), cols, starts, ends, next_start,
                                      strict=True):
        _, _, prefill, decode, kv, running, waiting, receiving = row
        out.append({
            "ph": "X", "pid": pid, "tid": STEP_THREAD, "ts": t0, "dur": t1 - t0,
            "name": _step_name(prefill, decode), "cat": "step",
            "args": {"step": k, "prefill_tokens": prefill, "decode_requests": decode,
                     "kv_used_blocks": kv, "kv_usage": round(kv / max(num_blocks, 1), 6),
                     "running": running, "waiting": waiting, "receiving": receiving},
        })
        q = (waiting, running, receiving)
        if kv != last_kv:
            out.append({"ph": "C", "pid": pid, "name": "kv", "ts": t0,
                        "args": {"used_blocks": kv}})
            last_kv = kv
        if q != last_q:
            out.append({"ph": "C", "pid": pid, "name": "queue", "ts": t0,
                        "args": {"waiting": waiting, "running": running,
                                 "receiving": receiving}})
            last_q = q
        if t_next > t1:  # idle until the next step: counted as 0
            if last_kv:
                out.append({"ph": "C", "pid": pid, "name": "kv", "ts": t1,
                            "args": {"used_blocks": 0}})
                last_kv = 0
            if last_q != (0, 0, 0):
                out.append({"ph": "C", "pid": pid, "name": "queue", "ts": t1,
                            "args": {"waiting": 0, "running": 0, "receiving": 0}})
                last_q = (0, 0, 0)
    return out


def _transfer_events(res: Results, lo: float, hi: float, pid_of: dict[str, int],
                     link_pid: dict[str, int],
                     steps: dict[str, tuple[np.ndarray, np.ndarray]],
                     shared_pid: int | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in res.records:
        t0, t1 = r["transfer_start_s"], r["transfer_end_s"]
        p, d = r["prefill_instance"], r["decode_instance"]
        if t0 is None or t1 is None or not (math.isfinite(t0) and math.isfinite(t1)):
            continue
        if not lo <= t0 < hi or p not in pid_of or d not in pid_of:
            continue
        rid = r["request_id"]
        lp = link_pid.get(f"{p}->{d}", shared_pid)
        if lp is not None:
            a, b = (int(x) for x in _us(np.array([t0, t1])))
            args = {"request_id": rid, "kv_bytes": int(r["kv_bytes_transferred"]),
                    "prompt_tokens": int(r["prompt_tokens"]), "from": p, "to": d}
            # one name for all: the UI stacks same-named async slices on one track
            out.append({"ph": "b", "pid": lp, "tid": STEP_THREAD, "cat": FLOW_CAT, "id": rid,
                        "name": "KV transfer", "ts": a, "args": args})
            out.append({"ph": "e", "pid": lp, "tid": STEP_THREAD, "cat": FLOW_CAT, "id": rid,
                        "name": "KV transfer", "ts": b})
        ps, pe = steps[p]
        ds, de = steps[d]
        kp = _step_index(ps, pe, r["p_end_s"])
        kd = _step_index(ds, de, r["first_token_s"])
        if kp < 0 or kd < 0 or not (lo <= r["first_token_s"] < hi):
            continue
        # a point strictly inside each slice, so both ends bind to their step
        dur_p, dur_d = int(pe[kp] - ps[kp]), int(de[kd] - ds[kd])
        ts_s = int(ps[kp]) + max(dur_p - 1, dur_p // 2)
        ts_f = int(ds[kd]) + min(1, dur_d // 2)
        flow = {"cat": FLOW_CAT, "id": rid, "name": "KV transfer", "tid": STEP_THREAD}
        out.append({"ph": "s", "pid": pid_of[p], "ts": ts_s, **flow})
        out.append({"ph": "f", "bp": "e", "pid": pid_of[d], "ts": ts_f, **flow})
    return out


def timeline_document(res: Results, max_steps: int | None = DEFAULT_MAX_STEPS,
                      window_s: tuple[float, float] | None = None) -> dict[str, Any]:
    """The whole trace: ``{"traceEvents": [...], "displayTimeUnit": "ms",
    "otherData": {...}}``."""
    events, truncated = timeline_events(res, max_steps, window_s)
    other: dict[str, Any] = {"pdsim_version": __version__, "name": res.config.name,
                             "seed": res.config.seed, "time_unit": "microseconds",
                             "partial": res.partial}
    if window_s is not None:
        other["window_s"] = list(window_s)
    if truncated is not None:
        other["truncated_at_s"] = truncated
        other["max_steps"] = max_steps
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_timeline(res: Results, path: str | Path, max_steps: int | None = DEFAULT_MAX_STEPS,
                   window_s: tuple[float, float] | None = None) -> Path:
    """Write the trace JSON (atomically); open it at ui.perfetto.dev."""
    doc = timeline_document(res, max_steps, window_s)
    return write_atomic(path, json.dumps(doc, separators=(",", ":"), allow_nan=False))
