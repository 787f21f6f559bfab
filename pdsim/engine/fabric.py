"""Flows over shared ports, rated max-min fairly and advanced event by event.

A ``Port`` is one direction of something with a bandwidth: a NIC's transmit or receive
side, a GPU's NVLink egress or ingress. A flow crosses a few ports and has its own cap. The
rates are the max-min fair allocation (progressive filling: every unfrozen flow rises at the
same pace until a port it crosses is full or it reaches its cap, then it freezes), and they
change only when a flow starts or ends or a port's capacity changes. Between those events
rates are constant, so the fabric keeps one timer, for the next flow to finish, and an
event costs work per flow, never per byte.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from itertools import count
from typing import TYPE_CHECKING

from pdsim.facts import RateSamples

if TYPE_CHECKING:
    import simpy

# a flow within this many bytes of done, when another one finishes, finishes with it
_BYTE_SLACK = 1.0


class Port:
    """One direction of a shared resource, ``capacity_bytes_per_s`` wide."""

    __slots__ = ("capacity_bytes_per_s", "name", "samples", "used_bytes_per_s")

    def __init__(self, name: str, capacity_bytes_per_s: float) -> None:
        self.name = name
        self.capacity_bytes_per_s = capacity_bytes_per_s
        self.used_bytes_per_s = 0.0
        self.samples = RateSamples()  # (time, bytes/s in use), on change


class Flow:
    """Bytes moving across ``ports`` at ``rate_bytes_per_s`` (at most ``cap_bytes_per_s``)."""

    __slots__ = ("cap_bytes_per_s", "fid", "ports", "rate_bytes_per_s", "remaining_bytes",
                 "tid")

    def __init__(self, fid: int, tid: int, ports: tuple[Port, ...], nbytes: float,
                 cap_bytes_per_s: float) -> None:
        self.fid = fid
        self.tid = tid
        self.ports = ports
        self.remaining_bytes = nbytes
        self.cap_bytes_per_s = cap_bytes_per_s
        self.rate_bytes_per_s = 0.0


def max_min_rates(flows: Sequence[Flow]) -> None:
    """Set each flow's ``rate_bytes_per_s`` to its max-min fair share (progressive filling).

    All unfrozen flows share one level. A port fills when the level reaches
    ``(capacity - frozen rates on it) / unfrozen flows on it``, a value that only grows as
    flows freeze, so a heap of ports (stale entries skipped) and the flows sorted by cap
    give the next flow or port to freeze: O((flows + ports) log ports), each flow frozen
    once. Deterministic: ties go to the cap, then to the port first crossed.
    """
    on: dict[Port, list[Flow]] = {}
    for f in flows:
        f.rate_bytes_per_s = -1.0  # not frozen yet
        for p in f.ports:
            on.setdefault(p, []).append(f)
    left = {p: p.capacity_bytes_per_s for p in on}  # capacity less the frozen rates
    live = {p: len(fs) for p, fs in on.items()}  # unfrozen flows crossing it
    order = {p: i for i, p in enumerate(on)}
    version = dict.fromkeys(on, 0)
    heap = [(left[p] / live[p], order[p], 0, p) for p in on]
    heapq.heapify(heap)
    by_cap = sorted(flows, key=lambda f: (f.cap_bytes_per_s, f.fid))
    next_cap = 0
    frozen = 0
    while frozen < len(flows):
        while heap and (live[heap[0][3]] == 0 or heap[0][2] != version[heap[0][3]]):
            heapq.heappop(heap)
        while by_cap[next_cap].rate_bytes_per_s >= 0:
            next_cap += 1
        cap = by_cap[next_cap].cap_bytes_per_s
        if not heap or cap <= heap[0][0]:  # every unfrozen flow capped at this level
            level, freeze = cap, []
            for f in by_cap[next_cap:]:
                if f.cap_bytes_per_s > level:
                    break
                if f.rate_bytes_per_s < 0:
                    freeze.append(f)
        else:  # the port that fills first
            level, _, _, port = heapq.heappop(heap)
            freeze = [f for f in on[port] if f.rate_bytes_per_s < 0]
        touched: dict[Port, None] = {}
        for f in freeze:
            f.rate_bytes_per_s = level
            for q in f.ports:
                left[q] -= level
                live[q] -= 1
                touched[q] = None
        frozen += len(freeze)
        for q in touched:
            if live[q]:
                version[q] += 1
                heapq.heappush(heap, (max(left[q], 0.0) / live[q], order[q], version[q], q))


class _Transfer:
    __slots__ = ("flows_left", "on_done")

    def __init__(self, flows_left: int, on_done: Callable[[float], None]) -> None:
        self.flows_left = flows_left
        self.on_done = on_done


class Fabric:
    """The active flows of one simulation; a transfer is done when all its flows are."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._flows: dict[int, Flow] = {}
        self._transfers: dict[int, _Transfer] = {}
        self._ports: dict[Port, None] = {}  # ports crossed by flows at the last rating
        self._fids = count()
        self._last_s = 0.0
        self._gen = 0

    @property
    def flows(self) -> list[Flow]:
        """The active flows, oldest first."""
        return list(self._flows.values())

    def start(self, tid: int, flows: Sequence[tuple[tuple[Port, ...], float, float]],
              on_done: Callable[[float], None]) -> None:
        """Begin transfer ``tid``: ``(ports, bytes, cap_bytes_per_s)`` per flow;
        ``on_done(now)`` runs when the last byte of the last flow lands."""
        self._advance()
        self._transfers[tid] = _Transfer(len(flows), on_done)
        for ports, nbytes, cap in flows:
            fid = next(self._fids)
            self._flows[fid] = Flow(fid, tid, ports, float(nbytes), cap)
        self._reschedule()

    def cancel(self, tid: int) -> bool:
        """Abort transfer ``tid``; True if it was active."""
        if self._transfers.pop(tid, None) is None:
            return False
        self._advance()
        for fid in [f.fid for f in self._flows.values() if f.tid == tid]:
            del self._flows[fid]
        self._reschedule()
        return True

    def set_capacity(self, ports: Sequence[Port], capacities: Sequence[float]) -> None:
        """Change ports' capacities now (a degradation); progress so far is kept."""
        self._advance()
        for p, c in zip(ports, capacities, strict=True):
            p.capacity_bytes_per_s = c
        self._reschedule()

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last_s
        if dt > 0:
            for f in self._flows.values():
                f.remaining_bytes -= f.rate_bytes_per_s * dt
        self._last_s = now

    def _reschedule(self) -> None:
        self._gen += 1
        flows = list(self._flows.values())
        max_min_rates(flows)
        self._sample(flows)
        soonest = math.inf
        for f in flows:
            rate, left = f.rate_bytes_per_s, f.remaining_bytes
            if rate > 0:
                due = left / rate if left > 0 else 0.0
                if due < soonest:
                    soonest = due
            elif left <= 0:
                soonest = 0.0
        if soonest == math.inf:
            return
        gen = self._gen
        ev = self.env.timeout(soonest)
        ev.callbacks.append(lambda _e: self._on_timer(gen))

    def _sample(self, flows: list[Flow]) -> None:
        """Record each port whose bytes/s in use changed (ports that fell idle too)."""
        used: dict[Port, float] = dict.fromkeys(self._ports, 0.0)
        for f in flows:
            for p in f.ports:
                used[p] = used.get(p, 0.0) + f.rate_bytes_per_s
        now = self.env.now
        for p, u in used.items():
            if u != p.used_bytes_per_s or not p.samples:
                p.used_bytes_per_s = u
                p.samples.append((now, u))
        self._ports = {p: None for p, u in used.items() if u > 0}

    def _on_timer(self, gen: int) -> None:
        if gen != self._gen:
            return  # superseded by a later start, cancel or capacity change
        self._advance()
        done = [f for f in self._flows.values()
                if f.remaining_bytes <= _BYTE_SLACK
                or (f.rate_bytes_per_s > 0
                    and f.remaining_bytes / f.rate_bytes_per_s <= 1e-12)]
        if not done and self._flows:  # the timer's own flow, whatever rounding left of it
            done = [min(self._flows.values(), key=lambda f: (
                f.remaining_bytes / f.rate_bytes_per_s if f.rate_bytes_per_s > 0
                else math.inf, f.fid))]
        finished: list[tuple[int, _Transfer]] = []
        for f in done:
            del self._flows[f.fid]
            t = self._transfers[f.tid]
            t.flows_left -= 1
            if t.flows_left == 0:
                del self._transfers[f.tid]
                finished.append((f.tid, t))
        self._reschedule()
        now = self.env.now
        for _, t in sorted(finished, key=lambda x: x[0]):
            t.on_done(now)


__all__ = ["Fabric", "Flow", "Port", "max_min_rates"]
