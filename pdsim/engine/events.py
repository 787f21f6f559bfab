"""Engine events with a place in the order of same-time events."""

from __future__ import annotations

import simpy

# SimPy's priorities are URGENT 0 and NORMAL 1; an instance's step ends use 2 + its index
STEP_END_PRIORITY_BASE = 2


def step_end_priority(index: int) -> simpy.events.EventPriority:
    """The priority of instance ``index``'s step ends."""
    return simpy.events.EventPriority(STEP_END_PRIORITY_BASE + index)


class StepEnd(simpy.Event):
    """The end of an engine step (or of a step inside a decode run), ``delay`` from now.

    Scheduled like a SimPy ``Timeout`` but with the instance's own ``priority``, below
    SimPy's: at the same instant every other event (an arrival, a hand-over, a landing)
    comes before a step boundary, and boundaries of several instances go in instance
    order. The order of same-time events is then a rule of the model, not an accident of
    which event was created first, so a decode run and the same steps taken one by one
    see the same order.
    """

    def __init__(self, env: simpy.Environment, delay: float,
                 priority: simpy.events.EventPriority) -> None:
        # what simpy.Timeout does, with the priority given (no super().__init__: this is
        # the engine's most frequent event)
        self.env = env
        self.callbacks: simpy.events.EventCallbacks = []
        self._ok = True
        self._value = None
        env.schedule(self, priority, delay)


def succeed_first(event: simpy.Event) -> None:
    """Trigger ``event`` now, ahead of everything else scheduled for this instant (what
    resumes an engine loop right after a decode run, as after a single step)."""
    event._ok = True
    event._value = None
    event.env.schedule(event, simpy.events.URGENT)
