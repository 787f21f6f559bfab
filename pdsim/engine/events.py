"""Engine events with a place in the order of same-time events.

SimPy orders events of one instant by priority, then by creation. The engine needs two
orders SimPy's public events do not offer: step ends after every other event of their
instant (in instance order), and an engine loop resumed ahead of everything else. Both
come from ``EngineEnvironment``, which overrides SimPy's public ``schedule`` for these
two event types; the events themselves are ordinary SimPy events, triggered by SimPy's
own code (no private field is written here).
"""

from __future__ import annotations

from typing import Any

import simpy
from simpy.core import BoundClass
from simpy.events import NORMAL, URGENT, EventPriority

# SimPy's priorities are URGENT 0 and NORMAL 1; an instance's step ends use 2 + its index
STEP_END_PRIORITY_BASE = 2


def step_end_priority(index: int) -> EventPriority:
    """The priority of instance ``index``'s step ends."""
    return EventPriority(STEP_END_PRIORITY_BASE + index)


class StepEnd(simpy.Timeout):
    """The end of an engine step (or of a step inside a decode run), ``delay`` from now.

    A SimPy ``Timeout`` with the instance's own ``priority``, below SimPy's: at the same
    instant every other event (an arrival, a hand-over, a landing) comes before a step
    boundary, and boundaries of several instances go in instance order. The order of
    same-time events is then a rule of the model, not an accident of which event was
    created first, so a decode run and the same steps taken one by one see the same
    order.
    """

    def __init__(self, env: simpy.Environment, delay: float, priority: EventPriority) -> None:
        self.priority = priority  # read by EngineEnvironment.schedule
        super().__init__(env, delay)


class LoopResume(simpy.Event):
    """Resumes an engine loop right after a decode run, as after a single step: when it
    succeeds it goes ahead of everything else scheduled for that instant."""


class EngineEnvironment(simpy.Environment):
    """A SimPy environment that schedules ``StepEnd`` at its own priority and
    ``LoopResume`` as urgent."""

    def __init__(self) -> None:
        super().__init__()
        # SimPy binds its event factories (timeout, event, process, ...) to the instance
        # for speed, but only those of the instance's own class: bind the base's too
        for name, obj in vars(simpy.Environment).items():
            if type(obj) is BoundClass:
                setattr(self, name, getattr(self, name))

    def schedule(self, event: simpy.Event, priority: EventPriority = NORMAL,
                 delay: Any = 0) -> None:
        kind = type(event)
        if kind is StepEnd:
            priority = event.priority  # type: ignore[attr-defined]
        elif kind is LoopResume:
            priority = URGENT
        simpy.Environment.schedule(self, event, priority, delay)
