"""The look shared by pdsim's figures: variant names and colours, the palette, an Agg
figure that never touches pyplot, and the styling of quantity-over-time panels."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pdsim.plot_data import RunData

if TYPE_CHECKING:
    from matplotlib.axes import Axes

VARIANT_LABELS = {"pd_before_fix": "P/D before fix", "pd_after_fix": "P/D after fix",
                  "colocated": "colocated"}
VARIANT_COLORS = {"pd_before_fix": "tab:red", "pd_after_fix": "tab:blue",
                  "colocated": "tab:gray"}
PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink",
           "tab:olive", "tab:cyan", "tab:red", "tab:gray")
LINESTYLES = ("-", "--", ":", "-.")


F = TypeVar("F", bound=Callable[..., Any])


def plain_text(fn: F) -> F:
    """Build and save figures with text drawn as written: run, pool and key names are the
    user's, and one with ``$`` (``$\\bad$``) is not mathtext matplotlib may fail to parse."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def label(name: str) -> str:
    """A variant's display name (``pd_before_fix`` -> ``P/D before fix``)."""
    return VARIANT_LABELS.get(name, name)


def color(name: str, i: int) -> str:
    return VARIANT_COLORS.get(name, PALETTE[i % len(PALETTE)])


def figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes,
            color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def title(runs: Mapping[str, RunData]) -> str:
    names = {r.summary.get("name") or r.name for r in runs.values()}
    return next(iter(names)) if len(runs) == 1 else ", ".join(label(n) for n in runs)


def bin_note(runs: Mapping[str, RunData]) -> str:
    """``mean per 0.5 s bin``: what a binned series' value is."""
    widths = {float(np.diff(r.series.edges_s)[0]) for r in runs.values()
              if r.series is not None and len(r.series.edges_s) > 1}
    return f"mean per {widths.pop():g} s bin" if len(widths) == 1 else "mean per time bin"


def style_series(ax: Any, ylabel: str, legend: bool = True) -> None:
    """The look of a quantity-over-time panel: label, zero baseline, grid, legend."""
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize="small", loc="upper right")
