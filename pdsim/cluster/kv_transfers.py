"""The KV of a P -> D hand-over on its way: the transfer and P's lease on the blocks.

D has allocated blocks for a request's remote tokens (its scheduler listed the load in
its plan): after the connector's setup (and the handshake when D pulls) the link moves
P's blocks, sharing bandwidth with the other transfers on it; when they land P frees
them (D notifies it) and D takes the request back. A transfer fails when it starts
(``faults``), runs past ``faults.kv_transfer_timeout_s``, or finds P's blocks gone: P's
lease (``connector.kv_lease_s``, from when P pinned them) ran out, or P went down. D
then recomputes the prompt or fails the request (``connector.kv_load_failure_policy``).
Each attempt's facts go into the request's ``HandOver`` record.
"""

from __future__ import annotations

from itertools import count
from typing import TYPE_CHECKING

from pdsim.config import Role

if TYPE_CHECKING:
    from pdsim.config_sections import ConnectorConfig
    from pdsim.engine.engines import Engines
    from pdsim.engine.events import EngineEnvironment
    from pdsim.engine.instance import Instance
    from pdsim.engine.request import Request
    from pdsim.engine.transfers import TransferNetwork
    from pdsim.faults import FaultState


class KVTransfers:
    """The transfers in flight, by request id, and each P's lease timer."""

    def __init__(self, env: EngineEnvironment, connector: ConnectorConfig,
                 timeout_s: float | None, network: TransferNetwork, faults: FaultState,
                 engines: Engines) -> None:
        self.env = env
        self.network = network
        self.faults = faults
        self._by_name = engines.by_name
        self._prefills = engines.prefills
        # before a transfer moves bytes: setup, and the handshake when D pulls
        self._setup_s = connector.setup_latency_s + (
            connector.handshake_s if connector.transfer_mode == "pull" else 0.0)
        self._timeout_s = timeout_s
        self._lease_s = connector.kv_lease_s
        self._recompute = connector.kv_load_failure_policy == "recompute"
        self._tids = count()
        self._active: dict[int, tuple[int, Instance, Instance]] = {}
        self.lease_expired = 0  # pins whose lease ran out before D read them

    # -------------------------------------------------------------- transfer

    def start(self, req: Request, d: Instance) -> None:
        """D allocated blocks for ``req``: handshake with P, then move the blocks.

        The bytes moved are P's: the blocks P holds for the tokens D loads, in P's KV layout
        (block size, dtype). D allocated its own blocks for those tokens in its layout and
        converts on arrival (not timed); with equal layouts both counts agree."""
        p = self._by_name[req.p_instance]
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
                self._failed(req, p, d, "kv_blocks_gone")
                return
            if self.faults.transfer_fails(self.env.now):
                self._failed(req, p, d, "kv_transfer_failed")
                return
            self._active[req.id] = (tid, p, d)
            network.start(tid, p, d, nbytes, landed)
            timeout = self._timeout_s
            if timeout is not None:
                ev = self.env.timeout(timeout)
                ev.callbacks.append(lambda _e: expire())

        def expire() -> None:
            active = self._active.get(req.id)
            if active is not None and active[0] == tid:
                network.cancel(tid)
                self.faults.counts["kv_transfer_timeouts"] += 1
                self._failed(req, p, d, "kv_transfer_timeout")

        def landed(now: float) -> None:
            self._active.pop(req.id, None)
            if req.kv_params is not None:
                req.kv_params.remote_block_ids = ()  # read: P frees them now
            handover.kv_landed_s = now
            handover.kv_nbytes = nbytes  # counted when landed: a failed load moved none
            p.release_pinned(req)  # D notifies P, which frees the blocks
            d.kv_landed(req)

        ev = self.env.timeout(self._setup_s)
        ev.callbacks.append(begin)

    def _failed(self, req: Request, p: Instance, d: Instance, reason: str) -> None:
        """A transfer cannot complete: P frees its blocks, D recomputes or fails."""
        self._active.pop(req.id, None)
        handover = req.handover
        if handover is not None:
            handover.kv_failed = reason
        p.release_pinned(req)
        d.kv_load_failed(req, self._recompute, reason)

    # ----------------------------------------------------------------- lease

    def watch_lease(self, p: Instance) -> None:
        """Arm P's lease timer for its oldest pin, unless armed. Pins are kept in the
        order they were made and every lease lasts as long, so one timer per P serves them
        all: when it fires it expires every pin whose lease has run out, then re-arms."""
        if p.lease_timer_armed or not p.pinned:
            return
        deadline = next(iter(p.pinned.values())).p_end_s + self._lease_s
        p.lease_timer_armed = True
        ev = self.env.timeout(max(0.0, deadline - self.env.now))
        ev.callbacks.append(lambda _e: self._leases_due(p, deadline))

    def _leases_due(self, p: Instance, deadline: float) -> None:
        p.lease_timer_armed = False
        lease = self._lease_s
        while p.pinned:
            req = next(iter(p.pinned.values()))
            if req.p_end_s + lease > deadline:
                break
            self._lease_expired(req, p)
        self.watch_lease(p)

    def _lease_expired(self, req: Request, p: Instance) -> None:
        if req.id in p.pinned:
            self.lease_expired += 1
            p.release_pinned(req)
            active = self._active.get(req.id)
            if active is not None:  # D was still reading blocks P has now freed
                tid, _, d = active
                self.network.cancel(tid)
                self._failed(req, p, d, "kv_lease_expired")

    # --------------------------------------------------------------- outages

    def source_down(self, pinned: list[Request]) -> None:
        """A P went down holding ``pinned``: whatever a D reads of them from here is gone."""
        for req in pinned:
            active = self._active.get(req.id)
            if active is not None:
                tid, p, d = active
                self.network.cancel(tid)
                self._failed(req, p, d, "prefill_instance_down")

    def drop(self, req: Request, inst: Instance) -> None:
        """``inst`` went down serving ``req``: a load in flight is cancelled and P frees
        the blocks it kept for it (a D that had not started loading tells every P)."""
        active = self._active.pop(req.id, None)
        if active is not None:
            self.network.cancel(active[0])
            active[1].release_pinned(req)
        elif req.kv_params is not None and req.p_instance and inst.role is Role.DECODE:
            for p in self._prefills:
                p.release_pinned(req)


__all__ = ["KVTransfers"]
