"""examples/quickstart.ipynb runs clean, and is committed without outputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOTEBOOK = EXAMPLES / "quickstart.ipynb"


def test_notebook_committed_without_outputs() -> None:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_notebook_uses_public_api_only() -> None:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    source = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    imports = [line.strip() for line in source.splitlines()
               if line.strip().startswith(("import ", "from "))]
    allowed = ("import pdsim", "from pdsim import plots", "from pdsim.compare import compare",
               "from pdsim.timeseries import timeseries", "import pandas as pd",
               "from pathlib import Path")
    assert sorted(imports) == sorted(allowed)


def test_notebook_runs_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    # A kernel spec of our own: this interpreter (the one with pdsim installed), whatever
    # kernel specs the machine has or lacks; and scratch dirs for IPython and Jupyter.
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (pdsim tests)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=120,
                                     resources={"metadata": {"path": str(EXAMPLES)}})
    client.execute()  # raises CellExecutionError on the first failing cell

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    stderr = "".join(o.get("text", "") for o in outputs
                     if o.output_type == "stream" and o.name == "stderr")
    assert "Traceback" not in stderr and "Warning" not in stderr, stderr
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    figure_cells = sum("plots." in "".join(c.source) and "_figure(" in "".join(c.source)
                       for c in nb.cells if c.cell_type == "code")
    assert figure_cells >= 6 and len(images) == figure_cells
