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


def _attribute_writes(attr: str) -> list[str]:
    """Every ``x.<attr> = ...`` (or ``+=``) in ``pdsim/``, as ``module:line``."""
    found = []
    for path in sorted(ENGINE.parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and sub.attr == attr:
                        found.append(f"{path.relative_to(ENGINE.parent)}:{node.lineno}")
    return found


def test_only_the_request_writes_its_phase() -> None:
    writes = _attribute_writes("phase")
    assert writes, "the request's own verbs write it"
    assert {w.split(":")[0] for w in writes} == {"engine/request.py"}, writes


def test_only_the_kv_manager_turns_a_request_s_tokens_into_blocks() -> None:
    """Inside the engine a request's block need is worked out once, in the KV manager
    (``KVManager.extra_blocks``: blocks for its tokens less the blocks it holds); decode
    rows grow by the vectorized rule of ``decode_advance.blocks_needed``."""
    calls = []
    for path in sorted(ENGINE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "blocks_for"):
                calls.append(f"{path.name}:{node.lineno}")
    assert calls, "the KV manager calls it"
    assert {c.split(":")[0] for c in calls} == {"kv_manager.py"}, calls


def _handover_fields() -> tuple[str, ...]:
    from pdsim.engine.request import HandOver

    return HandOver.__slots__


def _writes_and_builds(names: tuple[str, ...], builder: str) -> list[str]:
    """Every write ``x.<name> = ...`` (or ``+=``) of one of ``names`` and every call of
    ``builder(...)`` in ``pdsim/``, as ``module:function:line``, with the writes inside a
    ``__init__`` of class ``builder`` itself left out (the record setting its defaults)."""
    found = []
    for path in sorted(ENGINE.parent.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own_init: set[ast.AST] = set()
        for cls in ast.walk(tree):
            if isinstance(cls, ast.ClassDef) and cls.name == builder:
                for fn in cls.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                        own_init.update(ast.walk(fn))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ENGINE.parent)}:{getattr(node, 'lineno', 0)}"
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == builder):
                found.append(where)
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                for sub in ast.walk(t):
                    if (isinstance(sub, ast.Attribute) and sub.attr in names
                            and node not in own_init):
                        found.append(where)
    return found


def test_only_the_proxy_and_the_kv_transfers_write_the_hand_over_record() -> None:
    """The facts of a hand-over attempt (``HandOver``: which P and D, the pin, the KV
    load's start, landing or failure, the bytes) are made by the proxy (the second hop)
    and written by it and by the KV transfers (the load), each field by one of them
    alone; a request only holds its current attempt's record, which the proxy sets
    (``Request.handover``, None when the request is made and on a retry)."""
    fields = _handover_fields()
    assert "kv_landed_s" in fields and "p_name" in fields
    writes = _writes_and_builds(fields, "HandOver")
    assert writes, "the proxy builds the record and the two write it"
    assert {w.split(":")[0] for w in writes} == {"cluster/proxy.py",
                                                 "cluster/kv_transfers.py"}, writes
    builds = set(_writes_and_builds((), "HandOver"))
    assert {b.split(":")[0] for b in builds} == {"cluster/proxy.py"}, builds
    for name in fields:  # one writer for each field (the record's own defaults aside)
        where = {w.split(":")[0] for w in set(_writes_and_builds((name,), "HandOver"))
                 - builds}
        assert len(where) <= 1, (name, where)
    sets = _attribute_writes("handover")
    assert {w.split(":")[0] for w in sets} == {"cluster/proxy.py", "engine/request.py"}, sets
    # the request sets it only once, to None, as it is made
    in_request = [w for w in sets if w.startswith("engine/request.py")]
    assert len(in_request) == 1, in_request
