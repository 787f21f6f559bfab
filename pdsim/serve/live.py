"""The adapter between the HTTP layer and the engine: the only module of ``pdsim.serve``
that touches a ``Simulation``.

``LiveCluster`` builds a simulation with no pre-generated requests, starts it, and then
takes requests as clients send them (``submit``, at a simulated time not in the past) and
advances the simulated clock when the driver says (``advance_to``). What the engine
emits comes back as ``Event``s on each request's ``LiveRequest``, each stamped with the
simulated time it happened at, and never before the clock has reached it:

- ``tokens``: one engine step's new output tokens for the request (several under
  speculative decoding: the accepted drafts plus the bonus token), read after every step
  through the ``step_completed`` hook;
- ``prefilled``: a prefill instance finished a request whose P -> D hand-over the client
  makes (``--pd-endpoints``): the kv_transfer_params are ready;
- ``transfer``: the request's KV landed on its decode instance (the NIXL metrics);
- ``done``: the request finished, failed or was rejected (``error`` says why).

Decode runs (``engine.decode_runs: auto``) plan many decode steps ahead in one pass and
commit them later; a live server must release each step's tokens at that step's time, so
the cluster runs its steps one event each (``decode_runs: off``). The engine's contract
(tests/reliability/test_rel_decode_runs.py) is that both give the same records.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pdsim.config import Role, SimConfig
from pdsim.engine.request import Request, Status
from pdsim.simulation import Simulation
from pdsim.workload import RequestSpecs

if TYPE_CHECKING:
    from pdsim.engine.instance import Instance
    from pdsim.results import Results

#: arrivals are stamped on a grid of this many per simulated second, so the request log
#: (Mooncake JSONL, whole milliseconds) replays them at exactly the same times
ARRIVAL_GRID_PER_S = 1000


def live_config(config: SimConfig) -> SimConfig:
    """``config`` as a live cluster runs it: every decode step its own event (a step's
    tokens go out at its end), and every per-step fact kept (the run folder's series)."""
    engine = config.engine.model_copy(update={"decode_runs": "off", "record_steps": "full"})
    return config.model_copy(update={"engine": engine})


@dataclass(frozen=True)
class Event:
    """What happened to a request, at simulated time ``at_s``."""

    kind: str  # "tokens", "prefilled", "transfer" or "done"
    at_s: float
    tokens: int = 0  # "tokens": the new ones; "done": the request's total
    error: str | None = None  # "done": why it failed or was rejected (None: it finished)


class LiveRequest:
    """One client request (one hop of it under ``--pd-endpoints``) and what it has seen.

    ``hop``: ``full`` (arrival to last token), ``prefill`` (the P hop: ends when P has the
    KV, ``prefilled``) or ``decode`` (the D hop of a request prefilled before)."""

    __slots__ = ("emitted", "finish_reason", "finished", "hop", "notify", "p_seen", "req",
                 "xfer_seen")

    def __init__(self, req: Request, hop: str, notify: Callable[[Event], None],
                 finish_reason: str = "length") -> None:
        self.req = req
        self.hop = hop
        self.notify = notify
        self.emitted = 0  # output tokens reported so far
        self.finished = False
        self.finish_reason = finish_reason  # "length" (max_tokens reached) or "stop"
        self.p_seen = hop == "decode"  # its prefill instance's end reported
        self.xfer_seen = False


class LiveCluster:
    """A running simulation that takes requests live. Not thread-safe: one driver calls
    ``advance_to`` and ``submit`` from one thread (the server's event loop)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = live_config(config)
        empty = RequestSpecs(np.zeros(0), np.zeros(0, dtype=np.int64),
                             np.zeros(0, dtype=np.int64), source="live")
        # requests are dropped once recorded, as ``simulate`` runs (each ``LiveRequest``
        # holds its own until it is reported done)
        self.sim = Simulation(self.config, empty, keep_requests=False)
        self.sim.hooks.step_completed.append(self._on_step)
        self.sim.start()
        self.live: dict[int, LiveRequest] = {}  # in flight, by request id
        self.held: dict[int, Request] = {}  # prefilled on P, waiting for the client's D hop
        self.observers: list[Callable[[LiveRequest, Event], None]] = []  # the metrics
        self.max_model_len = self.config.model.max_model_len

    # ------------------------------------------------------------------ clock

    @property
    def now_s(self) -> float:
        return float(self.sim.env.now)

    def next_event_s(self) -> float:
        """When the next engine event is due (inf when the cluster is idle)."""
        return float(self.sim.env.peek())

    def advance_to(self, t_s: float) -> int:
        """Process every event due by simulated time ``t_s``; the number processed."""
        env = self.sim.env
        n = 0
        while (due := env.peek()) <= t_s and due < math.inf:
            env.step()
            n += 1
        if n:
            for lr in list(self.live.values()):
                self._check(lr, None)
        return n

    def arrival_after(self, t_s: float) -> float:
        """The first grid time strictly after ``t_s`` that the simulation can take an
        arrival at (``Simulation.can_add_at``): arrivals never land in the past, and a
        millisecond grid replays exactly from the request log."""
        k = math.floor(t_s * ARRIVAL_GRID_PER_S) + 1
        while not self.sim.can_add_at(k / ARRIVAL_GRID_PER_S):
            k += 1
        return k / ARRIVAL_GRID_PER_S

    # ------------------------------------------------------------------ intake

    def instances(self, role: Role | None = None) -> list[Instance]:
        return [i for i in self.sim.instances if role is None or i.role is role]

    def instance(self, name: str) -> Instance:
        """The instance called ``name`` (a client's ``--pd-endpoints`` address)."""
        return self.sim.by_name[name]

    @property
    def disaggregated(self) -> bool:
        return not self.sim.colocated

    def fits(self, prompt_tokens: int, output_tokens: int) -> bool:
        """Some instance can hold the request's KV (as the cluster's admission checks)."""
        sim = self.sim
        if sim.colocated:
            return any(prompt_tokens + output_tokens <= i.max_fit_tokens for i in sim.colocated)
        return (any(prompt_tokens <= i.max_fit_tokens for i in sim.prefills)
                and any(prompt_tokens + output_tokens <= i.max_fit_tokens
                        for i in sim.decodes))

    def submit(self, prompt_tokens: int, output_tokens: int, arrival_s: float,
               notify: Callable[[Event], None], *, instance: str | None = None,
               hop: str = "full", finish_reason: str = "length") -> LiveRequest:
        """A request arriving at ``arrival_s``; ``instance`` (a client-addressed prefill or
        colocated instance) skips the router; ``hop="prefill"``: the client makes the
        P -> D hand-over (``forward``)."""
        req = self.sim.add_request(prompt_tokens, output_tokens, arrival_s)
        if instance is not None:
            self.sim.route_to[req.id] = instance
        if hop == "prefill":
            self.sim.client_handover.add(req.id)
        lr = LiveRequest(req, hop, notify, finish_reason)
        self.live[req.id] = lr
        return lr

    def held_request(self, request_id: int) -> Request | None:
        """A request prefilled for a client's D hop, if P still holds it."""
        return self.held.get(request_id)

    def forward(self, req: Request, d_name: str, output_tokens: int, at_s: float,
                notify: Callable[[Event], None], finish_reason: str = "length"
                ) -> LiveRequest:
        """The client's D hop: at ``at_s`` (not in the simulated past) send ``req``
        (prefilled) to decode instance ``d_name`` with ``output_tokens`` to generate."""
        sim = self.sim
        if not at_s >= sim.env.now:
            raise ValueError(f"hand-over at {at_s!r} s is in the simulated past")
        self.held.pop(req.id, None)
        sim.retarget(req, output_tokens)
        lr = LiveRequest(req, "decode", notify, finish_reason)
        self.live[req.id] = lr
        d = sim.by_name[d_name]

        def hand_over(_e: object) -> None:
            sim.client_handover.discard(req.id)
            if req.status is not Status.IN_FLIGHT:
                pass  # gone meanwhile (P went down): reported below
            elif not d.up:
                sim.by_name[req.p_instance].release_pinned(req)
                sim.fail(req, "no_instance_up")
            else:
                sim.send_to_decode(req, d)
            self._check(lr, None)

        sim.env.timeout(at_s - sim.env.now).callbacks.append(hand_over)
        return lr

    # ------------------------------------------------------------------ results

    def results(self) -> Results:
        """The records so far (requests still in flight are partial), as ``pdsim run``
        reads them: ``results_from`` the simulation's ``RunFacts``."""
        return self.sim.results()

    # ------------------------------------------------------------------ events

    def _on_step(self, inst: Instance, now: float) -> None:
        name = inst.name
        for lr in list(self.live.values()):
            req = lr.req
            if req.d_instance == name or req.p_instance == name:
                self._check(lr, inst, now)

    def _emit(self, lr: LiveRequest, ev: Event) -> None:
        for obs in self.observers:
            obs(lr, ev)
        lr.notify(ev)

    def _check(self, lr: LiveRequest, inst: Instance | None, now: float | None = None) -> None:
        """Report what changed for ``lr`` since it was last looked at."""
        req = lr.req
        at = self.now_s if now is None else now
        if not lr.p_seen and not math.isnan(req.p_end_s):
            lr.p_seen = True
            if lr.hop == "prefill":
                self.held[req.id] = req
                self._finish(lr, Event("prefilled", req.p_end_s, 1))
                return
            self._emit(lr, Event("prefilled", req.p_end_s, 1))
        if lr.hop == "prefill":
            if req.status is not Status.IN_FLIGHT:
                self._finish(lr, Event("done", at, 0, req.fail_reason or "failed"))
            return
        if not lr.xfer_seen and not math.isnan(req.transfer_end_s):
            lr.xfer_seen = True
            self._emit(lr, Event("transfer", req.transfer_end_s, 0))
        d = inst if inst is not None and inst.name == req.d_instance else (
            self.sim.by_name.get(req.d_instance) if req.d_instance else None)
        count = d.output_tokens_of(req) if d is not None else req.num_output
        if count > lr.emitted:
            self._emit(lr, Event("tokens", at, count - lr.emitted))
            lr.emitted = count
        if req.status is Status.FINISHED:
            self._finish(lr, Event("done", req.finish_s, req.num_output))
        elif req.status is not Status.IN_FLIGHT:
            self._finish(lr, Event("done", at, lr.emitted, req.fail_reason or "failed"))

    def _finish(self, lr: LiveRequest, ev: Event) -> None:
        if lr.finished:
            return
        lr.finished = True
        self.live.pop(lr.req.id, None)
        self._emit(lr, ev)
