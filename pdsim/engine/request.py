"""A request's state while it moves through the cluster, and the facts it leaves behind."""

from __future__ import annotations

import enum
import math
import operator
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

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


def request_columns(reqs: Sequence[Request], pool_of: Mapping[str, str],
                    accepted_per_pos: np.ndarray, done: bool) -> dict[str, Any]:
    """The facts ``reqs`` hold (requests numbered 0..n-1 in order), one column each (the
    records' raw columns; ``_finished`` says which finished), plus ``segments`` by id.
    ``pool_of`` names each instance's pool. ``done``: the run is over, so the requests'
    segment lists and the acceptance table are handed over rather than copied."""
    n = len(reqs)

    def col(name: str, dtype: Any = np.float64) -> np.ndarray:
        return np.fromiter(map(operator.attrgetter(name), reqs), dtype=dtype, count=n)

    return {
        "request_id": col("id", np.int64),
        "status": [r.status.value for r in reqs],
        "fail_reason": [r.fail_reason for r in reqs],
        "arrival_s": col("arrival_s"),
        "prompt_tokens": col("prompt_tokens", np.int64),
        "output_tokens": col("num_output", np.int64),
        "target_output_tokens": col("output_target", np.int64),
        "prefill_instance": [r.p_instance for r in reqs],
        "decode_instance": [r.d_instance for r in reqs],
        "prefill_pool": [pool_of.get(r.p_instance, "") for r in reqs],
        "decode_pool": [pool_of.get(r.d_instance, "") for r in reqs],
        "p_queued_s": col("p_queued_s"), "p_start_s": col("p_start_s"),
        "p_end_s": col("p_end_s"),
        "transfer_start_s": col("transfer_start_s"), "transfer_end_s": col("transfer_end_s"),
        "d_queued_s": col("d_queued_s"), "first_token_s": col("first_token_s"),
        "finish_s": col("finish_s"),
        "p_prompt_tokens": col("p_prompt_tokens", np.int64),
        "kv_bytes_transferred": col("kv_bytes", np.int64),
        "tokens_recomputed_on_d": col("tokens_recomputed_on_d", np.int64),
        "d_local_prefill_tokens": col("d_local_prefill_tokens", np.int64),
        "num_preemptions": col("num_preemptions", np.int64),
        "num_drafts": col("num_drafts", np.int64),
        "num_draft_tokens": col("num_draft_tokens", np.int64),
        "num_accepted_tokens": col("num_accepted_tokens", np.int64),
        # the simulation's table, a row per request (a copy while the run goes on)
        "accepted_per_pos": accepted_per_pos if done else accepted_per_pos.copy(),
        "prefix_hit_tokens": col("prefix_hit_tokens", np.int64),
        "padded_first_steps": col("padded_first_steps", np.int64),
        "_finished": np.fromiter((r.status is Status.FINISHED for r in reqs), dtype=bool,
                                 count=n),
    }


def request_segments(reqs: Sequence[Request], done: bool) -> dict[int, list[list[int]]]:
    """Each request's output segments by id (its own lists when ``done``, else copies)."""
    if done:
        return {r.id: r.segments for r in reqs}
    return {r.id: list(r.segments) for r in reqs}


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
