"""Exported vllm serve lines import back (``pdsim import-vllm``) to the same deployment,
and the config with the imported deployment simulates to the same figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from plan_support import DSV3_HF, DSV3_PLAN, LLAMA_HF, small_config, small_spec

from pdsim.plan import enumerate_candidates, plan, read_plan_config
from pdsim.plan.planner import KEEP
from pdsim.plan.serve_lines import (
    deployment_document,
    import_back,
    round_trip_differences,
    serve_commands,
    with_deployment,
)
from pdsim.plan.space import candidate_config


@pytest.fixture(scope="module")
def small_plan() -> object:
    return plan(small_config(), small_spec(), 2, workers=1)


def test_every_front_point_round_trips_to_the_same_figures(small_plan: object) -> None:
    from pdsim.results import summary_only
    from pdsim.simulation import simulate

    hf = json.loads(LLAMA_HF.read_text())
    pl = small_plan
    assert pl.front  # type: ignore[attr-defined]
    for i in pl.front:  # type: ignore[attr-defined]
        p = pl.points[i]  # type: ignore[attr-defined]
        imported = import_back(p.config, hf, "meta-llama/Llama-3.1-8B")
        assert round_trip_differences(p.config, imported) == [], p.label
        back = with_deployment(p.config, imported)
        summary = simulate(summary_only(back)).summary.as_dict()
        assert {k: summary.get(k) for k in KEEP} == p.figures, p.label


def test_deepseek_layouts_round_trip_through_the_importer() -> None:
    cfg, spec = read_plan_config(DSV3_PLAN)
    hf = json.loads(DSV3_HF.read_text())
    seen = set()
    engines = 0
    for cand in enumerate_candidates(cfg, spec.model_copy(update={"expert_parallel": (
            False, True), "tensor_parallel_sizes": None}), 16):
        key = (cand.mode, tuple((n, c.layout) for n, c in cand.roles))
        if key in seen or cand.num_speculative_tokens != 3:
            continue
        try:
            c = candidate_config(cfg, cand)
        except Exception:  # does not fit: nothing to export
            continue
        seen.add(key)
        for _, choice in cand.roles:  # DP ranks sharing experts: one attention-DP engine
            groups = [g for g in (c.cluster.prefill, c.cluster.decode, c.cluster.colocated)
                      if g is not None and not isinstance(g, tuple)]
            dp = choice.layout.dp if choice.layout.ep else 1
            assert any(g.attention_dp_size == dp and g.count == choice.instances
                       for g in groups), cand.label
            engines += dp > 1
        imported = import_back(c, hf, "deepseek-ai/DeepSeek-V3")
        assert round_trip_differences(c, imported) == [], cand.label
        assert with_deployment(c, imported) == c, cand.label
    assert engines > 0
    assert len(seen) >= 20  # 8-GPU layouts: TP8, TP8 EP8, TP4/2/1 with DP; and 16-GPU ones


def _first_fitting(cfg: object, cands: list[object]) -> object:
    for cand in cands:
        try:
            return candidate_config(cfg, cand)  # type: ignore[arg-type]
        except Exception:  # does not fit
            continue
    raise AssertionError("no candidate fits")


def test_serve_lines_say_everything_the_import_would_assume() -> None:
    cfg, spec = read_plan_config(DSV3_PLAN)
    c = _first_fitting(cfg, [
        c for c in enumerate_candidates(cfg, spec, 16) if c.mode == "disaggregated"
        and c.decode is not None and c.decode.layout.dp == 8
        and c.num_speculative_tokens == 3])
    cmds = serve_commands(c, "deepseek-ai/DeepSeek-V3")
    decode = next(x for x in cmds if x["role"] == "decode")
    assert decode["count"] == 1 and decode["instances"] == 8 and decode["gpus"] == 8
    line = decode["command"]
    for opt in ("--tensor-parallel-size 1", "--data-parallel-size 8",
                "--enable-expert-parallel", "--max-num-seqs", "--max-num-batched-tokens",
                "--block-size 64", "--no-enable-prefix-caching", "--enable-chunked-prefill",
                '"num_speculative_tokens":3', '"kv_role":"kv_consumer"'):
        assert opt in line
    from pdsim.importers.deployment import import_deployment  # noqa: F401 (the inverse)

    doc = deployment_document(c, str(DSV3_HF), "deepseek-ai/DeepSeek-V3")
    assert yaml.safe_load(yaml.safe_dump(doc)) == doc and doc["hardware"] == "h200"


def test_exported_deployment_file_imports_with_the_cli(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pdsim.cli import app

    cfg, spec = read_plan_config(DSV3_PLAN)
    c = _first_fitting(cfg, [x for x in enumerate_candidates(cfg, spec, 16)
                             if x.mode == "colocated"])
    dep = tmp_path / "deployment.yaml"
    dep.write_text(yaml.safe_dump(deployment_document(c, str(DSV3_HF),
                                                      "deepseek-ai/DeepSeek-V3")))
    res = CliRunner().invoke(app, ["import-vllm", "--deployment", str(dep), "--out",
                                   str(tmp_path / "imported")])
    assert res.exit_code == 0, res.output
    imported = yaml.safe_load((tmp_path / "imported" / "config.yaml").read_text())
    assert round_trip_differences(c, imported) == []


def test_hybrid_moe_layout_is_listed_as_not_exported() -> None:
    """vLLM has no option for experts over groups of a TP group (TensorRT-LLM's --tp 8
    --ep 4): the line keeps TP8 without --enable-expert-parallel and says so."""
    import pdsim

    cfg = pdsim.load_config({
        "name": "hybrid", "model": {"profile": "deepseek-v3"},
        "step_time": {"kind": "roofline", "hardware": "h200", "tensor_parallel_size": 8,
                      "expert_parallel_size": 4},
        "cluster": {"mode": "colocated", "colocated": {"count": 1}},
        "workload": {"num_requests": 2, "arrivals": {"kind": "closed_loop", "concurrency": 1},
                     "prompt_tokens": {"kind": "fixed", "tokens": 128},
                     "output_tokens": {"kind": "fixed", "tokens": 16}}})
    (entry,) = serve_commands(cfg, "deepseek-ai/DeepSeek-V3")
    assert "--tensor-parallel-size 8" in entry["command"]
    assert "--enable-expert-parallel" not in entry["command"]
    assert "cluster.colocated.step_time.expert_parallel_size" in entry["not_exported"]
