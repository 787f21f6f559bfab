"""Workloads: arrival processes, length distributions and trace replay."""

from pdsim.workload.arrivals import arrival_times
from pdsim.workload.base import RequestSpecs
from pdsim.workload.generate import generate_requests
from pdsim.workload.lengths import sample_lengths
from pdsim.workload.traces import read_azure, read_mooncake, replay_trace, resolve_trace_path

__all__ = [
    "RequestSpecs",
    "arrival_times",
    "generate_requests",
    "read_azure",
    "read_mooncake",
    "replay_trace",
    "resolve_trace_path",
    "sample_lengths",
]
