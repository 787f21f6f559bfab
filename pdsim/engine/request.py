"""A request's state while it moves through the cluster, and the facts it leaves behind."""

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
        "hash_ids",
        "id",
        "kv_bytes",
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
        "transfer_end_s",
        "transfer_start_s",
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

    @property
    def accepted_per_pos(self) -> np.ndarray:
        """Drafts accepted at each position (a view of its row: ``+=`` adds in place)."""
        return self._accepted[self._accepted_row]  # type: ignore[no-any-return]

    @accepted_per_pos.setter
    def accepted_per_pos(self, value: np.ndarray) -> None:
        self._accepted[self._accepted_row] = value

    def start_attempt(self) -> None:
        """Clear the working state and the per-hop facts: the request (again) starts at
        the proxy, before P (on creation, and on a retry after an outage)."""
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
        self.transfer_start_s = NAN
        self.transfer_end_s = NAN
        self.d_queued_s = NAN
        self.kv_bytes = 0
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
    than ``super()``, which costs a lookup per call on this Python."""

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
        self.tokens_left += tokens_left(req)

    def appendleft(self, req: Request) -> None:
        deque.appendleft(self, req)
        self.tokens_left += tokens_left(req)

    def insert(self, i: int, req: Request) -> None:
        deque.insert(self, i, req)
        self.tokens_left += tokens_left(req)

    def popleft(self) -> Request:
        req = deque.popleft(self)
        self.tokens_left -= tokens_left(req)
        return req


class PrefillingList(_TokensLeftTally, list[Request]):
    """The requests in the middle of their prefill, with the same running sum."""

    def append(self, req: Request) -> None:
        list.append(self, req)
        self.tokens_left += tokens_left(req)

    def remove(self, req: Request) -> None:
        list.remove(self, req)
        self.tokens_left -= tokens_left(req)
