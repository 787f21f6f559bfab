"""The requests of one run: their rows, the objects made from them, the facts they leave.

A request is one row of the specs' arrays (arrival, prompt and output tokens, prefix
hashes) and of the acceptance table (drafts accepted at each position). Its ``Request``
object is made from that row when it arrives (or all at once with ``keep_requests``),
is live until it has ended and its decode row is settled, and is then recorded into the
facts' columns (``RequestFacts``) and let go, so a run's memory grows with its facts,
not its objects. Live intake (``add``) grows every array by doubling; the requests made
so far follow the acceptance table when it moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pdsim.engine.request import Request
from pdsim.engine.request_facts import RequestFacts, with_room
from pdsim.workload import RequestSpecs


class RequestTable:
    """A run's requests by id: made from their rows, live, ended, recorded."""

    def __init__(self, specs: RequestSpecs, num_speculative_tokens: int,
                 keep_requests: bool, route_to: dict[int, str],
                 client_handover: set[int]) -> None:
        """``route_to``, ``client_handover``: the proxy's per-request notes of
        ``pdsim serve``, dropped with each request as it is recorded."""
        n_spec = num_speculative_tokens
        # drafts accepted at each position, a row per request (the records' column), with
        # room for the requests ``add`` takes (``accepted_per_pos``: the rows used)
        self.accepted = np.zeros((len(specs), n_spec), dtype=np.int64)
        # token counts repeat: one int object per distinct count, not one per request
        self._ints: dict[int, int] = {}
        self._n_spec = n_spec
        # requests are made from the specs' arrays (no Python list of a number a request);
        # ``add`` grows them (their first ``num_requests`` rows are the requests)
        self.arrival_s = specs.arrival_s
        self.prompts = specs.prompt_tokens
        self.outputs = specs.output_tokens
        self.hash_ids: Sequence[tuple[int, ...] | None] | None = specs.hash_ids
        self.num_requests = len(self.arrival_s)
        # the requests' facts by column, written as each request ends and settles
        self.facts = RequestFacts(specs.arrival_s, specs.prompt_tokens, specs.output_tokens)
        self.live: dict[int, Request] = {}  # made and not yet recorded, by id
        self.ended: list[Request] = []  # ended, to be recorded once settled
        self.keep_requests = keep_requests
        # built with its requests (else it takes them live: ``add``)
        self.pregenerated = self.num_requests > 0
        self._route_to = route_to
        self._client_handover = client_handover
        self.kept: list[Request] | None = (
            [self.make(i) for i in range(self.num_requests)] if keep_requests else None)

    @property
    def accepted_per_pos(self) -> np.ndarray:
        """Drafts accepted at each position, a row per request (the records' column)."""
        return self.accepted[:self.num_requests]

    def make(self, i: int) -> Request:
        """Request ``i``'s object, made from its rows."""
        ints = self._ints
        prompt, output = self.prompts.item(i), self.outputs.item(i)
        hashes = self.hash_ids
        return Request(i, self.arrival_s.item(i), ints.setdefault(prompt, prompt),
                       ints.setdefault(output, output), self._n_spec,
                       hashes[i] if hashes is not None else None, self.accepted)

    def arrive(self, i: int) -> Request:
        """Request ``i`` as it arrives (made now unless the requests are kept)."""
        req = self.kept[i] if self.kept is not None else self.make(i)
        self.live[i] = req
        return req

    def record_ended(self, keep_unsettled: bool = False) -> None:
        """Write the ended requests' facts into the columns and let them go. A request
        that finished inside a decode run settles when the run commits (until then it
        keeps its row): with ``keep_unsettled`` those wait for a later call."""
        facts, live = self.facts, self.live
        route_to, client_handover = self._route_to, self._client_handover
        # pdsim serve's per-request routing notes go with the request
        serving = bool(route_to or client_handover)
        waiting: list[Request] = []
        for req in self.ended:
            if req.slot >= 0 and keep_unsettled:
                waiting.append(req)
                continue
            facts.record(req)
            del live[req.id]
            if serving:
                route_to.pop(req.id, None)
                client_handover.discard(req.id)
        self.ended = waiting

    def add(self, arrival_s: float, prompt_tokens: int, output_tokens: int,
            hash_ids: tuple[int, ...] | None) -> Request:
        """One more request (the next id): its row in the specs' arrays, the facts'
        columns and the acceptance table (made requests follow the table when it moves),
        and its object, made now and live."""
        rid = self.num_requests
        if rid == len(self.arrival_s):
            rows = max(64, 2 * rid)
            self.arrival_s = with_room(self.arrival_s, rows, math.nan)
            self.prompts = with_room(self.prompts, rows)
            self.outputs = with_room(self.outputs, rows)
            self.accepted = with_room(self.accepted, rows)
            for req in self.live.values():
                req.move_accepted(self.accepted)
            for req in self.kept or ():
                req.move_accepted(self.accepted)
        self.arrival_s[rid] = arrival_s
        self.prompts[rid] = prompt_tokens
        self.outputs[rid] = output_tokens
        if hash_ids is not None or self.hash_ids is not None:
            hashes = self.hash_ids
            if not isinstance(hashes, list):
                hashes = self.hash_ids = list(hashes or [None] * rid)
            hashes.append(hash_ids)
        self.facts.add(arrival_s, prompt_tokens, output_tokens)
        self.num_requests = rid + 1
        req = self.make(rid)
        self.live[rid] = req
        if self.kept is not None:
            self.kept.append(req)
        return req

    def retarget(self, req: Request, output_tokens: int) -> None:
        """``req`` now generates ``output_tokens``: the request, its row and its facts'
        row all say so."""
        req.output_target = output_tokens
        self.outputs[req.id] = output_tokens
        self.facts.retarget(req.id, output_tokens)


__all__ = ["RequestTable"]
