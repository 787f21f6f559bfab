"""Fault injection: KV transfer failures and timeouts, instance outages, link degradation.

Configured in the ``faults`` section; every random decision comes from the ``faults``
stream, so a config with faults off draws nothing from it and the rest of the run is
unchanged. Lease expiry (P freeing blocks D has not read) needs no fault: set
``connector.kv_lease_s`` shorter than the transfer path.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from pdsim._model import StrictModel, seconds_bound

if TYPE_CHECKING:
    import numpy as np


class InstanceOutage(StrictModel):
    """Instance ``instance`` (e.g. ``D0``, ``P1``, ``C0``) is down from start_s to end_s."""

    instance: str
    """Instance name, e.g. D0, P1, C0."""
    start_s: Annotated[float, Field(ge=0), seconds_bound()]
    """When the outage starts, in simulated seconds."""
    end_s: Annotated[float, Field(gt=0), seconds_bound()]
    """When the instance is back, in simulated seconds."""

    @model_validator(mode="after")
    def _order(self) -> InstanceOutage:
        if self.end_s <= self.start_s:
            raise ValueError("end_s must be after start_s")
        return self


class LinkDegradation(StrictModel):
    """Links (``P0->D0``; null = every link) run at ``bandwidth_factor`` of their bandwidth."""

    link: str | None = None
    """Link name, e.g. P0->D0; null: every link."""
    start_s: Annotated[float, Field(ge=0), seconds_bound()]
    """When the degradation starts, in simulated seconds."""
    end_s: Annotated[float, Field(gt=0), seconds_bound()]
    """When it ends, in simulated seconds."""
    bandwidth_factor: Annotated[float, Field(gt=0, le=1)]
    """Fraction of the link's bandwidth left during the interval."""

    @model_validator(mode="after")
    def _order(self) -> LinkDegradation:
        if self.end_s <= self.start_s:
            raise ValueError("end_s must be after start_s")
        return self


class FaultsConfig(StrictModel):
    """What goes wrong, and when.

    - ``kv_transfer_failure_probability``: each KV transfer fails when it starts moving
      (after setup) with this probability; D then follows
      ``connector.kv_load_failure_policy`` (fail the request, or recompute the prompt).
    - ``kv_transfer_failures_at_s``: at each of these times the next transfer to start
      fails.
    - ``kv_transfer_timeout_s``: a transfer still moving after this long is cancelled and
      handled like a failure.
    - ``instance_outages``: the router skips a down instance; its requests that have not
      streamed a token yet are retried from the proxy (``outage_policy: retry``, at most
      ``max_retries`` times) or failed (``fail``); requests cut off mid-stream fail.
    - ``link_degradations``: bandwidth factor over an interval.
    """

    kv_transfer_failure_probability: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Probability each KV transfer fails when it starts moving."""
    kv_transfer_failures_at_s: tuple[Annotated[float, Field(ge=0), seconds_bound()], ...] = ()
    """At each of these times (seconds) the next transfer to start fails."""
    kv_transfer_timeout_s: Annotated[float, Field(gt=0), seconds_bound()] | None = None
    """A transfer still moving after this many seconds is cancelled as failed; null: no timeout."""
    instance_outages: tuple[InstanceOutage, ...] = ()
    """Intervals during which an instance is down."""
    outage_policy: Literal["retry", "fail"] = "retry"
    """retry: requests not yet streaming are retried from the proxy; fail: they fail."""
    max_retries: Annotated[int, Field(ge=0)] = 2
    """Most retries of one request after outages."""
    link_degradations: tuple[LinkDegradation, ...] = ()
    """Intervals during which links run at reduced bandwidth."""

    @property
    def enabled(self) -> bool:
        return bool(self.kv_transfer_failure_probability or self.kv_transfer_failures_at_s
                    or self.kv_transfer_timeout_s is not None or self.instance_outages
                    or self.link_degradations)

    def overlap_issues(self) -> list[tuple[str, str]]:
        """``(path, message)`` for each outage or degradation that overlaps (or touches)
        an earlier one of the same instance or link: their start and end events would
        interleave and the last to fire would win (an instance "back up" inside a longer
        outage), so they are refused; write the union as one interval instead."""
        issues: list[tuple[str, str]] = []
        outages = self.instance_outages
        for j, b in enumerate(outages):
            for i, a in enumerate(outages[:j]):
                if a.instance == b.instance and _meet(a.start_s, a.end_s, b.start_s, b.end_s):
                    issues.append((f"faults.instance_outages.{j}",
                                   f"overlaps outage {i} of {a.instance} ({a.start_s:g}.."
                                   f"{a.end_s:g} s); write one outage from "
                                   f"{min(a.start_s, b.start_s):g} to "
                                   f"{max(a.end_s, b.end_s):g} s instead"))
                    break
        degs = self.link_degradations
        for j, d in enumerate(degs):
            for i, e in enumerate(degs[:j]):
                same = e.link is None or d.link is None or e.link == d.link
                if same and _meet(e.start_s, e.end_s, d.start_s, d.end_s):
                    issues.append((f"faults.link_degradations.{j}",
                                   f"overlaps degradation {i} on "
                                   f"{e.link or 'every link'} ({e.start_s:g}..{e.end_s:g} s); "
                                   f"split them into intervals that do not overlap, each "
                                   f"with its own bandwidth_factor"))
                    break
        return issues

    def scheduled_times_s(self) -> list[float]:
        """Every time at which a scheduled fault starts or ends, sorted."""
        times = [t for o in self.instance_outages for t in (o.start_s, o.end_s)]
        times += [t for d in self.link_degradations for t in (d.start_s, d.end_s)]
        return sorted(times)


def _meet(a0: float, a1: float, b0: float, b1: float) -> bool:
    """Whether [a0, a1] and [b0, b1] share a point (touching ends included)."""
    return a0 <= b1 and b0 <= a1


class FaultState:
    """The run's fault decisions (owned by one ``Simulation``)."""

    __slots__ = ("_cfg", "_fail_times", "_rng", "_times", "counts")

    def __init__(self, cfg: FaultsConfig, rng: np.random.Generator) -> None:
        self._cfg = cfg
        self._rng = rng
        self._fail_times = sorted(cfg.kv_transfer_failures_at_s)
        self._times = cfg.scheduled_times_s()
        self.counts = {"kv_transfer_failures": 0, "kv_transfer_timeouts": 0,
                       "instance_outages": 0, "retries": 0, "link_degradations": 0}

    @property
    def transfers_may_fail(self) -> bool:
        """Whether a transfer starting from now on can fail as it starts moving."""
        return bool(self._fail_times) or self._cfg.kv_transfer_failure_probability > 0

    def transfer_fails(self, now_s: float) -> bool:
        """Decide, as a transfer starts moving at ``now_s``, whether it fails."""
        if self._fail_times and self._fail_times[0] <= now_s:
            self._fail_times.pop(0)
            self.counts["kv_transfer_failures"] += 1
            return True
        p = self._cfg.kv_transfer_failure_probability
        if p > 0 and self._rng.random() < p:
            self.counts["kv_transfer_failures"] += 1
            return True
        return False

    def next_scheduled_after(self, now_s: float) -> float:
        """The next scheduled fault time strictly after ``now_s`` (inf if none)."""
        i = bisect.bisect_right(self._times, now_s)
        return self._times[i] if i < len(self._times) else math.inf
