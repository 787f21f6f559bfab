"""Regenerate (or check) every generated console block in README.md and docs/*.md.

A generated block is a fenced block right after a marker comment:

    <!-- pdsim-console: pdsim run configs/mtp3.yaml --out out/mtp3 -->
    ```text
    ...what that command prints...
    ```

With a command in the marker, the block is that command's output (stdout and stderr as a
terminal interleaves them, 120 columns). With ``<!-- pdsim-console -->`` alone, the block
itself holds the commands, one ``$ pdsim ...`` line each followed by its output. The word
``slow`` after ``pdsim-console`` (``<!-- pdsim-console slow: ... -->``) marks a block whose
commands take more than a few seconds: ``--check`` skips it unless given ``--all``.

Commands run in-process, in order, in a scratch folder that sees the repository's
``configs``, ``examples``, ``tests`` and ``schema`` (so ``--out`` never writes into the
tree).

    python tools/regen_docs.py              # rewrite every generated block (slow ones too)
    python tools/regen_docs.py --check      # exit 1 if a fast block no longer matches
    python tools/regen_docs.py --check --all
    python tools/regen_docs.py README.md    # only these files

``--check`` compares numbers within ``REL_TOL`` (2%, relative) and all other text exactly
(runs of spaces and of table rules count as one, so a wider number that widens a column
is not a difference); the regeneration writes the output exactly as printed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Relative tolerance on every number of a checked block.
REL_TOL = 0.02
#: The terminal width commands print for (as in CI and in a pipe).
WIDTH = 120
SCRATCH_LINKS = ("configs", "examples", "tests", "schema")
MARKER = re.compile(
    r"^<!-- pdsim-console(?P<slow> slow)?(?:: (?P<cmd>.+?))? -->\n"
    r"(?P<fence>```[a-z]*\n)(?P<body>.*?)^```$", re.S | re.M)
NUMBER = re.compile(r"[-+]?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_RULES = re.compile(r"[─━═]+")


@dataclass(frozen=True)
class Block:
    """One generated block of a file: where, what runs, what it shows now."""

    path: Path
    line: int  # of the marker, 1-based
    command: str | None  # None: the block's own ``$ `` lines
    slow: bool
    start: int  # offset of the body in the file's text
    end: int
    body: str

    @property
    def where(self) -> str:
        shown = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{shown}:{self.line}"

    def commands(self) -> list[str]:
        if self.command is not None:
            return [self.command]
        return [ln[2:] for ln in self.body.splitlines() if ln.startswith("$ ")]


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    return [Block(path, text[:m.start()].count("\n") + 1, m["cmd"], bool(m["slow"]),
                  m.start("body"), m.end("body"), m["body"])
            for m in MARKER.finditer(text)]


@contextmanager
def scratch() -> Iterator[Path]:
    """A temporary working folder that sees the repository's inputs."""
    old = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="pdsim-docs-") as tmp:
        for name in SCRATCH_LINKS:
            (Path(tmp) / name).symlink_to(ROOT / name, target_is_directory=True)
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(old)


def run(line: str) -> str:
    """One documented ``pdsim`` command line's terminal output."""
    from typer.testing import CliRunner

    from pdsim.cli import app, console, err_console

    console.width = err_console.width = WIDTH
    args = shlex.split(line, comments=True)
    if not args or args[0] != "pdsim":
        raise SystemExit(f"only pdsim commands are generated: {line!r}")
    res = CliRunner().invoke(app, args[1:], terminal_width=WIDTH)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return "\n".join(ln.rstrip() for ln in res.output.rstrip("\n").splitlines()) + "\n"


def render(block: Block) -> str:
    """The block's body as its commands print it now."""
    if block.command is not None:
        return run(block.command)
    return "".join(f"$ {cmd}\n{run(cmd)}" for cmd in block.commands())


def _pieces(text: str) -> tuple[list[str], list[float]]:
    words, numbers = [], []
    pos = 0
    for m in NUMBER.finditer(text):
        words.append(text[pos:m.start()])
        numbers.append(float(m.group().replace(",", "")))
        pos = m.end()
    words.append(text[pos:])
    return [" ".join(_RULES.sub("─", w).split()) for w in words], numbers


def differences(shown: str, produced: str, rel: float = REL_TOL) -> list[str]:
    """How ``produced`` differs from ``shown``, line by line: text exactly (whitespace
    and table-rule runs collapsed), numbers within ``rel``. Empty when they match."""
    a, b = shown.rstrip("\n").splitlines(), produced.rstrip("\n").splitlines()
    out = []
    if len(a) != len(b):
        out.append(f"{len(a)} lines shown, {len(b)} printed")
    for i, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        (wx, nx), (wy, ny) = _pieces(x), _pieces(y)
        same = wx == wy and len(nx) == len(ny) and all(
            abs(p - q) <= rel * max(abs(p), abs(q)) for p, q in zip(nx, ny, strict=True))
        if not same:
            out.append(f"line {i}: shown   {x.strip()}\n        printed {y.strip()}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/regen_docs.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help=f"write nothing; exit 1 when a block differs (numbers within "
                         f"{REL_TOL:.0%})")
    ap.add_argument("--all", action="store_true", help="with --check: slow blocks too")
    ap.add_argument("files", nargs="*", type=Path, help="only these files")
    args = ap.parse_args(argv)
    files = [p.resolve() for p in args.files] or doc_files()
    stale = 0
    with scratch():
        for path in files:
            found = blocks(path)
            if not found:
                continue
            text = path.read_text(encoding="utf-8")
            new = text
            for block in reversed(found):
                if args.check and block.slow and not args.all:
                    continue
                produced = render(block)
                if args.check:
                    diff = differences(block.body, produced)
                    if diff:
                        stale += 1
                        print(f"{block.where}: {block.commands()[0]}\n  " + "\n  ".join(diff))
                elif produced != block.body:
                    new = new[:block.start] + produced + new[block.end:]
                    print(f"regenerated {block.where}")
            if new != text:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"{stale} block(s) differ: run `python tools/regen_docs.py`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
