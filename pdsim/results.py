"""Facts recorded by a run: the records, the instances' facts and the ``Results``.

A run leaves one flat record per request (timestamps, token counts, draft counters) and,
per instance, the end time of every engine step (``pdsim.facts``). The summary is derived
from them by ``pdsim.metrics.summarize``, which states the metric definitions.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from pdsim.facts import InstanceFacts, SegmentTable
from pdsim.itl import itl_stats
from pdsim.metrics import chunk_times, summarize
from pdsim.summary import (
    RunSummary,
)

if TYPE_CHECKING:
    import pandas as pd

    from pdsim.config import SimConfig
    from pdsim.engine.decode_rows import RowSnapshot
    from pdsim.engine.snapshot import InstanceSnapshot

NAN = math.nan

RECORD_FIELDS = (
    "request_id", "status", "fail_reason", "arrival_s", "prompt_tokens", "output_tokens",
    "target_output_tokens", "prefill_instance", "decode_instance", "prefill_pool",
    "decode_pool", "p_queued_s", "p_start_s",
    "p_end_s", "transfer_start_s", "transfer_end_s", "d_queued_s", "first_token_s",
    "finish_s", "ttft_s", "tpot_s", "e2e_s", "num_chunks", "p_prompt_tokens",
    "kv_bytes_transferred", "kv_transfer_s", "tokens_recomputed_on_d",
    "d_local_prefill_tokens", "num_preemptions", "num_drafts", "num_draft_tokens",
    "num_accepted_tokens", "accepted_per_pos", "prefix_hit_tokens", "padded_first_steps",
)


class RecordTable(Sequence[dict[str, Any]]):
    """Per-request records stored by column; reads like a list of flat dicts.

    Indexing or iterating builds each row's dict on demand, so 100k requests cost their
    columns' arrays, not 100k dicts. ``columns`` gives the arrays themselves.
    """

    __slots__ = ("_n", "columns")

    def __init__(self, columns: dict[str, Any]) -> None:
        self.columns = columns
        self._n = len(columns["request_id"]) if columns else 0

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        row: dict[str, Any] = {}
        for k, c in self.columns.items():
            v = c[i]
            row[k] = v.tolist() if hasattr(v, "tolist") else v
        return row

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(self._n):
            yield self[i]

    def column(self, key: str) -> Any:
        return self.columns[key]


@dataclass
class Results:
    """Everything a run produced: config, per-request records, instance facts, summary."""

    config: SimConfig
    records: Sequence[dict[str, Any]]
    instances: list[InstanceFacts]
    summary: RunSummary
    # (time s, bytes/s in use) samples of each P->D link that carried a transfer, or, with
    # connector.topology, of each NIC direction / NVLink port a flow crossed
    links: Mapping[str, Sequence[tuple[float, float]]] = field(default_factory=dict)
    # every request's output segments by id (``SegmentTable``: reads as a dict of lists)
    segments: Mapping[int, list[list[int]]] = field(default_factory=dict)
    partial: bool = False

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per request (a copy)."""
        return [dict(r) for r in self.records]

    @property
    def num_requests(self) -> int:
        return len(self.records)

    def to_pandas(self) -> pd.DataFrame:
        """The records as a DataFrame (needs pandas: ``pip install 'pdsim[pandas]'``)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("to_pandas() needs pandas: pip install 'pdsim[pandas]'") \
                from exc
        if isinstance(self.records, RecordTable):
            cols = {k: (list(map(list, v)) if k == "accepted_per_pos" else v)
                    for k, v in self.records.columns.items()}
            return pd.DataFrame(cols, columns=list(RECORD_FIELDS))
        return pd.DataFrame.from_records(list(self.records), columns=list(RECORD_FIELDS))

    def request_itls_s(self, request_id: int) -> np.ndarray:
        """Gaps between one request's output chunks, in seconds."""
        times = chunk_times(self.instances, self.segments.get(request_id, []))
        return np.diff(times)

    def __repr__(self) -> str:
        s = self.summary
        return (f"Results({s.completed}/{s.num_requests} finished, "
                f"output {s.output_throughput_tok_s:.1f} tok/s, "
                f"TTFT p50 {s.ttft.p50_s * 1e3:.1f} ms, "
                f"TPOT p50 {s.tpot.p50_s * 1e3:.2f} ms, "
                f"acceptance length {s.spec_decode.acceptance_length:.3f})")


def summary_only(config: SimConfig) -> SimConfig:
    """``config`` for a run whose step log nothing will read (only its summary and
    records): per-step aggregates kept, unless the config chose (``engine.record_steps``
    other than ``auto``)."""
    if config.engine.record_steps != "auto":
        return config
    return config.model_copy(update={
        "engine": config.engine.model_copy(update={"record_steps": "aggregates"})})


@dataclass(frozen=True)
class RunFacts:
    """What a simulation hands over when it is finalized (``Simulation.finalize``), a
    plain value the results are built from alone: the requests' facts by column
    (``pdsim.engine.request_facts.RequestFacts.columns``), their output segments (``(segments,
    4)`` int64 rows: request id, instance, first step, last step), the instances'
    snapshots, link samples, fault counts and the acceptance table. ``done``: every
    request had ended and the run handed its own lists and table over (no copies)."""

    config: SimConfig
    columns: dict[str, Any]
    segments: np.ndarray
    snapshots: list[InstanceSnapshot]
    links: Mapping[str, Sequence[tuple[float, float]]]
    faults: dict[str, int]
    kv_lease_expired: int
    done: bool


def first_response_s(first_token_s: np.ndarray, finish_s: np.ndarray,
                     output_steps: np.ndarray, delay_steps: int) -> np.ndarray:
    """When each request's first streamed response reaches the client: ``delay_steps`` of
    the request's own engine steps after the one that emitted its first token
    (``SimConfig.first_response_steps``), at the request's mean time between the steps that
    emitted its output (``output_steps``: the steps its output segments span, its
    ``num_chunks``; one a token without speculation), and never after its last step; the
    engine's first token itself when the delay is 0 or the request did not finish."""
    if not delay_steps:
        return first_token_s
    with np.errstate(divide="ignore", invalid="ignore"):
        per_step = (finish_s - first_token_s) / (output_steps - 1)
        later = np.minimum(delay_steps, output_steps - 1) * per_step
    return np.where((output_steps > 1) & np.isfinite(later), first_token_s + later,
                    first_token_s)


def results_from(facts: RunFacts) -> Results:
    """The ``Results`` of a finished (or interrupted) simulation, from its facts."""
    snapshots = facts.snapshots
    inst_facts = [snap.facts for snap in snapshots]
    columns = facts.columns
    # requests still decoding when the run stopped (an interrupted run): their counters
    # and their open output segment are in their instance's decode rows
    live: dict[int, tuple[InstanceSnapshot, RowSnapshot]] = {}
    for snap in snapshots:
        for rid, row in snap.live_rows.items():
            live[rid] = (snap, row)
    flat: np.ndarray = facts.segments
    open_segments = [(rid, snap.index, row.segment_first_step, len(snap.facts.step_end_s) - 1)
                     for rid, (snap, row) in live.items()
                     if len(snap.facts.step_end_s) - 1 >= row.segment_first_step]
    if open_segments:
        flat = np.concatenate([flat, np.array(open_segments, dtype=np.int64)])
    segments = SegmentTable.from_flat(flat, len(columns["request_id"]))
    del flat
    # the ITL statistics first: their temporary arrays (one entry per step) are gone
    # before the records' derived columns are built
    itl = itl_stats(inst_facts, segments)
    ids = columns["request_id"]
    finished = columns.pop("_finished")
    arrival = columns["arrival_s"]
    first = columns["first_token_s"]
    finish = columns["finish_s"]
    out_tok = columns["output_tokens"]
    e2e = np.where(finished, finish - arrival, NAN)
    chunks = segments.chunks_per_request()  # the steps that emitted each request's output
    ttft = first_response_s(first, finish, chunks, facts.config.first_response_steps
                            ) - arrival
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(finished & (out_tok > 1), (e2e - ttft) / (out_tok - 1), NAN)
    t_start = columns["transfer_start_s"]
    t_end = columns["transfer_end_s"]
    nspec = facts.config.speculative.num_speculative_tokens
    columns["ttft_s"] = ttft
    columns["tpot_s"] = tpot
    columns["e2e_s"] = e2e
    columns["num_chunks"] = chunks
    columns["kv_transfer_s"] = t_end - t_start
    columns = {k: columns[k] for k in RECORD_FIELDS}
    for rid, (_, row) in live.items():
        i = rid  # requests are numbered in the order they are stored
        assert ids[i] == rid
        columns["output_tokens"][i] = row.output_tokens
        columns["num_drafts"][i] += row.drafts
        columns["num_draft_tokens"][i] += row.draft_tokens
        columns["num_accepted_tokens"][i] += row.accepted_tokens
        if nspec:
            columns["accepted_per_pos"][i] += row.accepted_per_pos
    records = RecordTable(columns)
    queried = sum(snap.prefix_query_tokens for snap in snapshots)
    summary = replace(
        summarize(records, inst_facts, segments, facts.config, itl),
        kv_lease_expired=facts.kv_lease_expired, faults=dict(facts.faults),
        prefix_cache_hit_rate=(sum(snap.prefix_hit_tokens for snap in snapshots) / queried
                               if queried else math.nan))
    return Results(facts.config, records, inst_facts, summary, facts.links, segments)
