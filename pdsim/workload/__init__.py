"""Workloads: arrival processes, length distributions and trace replay."""

from pdsim.workload.base import RequestSpecs
from pdsim.workload.generate import generate_requests

__all__ = ["RequestSpecs", "generate_requests"]
