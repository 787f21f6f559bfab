"""``pdsim profile``'s tables, and docs/step-time.md covering every config field."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from pdsim.errors import ConfigError
from pdsim.perf.config import MeasuredStepTimeConfig, RooflineStepTimeConfig
from pdsim.perf.memory import smallest_fitting_tensor_parallel_size
from pdsim.perf.profiles import load_hardware, load_model_architecture, model_names
from pdsim.perf.report import profile_report

ROOT = Path(__file__).resolve().parents[2]


def render(tables: list) -> str:  # type: ignore[type-arg]
    console = Console(record=True, width=200)
    for t in tables:
        console.print(t)
    return console.export_text()


@pytest.mark.parametrize("name", sorted(model_names()))
def test_report_for_every_model(name: str) -> None:
    arch = load_model_architecture(name)
    modules = arch.drafter.num_modules if arch.drafter else 0
    tp = smallest_fitting_tensor_parallel_size(arch, load_hardware("b200"),
                                               drafter_modules=modules)
    assert tp is not None
    tables = profile_report(name, "b200", tp, max_num_seqs=16)
    assert len(tables) == 3
    text = render(tables)
    for fragment in ("weights per GPU", "KV bytes per token", "KV blocks", "FLOPs per token",
                     "prefill 1,024 tokens", "decode 64 x 1,024 context"):
        assert fragment in text
    if arch.drafter is not None:
        assert "N=" in text


def test_report_when_weights_do_not_fit() -> None:
    tables = profile_report("llama-3.1-70b", "h100-sxm", 1)
    assert len(tables) == 2
    assert "does not fit" in render(tables)
    text = render(profile_report("llama-3.1-70b", "h100-sxm", 1, weight_dtype="fp8",
                                 num_speculative_tokens=2))
    assert "eagle3 N=2" in text
    with pytest.raises(ConfigError):
        profile_report("llama-9", "h100-sxm")


def test_report_takes_the_hybrid_moe_layout_and_names_a_bad_one() -> None:
    assert "expert_parallel_size=4" in render(profile_report("deepseek-v3", "h200", 8,
                                                             expert_parallel_size=4))
    with pytest.raises(ConfigError, match="a divisor of it") as exc:
        profile_report("deepseek-v3", "h200", 8, expert_parallel_size=3)
    assert exc.value.path == "--ep"


def test_docs_cover_every_field() -> None:
    doc = (ROOT / "docs" / "step-time.md").read_text(encoding="utf-8")
    for cls in (RooflineStepTimeConfig, MeasuredStepTimeConfig):
        for field in cls.model_fields:
            assert f"`{field}`" in doc, f"docs/step-time.md does not mention {field}"
    for column in ("phase", "batch_size", "tokens", "context_tokens", "step_time_s"):
        assert f"`{column}`" in doc
