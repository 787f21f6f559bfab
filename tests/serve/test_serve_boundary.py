"""``pdsim serve`` reaches the engine only through ``LiveCluster`` (the one module that
holds a ``Simulation``) and the ``Instance``'s own reads: it never reads an instance's
parts (decode rows, scheduler, KV manager or pool, decode run). The ``serve`` contract in
``pyproject.toml`` forbids importing those parts; attribute reads are not imports, so
this test reads them from the source."""

from __future__ import annotations

import ast
from pathlib import Path

SERVE = Path(__file__).resolve().parents[2] / "pdsim" / "serve"
# an Instance's parts, and what only they hold (DecodeRows' columns among them)
PARTS = {"rows", "scheduler", "kv", "pool", "active_run", "fresh_rows", "step_model",
         "request_of_row", "steps"}


def _reads(path: Path, names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.name}:{node.lineno}: .{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in names]


def test_serve_reads_no_part_of_an_instance() -> None:
    files = sorted(SERVE.glob("*.py"))
    assert len(files) > 3 and any(p.name == "live.py" for p in files)
    found = [r for p in files for r in _reads(p, PARTS)]
    assert not found, found


def test_only_live_py_holds_the_simulation() -> None:
    found = [r for p in sorted(SERVE.glob("*.py")) if p.name != "live.py"
             for r in _reads(p, {"sim"})]
    assert not found, found
    assert _reads(SERVE / "live.py", {"sim"}), "LiveCluster holds the simulation as .sim"
