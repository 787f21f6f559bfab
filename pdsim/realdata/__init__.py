"""Real-data I/O: acceptance from vLLM's Prometheus metrics, ``vllm bench serve`` results."""

from pdsim.realdata.bench_result import (
    BenchResult,
    bench_result_from_dict,
    bench_result_to_requests,
    make_bench_result,
    read_bench_result,
    summary_metrics,
)
from pdsim.realdata.prometheus import (
    AcceptanceStats,
    Scrape,
    acceptance_between,
    acceptance_from_scrape,
    import_metrics_report,
    parse_scrape,
    read_scrape,
)

__all__ = [
    "AcceptanceStats",
    "BenchResult",
    "Scrape",
    "acceptance_between",
    "acceptance_from_scrape",
    "bench_result_from_dict",
    "bench_result_to_requests",
    "import_metrics_report",
    "make_bench_result",
    "parse_scrape",
    "read_bench_result",
    "read_scrape",
    "summary_metrics",
]
