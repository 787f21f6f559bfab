"""Files a run leaves in ``--out``: every one written atomically.

- ``summary.json``: pdsim's summary (``partial: true`` if the run was interrupted).
- ``requests.csv`` (and ``requests.parquet`` when pyarrow is installed): one row per request.
- ``bench_result.json``: the same run in ``vllm bench serve --save-result`` form.
- ``config.resolved.yaml``: the config as run, derived values as comments.
- ``timeseries.csv``: per-instance and per-link time-weighted series (KV usage, queues,
  running batch, link bandwidth), for ``pdsim plot``.
- ``manifest.json``, written last: the run (name, seed, config hash, partial) and the
  SHA-256 of every file above; a folder without it was left incomplete (``run_folder``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from pdsim._version import __version__
from pdsim.loader import derived_values, dump_config
from pdsim.output import records_csv, write_atomic, write_json, write_parquet
from pdsim.realdata.bench_synthesis import run_bench_result
from pdsim.results import RECORD_FIELDS, Results
from pdsim.run_folder import finish_folder, prepare_out_dir, staged_folder
from pdsim.timeseries import write_timeseries

if TYPE_CHECKING:
    from pdsim.compare import Comparison
    from pdsim.config import SimConfig


def summary_document(res: Results) -> dict[str, object]:
    """What ``summary.json`` holds."""
    return {
        "pdsim_version": __version__,
        "name": res.config.name,
        "seed": res.config.seed,
        "partial": res.partial,
        "derived": derived_values(res.config),
        "summary": res.summary.as_dict(),
    }


def write_run(res: Results, out: Path, plots: bool = False, timeline: bool = False) -> None:
    """Write a run's files to ``out``, as a unit: written beside the previous result
    (``staged_folder``) and swapped in only once all of them, and their manifest
    (``manifest.json``, naming the run and every file's SHA-256), are complete."""
    prepare_out_dir(out)
    config_text = dump_config(res.config)
    with staged_folder(out) as stage:
        written = [
            write_atomic(stage / "config.resolved.yaml", config_text + "".join(
                f"# {k}: {v}\n" for k, v in derived_values(res.config).items())),
            write_atomic(stage / "requests.csv", records_csv(res.records, RECORD_FIELDS)),
            write_parquet(stage / "requests.parquet", res.records, RECORD_FIELDS),
            # vLLM json.dumps its float burstiness: constant gaps (infinite) read ``Infinity``
            write_json(stage / "bench_result.json", run_bench_result(res),
                       infinite_keys=("burstiness",)),
            write_timeseries(res, stage / "timeseries.csv"),
            write_json(stage / "summary.json", summary_document(res)),
        ]
        if plots:
            from pdsim.plots import write_run_plots

            written += write_run_plots(res, stage)
        if timeline:
            from pdsim.timeline import write_timeline

            written.append(write_timeline(res, stage / "timeline.json"))
        finish_folder(stage, [p.name for p in written if p is not None], {
            "pdsim_version": __version__, "name": res.config.name, "seed": res.config.seed,
            "config_sha256": hashlib.sha256(config_text.encode("utf-8")).hexdigest(),
            "partial": res.partial})


def write_compare(cmp: Comparison, cfg: SimConfig, out: Path, plots: bool = False,
                  report: bool = False) -> list[Path]:
    """Write a comparison's ``compare.json`` (and its plots and ``report.html``) to
    ``out`` as a unit, as ``write_run`` writes a run: beside the previous result, swapped
    in once all are complete and sealed by a manifest naming the compared config."""
    prepare_out_dir(out)
    config_text = dump_config(cfg)
    with staged_folder(out) as stage:
        written = [write_json(stage / "compare.json", cmp.to_dict())]
        if plots:
            written += write_compare_plots(cmp, stage)
        if report:
            from pdsim.html_report import runs_report, write_report
            from pdsim.plot_data import as_runs

            written.append(write_report(stage, runs_report(
                f"pdsim compare: {cfg.name}", as_runs(cmp), config_text)))
        names = [p.name for p in written]
        finish_folder(stage, names, {
            "pdsim_version": __version__, "kind": "compare", "name": cfg.name,
            "seed": cfg.seed,
            "config_sha256": hashlib.sha256(config_text.encode("utf-8")).hexdigest()})
    return [out / name for name in names]


def write_compare_plots(cmp: Comparison, out: Path) -> list[Path]:
    """Comparison plots (per-position acceptance before/after, latency CDFs)."""
    from pdsim.plots import write_comparison_plots

    return write_comparison_plots(cmp, out)
