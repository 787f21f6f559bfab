"""One simulation: build the cluster from a config, run it, return the facts.

``Simulation`` owns everything mutable (the SimPy environment, random streams, the
engines, links, requests) and wires the parts of one run, each built from what it uses:
the engines (``pdsim.engine.engines``), the request table, the proxy, the KV transfers,
the outages and live intake (``pdsim.cluster``). What is left here is the path of one
request through them: it arrives (``_arrivals``, or the closed loop's ``_release_next``),
passes the frontend, is dispatched by the proxy, and ends (``finish``, ``fail``,
``reject``); its facts are recorded and ``finalize`` hands them over. Nothing lives at
module level, so two simulations in one process never influence each other.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from pdsim.cluster.kv_transfers import KVTransfers
from pdsim.cluster.live_intake import LiveIntake
from pdsim.cluster.outages import Outages
from pdsim.cluster.proxy import Proxy
from pdsim.cluster.request_table import RequestTable
from pdsim.config import SimConfig
from pdsim.engine.connector import ConnectorScheduler
from pdsim.engine.engines import Engines
from pdsim.engine.events import EngineEnvironment
from pdsim.engine.instance import EngineHooks, Instance
from pdsim.engine.request import Request, Status
from pdsim.engine.request_facts import RequestFacts
from pdsim.engine.router import make_router
from pdsim.engine.transfers import make_network
from pdsim.faults import FaultState
from pdsim.results import Results, RunFacts, results_from
from pdsim.rng import RandomStreams, UniformBuffer
from pdsim.spec_decode.acceptance import AcceptanceSampler
from pdsim.workload import RequestSpecs, generate_requests

ProgressFn = Callable[[int, int], None]
# ended requests recorded into the columns in batches of this many (settled ones only)
RECORD_EVERY = 1024


class Simulation:
    """A P/D (or colocated) cluster serving one workload under one config.

    It implements the engine's ``Cluster`` protocol; the hand-over verbs an instance
    calls are its parts' own methods, bound here once (no call in between)."""

    on_prefill_done: Callable[[Request, Instance], None]
    send_to_decode: Callable[[Request, Instance], None]
    start_kv_transfer: Callable[[Request, Instance], None]

    def __init__(self, config: SimConfig, requests: RequestSpecs | None = None, *,
                 keep_requests: bool = True) -> None:
        """``keep_requests``: keep every ``Request`` object for the whole run in
        ``requests`` (what the invariant checker and tests that look into requests read).
        Without it a request is made when it arrives and dropped once it has ended and
        its facts are in the columns (``simulate`` runs so: memory then grows with the
        requests' facts, not their objects). The results are the same either way."""
        self.config = config
        self.env = env = EngineEnvironment()
        # observers of the engine (tests, the invariant checker): attach before running
        self.hooks = EngineHooks()
        self.streams = RandomStreams(config.seed)
        self.specs = requests if requests is not None else generate_requests(
            config.workload, self.streams)
        self.acceptance_sampler = AcceptanceSampler(config.conditional_acceptance,
                                                    self.streams.key("acceptance"))
        # P's guesses of the tokens it did not see, right or wrong (its only consumer)
        self.provenance_draws = UniformBuffer(self.streams.get("provenance"))
        router = make_router(config.router.policy, self.streams.get("routing"),
                             config.router)
        connector = ConnectorScheduler(config)
        # every instance, numbered across a role's pools, and the attention-DP engines
        self.engines = engines = Engines(self, env, config, self.specs,
                                         self.acceptance_sampler, self.hooks)
        self.instances = engines.instances
        self.by_role = engines.by_role
        self.by_name = engines.by_name
        self.dp_groups = engines.dp_groups
        self.prefills = engines.prefills
        self.decodes = engines.decodes
        self.colocated = engines.colocated
        # arrival to dispatch: HTTP, tokenization, the serving frontend (0: at once)
        self._frontend_s = config.router.frontend_latency_s
        self._frontend_per_prompt_token_s = config.router.frontend_latency_per_prompt_token_s
        # per-pair links or a topology, state made as transfers use it (never P x D)
        self.network = make_network(env, config, self.instances)
        self.faults = FaultState(config.faults, self.streams.get("faults"))
        self.transfers = KVTransfers(env, config.connector,
                                     config.faults.kv_transfer_timeout_s, self.network,
                                     self.faults, engines)
        self.proxy = proxy = Proxy(env, config.model.max_model_len, engines, router,
                                   connector, self.transfers, reject=self.reject,
                                   fail=self.fail)
        self._dispatch = proxy.dispatch
        self.on_prefill_done = proxy.on_prefill_done
        self.send_to_decode = proxy.send_to_decode
        self.start_kv_transfer = self.transfers.start
        # live serving (pdsim serve): the proxy's notes of client-addressed requests
        self.route_to = proxy.route_to
        self.client_handover = proxy.client_handover
        self.table = table = RequestTable(self.specs,
                                          config.speculative.num_speculative_tokens,
                                          keep_requests, proxy.route_to,
                                          proxy.client_handover)
        # the requests' facts by column, written as each request ends and settles
        self.request_facts: RequestFacts = table.facts
        self.keep_requests = keep_requests
        self.outages = Outages(env, config.faults, self.faults, engines, self.network,
                               self.transfers, retry=proxy.retry, fail=self.fail)
        self.live_intake = LiveIntake(env, table, self.instances, self._through_frontend)
        self.num_done = 0
        self._next_release = 0
        self._all_done = env.event()
        self._progress: ProgressFn | None = None
        self.closed_loop = self.specs.closed_loop_concurrency is not None

    @property
    def requests(self) -> list[Request]:
        """Every request, in id order (only with ``keep_requests``)."""
        kept = self.table.kept
        if kept is None:
            raise AttributeError("this simulation does not keep its requests "
                                 "(Simulation(..., keep_requests=True) does)")
        return kept

    @property
    def num_requests(self) -> int:
        """The requests so far (live intake adds more)."""
        return self.table.num_requests

    @property
    def accepted_per_pos(self) -> np.ndarray:
        """Drafts accepted at each position, a row per request (the records' column)."""
        return self.table.accepted_per_pos

    @property
    def lease_expired(self) -> int:
        """Pins whose lease ran out before D read them."""
        return self.transfers.lease_expired

    # ------------------------------------------------------------------- run

    def run(self, progress: ProgressFn | None = None) -> Results:
        """Simulate until every request has finished, failed or been rejected."""
        self.start(progress)
        if self.table.num_requests:
            self.env.run(until=self._all_done)
        return self.results()

    def start(self, progress: ProgressFn | None = None) -> None:
        """Start the engines, the faults and the arrivals; then ``step()`` (or ``run``)
        processes the events."""
        self._progress = progress
        self.engines.start()
        self.outages.schedule()
        n = self.table.num_requests
        if not n:
            return
        clients = self.specs.closed_loop_concurrency
        if clients is not None:
            for _ in range(min(clients, n)):
                self._release_next()
        else:
            self.env.process(self._arrivals())

    @property
    def done(self) -> bool:
        """The run is over: every request has finished, failed or been rejected, and the
        event that says so has been processed (where ``run`` stops). A simulation taking
        requests live (``add_request``) is over only until it takes the next one."""
        n = self.table.num_requests
        if not n:
            return True
        return self.num_done == n and self._all_done.processed

    def step(self) -> None:
        """Process the next event (after ``start``)."""
        self.env.step()

    def finalize(self) -> RunFacts:
        """The facts so far, as a plain value: each instance's snapshot (a decode run
        being followed is committed as far as it got), the requests' facts by column,
        link samples and fault counts. A finished run hands its own lists over, unless
        it takes requests live (``add_request``: more may come and write into them)."""
        snapshots = [inst.snapshot() for inst in self.instances]
        table = self.table
        table.record_ended()
        n = table.num_requests
        # every request has ended (``run`` stops here: the event that says so is then
        # triggered, not yet processed, so ``done`` would still be False) and nothing
        # more will write the columns
        ended = (n > 0 and self.num_done == n
                 and not any(snap.live_rows for snap in snapshots))
        pool_of = {inst.name: inst.pool_name for inst in self.instances}
        live = [table.live[i] for i in sorted(table.live)]
        hand_over = ended and not live and table.pregenerated
        columns, segments = table.facts.columns(live, pool_of, table.accepted_per_pos,
                                                hand_over)
        return RunFacts(self.config, columns, segments, snapshots, self.network.samples(),
                        dict(self.faults.counts), self.transfers.lease_expired, hand_over)

    def results(self) -> Results:
        """The results so far (``results_from(finalize())``)."""
        return results_from(self.finalize())

    def next_fault_after(self, now_s: float) -> float:
        """The next scheduled fault strictly after ``now_s`` (inf if none)."""
        return self.faults.next_scheduled_after(now_s)

    # --------------------------------------------------------------- arrival

    def _arrivals(self) -> simpy.events.ProcessGenerator:
        env = self.env
        table = self.table
        arrivals = table.arrival_s
        arrive = table.arrive
        for i in range(table.num_requests):
            delay = arrivals.item(i) - env.now
            if delay > 0:
                yield env.timeout(delay)
            self._through_frontend(arrive(i))

    def _release_next(self) -> None:
        table = self.table
        if self._next_release >= table.num_requests:
            return
        req = table.arrive(self._next_release)
        self._next_release += 1
        req.arrival_s = self.env.now
        self._through_frontend(req)

    def _through_frontend(self, req: Request) -> None:
        """Dispatch ``req`` once it has passed the frontend (``router.frontend_latency_s``
        and ``frontend_latency_per_prompt_token_s`` per prompt token): the proxy's first
        hop (``Proxy.dispatch``)."""
        latency = self._frontend_s + self._frontend_per_prompt_token_s * req.prompt_tokens
        if latency <= 0:
            self._dispatch(req)
            return
        passed = self.env.timeout(latency)
        passed.callbacks.append(lambda _event: self._dispatch(req))

    # -------------------------------------------------------------- terminal

    def finish(self, req: Request, at_s: float | None = None) -> None:
        """``req`` emitted its last token (at ``at_s``, default now)."""
        req.status = Status.FINISHED
        req.finish_s = self.env.now if at_s is None else at_s
        req.kv_params = None  # the hand-over is over: nothing reads it again
        self._terminal(req)

    def fail(self, req: Request, reason: str) -> None:
        req.status = Status.FAILED
        req.fail_reason = reason
        req.finish_s = self.env.now
        req.end()
        self._terminal(req)

    def reject(self, req: Request, reason: str) -> None:
        req.status = Status.REJECTED
        req.fail_reason = reason
        req.end()
        self._terminal(req)

    def _terminal(self, req: Request) -> None:
        self.num_done += 1
        table = self.table
        ended = table.ended
        ended.append(req)
        if len(ended) >= RECORD_EVERY:
            table.record_ended(keep_unsettled=True)
        n = table.num_requests
        if self._progress is not None and (self.num_done % 256 == 0
                                           or self.num_done == n):
            self._progress(self.num_done, n)
        if self.closed_loop:
            self._release_next()
        if self.num_done == n and not self._all_done.triggered:
            self._all_done.succeed()

    # ------------------------------------------------------------ live intake

    def add_request(self, prompt_tokens: int, output_tokens: int, arrival_s: float,
                    hash_ids: tuple[int, ...] | None = None) -> Request:
        """Admit a request into the running simulation (``LiveIntake.add_request``: only
        a simulation built with no requests takes them; ``can_add_at`` says when)."""
        return self.live_intake.add_request(prompt_tokens, output_tokens, arrival_s,
                                            hash_ids)

    def can_add_at(self, arrival_s: float) -> bool:
        """``add_request`` can take an arrival at ``arrival_s`` now."""
        return self.live_intake.can_add_at(arrival_s)

    def retarget(self, req: Request, output_tokens: int) -> None:
        """``req``, taken live and not yet decoding, now generates ``output_tokens``
        (``pdsim serve``: a client's D hop asks for its own ``max_tokens``): the request,
        the specs' arrays and the facts' columns all say so."""
        self.table.retarget(req, output_tokens)


def simulate(config: SimConfig, requests: RequestSpecs | None = None,
             progress: ProgressFn | None = None) -> Results:
    """Run one simulation of ``config`` and return its ``Results`` (the requests' objects
    are dropped as they end: ``Simulation(keep_requests=False)``)."""
    return Simulation(config, requests, keep_requests=False).run(progress)


__all__ = ["Simulation", "simulate"]
