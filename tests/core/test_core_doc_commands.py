"""Every shell block (bash, sh, console) in the README and docs runs as written: each
`pdsim` command of a block, in order, in a scratch folder that sees the repository's
configs, examples and tests (tests/data), exits as the block says (0 unless a
``# exit code N`` comment follows it). A block whose first line is ``# template`` needs the
reader's own files or services and is only parsed. Not run here: the README's first block
(the install and test commands `.ci/run` itself runs) and docs/calibration.md, whose blocks
``tests/calibration/test_calibration_docs.py`` runs and compares output for."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

ROOT = Path(__file__).resolve().parents[2]
PDSIM = Path(sys.executable).with_name("pdsim")
SKIP_FILES = {"calibration.md"}  # run by tests/calibration/test_calibration_docs.py


def _commands(lang: str, body: str) -> list[str]:
    """The command lines of a block: console lines after ``$ ``, every shell line
    otherwise; backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for raw in body.splitlines():
        line = raw.rstrip()
        if not pending:
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            elif not line.strip() or line.lstrip().startswith("#"):
                continue
        pending += line.strip() + " "
        if not line.endswith("\\"):
            out.append(pending.replace("\\ ", "").strip())
            pending = ""
    return out


def _blocks() -> list[tuple[str, str, list[str], bool]]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if path.name in SKIP_FILES:
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"```(bash|sh|console)\n(.*?)```", text, re.S):
            where = f"{path.name}:{text[:m.start()].count(chr(10)) + 1}"
            if path.name == "README.md" and m.start() == 0:
                continue  # the install and test commands: .ci/run runs exactly these
            body = m.group(2)
            out.append((where, m.group(1), _commands(m.group(1), body),
                        body.startswith("# template")))
    return out


BLOCKS = _blocks()
RUNNABLE = [b for b in BLOCKS if not b[3]]


def test_every_block_is_found_and_templates_are_few() -> None:
    assert len(RUNNABLE) >= 5
    assert sum(1 for b in BLOCKS if b[3]) <= 4
    for where, _, commands, _ in BLOCKS:
        assert commands, f"{where}: a shell block without a command"
        for command in commands:
            shlex.split(command, comments=True)  # well-formed


@pytest.mark.parametrize(("where", "lang", "commands"),
                         [b[:3] for b in RUNNABLE], ids=[b[0] for b in RUNNABLE])
def test_shell_block_runs_as_written(where: str, lang: str, commands: list[str],
                                     tmp_path: Path) -> None:
    for name in ("configs", "examples", "tests"):  # tests/data: import-vllm's examples
        (tmp_path / name).symlink_to(ROOT / name)
    for command in commands:
        expected = re.search(r"#\s*exit code (\d+)", command)
        argv = shlex.split(command, comments=True)
        assert argv[0] in ("pdsim", ".venv/bin/pdsim"), f"{where}: {command}"
        done = subprocess.run([str(PDSIM), *argv[1:]], cwd=tmp_path, capture_output=True,
                              text=True, timeout=600, env={"MPLBACKEND": "Agg",
                                                           "PATH": str(PDSIM.parent),
                                                           "HOME": str(tmp_path)})
        want = int(expected.group(1)) if expected else 0
        assert done.returncode == want, f"{where}: {command}\n{done.stderr[-3000:]}"
