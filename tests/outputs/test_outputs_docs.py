"""docs/outputs.md names every plot file and time-series column; its images decode."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from pdsim.plots import COMPARE_PLOTS, RUN_PLOTS
from pdsim.timeseries import TIMESERIES_FIELDS

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

DOCS = Path(__file__).resolve().parents[2] / "docs"
TEXT = (DOCS / "outputs.md").read_text(encoding="utf-8")


def test_every_plot_and_column_is_documented() -> None:
    for name in (*RUN_PLOTS, *COMPARE_PLOTS, *TIMESERIES_FIELDS, "timeline.json",
                 "timeseries.csv", "ui.perfetto.dev"):
        assert f"`{name}`" in TEXT or name in TEXT, f"docs/outputs.md does not mention {name}"


def test_images_exist_and_decode() -> None:
    images = re.findall(r"\]\((img/[^)]+\.png)\)", TEXT)
    assert images
    for rel in images:
        img = mpimg.imread(DOCS / rel)
        assert img.shape[0] > 300 and img.shape[1] > 600
