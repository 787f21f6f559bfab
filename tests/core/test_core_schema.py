"""The config JSON Schema users' editors read: ``pdsim schema``, the shipped
``schema/pdsim.schema.json``, the modelines of the shipped configs, and the docs' examples."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.loader import SCHEMA_FILE, config_schema, config_schema_json, parse_yaml, read_yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
MODELINE = "# yaml-language-server: $schema="
# reliability.md shows configs that are wrong on purpose (the errors pdsim prints).
DELIBERATELY_BAD = {"reliability.md"}


def _validator() -> jsonschema.Draft202012Validator:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(data: Any) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in _validator().iter_errors(data)]


def _properties(node: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (name, schema) under a ``properties`` key, however deep."""
    if isinstance(node, dict):
        yield from node.get("properties", {}).items()
        for value in node.values():
            yield from _properties(value)
    elif isinstance(node, list):
        for value in node:
            yield from _properties(value)


def test_schema_has_dialect_id_and_a_description_on_every_property() -> None:
    schema = config_schema()
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["$id"]
    props = list(_properties(schema))
    assert len(props) > 100
    missing = [name for name, sub in props if not sub.get("description", "").strip()]
    assert missing == []


def test_cli_schema_is_the_shipped_file() -> None:
    out = CliRunner().invoke(app, ["schema"])
    assert out.exit_code == 0
    assert json.loads(out.stdout) == config_schema()
    shipped = (ROOT / SCHEMA_FILE).read_text()
    assert shipped == config_schema_json(), (
        f"{SCHEMA_FILE} is stale: regenerate it with `pdsim schema > {SCHEMA_FILE}`")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_has_modeline_and_validates(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith(MODELINE)
    target = (path.parent / first[len(MODELINE):].strip()).resolve()
    assert target == (ROOT / SCHEMA_FILE).resolve()
    assert _errors(read_yaml(path)) == []


def test_roofline_model_may_come_from_the_profile_but_unknown_keys_may_not() -> None:
    ok = {"model": {"profile": "deepseek-v3"},
          "step_time": {"kind": "roofline", "hardware": "h200"}}
    assert _errors(ok) == []
    assert _errors({"step_time": {"kind": "roofline"}}) != []  # hardware is required
    assert _errors({"cluster": {"decode": {"scheduler": {"max_num_seq": 32}}}}) != []
    assert _errors({"workload": {"arrivals": {"kind": "weibull", "rate_per_s": 4}}}) != []


def _doc_yaml_blocks() -> list[tuple[str, str]]:
    """Every ```yaml block of the docs is a pdsim config (or a sweep spec); a block of
    another program's YAML names its file after the language (```yaml prometheus.yml)."""
    blocks = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if path.name in DELIBERATELY_BAD:
            continue
        text = path.read_text()
        for m in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
            line = text[:m.start()].count("\n") + 1
            blocks.append((f"{path.name}:{line}", m.group(1)))
    return blocks


DOC_BLOCKS = _doc_yaml_blocks()


@pytest.mark.parametrize(("where", "body"), DOC_BLOCKS, ids=[w for w, _ in DOC_BLOCKS])
def test_docs_yaml_examples_validate(where: str, body: str) -> None:
    data = parse_yaml(body)
    assert isinstance(data, dict), where
    if "grid" in data or "base_overrides" in data:  # a sweep spec, not a config
        pytest.skip("sweep spec")
    assert _errors(data) == [], where


def test_reliability_doc_examples_are_rejected_where_the_schema_can_tell() -> None:
    text = (ROOT / "docs" / "reliability.md").read_text()
    bodies = re.findall(r"```ya?ml\n(.*?)```", text, re.S)
    assert bodies
    rejected = [b for b in bodies if _errors(parse_yaml(b))]
    assert len(rejected) >= len(bodies) // 2
