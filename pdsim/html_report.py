"""``report.html``: one self-contained, interactive page of a result folder.

Summary tables, latency CDFs, time series, per-position acceptance, the before/after
comparison (a ``pdsim compare`` folder), the sweep curves (a ``pdsim sweep`` folder) and
the resolved config shown verbatim. The charts are plotly figures; plotly's JavaScript is
inlined once, so the page opens offline and from any folder. Reads only what the other
readers read (``plot_data``, ``sweep_figures``); needs plotly (``pip install
'pdsim[report]'``).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pdsim.errors import InputFileError, PdsimError
from pdsim.output import write_atomic
from pdsim.plot_data import (
    CHANGE_METRICS,
    RunData,
    metric_changes,
    read_compare_json,
    read_run_dir,
)
from pdsim.summary import display, format_change
from pdsim.sweep_figures import (
    SWEEP_METRICS,
    SweepTable,
    choose_x,
    is_sweep_dir,
    read_sweep_dir,
    sweep_series,
)

REPORT_FILE = "report.html"
#: Most points drawn per CDF line (evenly spaced quantiles of the sorted values).
CDF_MAX_POINTS = 2000
_CONFIG_FILE = "config.resolved.yaml"
_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
.scroll { overflow-x: auto; }
.note { color: #666; font-size: 0.9em; }
"""


def require_plotly() -> Any:
    """plotly, or a PdsimError naming the extra that installs it."""
    try:
        import plotly
    except ImportError:
        raise PdsimError("the HTML report needs plotly: pip install 'pdsim[report]'") from None
    return plotly


# ------------------------------------------------------------------------- tables

def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1e5 else f"{v:.6g}"
    if isinstance(v, dict | list):
        return json.dumps(v)
    return str(v)


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    return (f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>")


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, int | float | str)


#: Summary keys of the headline table (the full table follows, folded).
HEADLINE_KEYS = ("completed", "duration_s", "request_throughput_req_s", "acceptance_rate",
                 *(m[0] for m in CHANGE_METRICS))


def summary_html(runs: Mapping[str, RunData], only: Sequence[str] | None = None) -> str:
    """Every scalar summary value (or those in ``only``), one column per run, in the
    units the CLI shows (``pdsim.summary.display``: ms, %, GB), and the change when there
    are exactly two (``format_change``: points for a fraction, percent otherwise)."""
    keys: dict[str, None] = {}
    for r in runs.values():
        for k, v in r.summary.items():
            if k != "name" and _scalar(v) and (only is None or k in only):
                keys.setdefault(k, None)
    names = list(runs)
    headers = ["metric", *names]
    two = len(names) == 2
    if two:
        headers.append("change")
    rows = []
    for k in keys:
        vals = [runs[n].summary.get(k) for n in names]
        shown = display(k)
        row: list[Any] = [shown.label, *(_scaled(v, shown.scale) for v in vals)]
        if two:
            row.append(format_change(k, *vals))
        rows.append(row)
    return html_table(headers, rows)


def _scaled(v: Any, scale: float) -> Any:
    if scale == 1.0 or isinstance(v, bool) or not isinstance(v, int | float):
        return v
    return float(v) * scale


def instances_html(instances: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One row per instance of a run's ``summary["instances"]``: its pool (blank for a
    role's single unnamed group), role and time-weighted means. None when there are none."""
    if not instances:
        return None
    rows = [[name, inst.get("pool") or "", inst.get("role"),
             round(float(inst["busy_fraction"]) * 100, 2),
             round(float(inst["mean_kv_usage"]) * 100, 3),
             round(float(inst["mean_running"]), 2), inst.get("steps"),
             inst.get("preemptions")]
            for name, inst in instances.items()]
    return html_table(["instance", "pool", "role", "busy (%)", "KV usage (%)", "running",
                   "steps", "preemptions"], rows)


def sweep_table_html(table: SweepTable) -> str:
    """One row per sweep point: its swept values and the plotted metrics."""
    metrics = [m for m, _, _ in SWEEP_METRICS if any(m in r for r in table.rows)]
    extra = [k for k in ("completed", "acceptance_length") if any(k in r for r in table.rows)]
    headers = ["point", *table.params, *extra, *metrics]
    rows = [[r.get("point", i), *(p.get(k) for k in table.params),
             *(r.get(k) for k in (*extra, *metrics))]
            for i, (r, p) in enumerate(zip(table.rows, table.point_params, strict=True))]
    return html_table(headers, rows)


# ------------------------------------------------------------------------- figures

def _cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(values)
    y = np.arange(1, len(v) + 1) / len(v)
    if len(v) > CDF_MAX_POINTS:
        idx = np.unique(np.linspace(0, len(v) - 1, CDF_MAX_POINTS).round().astype(int))
        v, y = v[idx], y[idx]
    return v, y


def latency_cdf_chart(runs: Mapping[str, RunData]) -> Any | None:
    """TTFT, TPOT and E2E CDFs over finished requests, one line per run; None without
    per-request records."""
    from plotly.subplots import make_subplots

    specs = (("ttft_s", "TTFT (ms)", 1e3), ("tpot_s", "TPOT (ms)", 1e3),
             ("e2e_s", "E2E latency (s)", 1.0))
    fig = make_subplots(rows=1, cols=3, subplot_titles=[s[1] for s in specs])
    drawn = False
    for i, (name, run) in enumerate(runs.items()):
        if run.requests is None:
            continue
        req = run.requests
        for col, (key, label, scale) in enumerate(specs, start=1):
            v = req[key][(req["status"] == "finished") & np.isfinite(req[key])] * scale
            if not len(v):
                continue
            x, y = _cdf(v)
            fig.add_scatter(x=x, y=y, mode="lines", line_shape="hv", name=name,
                            legendgroup=name, showlegend=col == 1, row=1, col=col,
                            line={"color": _color(i)})
            fig.update_xaxes(title_text=label, row=1, col=col)
            drawn = True
    if not drawn:
        return None
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    fig.update_layout(title="Latency CDFs (finished requests)", height=420)
    return fig


def acceptance_chart(runs: Mapping[str, RunData]) -> Any | None:
    """Per-position acceptance rates, one bar group per draft position; None without
    speculative decoding."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, (name, run) in enumerate(runs.items()):
        rates = run.summary.get("per_position_acceptance_rates") or []
        if rates:
            al = run.summary.get("acceptance_length")
            label = name if al is None else f"{name} (acceptance length {al:.3f})"
            fig.add_bar(x=[f"draft {k + 1}" for k in range(len(rates))],
                        y=[r * 100 for r in rates], name=label, marker_color=_color(i))
    if not fig.data:
        return None
    fig.update_layout(title="Per-position acceptance", barmode="group", height=420,
                      yaxis={"title": "accepted, % of draft steps", "range": [0, 105]})
    return fig


def timeseries_chart(run: RunData) -> Any | None:
    """Output throughput and requests in the system (cluster), KV usage and running
    requests per instance, as time-bin means; None without ``timeseries.csv``."""
    from plotly.subplots import make_subplots

    if run.series is None:
        return None
    ts = run.series
    panels = (("cluster", "output_tok_s", "output tok/s (bin mean)"),
              ("cluster", "in_system", "requests in system (bin mean)"),
              ("instance", "kv_usage", "KV usage (fraction, bin mean)"),
              ("instance", "running", "running requests (bin mean)"))
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True,
                        subplot_titles=[p[2] for p in panels], vertical_spacing=0.06)
    x = np.append(ts.start_s, ts.end_s[-1:])
    tracks = [t for t in ts.tracks.values() if t.kind != "link"]
    for row, (scope, metric, _) in enumerate(panels, start=1):
        for i, t in enumerate(tracks):
            if (t.kind == "cluster") != (scope == "cluster") or metric not in t.values:
                continue
            vals = np.asarray(t.values[metric], dtype=np.float64)
            fig.add_scatter(x=x, y=np.append(vals, vals[-1:]), mode="lines", line_shape="hv",
                            name=f"{t.name} {metric}", line={"color": _color(i)}, row=row,
                            col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=len(panels), col=1)
    fig.update_layout(title=f"Time series: {run.name}", height=900, showlegend=True)
    return fig


def change_chart(summaries: Mapping[str, Mapping[str, Any]]) -> Any | None:
    """After the fix vs before it: each headline metric's change in percent (green where
    better); None unless both ``pd_before_fix`` and ``pd_after_fix`` are there."""
    import plotly.graph_objects as go

    before, after = summaries.get("pd_before_fix"), summaries.get("pd_after_fix")
    if before is None or after is None:
        return None
    rows = metric_changes(before, after)
    labels = [r.label for r in rows]
    changes = [r.change_pct for r in rows]
    colors = ["#2ca02c" if r.better else "#d62728" if r.change_pct else "#999999"
              for r in rows]
    texts = [f"{r.change_pct:+.1f}% ({r.shown})" for r in rows]
    if not labels:
        return None
    fig = go.Figure(go.Bar(x=changes, y=labels, orientation="h", marker_color=colors,
                           text=texts, textposition="outside"))
    lim = max(abs(c) for c in changes) or 1.0
    fig.update_layout(title="P/D after the fix vs before (green: better)", height=420,
                      xaxis={"title": "change after the fix vs before (%)",
                             "range": [-lim * 2.5, lim * 2.5]},
                      yaxis={"autorange": "reversed"})
    return fig


def sweep_chart(table: SweepTable) -> Any | None:
    """Each plotted metric against the swept key ``choose_x`` picks, one line per
    combination of the other swept values (seeds averaged), as ``pdsim plot`` draws."""
    from plotly.subplots import make_subplots

    x = choose_x(table)
    metrics = [m for m in SWEEP_METRICS if any(isinstance(r.get(m[0]), int | float)
                                               for r in table.rows)]
    if not metrics:
        return None
    ncols = 2 if len(metrics) > 1 else 1
    nrows = math.ceil(len(metrics) / ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=[m[1] for m in metrics])
    names: dict[str, int] = {}
    for i, (key, label, scale) in enumerate(metrics):
        row, col = i // ncols + 1, i % ncols + 1
        for name, (xs, ys) in sweep_series(table, key, x).items():
            j = names.setdefault(name, len(names))
            fig.add_scatter(x=xs, y=[y * scale for y in ys], mode="lines+markers", name=name,
                            legendgroup=name, showlegend=i == 0, line={"color": _color(j)},
                            row=row, col=col)
        fig.update_xaxes(title_text=x or "sweep point", row=row, col=col)
        fig.update_yaxes(title_text=label, row=row, col=col)
    fig.update_layout(title=f"Sweep of {len(table.rows)} points", height=380 * nrows)
    return fig


_COLORS = ("#d62728", "#1f77b4", "#7f7f7f", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
           "#e377c2", "#bcbd22", "#17becf")


def _color(i: int) -> str:
    return _COLORS[i % len(_COLORS)]


# ------------------------------------------------------------------------- the page

class HtmlPage:
    def __init__(self, title: str) -> None:
        self.title = title
        self.parts: list[str] = []
        self.charts = 0

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def raw(self, fragment: str) -> None:
        self.parts.append(fragment)

    def note(self, text: str) -> None:
        self.parts.append(f'<p class="note">{html.escape(text)}</p>')

    def chart(self, fig: Any | None, missing: str) -> None:
        if fig is None:
            self.note(missing)
            return
        import plotly.io as pio

        self.charts += 1
        self.parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=False,
                                      div_id=f"chart-{self.charts}",
                                      config={"displaylogo": False}))

    def config(self, text: str | None, missing: str) -> None:
        self.heading("Resolved config")
        if text is None:
            self.note(missing)
        else:
            self.parts.append(f"<pre>{html.escape(text)}</pre>")

    def render(self) -> str:
        from plotly.offline import get_plotlyjs

        js = get_plotlyjs().replace("</script", "<\\/script")
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{html.escape(self.title)}</title><style>{_CSS}</style>"
                f"<script type=\"text/javascript\">{js}</script></head><body>"
                f"<h1>{html.escape(self.title)}</h1>"
                f'<p class="note">{self.charts} interactive charts (plotly, works offline): '
                "zoom by dragging, double-click to reset, click a legend entry to hide it.</p>"
                + "\n".join(self.parts) + "</body></html>\n")


def runs_report(title: str, runs: Mapping[str, RunData], config_text: str | None) -> str:
    """The page of one run, or of a comparison's variants (``pd_before_fix`` and
    ``pd_after_fix`` get the before/after chart)."""
    require_plotly()
    page = HtmlPage(title)
    page.heading("Summary")
    page.raw(summary_html(runs, HEADLINE_KEYS))
    page.raw("<details><summary>every summary value</summary>" + summary_html(runs)
             + "</details>")
    tables = {name: instances_html(r.summary.get("instances") or {})
              for name, r in runs.items()}
    if any(t is not None for t in tables.values()):
        page.heading("Instances and pools")
        for name, table in tables.items():
            if table is not None:
                if len(runs) > 1:
                    page.note(name)
                page.raw(table)
    summaries = {k: r.summary for k, r in runs.items()}
    if len(runs) > 1:
        page.heading("Before / after")
        page.chart(change_chart(summaries), "needs pd_before_fix and pd_after_fix")
    page.heading("Latency CDFs")
    page.chart(latency_cdf_chart(runs), "no per-request records (requests.csv): "
               "compare.json holds summaries only")
    page.heading("Per-position acceptance")
    page.chart(acceptance_chart(runs), "no speculative decoding in this run")
    page.heading("Time series")
    drawn = False
    for run in runs.values():
        fig = timeseries_chart(run)
        if fig is not None:
            page.chart(fig, "")
            drawn = True
    if not drawn:
        page.note("no time series (timeseries.csv)")
    page.config(config_text, "no config.resolved.yaml in the folder")
    return page.render()


def sweep_report(title: str, table: SweepTable, config_text: str | None) -> str:
    """The page of a sweep: the table of points and the sweep curves."""
    require_plotly()
    page = HtmlPage(title)
    page.heading("Sweep points")
    page.raw(sweep_table_html(table))
    page.heading("Sweep curves")
    page.chart(sweep_chart(table), "the sweep table has none of the plotted metrics")
    page.config(config_text, "no config.resolved.yaml in the folder; each point's is "
                "in points/<id>/ (kept unless the sweep ran with --no-records)")
    return page.render()


def _config_text(d: Path) -> str | None:
    p = d / _CONFIG_FILE
    if not p.is_file():
        return None
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(str(p), None, f"cannot read: {exc}") from None


def report_dir_html(result_dir: str | Path, config_text: str | None = None) -> str:
    """The page of what ``pdsim run --out``, ``pdsim compare --out`` or ``pdsim sweep
    --out`` left in ``result_dir``; ``config_text`` stands in for a missing
    ``config.resolved.yaml`` (a sweep's base config)."""
    require_plotly()
    d = Path(result_dir)
    if not d.is_dir():
        raise InputFileError(str(d), None, "no such result directory" if not d.exists()
                             else "not a directory")
    config_text = _config_text(d) or config_text
    from pdsim.run_folder import check_folder, check_sealed

    if is_sweep_dir(d):
        check_sealed(d, "sweep.csv")
        return sweep_report(f"pdsim sweep: {d.name}", read_sweep_dir(d), config_text)
    if (d / "summary.json").is_file():
        check_folder(d, "summary.json")  # one finished run, as plot reads it
        run = read_run_dir(d)
        return runs_report(f"pdsim run: {run.name}", {run.name: run}, config_text)
    if (d / "compare.json").is_file():
        check_sealed(d, "compare.json")
        return runs_report(f"pdsim compare: {d.name}", read_compare_json(d / "compare.json"),
                           config_text)
    raise PdsimError(f"{d}: not a pdsim result directory: expected summary.json "
                     "(pdsim run --out), compare.json (pdsim compare --out) or sweep.csv "
                     "(pdsim sweep --out)")


def write_report(out_dir: str | Path, page: str) -> Path:
    """Write ``page`` as ``out_dir/report.html`` (atomically)."""
    return write_atomic(Path(out_dir) / REPORT_FILE, page)
