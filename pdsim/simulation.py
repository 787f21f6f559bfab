"""One simulation: build the cluster from a config, run it, return the facts.

``Simulation`` owns everything mutable (the SimPy environment, random streams, instances,
links, requests); nothing lives at module level, so two simulations in one process never
influence each other.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from itertools import count

import numpy as np
import simpy

from pdsim.config import Role, SimConfig
from pdsim.engine.connector import ConnectorScheduler, KVTransferParams
from pdsim.engine.dp_group import DPGroup
from pdsim.engine.events import EngineEnvironment
from pdsim.engine.instance import EngineHooks, Instance
from pdsim.engine.request import HandOver, Request, RequestFacts, Status, with_room
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
    """A P/D (or colocated) cluster serving one workload under one config."""

    def __init__(self, config: SimConfig, requests: RequestSpecs | None = None, *,
                 keep_requests: bool = True) -> None:
        """``keep_requests``: keep every ``Request`` object for the whole run in
        ``requests`` (what the invariant checker and tests that look into requests read).
        Without it a request is made when it arrives and dropped once it has ended and
        its facts are in the columns (``simulate`` runs so: memory then grows with the
        requests' facts, not their objects). The results are the same either way."""
        self.config = config
        self.env = EngineEnvironment()
        # observers of the engine (tests, the invariant checker): attach before running
        self.hooks = EngineHooks()
        self.streams = RandomStreams(config.seed)
        self.specs = requests if requests is not None else generate_requests(
            config.workload, self.streams)
        self.acceptance_sampler = AcceptanceSampler(config.conditional_acceptance,
                                                    self.streams.key("acceptance"))
        # P's guesses of the tokens it did not see, right or wrong (its only consumer)
        self.provenance_draws = UniformBuffer(self.streams.get("provenance"))
        self.router = make_router(config.router.policy, self.streams.get("routing"),
                                  config.router)
        self.connector = ConnectorScheduler(config)
        self._tids = count()
        self.instances: list[Instance] = []
        self.by_role: dict[Role, list[Instance]] = {}
        # attention-DP engines (pools with attention_dp_size > 1): their ranks are
        # instances; the router sees the engines of such a role (``_route_targets``)
        self.dp_groups: list[DPGroup] = []
        self._route_targets: dict[Role, list[Instance | DPGroup]] = {}
        # instances numbered across a role's pools; the router sees all of a role's
        for pool in config.cluster.pools():
            members = self.by_role.setdefault(pool.role, [])
            made = []
            for name in pool.instance_names:
                inst = Instance(self, self.env, config, self.specs, self.acceptance_sampler,
                                self.hooks, len(self.instances), name, pool.role,
                                pool.group, pool.name)
                self.instances.append(inst)
                members.append(inst)
                made.append(inst)
            dp = pool.group.attention_dp_size
            targets = self._route_targets.setdefault(pool.role, [])
            if dp == 1:
                targets.extend(made)
                continue
            for k in range(0, len(made), dp):
                engine = DPGroup(self.env, made[k:k + dp], pool.group.attention_dp_balance)
                self.dp_groups.append(engine)
                targets.append(engine)
        if not self.dp_groups:
            self._route_targets.clear()
        self.by_name = {inst.name: inst for inst in self.instances}
        # the role groups the request path reads (no enum hashing per request)
        self.prefills = self.by_role.get(Role.PREFILL, [])
        self.decodes = self.by_role.get(Role.DECODE, [])
        self.colocated = self.by_role.get(Role.COLOCATED, [])
        # roles whose pools differ in the longest request they hold
        self._fit_varies = {role for role, insts in self.by_role.items()
                            if len({i.max_fit_tokens for i in insts}) > 1}
        self._max_model_len = config.model.max_model_len
        conn = config.connector
        # before a transfer moves bytes: setup, and the handshake when D pulls
        self._transfer_setup_s = conn.setup_latency_s + (
            conn.handshake_s if conn.transfer_mode == "pull" else 0.0)
        self._transfer_timeout_s = config.faults.kv_transfer_timeout_s
        # arrival to dispatch: HTTP, tokenization, the serving frontend (0: at once)
        self._frontend_s = config.router.frontend_latency_s
        # per-pair links or a topology, state made as transfers use it (never P x D)
        self.network = make_network(self.env, config, self.instances)
        n_spec = config.speculative.num_speculative_tokens
        # drafts accepted at each position, a row per request (the records' column), with
        # room for the requests ``add_request`` takes (``accepted_per_pos``: the rows used)
        self._accepted = np.zeros((len(self.specs), n_spec), dtype=np.int64)
        # token counts repeat: one int object per distinct count, not one per request
        self._ints: dict[int, int] = {}
        self._n_spec = n_spec
        # requests are made from the specs' arrays (no Python list of a number a request);
        # ``add_request`` grows them (their first ``num_requests`` rows are the requests)
        self._arrival_s = self.specs.arrival_s
        self._prompts = self.specs.prompt_tokens
        self._outputs = self.specs.output_tokens
        self._hash_ids: Sequence[tuple[int, ...] | None] | None = self.specs.hash_ids
        self.num_requests = len(self._arrival_s)
        # the requests' facts by column, written as each request ends and settles
        self.request_facts = RequestFacts(self.specs.arrival_s, self.specs.prompt_tokens,
                                          self.specs.output_tokens)
        self._live: dict[int, Request] = {}  # made and not yet recorded, by id
        self._ended: list[Request] = []  # ended, to be recorded once settled
        self.keep_requests = keep_requests
        # built with its requests (else it takes them live: ``add_request``)
        self._pregenerated = self.num_requests > 0
        self._requests: list[Request] | None = (
            [self._make_request(i) for i in range(self.num_requests)] if keep_requests
            else None)
        self.num_done = 0
        self._next_release = 0
        self._all_done = self.env.event()
        self._progress: ProgressFn | None = None
        self.lease_expired = 0
        self.closed_loop = self.specs.closed_loop_concurrency is not None
        self.faults = FaultState(config.faults, self.streams.get("faults"))
        self._transfers: dict[int, tuple[int, Instance, Instance]] = {}
        # live serving (pdsim serve): requests whose instance a client addressed (the router
        # is skipped), and those whose P -> D hand-over the client makes (``send_to_decode``)
        self.route_to: dict[int, str] = {}
        self.client_handover: set[int] = set()
        self._live_dispatch_s = 0.0  # when the last request added live is dispatched

    @property
    def requests(self) -> list[Request]:
        """Every request, in id order (only with ``keep_requests``)."""
        if self._requests is None:
            raise AttributeError("this simulation does not keep its requests "
                                 "(Simulation(..., keep_requests=True) does)")
        return self._requests

    @property
    def accepted_per_pos(self) -> np.ndarray:
        """Drafts accepted at each position, a row per request (the records' column)."""
        return self._accepted[:self.num_requests]

    def _make_request(self, i: int) -> Request:
        ints = self._ints
        prompt, output = self._prompts.item(i), self._outputs.item(i)
        hashes = self._hash_ids
        return Request(i, self._arrival_s.item(i), ints.setdefault(prompt, prompt),
                       ints.setdefault(output, output), self._n_spec,
                       hashes[i] if hashes is not None else None, self._accepted)

    def _request(self, i: int) -> Request:
        """Request ``i`` as it arrives (made now unless the requests are kept)."""
        req = self._requests[i] if self._requests is not None else self._make_request(i)
        self._live[i] = req
        return req

    # ------------------------------------------------------------------- run

    def run(self, progress: ProgressFn | None = None) -> Results:
        """Simulate until every request has finished, failed or been rejected."""
        self.start(progress)
        if self.num_requests:
            self.env.run(until=self._all_done)
        return self.results()

    def start(self, progress: ProgressFn | None = None) -> None:
        """Start the engines, the faults and the arrivals; then ``step()`` (or ``run``)
        processes the events."""
        self._progress = progress
        ranked = {id(r) for g in self.dp_groups for r in g.ranks}
        for inst in self.instances:
            if id(inst) not in ranked:
                self.env.process(inst.run())
        for engine in self.dp_groups:
            self.env.process(engine.run())
        self._schedule_faults()
        if not self.num_requests:
            return
        clients = self.specs.closed_loop_concurrency
        if clients is not None:
            for _ in range(min(clients, self.num_requests)):
                self._release_next()
        else:
            self.env.process(self._arrivals())

    @property
    def done(self) -> bool:
        """The run is over: every request has finished, failed or been rejected, and the
        event that says so has been processed (where ``run`` stops). A simulation taking
        requests live (``add_request``) is over only until it takes the next one."""
        if not self.num_requests:
            return True
        return self.num_done == self.num_requests and self._all_done.processed

    def step(self) -> None:
        """Process the next event (after ``start``)."""
        self.env.step()

    def finalize(self) -> RunFacts:
        """The facts so far, as a plain value: each instance's snapshot (a decode run
        being followed is committed as far as it got), the requests' facts by column,
        link samples and fault counts. A finished run hands its own lists over, unless
        it takes requests live (``add_request``: more may come and write into them)."""
        snapshots = [inst.snapshot() for inst in self.instances]
        self._record_ended()
        # every request has ended (``run`` stops here: the event that says so is then
        # triggered, not yet processed, so ``done`` would still be False) and nothing
        # more will write the columns
        ended = (self.num_requests > 0 and self.num_done == self.num_requests
                 and not any(snap.live_rows for snap in snapshots))
        pool_of = {inst.name: inst.pool_name for inst in self.instances}
        live = [self._live[i] for i in sorted(self._live)]
        hand_over = ended and not live and self._pregenerated
        columns, segments = self.request_facts.columns(live, pool_of, self.accepted_per_pos,
                                                      hand_over)
        return RunFacts(self.config, columns, segments, snapshots, self.network.samples(),
                        dict(self.faults.counts), self.lease_expired, hand_over)

    def _record_ended(self, keep_unsettled: bool = False) -> None:
        """Write the ended requests' facts into the columns and let them go. A request
        that finished inside a decode run settles when the run commits (until then it
        keeps its row): with ``keep_unsettled`` those wait for a later call."""
        facts, live = self.request_facts, self._live
        # pdsim serve's per-request routing notes go with the request
        serving = bool(self.route_to or self.client_handover)
        waiting: list[Request] = []
        for req in self._ended:
            if req.slot >= 0 and keep_unsettled:
                waiting.append(req)
                continue
            facts.record(req)
            del live[req.id]
            if serving:
                self.route_to.pop(req.id, None)
                self.client_handover.discard(req.id)
        self._ended = waiting

    def results(self) -> Results:
        """The results so far (``results_from(finalize())``)."""
        return results_from(self.finalize())

    def next_fault_after(self, now_s: float) -> float:
        """The next scheduled fault strictly after ``now_s`` (inf if none)."""
        return self.faults.next_scheduled_after(now_s)

    def _arrivals(self) -> simpy.events.ProcessGenerator:
        env = self.env
        arrivals = self._arrival_s
        for i in range(self.num_requests):
            delay = arrivals.item(i) - env.now
            if delay > 0:
                yield env.timeout(delay)
            self._through_frontend(self._request(i))

    def _release_next(self) -> None:
        if self._next_release >= self.num_requests:
            return
        req = self._request(self._next_release)
        self._next_release += 1
        req.arrival_s = self.env.now
        self._through_frontend(req)

    def _through_frontend(self, req: Request) -> None:
        """Dispatch ``req`` once it has passed the frontend (``router.frontend_latency_s``)."""
        latency = self._frontend_s
        if latency <= 0:
            self._dispatch(req)
            return
        passed = self.env.timeout(latency)
        passed.callbacks.append(lambda _event: self._dispatch(req))

    # --------------------------------------------------------------- routing

    def _choose(self, group: list[Instance], req: Request, tokens: int) -> Instance | None:
        """The router's pick among the instances of ``group`` that are up. Where a role's
        pools differ in capacity, only among those that can hold ``tokens`` (if any can:
        else the caller rejects the request as before)."""
        cands: Sequence[Instance] = [i for i in group if i.up]
        if not cands:
            return None
        addressed = self.route_to.get(req.id)
        if addressed is not None:  # a client chose the instance (pdsim serve --pd-endpoints)
            return next((i for i in cands if i.name == addressed), None)
        if self._route_targets:
            return self._choose_engine(self._route_targets[cands[0].role], req, tokens)
        if cands[0].role in self._fit_varies:
            fit = [i for i in cands if tokens <= i.max_fit_tokens]
            cands = fit or cands
        return cands[self.router.choose(cands, req)]

    def _choose_engine(self, targets: list[Instance | DPGroup], req: Request,
                       tokens: int) -> Instance:
        """``_choose`` where a role has attention-DP engines: the router picks among the
        engines (and lone instances) that are up; an engine assigns the rank."""
        cands = [t for t in targets if t.up]
        if targets[0].role in self._fit_varies:
            fit = [t for t in cands if tokens <= t.max_fit_tokens]
            cands = fit or cands
        pick = cands[self.router.choose(cands, req)]
        return pick.assign(req) if isinstance(pick, DPGroup) else pick

    def _dispatch(self, req: Request) -> None:
        if req.prompt_tokens + req.output_target > self._max_model_len:
            self.reject(req, "exceeds_max_model_len")
            return
        if self.colocated:
            inst = self._choose(self.colocated, req, req.prompt_tokens + req.output_target)
            if inst is None:
                self.reject(req, "no_instance_up")
                return
            if not self._fits(inst, req.prompt_tokens + req.output_target):
                self.reject(req, "exceeds_kv_capacity")
                return
            req.d_instance = inst.name
            req.d_queued_s = self.env.now
            inst.add_request(req)
            return
        p = self._choose(self.prefills, req, req.prompt_tokens)
        if p is None:
            self.reject(req, "no_instance_up")
            return
        params = KVTransferParams(do_remote_decode=True)
        req.kv_params = params
        req.p_prompt_tokens = self.connector.truncate_request_for_prefill(
            params, req.prompt_tokens)
        req.seq_tokens = req.p_prompt_tokens  # P runs it with max_tokens = 1
        if not self._fits(p, req.p_prompt_tokens) or not any(
                self._fits(d, req.prompt_tokens + req.output_target)
                for d in self.decodes):
            self.reject(req, "exceeds_kv_capacity")
            return
        req.p_instance = p.name
        req.p_queued_s = self.env.now
        p.add_request(req)

    @staticmethod
    def _fits(inst: Instance, tokens: int) -> bool:
        """A request of ``tokens`` tokens (plus its sampled token and drafts) fits in
        ``inst``'s whole pool."""
        return tokens <= inst.max_fit_tokens

    def on_prefill_done(self, req: Request, p: Instance) -> None:
        """P sampled its token: the proxy forwards the original request to a D."""
        params = req.kv_params
        assert params is not None
        params.do_remote_decode = False
        params.do_remote_prefill = True
        params.remote_engine_id = p.name
        params.remote_num_tokens = req.p_prompt_tokens
        params.remote_block_ids = tuple(p.pool.tables.get(req.id, ()))
        req.handover = HandOver(req.attempts, p.name, req.p_end_s)
        if req.id in self.client_handover:
            self._watch_leases(p)  # P keeps the blocks for the lease; the client forwards
            return
        d = self._choose(self.decodes, req, req.prompt_tokens + req.output_target)
        if d is None:
            p.release_pinned(req)
            self.fail(req, "no_instance_up")
            return
        self.send_to_decode(req, d)

    def send_to_decode(self, req: Request, d: Instance) -> None:
        """Forward ``req``, whose prefill ``p_instance`` has finished, to decode instance
        ``d`` with its kv_transfer_params: the proxy's second hop (the built-in one, or a
        client's under ``client_handover``)."""
        p = self.by_name[req.p_instance]
        handover = req.handover
        assert handover is not None and handover.p_name == p.name
        req.d_instance = handover.d_name = d.name
        req.d_queued_s = handover.sent_s = self.env.now
        req.seq_tokens = req.prompt_tokens
        remote = self.connector.remote_prefill_token_count(req.prompt_tokens)
        req.remote_tokens = handover.kv_tokens = min(remote, req.p_prompt_tokens)
        if req.remote_tokens == 0:
            p.release_pinned(req)
            req.recompute_prompt_on_d()
        else:
            self._watch_leases(p)
        d.add_request(req)

    def _watch_leases(self, p: Instance) -> None:
        """Arm P's lease timer for its oldest pin, unless armed. Pins are kept in the
        order they were made and every lease lasts as long, so one timer per P serves them
        all: when it fires it expires every pin whose lease has run out, then re-arms."""
        if p.lease_timer_armed or not p.pinned:
            return
        deadline = next(iter(p.pinned.values())).p_end_s + self.config.connector.kv_lease_s
        p.lease_timer_armed = True
        ev = self.env.timeout(max(0.0, deadline - self.env.now))
        ev.callbacks.append(lambda _e: self._leases_due(p, deadline))

    def _leases_due(self, p: Instance, deadline: float) -> None:
        p.lease_timer_armed = False
        lease = self.config.connector.kv_lease_s
        while p.pinned:
            req = next(iter(p.pinned.values()))
            if req.p_end_s + lease > deadline:
                break
            self._lease_expired(req, p)
        self._watch_leases(p)

    def _lease_expired(self, req: Request, p: Instance) -> None:
        if req.id in p.pinned:
            self.lease_expired += 1
            p.release_pinned(req)
            active = self._transfers.get(req.id)
            if active is not None:  # D was still reading blocks P has now freed
                tid, _, d = active
                self.network.cancel(tid)
                self._transfer_failed(req, p, d, "kv_lease_expired")

    # -------------------------------------------------------------- transfer

    def start_kv_transfer(self, req: Request, d: Instance) -> None:
        """D allocated blocks for ``req``: handshake with P, then move the blocks.

        The bytes moved are P's: the blocks P holds for the tokens D loads, in P's KV layout
        (block size, dtype). D allocated its own blocks for those tokens in its layout and
        converts on arrival (not timed); with equal layouts both counts agree."""
        p = self.by_name[req.p_instance]
        network = self.network
        nbytes = p.layout.transfer_bytes(req.remote_tokens)
        handover = req.handover
        assert handover is not None
        handover.kv_start_s = self.env.now
        tid = next(self._tids)

        def begin(_e: object) -> None:
            if req.id not in d.receiving:
                return  # D went down meanwhile
            if req.id not in p.pinned:
                # P's lease ran out (or P went down) before D read: the blocks are gone.
                self._transfer_failed(req, p, d, "kv_blocks_gone")
                return
            if self.faults.transfer_fails(self.env.now):
                self._transfer_failed(req, p, d, "kv_transfer_failed")
                return
            self._transfers[req.id] = (tid, p, d)
            network.start(tid, p, d, nbytes, landed)
            timeout = self._transfer_timeout_s
            if timeout is not None:
                ev = self.env.timeout(timeout)
                ev.callbacks.append(lambda _e: expire())

        def expire() -> None:
            active = self._transfers.get(req.id)
            if active is not None and active[0] == tid:
                network.cancel(tid)
                self.faults.counts["kv_transfer_timeouts"] += 1
                self._transfer_failed(req, p, d, "kv_transfer_timeout")

        def landed(now: float) -> None:
            self._transfers.pop(req.id, None)
            if req.kv_params is not None:
                req.kv_params.remote_block_ids = ()  # read: P frees them now
            handover.kv_landed_s = now
            handover.kv_nbytes = nbytes  # counted when landed: a failed load moved none
            p.release_pinned(req)  # D notifies P, which frees the blocks
            d.kv_landed(req)

        ev = self.env.timeout(self._transfer_setup_s)
        ev.callbacks.append(begin)

    def _transfer_failed(self, req: Request, p: Instance, d: Instance, reason: str) -> None:
        """A transfer cannot complete: P frees its blocks, D recomputes or fails."""
        self._transfers.pop(req.id, None)
        if req.handover is not None:
            req.handover.kv_failed = reason
        p.release_pinned(req)
        recompute = self.config.connector.kv_load_failure_policy == "recompute"
        d.kv_load_failed(req, recompute, reason)

    # ---------------------------------------------------------------- faults

    def _schedule_faults(self) -> None:
        f = self.config.faults
        # a rank of an attention-DP engine going down takes the engine down: its ranks
        # fail together (vLLM's DP engine cores share one lifetime) and come back together
        engine_of = {r.name: g.ranks for g in self.dp_groups for r in g.ranks}
        for o in f.instance_outages:
            inst = self.by_name[o.instance]
            insts = engine_of.get(o.instance, [inst])
            self._at(o.start_s, functools.partial(self._outage_start, insts))
            self._at(o.end_s, functools.partial(self._outage_end, insts))
        for deg in f.link_degradations:
            self._at(deg.start_s, functools.partial(self._scale, deg.link, deg.bandwidth_factor))
            self._at(deg.end_s, functools.partial(self._scale, deg.link, 1.0))

    def _at(self, t: float, fn: Callable[[], None]) -> None:
        ev = self.env.timeout(max(0.0, t - self.env.now))
        ev.callbacks.append(lambda _e: fn())

    def _scale(self, link: str | None, factor: float) -> None:
        if factor < 1.0:
            self.faults.counts["link_degradations"] += 1
        self.network.degrade(link, factor)

    def _outage_start(self, insts: list[Instance]) -> None:
        """One outage: ``insts`` (an instance, or every rank of its attention-DP engine)
        all go down first, then their requests are failed or retried elsewhere."""
        self.faults.counts["instance_outages"] += 1
        for inst, (served, pinned) in [(i, i.go_down()) for i in insts]:
            self._drop_requests(inst, served, pinned)

    @staticmethod
    def _outage_end(insts: list[Instance]) -> None:
        for inst in insts:
            inst.come_up()

    def _drop_requests(self, inst: Instance, served: list[Request],
                       pinned: list[Request]) -> None:
        for req in pinned:  # on a D now: whatever it reads from here is gone
            active = self._transfers.get(req.id)
            if active is not None:
                tid, p, d = active
                self.network.cancel(tid)
                self._transfer_failed(req, p, d, "prefill_instance_down")
        for req in served:
            active = self._transfers.pop(req.id, None)
            if active is not None:
                self.network.cancel(active[0])
                active[1].release_pinned(req)
            elif req.kv_params is not None and req.p_instance and inst.role is Role.DECODE:
                for p in self.by_role[Role.PREFILL]:
                    p.release_pinned(req)
            if req.status is not Status.IN_FLIGHT:
                continue
            cfg = self.config.faults
            if req.num_output > 0:
                self.fail(req, "instance_down_mid_stream")
            elif cfg.outage_policy == "retry" and req.attempts < cfg.max_retries:
                req.attempts += 1
                self.faults.counts["retries"] += 1
                req.start_attempt()
                req.handover = None  # the retry's hand-over, if any, is a new record
                self._dispatch(req)
            else:
                self.fail(req, "instance_down")

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
        ended = self._ended
        ended.append(req)
        if len(ended) >= RECORD_EVERY:
            self._record_ended(keep_unsettled=True)
        if self._progress is not None and (self.num_done % 256 == 0
                                           or self.num_done == self.num_requests):
            self._progress(self.num_done, self.num_requests)
        if self.closed_loop:
            self._release_next()
        if self.num_done == self.num_requests and not self._all_done.triggered:
            self._all_done.succeed()

    # ------------------------------------------------------------ live intake

    def add_request(self, prompt_tokens: int, output_tokens: int, arrival_s: float,
                    hash_ids: tuple[int, ...] | None = None) -> Request:
        """Admit a request into the running simulation (after ``start``; live intake, as
        ``pdsim serve`` does): it is stored after the others (its id is the next one) and
        dispatched at ``arrival_s``, which may not lie in the simulated past nor before the
        last request's arrival, exactly as a pre-generated arrival at that time would be:
        at the same float time (from some ``now`` no delay lands there; ``can_add_at``
        says, and ``ValueError`` is raised). Only a simulation built with no pre-generated
        requests takes them (its arrivals process would release them a second time).

        The request is one more row of the specs' arrays, the facts' columns and the
        acceptance table (each grows by doubling), made from them as a pre-generated one
        is (now, since the caller follows it from here), and recorded and dropped alike."""
        if self._pregenerated:
            raise ValueError("add_request needs a simulation built with no requests")
        now = self.env.now
        if not arrival_s >= now:
            raise ValueError(f"arrival at {arrival_s!r} s is in the simulated past "
                             f"(now {now!r} s)")
        rid = self.num_requests
        if rid and arrival_s < self._arrival_s.item(rid - 1):
            raise ValueError(f"arrival at {arrival_s!r} s is before the last one "
                             f"({self._arrival_s.item(rid - 1)!r} s)")
        due, delay = self._live_dispatch(arrival_s)
        if delay is None:
            raise ValueError(f"arrival at {arrival_s!r} s cannot be dispatched exactly from "
                             f"now ({now!r} s); pick another time (can_add_at)")
        self._add_spec(arrival_s, prompt_tokens, output_tokens, hash_ids)
        req = self._make_request(rid)
        self._live[rid] = req
        if self._requests is not None:
            self._requests.append(req)
        self._live_dispatch_s = due
        ev = self.env.timeout(delay)
        ev.callbacks.append(lambda _e: self._through_frontend(req))
        return req

    def _add_spec(self, arrival_s: float, prompt_tokens: int, output_tokens: int,
                  hash_ids: tuple[int, ...] | None) -> None:
        """One more request's row in the specs' arrays, the facts' columns and the
        acceptance table; made requests follow the table when it moves."""
        rid = self.num_requests
        if rid == len(self._arrival_s):
            rows = max(64, 2 * rid)
            self._arrival_s = with_room(self._arrival_s, rows, math.nan)
            self._prompts = with_room(self._prompts, rows)
            self._outputs = with_room(self._outputs, rows)
            self._accepted = with_room(self._accepted, rows)
            for req in self._live.values():
                req.move_accepted(self._accepted)
            for req in self._requests or ():
                req.move_accepted(self._accepted)
        self._arrival_s[rid] = arrival_s
        self._prompts[rid] = prompt_tokens
        self._outputs[rid] = output_tokens
        if hash_ids is not None or self._hash_ids is not None:
            hashes = self._hash_ids
            if not isinstance(hashes, list):
                hashes = self._hash_ids = list(hashes or [None] * rid)
            hashes.append(hash_ids)
        self.request_facts.add(arrival_s, prompt_tokens, output_tokens)
        self.num_requests = rid + 1
        self._fresh_rows_follow()

    def _fresh_rows_follow(self) -> None:
        """The instances' fresh-row look-aheads read the requests' lengths now stored."""
        n = self.num_requests
        for inst in self.instances:
            if inst.fresh_rows is not None:
                inst.fresh_rows.requests_added(self._prompts[:n], self._outputs[:n])

    def retarget(self, req: Request, output_tokens: int) -> None:
        """``req``, taken live and not yet decoding, now generates ``output_tokens``
        (``pdsim serve``: a client's D hop asks for its own ``max_tokens``): the request,
        the specs' arrays and the facts' columns all say so."""
        req.output_target = output_tokens
        self._outputs[req.id] = output_tokens
        self.request_facts.retarget(req.id, output_tokens)

    def can_add_at(self, arrival_s: float) -> bool:
        """``add_request`` can take an arrival at ``arrival_s`` now: not in the past, not
        before the last one, and its dispatch time reachable exactly (below)."""
        now = self.env.now
        n = self.num_requests
        if not arrival_s >= now or (n and arrival_s < self._arrival_s.item(n - 1)):
            return False
        return self._live_dispatch(arrival_s)[1] is not None

    def _live_dispatch(self, arrival_s: float) -> tuple[float, float | None]:
        """When a pre-generated arrival at ``arrival_s`` would be dispatched, and the delay
        from now that lands on that float exactly (None if none does). The arrivals
        process (``_arrivals``) dispatches at the last dispatch time plus the gap to this
        arrival (at once when it is not ahead); ``now + (t - now)`` can miss ``t`` by an
        ulp, and from some ``now`` no delay lands on ``t`` at all."""
        last = self._live_dispatch_s
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


def simulate(config: SimConfig, requests: RequestSpecs | None = None,
             progress: ProgressFn | None = None) -> Results:
    """Run one simulation of ``config`` and return its ``Results`` (the requests' objects
    are dropped as they end: ``Simulation(keep_requests=False)``)."""
    return Simulation(config, requests, keep_requests=False).run(progress)


__all__ = ["Simulation", "simulate"]
