"""The engine's boundaries hold: it imports no layer above it (it reaches the cluster
through the ``Cluster`` protocol) and writes no SimPy private field."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "pdsim" / "engine"
# layers above the engine, which it must not import (even for type checking)
ABOVE = ("pdsim.simulation", "pdsim.results", "pdsim.invariants", "pdsim.cli",
         "pdsim.commands", "pdsim.writers", "pdsim.report", "pdsim.sweep", "pdsim.plots")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_engine_imports_no_layer_above_it() -> None:
    bad = {f"{path.name}: {name}" for path in ENGINE.glob("*.py") for name in _imports(path)
           if name.startswith(ABOVE)}
    assert not bad, sorted(bad)


def test_the_engine_writes_no_simpy_private_field() -> None:
    writes = []
    for path in ENGINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in ("_ok", "_value", "_defused",
                                                               "_queue", "_now", "_eid"):
                    writes.append(f"{path.name}:{node.lineno} .{t.attr}")
    assert not writes, writes
