"""The engine's own switches (config layer: imports nothing of the engine)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from pdsim._model import StrictModel


class EngineConfig(StrictModel):
    """How the engine computes, not what it models: every switch leaves results the same.

    ``decode_runs``: ``auto`` follows stretches of pure-decode steps as vectorized decode
    runs wherever they may be taken; ``off`` takes every decode step as its own event
    (slower; the reference the runs are tested against).
    ``record_steps``: which per-step facts a run keeps (the summary is the same either
    way).
    ``decode_run_join_room``: columns a decode run first allocates for rows that join it
    (doubled when short): a memory/speed trade, never a change in results.
    """

    decode_runs: Literal["auto", "off"] = "auto"
    """auto: follow stretches of pure-decode steps as vectorized runs; off: one event per step
    (same results, slower)."""
    record_steps: Literal["auto", "full", "aggregates"] = "auto"
    """Which per-step facts a run keeps: full (every column: time series, timelines), or
    aggregates (what the summary needs: end and start times, KV blocks in use, running;
    less memory); auto is full, except where the CLI knows no per-step output is asked for
    (``pdsim run`` without ``--out``, summary-only sweep points, ``pdsim search``)."""
    decode_run_join_room: Annotated[int, Field(ge=1)] = 32
    """Columns a decode run first allocates for rows that join it (doubled when short): a
    memory/speed trade, never a change in results."""
