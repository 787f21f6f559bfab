"""The proxy in front of the engines: where a request goes, and the P -> D hand-over.

As vLLM's disaggregated-serving proxy does, the first hop sends a request to a prefill
instance with ``do_remote_decode`` (the connector truncates the prompt P computes, and P
runs it for one token); when P has the KV (``on_prefill_done``) the second hop forwards
the original request to a decode instance with the kv_transfer_params P returned
(``send_to_decode``), and D loads the KV (``KVTransfers``). On a colocated cluster the
one hop goes to a colocated instance. Each hop's instance is the router's pick among
those that are up (``choose``): among attention-DP engines where a pool has them (the
engine assigns the rank), among those that can hold the request where a role's pools
differ, or the instance a client addressed (``pdsim serve --pd-endpoints``). The facts of
each hand-over attempt start here, in the request's ``HandOver`` record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pdsim.engine.connector import KVTransferParams
from pdsim.engine.dp_group import DPGroup
from pdsim.engine.request import HandOver

if TYPE_CHECKING:
    from pdsim.cluster.kv_transfers import KVTransfers
    from pdsim.engine.connector import ConnectorScheduler
    from pdsim.engine.engines import Engines
    from pdsim.engine.events import EngineEnvironment
    from pdsim.engine.instance import Instance
    from pdsim.engine.request import Request
    from pdsim.engine.router import RoutingPolicy

EndFn = Callable[["Request", str], None]


class Proxy:
    """Routes each request to its instances and hands it over from P to D."""

    def __init__(self, env: EngineEnvironment, max_model_len: int, engines: Engines,
                 router: RoutingPolicy, connector: ConnectorScheduler,
                 transfers: KVTransfers, *, reject: EndFn, fail: EndFn) -> None:
        """``reject``, ``fail``: the cluster's terminal verbs, for a request no instance
        can take (rejected before it is served, failed after)."""
        self.env = env
        self.router = router
        self.connector = connector
        self.transfers = transfers
        self._reject = reject
        self._fail = fail
        self._max_model_len = max_model_len
        self._by_name = engines.by_name
        self._prefills = engines.prefills
        self._decodes = engines.decodes
        self._colocated = engines.colocated
        self.route_targets = engines.route_targets
        # roles whose pools differ in the longest request they hold
        self._fit_varies = {role for role, insts in engines.by_role.items()
                            if len({i.max_fit_tokens for i in insts}) > 1}
        # live serving (pdsim serve): requests whose instance a client addressed (the router
        # is skipped), and those whose P -> D hand-over the client makes (``send_to_decode``)
        self.route_to: dict[int, str] = {}
        self.client_handover: set[int] = set()

    # --------------------------------------------------------------- routing

    def choose(self, group: list[Instance], req: Request, tokens: int) -> Instance | None:
        """The router's pick among the instances of ``group`` that are up. Where a role's
        pools differ in capacity, only among those that can hold ``tokens`` (if any can:
        else the caller rejects the request as before)."""
        cands: Sequence[Instance] = [i for i in group if i.up]
        if not cands:
            return None
        addressed = self.route_to.get(req.id)
        if addressed is not None:  # a client chose the instance (pdsim serve --pd-endpoints)
            return next((i for i in cands if i.name == addressed), None)
        if self.route_targets:
            return self._choose_engine(self.route_targets[cands[0].role], req, tokens)
        if cands[0].role in self._fit_varies:
            fit = [i for i in cands if tokens <= i.max_fit_tokens]
            cands = fit or cands
        return cands[self.router.choose(cands, req)]

    def _choose_engine(self, targets: list[Instance | DPGroup], req: Request,
                       tokens: int) -> Instance:
        """``choose`` where a role has attention-DP engines: the router picks among the
        engines (and lone instances) that are up; an engine assigns the rank."""
        cands = [t for t in targets if t.up]
        if targets[0].role in self._fit_varies:
            fit = [t for t in cands if tokens <= t.max_fit_tokens]
            cands = fit or cands
        pick = cands[self.router.choose(cands, req)]
        return pick.assign(req) if isinstance(pick, DPGroup) else pick

    @staticmethod
    def _fits(inst: Instance, tokens: int) -> bool:
        """A request of ``tokens`` tokens (plus its sampled token and drafts) fits in
        ``inst``'s whole pool."""
        return tokens <= inst.max_fit_tokens

    # ------------------------------------------------------------- first hop

    def dispatch(self, req: Request) -> None:
        """The first hop: to a colocated instance, or to a P with ``do_remote_decode``
        (rejected when no instance is up or none can hold it)."""
        if req.prompt_tokens + req.output_target > self._max_model_len:
            self._reject(req, "exceeds_max_model_len")
            return
        if self._colocated:
            inst = self.choose(self._colocated, req, req.prompt_tokens + req.output_target)
            if inst is None:
                self._reject(req, "no_instance_up")
                return
            if not self._fits(inst, req.prompt_tokens + req.output_target):
                self._reject(req, "exceeds_kv_capacity")
                return
            req.d_instance = inst.name
            req.d_queued_s = self.env.now
            inst.add_request(req)
            return
        p = self.choose(self._prefills, req, req.prompt_tokens)
        if p is None:
            self._reject(req, "no_instance_up")
            return
        params = KVTransferParams(do_remote_decode=True)
        req.kv_params = params
        req.p_prompt_tokens = self.connector.truncate_request_for_prefill(
            params, req.prompt_tokens)
        req.seq_tokens = req.p_prompt_tokens  # P runs it with max_tokens = 1
        if not self._fits(p, req.p_prompt_tokens) or not any(
                self._fits(d, req.prompt_tokens + req.output_target)
                for d in self._decodes):
            self._reject(req, "exceeds_kv_capacity")
            return
        req.p_instance = p.name
        req.p_queued_s = self.env.now
        p.add_request(req)

    def retry(self, req: Request) -> None:
        """Send ``req`` again from the start (its instance went down before it streamed a
        token): a new attempt, with a new hand-over record if it gets one."""
        req.attempts += 1
        req.start_attempt()
        req.handover = None
        self.dispatch(req)

    # ------------------------------------------------------------ second hop

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
            self.transfers.watch_lease(p)  # P keeps the blocks for the lease; the client forwards
            return
        d = self.choose(self._decodes, req, req.prompt_tokens + req.output_target)
        if d is None:
            p.release_pinned(req)
            self._fail(req, "no_instance_up")
            return
        self.send_to_decode(req, d)

    def send_to_decode(self, req: Request, d: Instance) -> None:
        """Forward ``req``, whose prefill ``p_instance`` has finished, to decode instance
        ``d`` with its kv_transfer_params: the proxy's second hop (the built-in one, or a
        client's under ``client_handover``)."""
        p = self._by_name[req.p_instance]
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
            self.transfers.watch_lease(p)
        d.add_request(req)


__all__ = ["Proxy"]
