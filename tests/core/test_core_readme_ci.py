"""The README's first two commands are what .ci/run runs, so a fresh machine does what CI does."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_commands_as_written() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.match(r"```bash\n(.*?)```", readme, re.S)
    assert first is not None, "README.md must open with the two commands in a bash block"
    commands = [line for line in first.group(1).splitlines() if line.strip()]
    assert len(commands) == 2, commands
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for command in commands:
        assert command in ci_lines, f".ci/run does not run the README's {command!r}"


def test_ci_runs_every_lane() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^\.venv/bin/pytest .*--lanes all", ci, re.M), ci
