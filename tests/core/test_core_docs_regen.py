"""Docs that cannot drift: every generated console block in README.md and docs/*.md (a
``<!-- pdsim-console ... -->`` marker before it) is what its command prints now, numbers
within ``tools/regen_docs.py``'s ``REL_TOL`` (2%) and text exactly. Blocks marked ``slow``
are checked by ``python tools/regen_docs.py --check --all``, not here. When this fails,
``python tools/regen_docs.py`` rewrites the blocks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("regen_docs", ROOT / "tools" / "regen_docs.py")
assert _spec is not None and _spec.loader is not None
regen = importlib.util.module_from_spec(_spec)
sys.modules["regen_docs"] = regen
_spec.loader.exec_module(regen)


def test_every_fast_generated_block_matches_its_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert regen.main(["--check"]) == 0, capsys.readouterr().out


def test_the_readme_blocks_the_issue_named_are_generated() -> None:
    commands = [c for b in regen.blocks(ROOT / "README.md") for c in b.commands()]
    for start in ("pdsim run configs/mtp3.yaml", "pdsim compare configs/inkling_small",
                  "pdsim import-metrics", "pdsim calibrate", "pdsim search"):
        assert any(c.startswith(start) for c in commands), start


@pytest.mark.parametrize(("shown", "printed", "same"), [
    ("TTFT 177.77 ms", "TTFT 177.77 ms", True),
    ("TTFT 177.77 ms", "TTFT 180.00 ms", True),  # 1.3%
    ("TTFT 177.77 ms", "TTFT 183.00 ms", False),  # 2.9%
    ("RMS 34.80% -> 2.03%", "RMS 34.60% -> 2.61%", False),
    ("│ 5.36e-05 │  +34.01% │", "│ 5.35e-05 │ +34.00% │", True),  # a narrower column
    ("┏━━━━┓", "┏━━━━━━┓", True),
    ("acceptance rate +30.2 points", "acceptance rate +30.2 pt", False),
    ("3 lines\n", "3 lines\nand one more\n", False),
])
def test_numbers_compare_within_the_tolerance_and_text_exactly(
        shown: str, printed: str, same: bool) -> None:
    assert (regen.differences(shown, printed) == []) is same


def test_regeneration_rewrites_a_stale_block_and_check_then_passes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("Intro.\n\n<!-- pdsim-console: pdsim --version -->\n```text\npdsim 0.0\n"
                   "```\n\nAfter.\n", encoding="utf-8")
    assert regen.main(["--check", str(doc)]) == 1
    assert "doc.md:3" in capsys.readouterr().out
    assert regen.main([str(doc)]) == 0
    import pdsim

    text = doc.read_text(encoding="utf-8")
    assert f"```text\npdsim {pdsim.__version__}\n```\n\nAfter.\n" in text
    assert text.startswith("Intro.\n\n<!-- pdsim-console: pdsim --version -->\n")
    assert regen.main(["--check", str(doc)]) == 0


def test_slow_blocks_are_skipped_by_check_unless_all(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- pdsim-console slow: pdsim --version -->\n```text\nstale\n```\n",
                   encoding="utf-8")
    assert regen.main(["--check", str(doc)]) == 0
    assert regen.main(["--check", "--all", str(doc)]) == 1
