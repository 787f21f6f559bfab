"""What an instance hands over when a simulation is finalized: read-only copies."""

from __future__ import annotations

from dataclasses import dataclass

from pdsim.engine.decode_rows import RowSnapshot
from pdsim.facts import InstanceFacts


@dataclass(frozen=True)
class InstanceSnapshot:
    """An instance's facts at the end of a run (or where it was interrupted): its step
    facts, its prefix-cache counters and, per request still decoding, the counters its
    decode row has not yet settled into it (``live_rows``)."""

    index: int
    facts: InstanceFacts
    prefix_hit_tokens: int
    prefix_query_tokens: int
    live_rows: dict[int, RowSnapshot]
