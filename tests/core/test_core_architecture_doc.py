"""docs/architecture.md names only what exists: every ``Class.member`` it writes in
backticks is a class of ``pdsim/`` with that member (a method, a class attribute or an
attribute its methods set on ``self``), every ``*.py`` file it names is a module of
``pdsim/`` (or a file of the repository) and every ``pdsim.*`` module it names can be
found. A split or a rename that leaves the document describing code that is gone fails
here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PDSIM = ROOT / "pdsim"
DOC = ROOT / "docs" / "architecture.md"


def _members_by_class() -> dict[str, set[str]]:
    """Each class name in ``pdsim/`` and the members any class of that name defines."""
    found: dict[str, set[str]] = {}
    for path in PDSIM.rglob("*.py"):
        for cls in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(cls, ast.ClassDef):
                continue
            members = found.setdefault(cls.name, set())
            for node in cls.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.add(node.name)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    members.add(node.target.id)
                elif isinstance(node, ast.Assign):
                    members.update(t.id for t in node.targets if isinstance(t, ast.Name))
            for node in ast.walk(cls):
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
                for t in targets:
                    for sub in ast.walk(t):
                        if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                                and sub.value.id == "self"):
                            members.add(sub.attr)
    return found


def _quoted() -> set[str]:
    return set(re.findall(r"`([^`\s]+)`", DOC.read_text(encoding="utf-8")))


def test_every_class_member_the_architecture_names_exists() -> None:
    classes = _members_by_class()
    named = [q for q in _quoted()
             if re.fullmatch(r"[A-Z]\w*\.\w+", q) and q.split(".")[0] in classes]
    assert len(named) > 20, named  # the document walks through the engine's verbs
    missing = sorted(q for q in named if q.split(".")[1] not in classes[q.split(".")[0]])
    assert not missing, missing


def test_every_module_the_architecture_names_exists() -> None:
    modules = {p.relative_to(PDSIM).as_posix() for p in PDSIM.rglob("*.py")}
    files = [q for q in _quoted() if q.endswith(".py")]
    assert len(files) > 10, files
    missing = sorted(f for f in files if f not in modules and not (ROOT / f).exists()
                     and not any(m.endswith("/" + f) for m in modules))
    assert not missing, missing
    dotted = [q for q in _quoted() if re.fullmatch(r"pdsim(\.\w+)+", q)]
    gone = []
    for name in dotted:
        parts = name.split(".")[1:]
        # a module or package, or a name in one (``pdsim.perf.dp_group.DPGroupStepTime``)
        if not any((PDSIM.joinpath(*parts[:k]).with_suffix(".py").exists()
                    or (PDSIM.joinpath(*parts[:k]) / "__init__.py").exists())
                   for k in {len(parts), max(1, len(parts) - 1)}):
            gone.append(name)
    assert not gone, gone
