"""docs/calibration.md shows real output: every ``$ pdsim ...`` line of its console
blocks is run (in order, in a scratch directory that sees the repository's ``configs``
and ``examples``) and must print what the page shows and exit as its ``# exit code N``
comment says (0 when none).

After a change that moves the numbers, rewrite the page's outputs with
``.venv/bin/python tests/calibration/test_calibration_docs.py``.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "calibration.md"
BLOCK = re.compile(r"```console\n(.*?)```", flags=re.S)
EXIT = re.compile(r"#\s*exit code (\d+)\s*$")


def commands(block: str) -> list[tuple[str, str]]:
    """(command line, shown output) pairs of one console block."""
    pairs: list[tuple[str, str]] = []
    for line in block.splitlines(keepends=True):
        if line.startswith("$ "):
            pairs.append((line[2:].rstrip("\n"), ""))
        elif pairs:
            pairs[-1] = (pairs[-1][0], pairs[-1][1] + line)
    return pairs


def normalized(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def run(line: str) -> tuple[str, int]:
    """Run one documented ``pdsim`` command line; (terminal output, exit code)."""
    from pdsim.cli import app, console, err_console

    console.width = err_console.width = 120  # as in CI, whatever terminal runs this
    args = shlex.split(line, comments=True)
    assert args[0] == "pdsim", f"only pdsim commands run here: {line}"
    res = CliRunner().invoke(app, args[1:])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.output, res.exit_code


def expected_exit(line: str) -> int:
    m = EXIT.search(line)
    return int(m.group(1)) if m else 0


def scratch(tmp: Path) -> None:
    for name in ("configs", "examples"):
        (tmp / name).symlink_to(ROOT / name, target_is_directory=True)


@pytest.fixture
def in_scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    scratch(tmp_path)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def test_the_doc_shows_real_output(in_scratch: Path) -> None:
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    pairs = [p for b in blocks for p in commands(b)]
    assert len(pairs) >= 5
    for line, shown in pairs:
        output, code = run(line)
        assert code == expected_exit(line), (line, output)
        assert normalized(output) == normalized(shown), (
            f"{line}: output differs from docs/calibration.md; regenerate it with "
            f"python {Path(__file__).relative_to(ROOT)}\n{output}")


def regenerate() -> None:
    """Rewrite every console block of the page with fresh output."""
    import os
    import tempfile

    text = DOC.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        scratch(Path(tmp))
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            def fill(m: re.Match[str]) -> str:
                out = []
                for line, _ in commands(m.group(1)):
                    output, code = run(line)
                    if code != expected_exit(line):
                        sys.exit(f"{line}: exit code {code}")
                    out.append(f"$ {line}\n{normalized(output)}\n")
                return "```console\n" + "".join(out) + "```"

            text = BLOCK.sub(fill, text)
        finally:
            os.chdir(cwd)
    DOC.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    regenerate()
