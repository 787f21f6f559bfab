"""Every Python block in the README and docs runs as written (as a script, in a scratch
folder that sees the repository's configs and examples), unless its first line marks it
``# template``: those need the reader's own data."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = "# template"


def _blocks() -> list[tuple[str, str]]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"```python\n(.*?)```", text, re.S):
            out.append((f"{path.name}:{text[:m.start()].count(chr(10)) + 1}", m.group(1)))
    return out


BLOCKS = _blocks()
RUNNABLE = [(w, b) for w, b in BLOCKS if not b.startswith(TEMPLATE)]


def test_templates_are_few_and_say_so() -> None:
    templates = [w for w, b in BLOCKS if b.startswith(TEMPLATE)]
    assert len(RUNNABLE) >= 8
    assert len(templates) <= 2, templates


@pytest.mark.parametrize(("where", "code"), RUNNABLE, ids=[w for w, _ in RUNNABLE])
def test_python_block_runs_as_written(where: str, code: str, tmp_path: Path) -> None:
    for name in ("configs", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{where}:\n{done.stderr[-3000:]}"
