"""A request's state while it moves through the cluster: the request, its phase verbs,
the hand-over record and the queues (its facts by column are ``request_facts``)."""

from __future__ import annotations

import enum
import math
from collections import deque

import numpy as np

from pdsim.engine.connector import KVTransferParams

NAN = math.nan


class Phase(enum.Enum):
    """Where a request is on its current instance."""

    WAITING = "waiting"
    WAITING_FOR_REMOTE_KVS = "waiting_for_remote_kvs"
    PREFILL = "prefill"
    DECODE = "decode"
    PINNED = "pinned"  # finished on P, blocks held for D to read
    DONE = "done"


class Status(enum.Enum):
    """Terminal state of a request."""

    IN_FLIGHT = "in_flight"
    FINISHED = "finished"
    FAILED = "failed"
    REJECTED = "rejected"


class HandOver:
    """The facts of one P -> D hand-over attempt of a request, in one small record that
    only the cluster's proxy and KV transfers write, each field one of them
    (``pdsim.cluster``; a test checks the writes): which P prefilled it and when its
    blocks were pinned, which D it went to and when, the prompt tokens D loads from P,
    when the KV load was asked for and when it landed (or why it failed), and the bytes
    moved. A request holds the record of its current attempt (``Request.handover``; None
    before P finishes, and on a colocated instance); an outage retry (``attempt`` + 1)
    starts a new one. The records and the invariant checker read the hand-over's facts
    from here."""

    __slots__ = ("attempt", "d_name", "kv_failed", "kv_landed_s", "kv_nbytes", "kv_start_s",
                 "kv_tokens", "p_name", "pinned_s", "sent_s")

    def __init__(self, attempt: int, p_name: str, pinned_s: float) -> None:
        self.attempt = attempt  # the request's attempt: 0, then + 1 per outage retry
        self.p_name = p_name  # the prefill instance whose blocks D reads
        self.pinned_s = pinned_s  # P computed the prompt; its blocks stay for D
        self.d_name = ""  # the decode instance it was sent to ('' until then)
        self.sent_s = NAN  # when D got it (the proxy's second hop)
        self.kv_tokens = 0  # prompt tokens D loads from P (0: D computes them all)
        self.kv_start_s = NAN  # D allocated blocks and asked for the load
        self.kv_landed_s = NAN  # the KV landed on D
        self.kv_nbytes = 0  # bytes moved, counted when landed (a failed load moved none)
        self.kv_failed = ""  # why the load failed ('' unless it did)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (f"HandOver({self.p_name}->{self.d_name or '?'}, attempt {self.attempt}, "
                f"tokens {self.kv_tokens}, start {self.kv_start_s}, landed "
                f"{self.kv_landed_s}{', failed ' + self.kv_failed if self.kv_failed else ''})")


class Request:
    """One request. Mutable working fields for the instance that holds it, plus facts.

    Time fields are simulated seconds (NaN until reached). ``segments`` lists
    ``[instance_index, first_step, last_step]``: the engine steps of that instance in which
    the request emitted an output chunk, contiguous because every running decode request is
    scheduled in every step (a preemption closes a segment).
    """

    __slots__ = (
        "_accepted",
        "_accepted_row",
        "arrival_s",
        "attempts",
        "d_first_local",
        "d_instance",
        "d_local_prefill_tokens",
        "d_queued_s",
        "fail_reason",
        "final_chunk_tokens",
        "finish_s",
        "first_token_s",
        "handover",
        "hash_ids",
        "id",
        "kv_from_remote",
        "kv_params",
        "num_accepted_tokens",
        "num_computed",
        "num_draft_tokens",
        "num_drafts",
        "num_output",
        "num_preemptions",
        "output_target",
        "p_end_s",
        "p_instance",
        "p_preemptions",
        "p_prompt_tokens",
        "p_queued_s",
        "p_start_s",
        "padded_first_steps",
        "phase",
        "prefix_hit_tokens",
        "prompt_tokens",
        "remote_tokens",
        "segments",
        "seq_tokens",
        "slot",
        "status",
        "tokens_recomputed_on_d",
    )

    def __init__(self, rid: int, arrival_s: float, prompt_tokens: int, output_tokens: int,
                 num_spec: int, hash_ids: tuple[int, ...] | None = None,
                 accepted: np.ndarray | None = None) -> None:
        self.id = rid
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.output_target = output_tokens
        self.hash_ids = hash_ids
        self.status = Status.IN_FLIGHT
        self.fail_reason: str | None = None
        self.num_output = 0
        self.p_prompt_tokens = prompt_tokens
        self.prefix_hit_tokens = 0
        self.attempts = 0
        self.p_instance = ""
        self.d_instance = ""
        self.first_token_s = NAN
        self.finish_s = NAN
        # the current attempt's hand-over record (only the proxy sets it: pdsim.cluster.proxy)
        self.handover: HandOver | None = None
        self.start_attempt()
        self.num_preemptions = 0
        self.p_preemptions = 0
        self.segments: list[list[int]] = []
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.padded_first_steps = 0  # first decode steps padded with placeholder drafts
        # drafts accepted at each position: row ``rid`` of the simulation's table (one 2-D
        # array for every request, not an array each), or a row of its own
        if accepted is None:
            self._accepted = np.zeros((1, num_spec), dtype=np.int64)
            self._accepted_row = 0
        else:
            self._accepted = accepted
            self._accepted_row = rid

    # The hand-over's facts, read from its record (NaN / 0 without one).

    @property
    def transfer_start_s(self) -> float:
        """When D asked for the KV load of this attempt (NaN if it never did)."""
        h = self.handover
        return NAN if h is None else h.kv_start_s

    @property
    def transfer_end_s(self) -> float:
        """When this attempt's KV landed on D (NaN if it has not)."""
        h = self.handover
        return NAN if h is None else h.kv_landed_s

    @property
    def kv_bytes(self) -> int:
        """The bytes this attempt's KV load moved (0 unless it landed)."""
        h = self.handover
        return 0 if h is None else h.kv_nbytes

    @property
    def accepted_per_pos(self) -> np.ndarray:
        """Drafts accepted at each position (a view of its row: ``+=`` adds in place)."""
        return self._accepted[self._accepted_row]  # type: ignore[no-any-return]

    @accepted_per_pos.setter
    def accepted_per_pos(self, value: np.ndarray) -> None:
        self._accepted[self._accepted_row] = value

    def move_accepted(self, table: np.ndarray) -> None:
        """Its drafts-accepted row is now in ``table``, at the same row: the simulation's
        table grew (live intake) and its rows were copied there."""
        self._accepted = table

    def start_attempt(self) -> None:
        """Clear the working state and the per-hop facts: the request (again) starts at
        the proxy, before P (on creation, and on a retry after an outage; the proxy
        then starts a new hand-over record too)."""
        self.kv_params: KVTransferParams | None = None
        self.phase = Phase.WAITING
        self.seq_tokens = self.prompt_tokens  # tokens whose KV the instance must hold
        self.num_computed = 0
        self.slot = -1
        self.remote_tokens = 0
        self.kv_from_remote = False
        self.d_first_local = -1
        self.final_chunk_tokens = 0
        self.p_queued_s = NAN
        self.p_start_s = NAN
        self.p_end_s = NAN
        self.d_queued_s = NAN
        self.tokens_recomputed_on_d = 0
        self.d_local_prefill_tokens = 0

    # Phase changes: the only writers of ``phase`` (the instance's queues decide when).

    def queue(self) -> None:
        """Queued on an instance (new there, or arrived at D with its transfer params)."""
        self.phase = Phase.WAITING
        self.num_computed = 0

    def await_remote_kv(self) -> None:
        """D gave it blocks for its remote KV and asked for the load."""
        self.phase = Phase.WAITING_FOR_REMOTE_KVS

    def kv_landed(self) -> None:
        """D: its remote KV arrived; it waits to recompute the rest of its prompt (at
        least the last prompt token, for the logits)."""
        self.phase = Phase.WAITING
        self.kv_from_remote = True
        self.num_computed = min(self.remote_tokens, self.prompt_tokens - 1)
        self.d_first_local = self.num_computed
        self.tokens_recomputed_on_d = self.prompt_tokens - self.remote_tokens
        self.d_local_prefill_tokens = self.prompt_tokens - self.num_computed

    def requeue_to_recompute(self) -> None:
        """D: its KV load failed; it waits to compute its whole prompt locally."""
        self.phase = Phase.WAITING
        self.recompute_prompt_on_d()

    def start_prefill(self) -> None:
        """Admitted with its first prefill chunk."""
        self.phase = Phase.PREFILL

    def pin(self, now_s: float) -> None:
        """P computed its prompt at ``now_s``: its blocks stay for a D to read."""
        self.phase = Phase.PINNED
        self.p_end_s = now_s

    def enter_decode(self) -> None:
        """It decodes from its next step (it has a decode row)."""
        self.phase = Phase.DECODE

    def preempted(self, on_prefill: bool) -> None:
        """Preempted by recompute: back to waiting with nothing computed. On D or a
        colocated instance it recomputes its prompt and generated tokens locally (fresh,
        exact drafter KV; P's blocks are gone by now, so it never asks for remote KV
        again)."""
        self.num_computed = 0
        self.phase = Phase.WAITING
        if on_prefill:
            self.p_preemptions += 1
        else:
            self.seq_tokens = self.prompt_tokens + self.num_output
            self.kv_from_remote = False
            self.kv_params = None

    def end(self) -> None:
        """It left the engine for good (finished, failed or rejected)."""
        self.phase = Phase.DONE

    def recompute_prompt_on_d(self) -> None:
        """D computes the whole prompt itself: no remote KV (none to load, the load
        failed, or D gave the landed blocks back)."""
        self.num_computed = 0
        self.remote_tokens = 0
        self.kv_from_remote = False
        self.kv_params = None
        self.tokens_recomputed_on_d = self.prompt_tokens
        self.d_local_prefill_tokens = self.prompt_tokens

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (f"Request({self.id}, {self.phase.value}, computed={self.num_computed}/"
                f"{self.seq_tokens}, out={self.num_output}/{self.output_target})")


def tokens_left(req: Request) -> int:
    """Prompt tokens ``req`` still has to compute on its current instance."""
    return req.seq_tokens - req.num_computed


class _TokensLeftTally:
    """Mixin for a container of requests that keeps the sum of their tokens still to
    compute (``tokens_left``), so a load-reading router costs O(1) however long the
    container. A request's count is taken as it enters and given back as it leaves;
    whoever changes a contained request's counts reports the change (``adjust``). The
    containers' hot methods name their base class (``deque.append(self, req)``) rather
    than ``super()``, which costs a lookup per call on this Python, and compute
    ``tokens_left`` inline."""

    tokens_left: int

    def __init__(self) -> None:
        super().__init__()
        self.tokens_left = 0

    def clear(self) -> None:
        super().clear()  # type: ignore[misc]
        self.tokens_left = 0

    def adjust(self, delta: int) -> None:
        """A contained request's tokens left changed by ``delta``."""
        self.tokens_left += delta


class WaitingQueue(_TokensLeftTally, deque[Request]):
    """An instance's waiting queue, with its requests' tokens still to compute."""

    def append(self, req: Request) -> None:
        deque.append(self, req)
        self.tokens_left += req.seq_tokens - req.num_computed

    def appendleft(self, req: Request) -> None:
        deque.appendleft(self, req)
        self.tokens_left += req.seq_tokens - req.num_computed

    def insert(self, i: int, req: Request) -> None:
        deque.insert(self, i, req)
        self.tokens_left += req.seq_tokens - req.num_computed

    def popleft(self) -> Request:
        req = deque.popleft(self)
        self.tokens_left -= req.seq_tokens - req.num_computed
        return req


class PrefillingList(_TokensLeftTally, list[Request]):
    """The requests in the middle of their prefill, with the same running sum."""

    def append(self, req: Request) -> None:
        list.append(self, req)
        self.tokens_left += req.seq_tokens - req.num_computed

    def remove(self, req: Request) -> None:
        list.remove(self, req)
        self.tokens_left -= req.seq_tokens - req.num_computed
