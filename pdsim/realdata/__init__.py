"""Real-data I/O: acceptance from vLLM's Prometheus metrics, ``vllm bench serve`` results;
validation of pdsim against such results and calibration to them.

The two entry points live in their modules (``from pdsim.realdata.validate import
validate``, ``from pdsim.realdata.calibrate import calibrate``); exporting them here would
shadow the module names.
"""

from pdsim.realdata.bench_metrics import summary_metrics
from pdsim.realdata.bench_replay import bench_result_to_requests
from pdsim.realdata.bench_result import BenchResult, bench_result_from_dict, read_bench_result
from pdsim.realdata.bench_synthesis import make_bench_result, run_bench_result
from pdsim.realdata.calibrate import CalibrationReport, ParameterFit
from pdsim.realdata.prometheus import (
    AcceptanceStats,
    Scrape,
    acceptance_between,
    acceptance_from_scrape,
    import_metrics_report,
    parse_scrape,
    read_scrape,
)
from pdsim.realdata.validate import (
    MetricRow,
    ValidationReport,
    real_metrics,
    simulated_metrics,
    trim_result,
)

__all__ = [
    "AcceptanceStats",
    "BenchResult",
    "CalibrationReport",
    "MetricRow",
    "ParameterFit",
    "Scrape",
    "ValidationReport",
    "acceptance_between",
    "acceptance_from_scrape",
    "bench_result_from_dict",
    "bench_result_to_requests",
    "import_metrics_report",
    "make_bench_result",
    "parse_scrape",
    "read_bench_result",
    "read_scrape",
    "real_metrics",
    "run_bench_result",
    "simulated_metrics",
    "summary_metrics",
    "trim_result",
]
