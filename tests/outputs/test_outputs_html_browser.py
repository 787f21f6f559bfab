"""``report.html`` in a real browser: headless Chromium loads the page of a small run and of
a small comparison with no console error, and every chart renders: plotly drew its SVG and
traces in each chart's box, and the screenshot of each box is not blank.

Skips (with the reason) where no Chromium is installed; ``.ci/run`` installs Debian's
``chromium`` so CI runs it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import numpy as np
import pytest
from typer.testing import CliRunner

from pdsim.cli import app

pytest.importorskip("plotly")

MTP3 = Path(__file__).resolve().parents[2] / "configs" / "mtp3.yaml"
SMALL = ["--set", "workload.num_requests=60"]
WIDTH_PX = 1280
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                               "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH "
                                "(apt-get install chromium; .ci/run does)")

# Injected first in <head> of a copy of the page: records uncaught errors, rejected
# promises and console.error calls, then (after load) each chart's rendering and box.
PROBE = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push("error: " + e.message); });
window.addEventListener("unhandledrejection", function (e) {
  window.__errors.push("unhandled rejection: " + e.reason); });
(function () { var orig = console.error; console.error = function () {
  window.__errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
  orig.apply(console, arguments); }; })();
window.addEventListener("load", function () { setTimeout(function () {
  var charts = Array.prototype.map.call(document.querySelectorAll(".plotly-graph-div"),
    function (g) { var r = g.getBoundingClientRect();
      return {id: g.id, main_svg: g.querySelectorAll(".main-svg").length,
              traces: g.querySelectorAll(".trace").length,
              box: [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]}; });
  var out = document.createElement("pre"); out.id = "pdsim-probe";
  out.textContent = JSON.stringify({charts: charts, errors: window.__errors,
                                    height: document.documentElement.scrollHeight});
  document.body.appendChild(out); }, 300); });
</script>"""


def _chromium(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--force-device-scale-factor=1", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=10000", f"--user-data-dir={tmp / 'profile'}", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def _console_errors(stderr: str) -> list[str]:
    """Chromium's log lines of page console messages at error level."""
    return [line for line in stderr.splitlines()
            if "CONSOLE" in line and re.search(r"error", line, re.I)]


def _load(page: Path, tmp: Path) -> tuple[dict[str, Any], np.ndarray]:
    probed = tmp / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1),
                      encoding="utf-8")
    # the same width as the screenshot, so the boxes measured here are where it draws them
    r = _chromium(tmp, probed.as_uri(), "--dump-dom", f"--window-size={WIDTH_PX},2000")
    assert r.returncode == 0, r.stderr[-2000:]
    found = re.search(r'<pre id="pdsim-probe">(.*?)</pre>', r.stdout, re.S)
    assert found is not None, "the page's scripts did not run to the end"
    probe: dict[str, Any] = json.loads(found.group(1).replace("&amp;", "&")
                                       .replace("&lt;", "<").replace("&gt;", ">"))
    probe["console"] = _console_errors(r.stderr)
    png = tmp / "shot.png"
    r = _chromium(tmp, page.as_uri(), f"--screenshot={png}",
                  f"--window-size={WIDTH_PX},{min(int(probe['height']) + 20, 12_000)}")
    assert r.returncode == 0 and png.is_file(), r.stderr[-2000:]
    probe["console"] += _console_errors(r.stderr)
    return probe, mpimg.imread(png)


def _assert_renders(page: Path, tmp: Path, charts: int) -> None:
    probe, img = _load(page, tmp)
    assert probe["errors"] == [] and probe["console"] == [], probe
    assert [c["id"] for c in probe["charts"]] == [f"chart-{k + 1}" for k in range(charts)]
    for c in probe["charts"]:
        assert c["main_svg"] >= 1 and c["traces"] >= 1, c
        x, y, w, h = (round(float(v)) for v in c["box"])
        assert w > 300 and h > 200, c
        box = img[y:y + h, x:x + w, :3]
        assert box.shape[0] == h and box.shape[1] == w, ("chart outside the screenshot", c)
        assert float(np.std(box)) > 0.05, f"{c['id']} looks blank in the screenshot"
        assert len(np.unique(box.reshape(-1, 3), axis=0)) > 20, c


def test_run_report_renders_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["run", str(MTP3), *SMALL, "--out", str(out), "--report"])
    assert r.exit_code == 0, r.output
    # latency CDFs, per-position acceptance, time series
    _assert_renders(out / "report.html", tmp_path, charts=3)


def test_compare_report_renders_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    r = CliRunner().invoke(app, ["compare", str(MTP3), *SMALL, "--out", str(out),
                                 "--report"])
    assert r.exit_code == 0, r.output
    # before/after, latency CDFs, acceptance, a time series per variant
    _assert_renders(out / "report.html", tmp_path, charts=5)
