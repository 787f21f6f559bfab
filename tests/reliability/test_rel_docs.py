"""Every config example in docs/reliability.md prints exactly the error lines shown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdsim.cli import app

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
PAIRS = re.findall(r"```yaml\n(.*?)```\s*```text\n(.*?)```",
                   DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_doc_has_examples() -> None:
    assert len(PAIRS) >= 10


@pytest.mark.parametrize(("config", "expected"), PAIRS)
def test_doc_example(tmp_path: Path, config: str, expected: str) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(config)
    res = CliRunner().invoke(app, ["show-config", str(cfg)])
    assert res.exit_code == 2
    # undo the console's line wrapping; each problem starts a line with "error: "
    got = [" ".join(line.split()) for line in
           re.split(r"\n(?=error: )", res.stderr.strip())]
    assert got == expected.strip().splitlines()
