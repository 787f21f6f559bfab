"""Scheduled faults of the cluster: instance outages and link degradations.

An outage (``faults.instance_outages``) takes an instance down, or every rank of its
attention-DP engine (vLLM's DP engine cores share one lifetime: the ranks fail together
and come back together), and back up at its end. The instances go down first; then each
request they served is dealt with: its KV load is cancelled and P frees the blocks it
kept for it; a request that has streamed a token fails (``instance_down_mid_stream``),
one that has not is retried from the proxy (``outage_policy: retry``, at most
``max_retries`` times) or fails (``instance_down``). Transfers reading a downed P's
pinned blocks fail. A link degradation scales a link's bandwidth over an interval.
Random transfer failures and the fault horizon of decode runs are ``pdsim.faults``'.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from pdsim.engine.request import Status

if TYPE_CHECKING:
    from pdsim.cluster.kv_transfers import KVTransfers
    from pdsim.engine.engines import Engines
    from pdsim.engine.events import EngineEnvironment
    from pdsim.engine.instance import Instance
    from pdsim.engine.request import Request
    from pdsim.engine.transfers import TransferNetwork
    from pdsim.faults import FaultsConfig, FaultState


class Outages:
    """Schedules the config's outages and degradations, and deals with what they cut."""

    def __init__(self, env: EngineEnvironment, config: FaultsConfig, faults: FaultState,
                 engines: Engines, network: TransferNetwork, transfers: KVTransfers, *,
                 retry: Callable[[Request], None],
                 fail: Callable[[Request, str], None]) -> None:
        """``retry``: send a request again from the proxy; ``fail``: the cluster's verb."""
        self.env = env
        self.config = config
        self.faults = faults
        self.engines = engines
        self.network = network
        self.transfers = transfers
        self._retry = retry
        self._fail = fail

    def schedule(self) -> None:
        """Arm every outage's and degradation's start and end (when the run starts)."""
        f = self.config
        together = self.engines.failing_together()
        by_name = self.engines.by_name
        for o in f.instance_outages:
            inst = by_name[o.instance]
            insts = together.get(o.instance, [inst])
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
        transfers = self.transfers
        transfers.source_down(pinned)
        cfg = self.config
        for req in served:
            transfers.drop(req, inst)
            if req.status is not Status.IN_FLIGHT:
                continue
            if req.num_output > 0:
                self._fail(req, "instance_down_mid_stream")
            elif cfg.outage_policy == "retry" and req.attempts < cfg.max_retries:
                self.faults.counts["retries"] += 1
                self._retry(req)
            else:
                self._fail(req, "instance_down")


__all__ = ["Outages"]
