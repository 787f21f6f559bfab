"""The facts a simulation's requests leave behind, by column: a request's row is written
once it has ended (``RequestFacts.record``), so a run keeps no per-request object after."""

from __future__ import annotations

import math
import operator
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pdsim.engine.request import Request, Status

NAN = math.nan


# the facts a request leaves behind, as (column, attribute, dtype): numbers in arrays
_NUMERIC_FACTS = (
    ("arrival_s", "arrival_s", np.float64),
    ("output_tokens", "num_output", np.int64),
    ("p_queued_s", "p_queued_s", np.float64),
    ("p_start_s", "p_start_s", np.float64),
    ("p_end_s", "p_end_s", np.float64),
    ("transfer_start_s", "transfer_start_s", np.float64),
    ("transfer_end_s", "transfer_end_s", np.float64),
    ("d_queued_s", "d_queued_s", np.float64),
    ("first_token_s", "first_token_s", np.float64),
    ("finish_s", "finish_s", np.float64),
    ("p_prompt_tokens", "p_prompt_tokens", np.int64),
    ("kv_bytes_transferred", "kv_bytes", np.int64),
    ("tokens_recomputed_on_d", "tokens_recomputed_on_d", np.int64),
    ("d_local_prefill_tokens", "d_local_prefill_tokens", np.int64),
    ("num_preemptions", "num_preemptions", np.int64),
    ("num_drafts", "num_drafts", np.int64),
    ("num_draft_tokens", "num_draft_tokens", np.int64),
    ("num_accepted_tokens", "num_accepted_tokens", np.int64),
    ("prefix_hit_tokens", "prefix_hit_tokens", np.int64),
    ("padded_first_steps", "padded_first_steps", np.int64),
)
# ... and the ones held as Python objects (strings, None)
_OBJECT_FACTS = (
    ("fail_reason", "fail_reason"),
    ("prefill_instance", "p_instance"),
    ("decode_instance", "d_instance"),
)


FLUSH_ROWS = 1024  # recorded rows moved into the columns together


def with_room(a: np.ndarray, rows: int, fill: float = 0) -> np.ndarray:
    """``a`` copied into a new array of ``rows`` rows (at least as many as it has), the
    rows after its own set to ``fill``: storage that grows by reallocation (live intake)."""
    out = np.full((rows, *a.shape[1:]), fill, dtype=a.dtype)
    out[:len(a)] = a
    return out


class RequestFacts:
    """The facts of a simulation's requests by column, a row per request id: a request's
    row is written once it has ended and its counters are settled (``record``), so the
    run needs no per-request object after that. Rows not yet written hold what a request
    has before it arrives: its arrival time and token counts, nothing else."""

    def __init__(self, arrival_s: np.ndarray, prompt_tokens: np.ndarray,
                 output_tokens: np.ndarray) -> None:
        n = len(arrival_s)
        self.num_requests = n
        cols: dict[str, np.ndarray] = {}
        for name, _, dtype in _NUMERIC_FACTS:
            cols[name] = (np.full(n, NAN) if dtype is np.float64
                          else np.zeros(n, dtype=np.int64))
        cols["arrival_s"][:] = arrival_s
        cols["p_prompt_tokens"][:] = prompt_tokens
        self.numeric = cols
        self.prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
        self.output_target = np.asarray(output_tokens, dtype=np.int64)
        self.objects: dict[str, list[Any]] = {
            "fail_reason": [None] * n, "prefill_instance": [""] * n,
            "decode_instance": [""] * n}
        self.status: list[str] = [Status.IN_FLIGHT.value] * n
        self.finished = np.zeros(n, dtype=bool)
        # output segments (request id, instance, first step, last step), flat
        self.segments = array("q")
        # the segments in request-id order once handed over (``columns`` with ``done``)
        self._handed_segments: np.ndarray | None = None
        # rows recorded since the last flush: ids, numeric facts, (status, objects)
        self._ids: list[int] = []
        self._numbers: list[tuple[Any, ...]] = []
        self._others: list[tuple[Any, ...]] = []
        self._numbers_of = operator.attrgetter(*(attr for _, attr, _ in _NUMERIC_FACTS))
        self._others_of = operator.attrgetter("status", *(attr for _, attr in _OBJECT_FACTS))

    def add(self, arrival_s: float, prompt_tokens: int, output_tokens: int) -> None:
        """A row for one more request, after the others (live intake), holding what a
        request has before it arrives, as every row does; the arrays keep room for more
        (their capacity doubles when full, so adding ``n`` rows costs O(n) in all)."""
        rid = self.num_requests
        if rid == len(self.finished):
            rows = max(64, 2 * rid)
            self.numeric = {name: with_room(col, rows, NAN if col.dtype == np.float64 else 0)
                            for name, col in self.numeric.items()}
            self.prompt_tokens = with_room(self.prompt_tokens, rows)
            self.output_target = with_room(self.output_target, rows)
            self.finished = with_room(self.finished, rows, False)
        self.numeric["arrival_s"][rid] = arrival_s
        self.numeric["p_prompt_tokens"][rid] = prompt_tokens
        self.prompt_tokens[rid] = prompt_tokens
        self.output_target[rid] = output_tokens
        objects = self.objects
        objects["fail_reason"].append(None)
        objects["prefill_instance"].append("")
        objects["decode_instance"].append("")
        self.status.append(Status.IN_FLIGHT.value)
        self.num_requests = rid + 1

    def retarget(self, rid: int, output_tokens: int) -> None:
        """Request ``rid`` (not yet recorded) now generates ``output_tokens``."""
        self.output_target[rid] = output_tokens

    def record(self, req: Request) -> None:
        """Write ``req``'s row (it has ended and its decode row, if any, is settled): its
        facts are read now and go into the columns a block of rows at a time."""
        rid = req.id
        self._ids.append(rid)
        self._numbers.append(self._numbers_of(req))
        self._others.append(self._others_of(req))
        segs = self.segments
        for inst, first, last in req.segments:
            segs.extend((rid, inst, first, last))
        if len(self._ids) >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        """Move the recorded rows into the columns (integers pass exactly through the
        float64 block: every count is far below 2**53)."""
        ids_list = self._ids
        if not ids_list:
            return
        ids = np.array(ids_list, dtype=np.int64)
        block = np.array(self._numbers, dtype=np.float64)
        numeric = self.numeric
        for j, (name, _, _) in enumerate(_NUMERIC_FACTS):
            numeric[name][ids] = block[:, j]
        status, finished = self.status, self.finished
        objects = [self.objects[name] for name, _ in _OBJECT_FACTS]
        done = Status.FINISHED
        for rid, (st, *values) in zip(ids_list, self._others, strict=True):
            status[rid] = st.value
            finished[rid] = st is done
            for col, value in zip(objects, values, strict=True):
                col[rid] = value
        self._ids, self._numbers, self._others = [], [], []

    def _segments_by_id(self, live: Sequence[Request], done: bool) -> np.ndarray:
        """The recorded segments and the ``live`` requests', as ``(segments, 4)`` rows in
        request-id order (a stable sort: each request's stay in the order it emitted
        them). ``done``: handed over, and kept for a later call in place of the flat
        store (nothing is recorded after it)."""
        if done and self._handed_segments is not None and not len(self.segments):
            return self._handed_segments
        flat = self.segments
        extra = [(req.id, *seg) for req in live for seg in req.segments]
        rows = np.frombuffer(flat, dtype=np.int64).reshape(-1, 4) if len(flat) else \
            np.empty((0, 4), dtype=np.int64)
        if extra:
            rows = np.concatenate([rows, np.array(extra, dtype=np.int64).reshape(-1, 4)])
        rid = rows[:, 0]
        if len(rid) > 1 and not bool(np.all(rid[1:] >= rid[:-1])):
            rows = rows[np.argsort(rid, kind="stable")]
        elif rows.base is not None and not done:
            rows = rows.copy()  # not a view of the store the run goes on writing
        if done:
            self.segments = array("q")
            self._handed_segments = rows
        return rows

    def columns(self, live: Sequence[Request], pool_of: Mapping[str, str],
                accepted_per_pos: np.ndarray, done: bool
                ) -> tuple[dict[str, Any], np.ndarray]:
        """The records' raw columns (``_finished`` says which finished) and every
        request's output segments as ``(segments, 4)`` int64 rows ``(request id,
        instance, first step, last step)`` in request-id order (each request's in the
        order it emitted them), with the facts of the ``live``
        requests (not yet recorded: still in flight) written over their rows. ``done``:
        the run is over and nothing is live, so the columns, the segments and the
        acceptance table are handed over rather than copied."""
        self._flush()
        n = self.num_requests  # the arrays may have room for more rows (``add``)
        numeric = {k: v[:n] if done else v[:n].copy() for k, v in self.numeric.items()}
        objects = self.objects if done else {k: list(v) for k, v in self.objects.items()}
        status = self.status if done else list(self.status)
        finished = self.finished[:n] if done else self.finished[:n].copy()
        segments = self._segments_by_id(live, done)
        for req in live:
            rid = req.id
            for name, attr, _ in _NUMERIC_FACTS:
                numeric[name][rid] = getattr(req, attr)
            for name, attr in _OBJECT_FACTS:
                objects[name][rid] = getattr(req, attr)
            status[rid] = req.status.value
            finished[rid] = req.status is Status.FINISHED
        cols: dict[str, Any] = {
            "request_id": np.arange(n, dtype=np.int64),
            "status": status,
            "prompt_tokens": self.prompt_tokens[:n].copy(),
            "target_output_tokens": self.output_target[:n].copy(),
            "prefill_pool": [pool_of.get(name, "") for name in objects["prefill_instance"]],
            "decode_pool": [pool_of.get(name, "") for name in objects["decode_instance"]],
            # the simulation's table, a row per request (a copy while the run goes on)
            "accepted_per_pos": accepted_per_pos if done else accepted_per_pos.copy(),
            "_finished": finished,
        }
        cols.update(numeric)
        cols.update(objects)
        return cols, segments
