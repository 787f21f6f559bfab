"""A model profile as YAML text, and YAML comments: what the importer writes and what it
validates before writing (its own module, so ``deployment`` and ``render`` both use it
without importing each other)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

import yaml

from pdsim.perf.architecture import ModelArchitecture


def _comment(lines: Iterable[str], width: int = 100) -> str:
    """``lines`` as YAML comments, each wrapped to ``width`` with its indent kept."""
    out: list[str] = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()) + (4 if line.lstrip()[:2] == "- "
                                                          else 2))
        wrapped = textwrap.wrap(line, width - 2, subsequent_indent=indent,
                                break_long_words=False, break_on_hyphens=False) or [""]
        out.extend(f"# {w}".rstrip() + "\n" for w in wrapped)
    return "".join(out)


def profile_yaml(arch: ModelArchitecture, header: Iterable[str]) -> str:
    """A model profile file (loads with ``load_model_architecture``)."""
    body = yaml.safe_dump(arch.model_dump(mode="json"), sort_keys=False)
    return _comment(header) + body
