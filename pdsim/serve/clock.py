"""The simulated clock against the wall clock, and the driver that keeps them together.

Simulated time 0 is the moment the first request arrives (an idle cluster does nothing
before it, and the request log then replays from 0). From there simulated time runs
``speed`` times as fast as the wall clock. The driver processes each engine event when
the wall clock reaches it: it sleeps until the next event is due (or a request comes in),
then processes every event due by the simulated time of that moment, so nothing the
engine emits goes out before its simulated time. When a pass starts late, the lateness
(wall seconds past the first event's due time) is the lag: ``pdsim:clock_lag_seconds``
in ``/metrics``, and a warning on stderr when it passes ``LAG_WARN_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pdsim.serve.live import LiveCluster

LAG_WARN_S = 0.1
"""Wall seconds behind the clock past which the server warns (at most every
``LAG_WARN_EVERY_S``)."""
LAG_WARN_EVERY_S = 5.0


class Clock:
    """Simulated seconds from wall seconds: ``(wall - origin) * speed``."""

    def __init__(self, speed: float) -> None:
        if not speed > 0 or math.isinf(speed):
            raise ValueError(f"speed must be a positive number (got {speed!r})")
        self.speed = speed
        self.origin: float | None = None  # wall time (monotonic) of simulated time 0

    @property
    def started(self) -> bool:
        return self.origin is not None

    def start(self) -> None:
        self.origin = time.monotonic()

    def sim_now(self) -> float:
        if self.origin is None:
            return 0.0
        return (time.monotonic() - self.origin) * self.speed

    def wall_at(self, sim_s: float) -> float:
        """The wall time (monotonic) at which simulated time ``sim_s`` is reached."""
        assert self.origin is not None
        return self.origin + sim_s / self.speed


class Driver:
    """Advances the cluster with the wall clock, on the server's event loop."""

    def __init__(self, cluster: LiveCluster, clock: Clock,
                 warn: Callable[[str], None] | None = None) -> None:
        self.cluster = cluster
        self.clock = clock
        self.warn = warn
        self.lag_s = 0.0  # at the last pass that processed events
        self.max_lag_s = 0.0
        self.passes = 0
        self._last_warn = -math.inf
        self._wake: asyncio.Event | None = None

    def poke(self) -> None:
        """Something changed (a request came in, the server stops): look again now."""
        if self._wake is not None:
            self._wake.set()

    def catch_up(self) -> int:
        """Process every event due by now; the number processed."""
        clock = self.clock
        if not clock.started:
            return 0
        first = self.cluster.next_event_s()
        target = clock.sim_now()
        if first > target:
            return 0
        lag = max(0.0, time.monotonic() - clock.wall_at(first))
        n = self.cluster.advance_to(target)
        self.passes += 1
        self.lag_s = lag
        self.max_lag_s = max(self.max_lag_s, lag)
        now = time.monotonic()
        if lag > LAG_WARN_S and self.warn is not None and now - self._last_warn > LAG_WARN_EVERY_S:
            self._last_warn = now
            self.warn(f"the simulation is {lag:.3f} s (wall) behind the clock at --speed "
                      f"{clock.speed:g}: this machine cannot keep up; lower --speed")
        return n

    async def run(self, stop: asyncio.Event) -> None:
        """Drive until ``stop`` is set (then poke)."""
        self._wake = wake = asyncio.Event()
        while not stop.is_set():
            self.catch_up()
            nxt = self.cluster.next_event_s()
            timeout = None
            if self.clock.started and nxt < math.inf:
                timeout = max(0.0, self.clock.wall_at(nxt) - time.monotonic())
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)
