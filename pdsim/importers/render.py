"""The imported config and model profile as YAML text, headed by comments that say where
they come from, what was assumed and what was ignored."""

from __future__ import annotations

from collections.abc import Iterable

import yaml

from pdsim.importers.deployment import ImportResult
from pdsim.importers.profile_text import _comment, profile_yaml

__all__ = ["profile_yaml", "result_yaml"]


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
