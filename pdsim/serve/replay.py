"""The request log of a ``pdsim serve`` session and the config that replays it offline.

The log is a Mooncake JSONL trace (``timestamp`` in whole milliseconds of simulated
time, ``input_length``, ``output_length``), one row per request the cluster admitted, in
arrival order. Arrivals are stamped on the millisecond grid (``live.ARRIVAL_GRID_PER_S``)
and the first one at 0, so the trace reader gives back exactly the same arrival times;
with the serving config (decode runs off, as served) ``pdsim run`` then gives the same
records. Requests whose P -> D hand-over a client made (``--pd-endpoints``) are in the log,
but their second hop came when the client sent it, to the instance it chose: a replay
hands them over at once, through the router, so their records differ.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pdsim.config import SimConfig
from pdsim.serve.live import ARRIVAL_GRID_PER_S
from pdsim.workload.config import MooncakeTrace, WorkloadConfig


def log_jsonl(log: Sequence[tuple[float, int, int]]) -> str:
    """The request log as Mooncake JSONL."""
    lines = []
    for arrival_s, prompt, output in log:
        ms = round(arrival_s * ARRIVAL_GRID_PER_S)
        lines.append(json.dumps({"timestamp": ms, "input_length": prompt,
                                 "output_length": output}))
    return "".join(line + "\n" for line in lines)


def replay_config(served: SimConfig, log_path: str) -> SimConfig:
    """``served`` (the config as the server ran it) with its workload replaced by the
    request log at ``log_path`` (relative to where ``pdsim run`` runs, as every trace
    path is)."""
    workload = WorkloadConfig(trace=MooncakeTrace(path=log_path))
    return served.model_copy(update={"workload": workload})
