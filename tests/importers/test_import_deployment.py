"""``pdsim import-vllm`` end to end: each test deployment (tests/data/vllm_deployments,
command lines as vLLM's docs write them, real config.json files) becomes a config and a
model profile file that load and simulate; bad deployments are errors naming the command
and the option."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.errors import ConfigError
from pdsim.importers.deployment import RoleCommand, import_deployment
from pdsim.importers.hf_config import read_hf_config
from pdsim.loader import load_config
from pdsim.perf.config import CPU_COST_RULES
from pdsim.perf.profiles import load_hardware
from pdsim.simulation import simulate

DATA = Path(__file__).resolve().parents[1] / "data"
DEPLOYMENTS = DATA / "vllm_deployments"
TINY = ["workload.num_requests=12"]
HETEROGENEOUS = "deepseek-v3-tp8p-dp8ep-d.yaml"
POOLS = "llama-3.1-8b-2-decode-pools.yaml"


def _import_cli(deployment: Path, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["import-vllm", "--deployment", str(deployment),
                                    "--out", str(out), *extra])


def _run(out: Path) -> Any:
    cfg = load_config(out / "config.yaml", TINY)
    res = simulate(cfg)
    assert res.summary.completed == 12
    return cfg


@pytest.mark.parametrize("name", [p.name for p in sorted(DEPLOYMENTS.glob("*.yaml"))])
def test_each_deployment_imports_and_runs(name: str, tmp_path: Path) -> None:
    res = _import_cli(DEPLOYMENTS / name, tmp_path)
    assert res.exit_code == 0, res.output
    assert "assumed:" in res.output
    _run(tmp_path)


def test_deepseek_1p1d_maps_the_options(tmp_path: Path) -> None:
    assert _import_cli(DEPLOYMENTS / "deepseek-v3-1p1d.yaml", tmp_path).exit_code == 0
    cfg = _run(tmp_path)
    st = cfg.step_time
    assert st.kind == "roofline" and st.tensor_parallel_size == 8
    # vLLM's serving-loop CPU costs (pdsim.perf.config.CPU_COST_RULES)
    assert st.cpu_cost_rule == "vllm" and "cpu_cost_rule: vllm" in (
        tmp_path / "config.yaml").read_text(encoding="utf-8")
    assert (st.overhead_s, st.overhead_per_request_s, st.eager_kernel_s) == CPU_COST_RULES["vllm"]
    # and vLLM's own MoE kernels (the profile's per-engine fit)
    h200 = load_hardware("h200").kernels
    assert h200 is not None
    assert st.kernel_rule == "vllm" and st.moe_pair_s == h200.moe_pair_s_by_engine["vllm"]
    assert st.resolved_model().weight_dtype == "fp8"
    assert (cfg.speculative.method, cfg.speculative.num_speculative_tokens) == ("mtp", 1)
    assert cfg.model.num_mtp_modules == 1 and cfg.model.max_model_len == 163840
    assert cfg.connector.kv_load_failure_policy == "fail"
    assert (cfg.cluster.prefill.count, cfg.cluster.decode.count) == (1, 1)
    assert cfg.cluster.decode.scheduler.block_size == 64  # MLA: FlashMLA's block, assumed
    text = (tmp_path / "config.yaml").read_text(encoding="utf-8")
    assert "# Assumed" in text and "hardware: h200" in text and "--port 8000" in text


def test_dp_and_ep_become_instances_and_expert_parallelism(tmp_path: Path) -> None:
    assert _import_cli(DEPLOYMENTS / "qwen3-30b-a3b-dp8ep.yaml", tmp_path).exit_code == 0
    cfg = _run(tmp_path)
    assert cfg.cluster.mode == "colocated" and cfg.cluster.colocated.count == 8
    assert (cfg.step_time.tensor_parallel_size, cfg.step_time.expert_parallel_size) == (1, 8)
    # --data-parallel-size 8 --enable-expert-parallel: one attention-DP engine of 8 ranks
    assert cfg.cluster.colocated.attention_dp_size == 8


def test_dp_without_expert_parallelism_stays_lone_instances(tmp_path: Path) -> None:
    """Without --enable-expert-parallel the DP ranks share nothing pdsim models: 8 lone
    instances, no attention-DP engine."""
    text = (DEPLOYMENTS / "qwen3-30b-a3b-dp8ep.yaml").read_text(encoding="utf-8")
    text = text.replace("      --enable-expert-parallel \\\n", "").replace(
        "../hf_configs/", f"{(DEPLOYMENTS.parent / 'hf_configs').as_posix()}/")
    assert "--enable-expert-parallel" not in text
    (tmp_path / "dp8.yaml").write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    assert _import_cli(tmp_path / "dp8.yaml", out).exit_code == 0
    cfg = _run(out)
    assert cfg.cluster.colocated.count == 8
    assert cfg.cluster.colocated.attention_dp_size == 1


def test_heterogeneous_p_and_d_get_their_own_step_times(tmp_path: Path) -> None:
    assert _import_cli(DEPLOYMENTS / HETEROGENEOUS, tmp_path).exit_code == 0
    written = yaml.safe_load((tmp_path / "config.yaml").read_text(encoding="utf-8"))
    assert written["cluster"]["prefill"]["step_time"]["tensor_parallel_size"] == 8
    assert written["step_time"]["expert_parallel_size"] == 8
    assert written["cluster"]["decode"]["count"] == 8
    assert written["cluster"]["decode"]["attention_dp_size"] == 8
    assert written["cluster"]["prefill"].get("attention_dp_size", 1) == 1
    _run(tmp_path)


def test_pools_of_one_role_become_a_list_of_named_groups() -> None:
    from pdsim.commands.import_vllm import _deployment_file, _role_commands

    data, base = _deployment_file(DEPLOYMENTS / POOLS)
    commands = _role_commands(data, POOLS, None)
    res = import_deployment(commands, read_hf_config(base / data["hf_config"]),
                            check=False)  # lists of groups load once the groups branch lands
    decode = res.config["cluster"]["decode"]
    assert [g["name"] for g in decode] == ["d-h100", "d-h200"]
    assert [g["count"] for g in decode] == [2, 1]
    assert "step_time" not in decode[0]  # the first decode pool's is the root step time
    assert decode[1]["step_time"]["hardware"] == "h200"
    assert res.config["step_time"]["hardware"] == "h100-sxm"
    assert res.config["name"].endswith("-1p3d")


def test_the_written_files_load_from_any_folder(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "deep" / "imported"
    assert _import_cli(DEPLOYMENTS / "llama-3.1-8b-1p1d.yaml", out).exit_code == 0
    monkeypatch.chdir(tmp_path)  # the profile is found next to the config, not here
    cfg = load_config(Path("deep/imported/config.yaml"), TINY)
    assert cfg.model.profile == str((out / "llama-3.1-8b.model.yaml").resolve())
    res = CliRunner().invoke(app, ["profile", "deep/imported/llama-3.1-8b.model.yaml",
                                   "h100-sxm"])
    assert res.exit_code == 0, res.output


def _deepseek(prefill: str, decode: str) -> None:
    import_deployment([RoleCommand("prefill", prefill), RoleCommand("decode", decode)],
                      read_hf_config(DATA / "hf_configs" / "DeepSeek-V3.config.json"))


NIXL = "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"%s\"}'"
P = "vllm serve deepseek-ai/DeepSeek-V3 -tp 8 " + NIXL % "kv_producer"
D = "vllm serve deepseek-ai/DeepSeek-V3 -tp 8 " + NIXL % "kv_consumer"


@pytest.mark.parametrize(("prefill", "decode", "message"), [
    (P, D.replace("kv_consumer", "kv_producer"),
     r"--decode: --kv-transfer-config: kv_role 'kv_producer' on a decode instance"),
    (P.replace("kv_producer", "kv_consumer"), D,
     r"--prefill: --kv-transfer-config: kv_role 'kv_consumer' on a prefill instance"),
    (P, D.replace("DeepSeek-V3", "Llama-3.1-8B"),
     r"--decode: model: serves 'deepseek-ai/Llama-3.1-8B' but --prefill serves"),
    (P, "vllm serve deepseek-ai/DeepSeek-V3 -tp 8",
     r"--decode: --kv-transfer-config: missing"),
    (P, D.replace("NixlConnector", "ExampleConnector"), r"kv_connector 'ExampleConnector'"),
    (P, D + " -pp 2", r"--decode: --pipeline-parallel-size: pdsim does not model pipeline"),
    (P, D + " --quantization awq", r"--decode: --quantization: awq, but config.json says"),
    (P, D + " --speculative-config '{\"method\":\"eagle3\"}'",
     r"num_speculative_tokens must be a whole number"),
    (P + " --max-model-len 4096", D + " --max-model-len 8192",
     r"--decode: --max-model-len: 8192 differs from --prefill's 4096"),
    (P, D + " --kv-cache-dtype int3", r"--decode: --kv-cache-dtype: 'int3'"),
    (P + " --max-model-len 1m", D + " --max-model-len 1m",
     r"--prefill: --max-model-len: 1000000 is longer than the model's context, 163840 "
     r"tokens"),
    (P, D.replace("-tp 8", "-tp 3"),
     r"--decode: --tensor-parallel-size: 3 does not divide the model's 128 heads"),
    (P, D + " --speculative-config '{\"method\":\"medusa\",\"num_speculative_tokens\":2}'",
     r"method 'medusa'"),
])
def test_conflicts_are_named(prefill: str, decode: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _deepseek(prefill, decode)


def test_a_speculative_method_the_model_cannot_run() -> None:
    spec = " --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":1}'"
    with pytest.raises(ConfigError, match=r"--colocated: --speculative-config: method mtp, "
                       r"but the model's config.json has no MTP layers"):
        import_deployment([RoleCommand("colocated", "vllm serve meta-llama/Llama-3.1-8B"
                                       + spec)],
                          read_hf_config(DATA / "hf_configs" / "Llama-3.1-8B.config.json"))


def test_an_eagle3_head_is_assumed_and_said(tmp_path: Path) -> None:
    spec = ("--speculative-config '{\"model\": \"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B\", "
            "\"num_speculative_tokens\": 3, \"method\": \"eagle3\"}'")
    res = CliRunner().invoke(app, [
        "import-vllm", "--hf-config", str(DATA / "hf_configs" / "Llama-3.1-8B.config.json"),
        "--colocated", f"vllm serve meta-llama/Llama-3.1-8B {spec}", "--hardware",
        "h100-sxm", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "eagle3 head shaped like a target layer" in res.output
    cfg = _run(tmp_path)
    assert cfg.speculative.method == "eagle3"
    assert cfg.step_time.resolved_model().drafter is not None


def test_cli_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, [
        "import-vllm", "--hf-config", str(DATA / "hf_configs" / "Llama-3.1-8B.config.json"),
        "--colocated", "vllm serve meta-llama/Llama-3.1-8B --bogus 1", "--out",
        str(tmp_path)])
    assert res.exit_code == 2
    assert "error: --colocated: --bogus: unknown vllm serve option" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(app, ["import-vllm", "--out", str(tmp_path),
                                   "--colocated", "vllm serve m"])
    assert res.exit_code == 2 and "error: --hf-config: missing" in res.output


def test_a_missing_hf_config_of_a_deployment_file_names_the_field(tmp_path: Path) -> None:
    dep = tmp_path / "dep.yaml"
    dep.write_text("hf_config: nope/config.json\ncolocated: {command: vllm serve m}\n")
    res = CliRunner().invoke(app, ["import-vllm", "--deployment", str(dep), "--out",
                                   str(tmp_path / "out")])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert (f"error: {dep}: hf_config: {tmp_path / 'nope' / 'config.json'}: no such file "
            "(a path relative to the deployment file)") in " ".join(res.output.split())


@pytest.mark.parametrize(("flag", "overlaps"), [("", True), (" --async-scheduling", True),
                                                 (" --no-async-scheduling", False)])
def test_async_scheduling_is_vllms_default_unless_turned_off(flag: str,
                                                             overlaps: bool) -> None:
    # vLLM schedules asynchronously by default from v0.14; the import says so when the
    # command does not, and --no-async-scheduling keeps the synchronous loop
    res = import_deployment([RoleCommand("colocated", "vllm serve meta-llama/Llama-3.1-8B"
                                         + flag)],
                            read_hf_config(DATA / "hf_configs" / "Llama-3.1-8B.config.json"))
    assert res.config["step_time"]["async_scheduling"] is overlaps
    said = [a for a in res.assumed if "async_scheduling" in a]
    assert bool(said) is (flag == "")
    assert not any("async-scheduling" in i for i in res.ignored)
