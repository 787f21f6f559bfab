"""No import cycle in ``pdsim/``, counting every import: module-level, under
``TYPE_CHECKING`` and inside functions. A cycle hidden behind ``TYPE_CHECKING`` or a lazy
import still ties two modules together (neither can be read, tested or replaced alone),
so this test computes the whole graph from the source and fails on any strongly
connected set of more than one module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PDSIM = Path(__file__).resolve().parents[2] / "pdsim"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = PDSIM) -> dict[str, set[str]]:
    """Each module of the package at ``root`` and the package modules it imports."""
    files = {_module_name(p, root): p for p in root.rglob("*.py")}

    def owner(name: str) -> str | None:
        """The module ``name`` lives in (``pkg.mod.attr`` -> ``pkg.mod``)."""
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            for name in names:
                target = owner(name) if name.split(".")[0] == root.name else None
                if target is not None and target != mod:
                    deps.add(target)
        graph[mod] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_no_import_cycle_in_pdsim() -> None:
    graph = import_graph()
    assert "pdsim.engine.scheduler" in graph and len(graph) > 50
    assert not cycles(graph), cycles(graph)


@pytest.mark.parametrize("imports", [
    {"a": "import pkg.b", "b": "from pkg.c import x", "c": "from pkg import a"},
    {"a": "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
          "if TYPE_CHECKING:\n    from pkg.b import B\n", "b": "from . import a"},
    {"a": "def f():\n    from pkg.b import g\n", "b": "from .a import f"},
])
def test_the_graph_sees_every_kind_of_import(tmp_path: Path,
                                             imports: dict[str, str]) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in imports.items():
        (pkg / f"{name}.py").write_text(text)
    graph = import_graph(pkg)
    assert cycles(graph) == [sorted(f"pkg.{n}" for n in imports)]
    # break one edge: no cycle left
    first = sorted(imports)[0]
    (pkg / f"{first}.py").write_text("")
    assert cycles(import_graph(pkg)) == []
