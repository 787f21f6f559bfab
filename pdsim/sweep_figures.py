"""Pictures of a sweep folder (``pdsim sweep --out``): each headline metric against the
swept parameter, one line per combination of the other swept values (P/D before and after
the fix as separate lines when the sweep has them), averaged over swept seeds.

Reads only what the sweep wrote: ``sweep.csv`` (one row per point) and each point's
``points/<id>/point.json`` (the values that point sets), so it needs nothing of the
sweep machinery and works on a folder copied from a cluster.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pdsim.errors import InputFileError, PdsimError
from pdsim.output import write_atomic
from pdsim.plot_style import plain_text

SWEEP_TABLE = "sweep.csv"
SWEEP_PLOT = "sweep.png"
# (sweep.csv column, axis label, display scale): the metrics drawn, when the table has them
SWEEP_METRICS: tuple[tuple[str, str, float], ...] = (
    ("output_throughput_tok_s", "output throughput (tok/s)", 1.0),
    ("mean_tpot_s", "mean TPOT (ms)", 1e3),
    ("p90_ttft_s", "p90 TTFT (ms)", 1e3),
    ("acceptance_rate", "measured acceptance rate", 1.0),
)
_PALETTE = ("tab:red", "tab:blue", "tab:gray", "tab:green", "tab:orange", "tab:purple",
            "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


@dataclass(frozen=True)
class SweepTable:
    """A sweep folder's rows (``sweep.csv``, numbers parsed) and its swept keys, in the
    order the points first set them."""

    rows: list[dict[str, Any]]
    params: list[str]
    point_params: list[dict[str, Any]]


def _cell(text: str) -> Any:
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def is_sweep_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a sweep's table."""
    return (Path(path) / SWEEP_TABLE).is_file()


def read_sweep_dir(path: str | Path) -> SweepTable:
    """``sweep.csv`` and the per-point ``point.json`` files of a sweep folder."""
    d = Path(path)
    table = d / SWEEP_TABLE
    try:
        with table.open(newline="", encoding="utf-8") as fh:
            rows = [{k: _cell(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputFileError(str(table), None, f"cannot read the sweep table: {exc}") from None
    if not rows or "point_id" not in rows[0]:
        raise InputFileError(str(table), 1, "not a pdsim sweep table (no point_id column)")
    params: dict[str, None] = {}
    point_params = []
    for r in rows:
        pfile = d / "points" / str(r["point_id"]) / "point.json"
        try:
            doc = json.loads(pfile.read_text(encoding="utf-8"))
            p = dict(doc["params"])
        except (OSError, ValueError, KeyError, TypeError):
            raise InputFileError(str(pfile), None, "missing or unreadable point file; "
                                 "was the sweep folder copied whole?") from None
        point_params.append(p)
        for k in p:
            params.setdefault(k, None)
    return SweepTable(rows, list(params), point_params)


def _label_value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, dict | list) else str(v)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def choose_x(table: SweepTable) -> str | None:
    """The swept key drawn on the x axis: the numeric one (other than ``seed``) with the
    most distinct values; ``None`` when no swept key is numeric."""
    best: tuple[int, int, str] | None = None
    for i, k in enumerate(table.params):
        if k == "seed":
            continue
        values = [p[k] for p in table.point_params if k in p]
        if not values or not all(_is_number(v) for v in values):
            continue
        n = len(set(values))
        if n > 1 and (best is None or (n, -i) > best[:2]):
            best = (n, -i, k)
    return None if best is None else best[2]


def _series_key(p: Mapping[str, Any], params: Sequence[str], x: str | None) -> str:
    if "name" in p and x != "name":
        return str(p["name"])
    parts = [f"{k}={_label_value(p[k])}" for k in params if k not in (x, "seed") and k in p]
    return ", ".join(parts) or "all points"


def sweep_series(table: SweepTable, metric: str, x: str | None
                 ) -> dict[str, tuple[list[Any], list[float]]]:
    """Per series, x values (ascending) and the metric, averaged over swept seeds."""
    groups: dict[str, dict[Any, list[float]]] = {}
    for pos, (row, p) in enumerate(zip(table.rows, table.point_params, strict=True)):
        v = row.get(metric)
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            continue
        xv = p.get(x) if x is not None else pos
        groups.setdefault(_series_key(p, table.params, x), {}).setdefault(xv, []).append(
            float(v))
    out = {}
    for name, by_x in groups.items():
        xs = sorted(by_x, key=lambda a: (a is None, a))
        out[name] = (xs, [float(np.mean(by_x[a])) for a in xs])
    return out


def sweep_figure(table: SweepTable) -> Figure:
    """One panel per metric in ``SWEEP_METRICS`` the table has, against the swept key
    ``choose_x`` picks (point number when none is numeric)."""
    x = choose_x(table)
    metrics = [m for m in SWEEP_METRICS if any(_is_number(r.get(m[0])) for r in table.rows)]
    if not metrics:
        raise PdsimError("the sweep table has none of the plotted metrics "
                         f"({', '.join(m[0] for m in SWEEP_METRICS)})")
    ncols = 2 if len(metrics) > 1 else 1
    nrows = math.ceil(len(metrics) / ncols)
    fig = Figure(figsize=(5.5 * ncols, 3.6 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    seeds = {p.get("seed") for p in table.point_params if "seed" in p}
    title = f"sweep of {len(table.rows)} points"
    if len(seeds) > 1:
        title += f" (each value the mean over {len(seeds)} seeds)"
    fig.suptitle(title)
    for i, (key, label, scale) in enumerate(metrics):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        for j, (name, (xs, ys)) in enumerate(sweep_series(table, key, x).items()):
            ax.plot(xs, [y * scale for y in ys], marker="o", label=name,
                    color=_PALETTE[j % len(_PALETTE)])
        ax.set_xlabel(x if x is not None else "sweep point")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize="small")
    return fig


@plain_text
def write_sweep_plots(result_dir: str | Path, out: str | Path | None = None,
                      filename: str = SWEEP_PLOT) -> list[Path]:
    """Write ``sweep.png`` (or ``filename``) for the sweep folder ``result_dir`` to ``out``
    (default: the folder itself)."""
    fig = sweep_figure(read_sweep_dir(result_dir))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    target = Path(out) if out is not None else Path(result_dir)
    return [write_atomic(target / filename, buf.getvalue())]
