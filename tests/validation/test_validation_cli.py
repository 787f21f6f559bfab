"""``python -m validation`` writes docs/validation.md only when asked (``--write``);
``--check`` and the default only read, and every printed row carries its unit."""

from __future__ import annotations

from pathlib import Path

import pytest

import validation.__main__ as cli
from validation.rows import load_rows

ROW = load_rows()[12]  # a KV-transfer row: one quick simulation


@pytest.fixture
def one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat the quick row as the whole table (a "full" run, which may write)."""
    monkeypatch.setattr(cli, "load_rows", lambda role=None, ids=None: [ROW])


@pytest.mark.parametrize("args", [[], ["--check"], ["--no-write"]])
def test_nothing_is_written_unless_asked(args: list[str], tmp_path: Path, one_row: None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "validation.md"
    doc.write_text("hand-written\n", encoding="utf-8")
    cli.main([*args, "--doc", str(doc)])
    assert doc.read_text(encoding="utf-8") == "hand-written\n"
    out = capsys.readouterr().out
    assert "wrote" not in out
    (line,) = [ln for ln in out.splitlines() if ROW.id in ln]
    assert line.count(f" {ROW.published.unit} ") >= 2, line  # both values with the unit


def test_write_regenerates_and_check_then_passes(tmp_path: Path, one_row: None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "validation.md"
    cli.main(["--write", "--doc", str(doc), "--commit", "abc"])
    text = doc.read_text(encoding="utf-8")
    assert "python -m validation --write" in text
    before = doc.stat().st_mtime_ns
    assert cli.main(["--check", "--doc", str(doc)]) in (0, 1)
    assert "is stale" not in capsys.readouterr().out
    assert doc.stat().st_mtime_ns == before and doc.read_text(encoding="utf-8") == text


def test_check_and_write_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        cli.main(["--check", "--write"])
