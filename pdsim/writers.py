"""Files a run leaves in ``--out``: every one written atomically.

- ``summary.json``: pdsim's summary (``partial: true`` if the run was interrupted).
- ``requests.csv`` (and ``requests.parquet`` when pyarrow is installed): one row per request.
- ``bench_result.json``: the same run in ``vllm bench serve --save-result`` form.
- ``config.resolved.yaml``: the config as run, derived values as comments.
- ``timeseries.csv``: per-instance and per-link time-weighted series (KV usage, queues,
  running batch, link bandwidth), for ``pdsim plot``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pdsim.loader import derived_values, dump_config
from pdsim.output import records_csv, write_atomic, write_json, write_parquet
from pdsim.results import RECORD_FIELDS, Results
from pdsim.timeseries import write_timeseries

if TYPE_CHECKING:
    from pdsim.compare import Comparison


def summary_document(res: Results) -> dict[str, object]:
    """What ``summary.json`` holds."""
    from pdsim import __version__

    return {
        "pdsim_version": __version__,
        "name": res.config.name,
        "seed": res.config.seed,
        "partial": res.partial,
        "derived": derived_values(res.config),
        "summary": res.summary,
    }


def write_run(res: Results, out: Path, plots: bool = False, timeline: bool = False) -> None:
    """Write a run's files to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "config.resolved.yaml", dump_config(res.config)
                 + "".join(f"# {k}: {v}\n" for k, v in derived_values(res.config).items()))
    write_atomic(out / "requests.csv", records_csv(res.records, RECORD_FIELDS))
    write_parquet(out / "requests.parquet", res.records, RECORD_FIELDS)
    write_json(out / "bench_result.json", bench_result(res))
    write_timeseries(res, out / "timeseries.csv")
    write_json(out / "summary.json", summary_document(res))
    if plots:
        from pdsim.plots import write_run_plots

        write_run_plots(res, out)
    if timeline:
        from pdsim.timeline import write_timeline

        write_timeline(res, out / "timeline.json")


def bench_result(res: Results) -> dict[str, object]:
    """The run as a ``vllm bench serve --save-result`` JSON document."""
    from pdsim.realdata import make_bench_result
    from pdsim.realdata.prometheus import AcceptanceStats

    records = []
    for r in res.records:
        row = dict(r)
        row["itls_s"] = res.request_itls_s(r["request_id"]).tolist()
        records.append(row)
    s = res.summary
    spec = None
    if s["num_drafts"]:
        spec = AcceptanceStats(s["num_drafts"], s["num_draft_tokens"],
                               s["num_accepted_tokens"],
                               tuple(s["num_accepted_tokens_per_pos"]), source="pdsim")
    if not s["duration_s"] > 0:
        return {}
    summary = {"duration_s": s["duration_s"], "num_requests": s["num_requests"],
               "completed": s["completed"]}
    meta: dict[str, object] = {"backend": "pdsim", "model_id": res.config.model.name,
                               "num_prompts": s["num_requests"]}
    wl = res.config.workload
    arr = wl.arrivals
    if wl.trace is None or arr.kind == "closed_loop":
        if arr.kind == "closed_loop":
            meta.update(request_rate="inf", burstiness=1.0, max_concurrency=arr.concurrency)
        elif arr.kind == "gamma":
            meta.update(request_rate=arr.rate_per_s, burstiness=arr.shape)
        elif arr.kind == "poisson":
            meta.update(request_rate=arr.rate_per_s, burstiness=1.0)
        else:  # constant gaps: vLLM's burstiness -> infinity
            meta.update(request_rate=arr.rate_per_s)
    return make_bench_result(records, summary, meta=meta, spec_decode=spec)


def write_compare_plots(cmp: Comparison, out: Path) -> list[Path]:
    """Comparison plots (per-position acceptance before/after, latency CDFs)."""
    from pdsim.plots import write_comparison_plots

    return write_comparison_plots(cmp, out)
