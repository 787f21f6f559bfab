"""Live intake: requests admitted into a running simulation (what ``pdsim serve`` does).

Only a simulation built with no pre-generated requests takes them (its arrivals process
would release them a second time). A request taken live is one more row of the request
table (``RequestTable.add``), made at once (the caller follows it from there), and
dispatched at the float time the arrivals process would have dispatched a pre-generated
arrival at that time: never in the simulated past, never before the last arrival, and
only where some delay from now lands on that time exactly (``can_add_at``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pdsim.cluster.request_table import RequestTable
    from pdsim.engine.events import EngineEnvironment
    from pdsim.engine.instance import Instance
    from pdsim.engine.request import Request


class LiveIntake:
    """Takes requests into a running simulation at times it can dispatch them exactly."""

    def __init__(self, env: EngineEnvironment, table: RequestTable,
                 instances: Sequence[Instance],
                 through_frontend: Callable[[Request], None]) -> None:
        """``through_frontend``: where an arrival goes at its time (the frontend, then the
        proxy), as a pre-generated one does."""
        self.env = env
        self.table = table
        self.instances = instances
        self._through_frontend = through_frontend
        self._dispatch_s = 0.0  # when the last request added live is dispatched

    def add_request(self, prompt_tokens: int, output_tokens: int, arrival_s: float,
                    hash_ids: tuple[int, ...] | None = None) -> Request:
        """Admit a request into the running simulation (after ``start``): it is stored
        after the others (its id is the next one) and dispatched at ``arrival_s``, which
        may not lie in the simulated past nor before the last request's arrival, exactly
        as a pre-generated arrival at that time would be: at the same float time (from
        some ``now`` no delay lands there; ``can_add_at`` says, and ``ValueError`` is
        raised)."""
        table = self.table
        if table.pregenerated:
            raise ValueError("add_request needs a simulation built with no requests")
        now = self.env.now
        if not arrival_s >= now:
            raise ValueError(f"arrival at {arrival_s!r} s is in the simulated past "
                             f"(now {now!r} s)")
        rid = table.num_requests
        if rid and arrival_s < table.arrival_s.item(rid - 1):
            raise ValueError(f"arrival at {arrival_s!r} s is before the last one "
                             f"({table.arrival_s.item(rid - 1)!r} s)")
        due, delay = self._dispatch_time(arrival_s)
        if delay is None:
            raise ValueError(f"arrival at {arrival_s!r} s cannot be dispatched exactly from "
                             f"now ({now!r} s); pick another time (can_add_at)")
        req = table.add(arrival_s, prompt_tokens, output_tokens, hash_ids)
        # the instances' fresh-row look-aheads read the requests' lengths now stored
        n = table.num_requests
        for inst in self.instances:
            if inst.fresh_rows is not None:
                inst.fresh_rows.requests_added(table.prompts[:n], table.outputs[:n])
        self._dispatch_s = due
        ev = self.env.timeout(delay)
        ev.callbacks.append(lambda _e: self._through_frontend(req))
        return req

    def can_add_at(self, arrival_s: float) -> bool:
        """``add_request`` can take an arrival at ``arrival_s`` now: not in the past, not
        before the last one, and its dispatch time reachable exactly (below)."""
        now = self.env.now
        table = self.table
        n = table.num_requests
        if not arrival_s >= now or (n and arrival_s < table.arrival_s.item(n - 1)):
            return False
        return self._dispatch_time(arrival_s)[1] is not None

    def _dispatch_time(self, arrival_s: float) -> tuple[float, float | None]:
        """When a pre-generated arrival at ``arrival_s`` would be dispatched, and the delay
        from now that lands on that float exactly (None if none does). The arrivals
        process dispatches at the last dispatch time plus the gap to this arrival (at
        once when it is not ahead); ``now + (t - now)`` can miss ``t`` by an ulp, and
        from some ``now`` no delay lands on ``t`` at all."""
        last = self._dispatch_s
        due = last + (arrival_s - last) if arrival_s - last > 0 else last
        now = self.env.now
        delay = max(0.0, due - now)
        for _ in range(8):
            if now + delay == due:
                return due, delay
            delay = math.nextafter(delay, math.inf if now + delay < due else -math.inf)
            if delay < 0:
                break
        return due, None


__all__ = ["LiveIntake"]
