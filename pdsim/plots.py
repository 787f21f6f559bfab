"""Plots of a run or of a before/after comparison: matplotlib Figures and PNG files.

Every ``*_figure`` function takes a ``Results``, a ``Comparison``, a mapping of names to
``Results`` (overlaid), or the same read back from a result folder (``RunData``), and
returns a ``matplotlib.figure.Figure`` drawn on the Agg canvas: nothing touches pyplot's
global state or a display, and a notebook shows the figure inline
(``%matplotlib inline``). ``write_run_plots``, ``write_comparison_plots`` and
``plot_result_dir`` write them as PNG files (atomically); docs/outputs.md lists them.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure

from pdsim.errors import InputFileError, PdsimError
from pdsim.output import write_atomic
from pdsim.plot_data import (
    RunData,
    as_runs,
    as_summaries,
    link_groups,
    metric_changes,
    read_compare_json,
    read_run_dir,
    run_data,
)
from pdsim.plot_style import LINESTYLES as _LINESTYLES
from pdsim.plot_style import PALETTE as _PALETTE
from pdsim.plot_style import bin_note as _bin_note
from pdsim.plot_style import color as _color
from pdsim.plot_style import figure as _figure
from pdsim.plot_style import label as _label
from pdsim.plot_style import note as _note
from pdsim.plot_style import plain_text
from pdsim.plot_style import style_series as _style_series
from pdsim.plot_style import title as _title
from pdsim.run_folder import check_folder, check_sealed, reseal
from pdsim.sweep_figures import is_sweep_dir, write_sweep_plots
from pdsim.timeseries import bin_edges, output_tokens_integral, throughput_bins

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from pdsim.compare import Comparison
    from pdsim.results import Results

#: PNG files of one run (``pdsim run --plots``, ``pdsim plot RUN_DIR``).
RUN_PLOTS = ("latency_cdf.png", "acceptance_per_position.png", "kv_usage.png",
             "queue_depth.png", "throughput.png")
#: PNG files of a comparison (``pdsim compare --plots``, ``pdsim plot COMPARE_DIR``).
COMPARE_PLOTS = ("compare_acceptance_per_position.png", "compare_metrics.png",
                 "compare_latency_cdf.png", "compare_throughput.png")

_DPI = 120


# ------------------------------------------------------------------------- figures

def latency_cdf_figure(data: Any) -> Figure:
    """CDFs of TTFT, TPOT and E2E latency over finished requests, one line per run."""
    runs = as_runs(data)
    fig = _figure(13.0, 3.8)
    axes = fig.subplots(1, 3)
    specs = (("ttft_s", "TTFT", 1e3, "ms"), ("tpot_s", "TPOT", 1e3, "ms"),
             ("e2e_s", "E2E latency", 1.0, "s"))
    for ax, (key, title, scale, unit) in zip(axes, specs, strict=True):
        drawn = False
        for i, (name, run) in enumerate(runs.items()):
            if run.requests is None:
                continue
            req = run.requests
            v = req[key][(req["status"] == "finished") & np.isfinite(req[key])] * scale
            if not len(v):
                continue
            v = np.sort(v)
            y = np.arange(1, len(v) + 1) / len(v)
            p50, p99 = np.percentile(v, [50, 99])
            lab = f"p50 {p50:.3g}, p99 {p99:.3g} {unit}"
            ax.step(v, y, where="post", color=_color(name, i),
                    label=lab if len(runs) == 1 else f"{_label(name)}: {lab}")
            drawn = True
        if not drawn:
            _note(ax, "no finished requests with per-request records")
            ax.set_title(title)
            continue
        ax.set_title(title)
        ax.set_xlabel(f"{title} ({unit})")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="lower right")
    fig.suptitle(f"Latency CDFs: {_title(runs)}")
    return fig


def acceptance_figure(data: Any) -> Figure:
    """Per-position acceptance rates (vLLM's definition), bars grouped by position, one
    bar per run; the legend gives each run's acceptance length."""
    runs = as_runs(data)
    fig = _figure(7.5, 4.5)
    ax = fig.subplots()
    rates = {k: list(r.summary.get("per_position_acceptance_rates") or [])
             for k, r in runs.items()}
    n = max((len(v) for v in rates.values()), default=0)
    if not n:
        _note(ax, "no speculative decoding in this run")
        ax.set_title(f"Per-position acceptance: {_title(runs)}")
        return fig
    width = 0.8 / len(runs)
    x = np.arange(n)
    for i, (name, vals) in enumerate(rates.items()):
        if not vals:
            continue
        pct = np.asarray(vals, dtype=np.float64) * 100.0
        al = runs[name].summary.get("acceptance_length")
        lab = _label(name) if len(runs) > 1 else "per-position rate"
        if al is not None and math.isfinite(al):
            lab += f" (acceptance length {al:.3f})"
        bars = ax.bar(x[:len(pct)] + (i - (len(runs) - 1) / 2) * width, pct, width,
                      color=_color(name, i), label=lab)
        ax.bar_label(bars, labels=[f"{v:.1f}" for v in pct], fontsize="small", padding=2)
    ax.set_xticks(x, [f"draft {k + 1}" for k in range(n)])
    ax.set_ylabel("accepted, % of draft steps")
    ax.set_ylim(0, 105)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper right")
    ax.set_title(f"Per-position acceptance: {_title(runs)}")
    return fig


def _stairs_by_instance(ax: Axes, runs: Mapping[str, RunData], metric: str,
                        scale: float = 1.0, prefill_metric: str | None = None) -> bool:
    """One line per (run, instance), labelled with the instance's pool where it has one;
    with several runs, colour = run, style = instance. ``prefill_metric`` replaces
    ``metric`` on prefill instances."""
    drawn = False
    for i, (name, run) in enumerate(runs.items()):
        if run.series is None:
            continue
        tracks = run.series.of_kind("prefill", "decode", "colocated")
        instances = run.summary.get("instances") or {}
        for j, track in enumerate(tracks):
            key = prefill_metric if prefill_metric and track.kind == "prefill" else metric
            if key not in track.values:
                continue
            pool = (instances.get(track.name) or {}).get("pool")
            inst = f"{track.name} ({pool})" if pool else track.name
            if len(runs) == 1:
                color, style, label = _PALETTE[j % len(_PALETTE)], "-", inst
            else:
                color, style = _color(name, i), _LINESTYLES[j % len(_LINESTYLES)]
                label = f"{_label(name)}: {inst}"
            ax.stairs(track.values[key] * scale, run.series.edges_s, color=color,
                      linestyle=style, label=label, baseline=None)
            drawn = True
    return drawn


def kv_usage_figure(data: Any) -> Figure:
    """KV-cache usage (% of each instance's blocks) over time, time-weighted per bin."""
    runs = as_runs(data)
    fig = _figure(10.0, 4.0)
    ax = fig.subplots()
    if _stairs_by_instance(ax, runs, "kv_usage", 100.0):
        ax.set_xlabel("simulated time (s)")
        _style_series(ax, "KV cache used (%)")
    else:
        _note(ax, "no time series (timeseries.csv) for this run")
    ax.set_title(f"KV cache usage over time: {_title(runs)}")
    return fig


def queue_depth_figure(data: Any) -> Figure:
    """Requests in the system (cluster), and per instance the waiting requests, requests
    receiving KV and the running batch (on P: requests being prefilled) over time, each a
    time-weighted mean per bin (so fractional)."""
    runs = as_runs(data)
    fig = _figure(10.0, 9.5)
    axes = fig.subplots(4, 1, sharex=True)
    note = _bin_note(runs)
    drawn = False
    for i, (name, run) in enumerate(runs.items()):
        cluster = run.series.tracks.get("cluster") if run.series is not None else None
        if cluster is not None and "in_system" in cluster.values:
            assert run.series is not None
            axes[0].stairs(cluster.values["in_system"], run.series.edges_s, baseline=None,
                           color=_color(name, i), label=_label(name))
            drawn = True
    if drawn:
        _style_series(axes[0], f"in the system\n(cluster; {note})", legend=len(runs) > 1)
    else:
        _note(axes[0], "no requests-in-system series (timeseries.csv) for this run")
    panels = (("waiting", "waiting (queued)", None), ("receiving", "receiving KV", None),
              ("running", "running (batch;\nP: prefilling)", None))
    any_drawn = False
    for ax, (metric, label, on_p) in zip(axes[1:], panels, strict=True):
        if _stairs_by_instance(ax, runs, metric, prefill_metric=on_p):
            any_drawn = True
            _style_series(ax, f"{label}\nrequests", legend=False)
        else:
            _note(ax, "no time series (timeseries.csv) for this run")
    if any_drawn:
        axes[1].legend(fontsize="small", loc="upper right")
    axes[-1].set_xlabel("simulated time (s)")
    fig.suptitle(f"Requests in the system, queues and running batch ({note}): {_title(runs)}")
    return fig


def _throughput(run: RunData) -> tuple[np.ndarray, np.ndarray] | None:
    if run.series is not None and "cluster" in run.series.tracks:
        return run.series.edges_s, run.series.tracks["cluster"].values["output_tok_s"]
    if run.requests is None:
        return None
    req = run.requests
    ends = np.concatenate((req["finish_s"], req["first_token_s"]))
    ends = ends[np.isfinite(ends)]
    if not len(ends):
        return None
    edges = bin_edges(float(ends.max()))
    return edges, throughput_bins(req["first_token_s"], req["finish_s"],
                                  req["output_tokens"], edges)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def _tokens_ahead(runs: Mapping[str, RunData]) -> tuple[np.ndarray, np.ndarray] | None:
    """Output tokens P/D after the fix has emitted minus before it, by each bin edge (from
    the request records, exact); None unless both variants have records."""
    if not {"pd_before_fix", "pd_after_fix"} <= set(runs):
        return None
    reqs = [r for v in ("pd_before_fix", "pd_after_fix")
            if (r := runs[v].requests) is not None]
    if len(reqs) < 2:
        return None
    ends = np.concatenate([np.concatenate((r["finish_s"], r["first_token_s"])) for r in reqs])
    ends = ends[np.isfinite(ends)]
    if not len(ends):
        return None
    edges = bin_edges(float(ends.max()))
    before, after = (output_tokens_integral(r["first_token_s"], r["finish_s"],
                                            r["output_tokens"], edges) for r in reqs)
    return edges, (after - before)[1:]


def throughput_figure(data: Any) -> Figure:
    """Output tokens per second over time (dashed: the run's overall output throughput);
    for P/D before and after the fix, how many output tokens after is ahead of before
    (their throughput curves mostly overlap); where the runs have P->D links, the KV link
    bandwidth in use (a topology's ports summed per node and direction, ``link_groups``)."""
    runs = as_runs(data)
    links = [(name, t) for name, r in runs.items() if r.series is not None
             for t in r.series.of_kind("link")]
    ahead = _tokens_ahead(runs)
    rows = 1 + (ahead is not None) + bool(links)
    fig = _figure(10.0, 4.0 + 2.5 * (rows - 1))
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    ax = axes[0]
    if ahead is not None:
        edges, diff = ahead
        axes[1].stairs(diff, edges, baseline=None, color="tab:blue")
        axes[1].axhline(0.0, color="0.4", linewidth=0.8)
        axes[1].set_ylabel("output tokens:\nafter - before fix")
        axes[1].grid(alpha=0.3)
    curves: list[tuple[list[str], int, np.ndarray, np.ndarray, Any]] = []
    for i, (name, run) in enumerate(runs.items()):
        tp = _throughput(run)
        if tp is None:
            continue
        mean = run.summary.get("output_throughput_tok_s")
        same = next((c for c in curves if _same(c[2], tp[0]) and _same(c[3], tp[1])
                     and c[4] == mean), None)
        if same is not None:  # identical runs: one curve, named for all of them
            same[0].append(name)
        else:
            curves.append(([name], i, tp[0], tp[1], mean))
    for names, i, edges, tok_s, mean in curves:
        color, label = _color(names[0], i), " = ".join(_label(n) for n in names)
        ax.stairs(tok_s, edges, color=color, baseline=None,
                  label=label if len(runs) > 1 else "output tokens/s")
        if mean is not None and math.isfinite(mean):
            ax.axhline(mean, color=color, linestyle="--", linewidth=1,
                       label=f"{label + ' ' if len(runs) > 1 else ''}"
                             f"overall {mean:.0f} tok/s")
    if curves:
        _style_series(ax, "output tokens/s")
    else:
        _note(ax, "no per-request records for this run")
    if links:
        lax = axes[-1]
        drawn_links: list[tuple[list[str], str, np.ndarray, np.ndarray]] = []
        for name in dict.fromkeys(n for n, _ in links):
            series = runs[name].series
            assert series is not None
            tracks = {t.name: t for n, t in links if n == name}
            for label, members in link_groups(list(tracks)).items():
                values = np.sum([tracks[m].values["link_gb_per_s"] for m in members], axis=0)
                if len(members) > 1:
                    label = f"{label} ({len(members)}, summed)"
                same_link = next((d for d in drawn_links if d[1] == label
                                  and _same(d[2], series.edges_s) and _same(d[3], values)),
                                 None)
                if same_link is not None:
                    same_link[0].append(name)
                else:
                    drawn_links.append(([name], label, series.edges_s, values))
        order = list(dict.fromkeys(d[1] for d in drawn_links))
        for j, (names, link, edges, values) in enumerate(drawn_links):
            # one run: a colour per link; several: the run's colour, a line style per link
            lax.stairs(values, edges, baseline=None,
                       color=_PALETTE[j % len(_PALETTE)] if len(runs) == 1
                       else _color(names[0], list(runs).index(names[0])),
                       linestyle="-" if len(runs) == 1
                       else _LINESTYLES[order.index(link) % len(_LINESTYLES)],
                       label=link if len(runs) == 1 else
                       f"{' = '.join(_label(n) for n in names)}: {link}")
        _style_series(lax, f"KV link in use\n(GB/s, {_bin_note(runs)})")
    axes[-1].set_xlabel("simulated time (s)")
    fig.suptitle(f"Throughput over time: {_title(runs)}")
    return fig


def metrics_figure(data: Any) -> Figure:
    """After the fix vs before it: each headline metric's change in percent, green where
    it improved, with both values written beside the bar. ``data`` is a ``Comparison``,
    the summaries of its two variants by name, or a ``compare.json`` document."""
    summaries = as_summaries(data)
    before, after = summaries.get("pd_before_fix"), summaries.get("pd_after_fix")
    fig = _figure(9.0, 4.8)
    ax = fig.subplots()
    if before is None or after is None:
        _note(ax, "needs pd_before_fix and pd_after_fix")
        return fig
    rows = metric_changes(before, after)
    labels = [r.label for r in rows]
    changes = [r.change_pct for r in rows]
    colors = ["tab:green" if r.better else "tab:red" if r.change_pct else "0.6" for r in rows]
    notes = [r.shown for r in rows]
    y = np.arange(len(labels))[::-1]
    bars = ax.barh(y, changes, color=colors)
    ax.bar_label(bars, labels=[f"{c:+.1f}%  ({n})" for c, n in zip(changes, notes,
                                                                    strict=True)],
                 fontsize="small", padding=3)
    ax.set_yticks(y, labels)
    ax.axvline(0, color="0.3", linewidth=0.8)
    lim = max((abs(c) for c in changes), default=1.0) or 1.0
    ax.set_xlim(-lim * 2.2, lim * 2.2)
    ax.set_xlabel("change after the fix vs before (%)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("P/D after the fix vs before (green: better)")
    return fig


# --------------------------------------------------------------------- PNG files

def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()


def _save(fig: Figure, path: Path) -> Path:
    return write_atomic(path, figure_png(fig))


@plain_text
def write_run_figures(run: RunData, out: Path) -> list[Path]:
    """Write ``RUN_PLOTS`` for one run to ``out``; a plot the run has no data for (no
    speculative decoding, no time series) is left out."""
    files = []
    if run.requests is not None:
        files.append(_save(latency_cdf_figure(run), out / "latency_cdf.png"))
    if run.summary.get("per_position_acceptance_rates"):
        files.append(_save(acceptance_figure(run), out / "acceptance_per_position.png"))
    if run.series is not None:
        files.append(_save(kv_usage_figure(run), out / "kv_usage.png"))
        files.append(_save(queue_depth_figure(run), out / "queue_depth.png"))
    if run.series is not None or run.requests is not None:
        files.append(_save(throughput_figure(run), out / "throughput.png"))
    return files


def write_run_plots(res: Results, out: str | Path) -> list[Path]:
    """Write one run's PNG plots (``RUN_PLOTS``) to ``out``."""
    return write_run_figures(run_data(res), Path(out))


@plain_text
def write_comparison_figures(runs: Mapping[str, RunData], out: Path) -> list[Path]:
    """Write ``COMPARE_PLOTS`` to ``out``; the latency and throughput plots need
    per-request records, so a ``compare.json`` alone gives only the first two."""
    files = []
    if any(r.summary.get("per_position_acceptance_rates") for r in runs.values()):
        files.append(_save(acceptance_figure(runs), out / "compare_acceptance_per_position.png"))
    files.append(_save(metrics_figure({k: r.summary for k, r in runs.items()}),
                       out / "compare_metrics.png"))
    if any(r.requests is not None for r in runs.values()):
        files.append(_save(latency_cdf_figure(runs), out / "compare_latency_cdf.png"))
        files.append(_save(throughput_figure(runs), out / "compare_throughput.png"))
    return files


def write_comparison_plots(cmp: Comparison, out: str | Path) -> list[Path]:
    """Write a comparison's PNG plots (``COMPARE_PLOTS``) to ``out``."""
    return write_comparison_figures(as_runs(cmp), Path(out))


def plot_result_dir(result_dir: str | Path, out: str | Path | None = None) -> list[Path]:
    """Plot what ``pdsim run --out``, ``pdsim compare --out`` (both, if both are there) or
    ``pdsim sweep --out`` (``sweep.png``) left in ``result_dir``; PNG files go to ``out``
    (default: ``result_dir``)."""
    d = Path(result_dir)
    if not d.exists():
        raise InputFileError(str(d), None, "no such result directory")
    if not d.is_dir():
        raise InputFileError(str(d), None, "not a directory")
    if is_sweep_dir(d):
        check_sealed(d, "sweep.csv")
        written = write_sweep_plots(d, out)
        reseal(d, written)
        return written
    has_run, has_cmp = (d / "summary.json").is_file(), (d / "compare.json").is_file()
    if not (has_run or has_cmp):
        raise PdsimError(f"{d}: not a pdsim result directory: expected summary.json "
                         "(pdsim run --out), compare.json (pdsim compare --out) or "
                         "sweep.csv (pdsim sweep --out)")
    target = Path(out) if out is not None else d
    files = []
    if has_run:
        check_folder(d, "summary.json")
        files += write_run_figures(read_run_dir(d), target)
    if has_cmp:
        check_sealed(d, "compare.json")
        files += write_comparison_figures(read_compare_json(d / "compare.json"), target)
    reseal(d, files)  # figures the run or comparison sealed, drawn again from its files
    return files
