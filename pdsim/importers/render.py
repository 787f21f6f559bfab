"""The imported config and model profile as YAML text, headed by comments that say where
they come from, what was assumed and what was ignored."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

import yaml

from pdsim.importers.deployment import ImportResult
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


def _section(title: str, items: Iterable[str]) -> list[str]:
    items = list(items)
    return [title, *(f"  - {i}" for i in items)] if items else []


def result_yaml(result: ImportResult, hf_source: str) -> tuple[str, str]:
    """(config text, profile text) of an import."""
    sources = ["Imported by `pdsim import-vllm` from:"]
    for c in result.commands:
        cmd = " ".join(c.command.replace("\\\n", " ").split())
        sources.append(f"  --{c.role} (x{c.count}, {c.hardware}): {cmd}")
    sources.append(f"  model: {hf_source}")
    notes = [*sources,
             *_section("Assumed (not on the command lines or in config.json; check them):",
                       result.assumed),
             *_section("Ignored (no effect on what pdsim simulates):", result.ignored),
             "Not imported: the workload (pdsim's default synthetic one; see "
             "docs/workloads.md)."]
    config = _comment(notes) + yaml.safe_dump(result.config, sort_keys=False)
    arch = result.profile
    header = [f"Model profile {arch.name}, read by `pdsim import-vllm` from {hf_source}.",
              *_section("Assumed (see also `estimated` below):",
                        (f"{k}: {v}" for k, v in arch.estimated.items()))]
    return config, profile_yaml(arch, header)
