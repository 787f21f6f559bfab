"""Reliability round 3 (issue 26): regressions for the reproductions it lists."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from rel_support import assert_cli_error, small, write_yaml

from pdsim.errors import ConfigError
from pdsim.loader import load_config, parse_yaml
from pdsim.sweep import parse_grid
from pdsim.sweep.grid import MAX_SWEEP_POINTS, expand_points


@pytest.mark.parametrize(("text", "value"), [
    ("10:20", "10:20"), ("2:4", "2:4"), ("1:30:00", "1:30:00"), ("017", 17), ("0o17", 15),
    ("0x10", 16), ("1_000", "1_000"), ("2001-12-14", "2001-12-14"), ("=", "="),
    ("-12", 12 * -1), ("4e-6", 4e-6), (".inf", float("inf")), ("off", "off")])
def test_values_are_read_by_yaml_1_2_rules(text: str, value: object) -> None:
    assert parse_yaml(text) == value
    assert type(parse_yaml(text)) is type(value)


def test_base_60_is_not_a_number_in_set_or_grid(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="num_requests"):
        load_config(small(), overrides=["workload.num_requests=10:20"])
    assert parse_grid("workload.arrivals.rate_per_s=2:4,8") == (
        "workload.arrivals.rate_per_s", ["2:4", 8])
    cfg = write_yaml(tmp_path / "c.yaml", small())
    assert_cli_error(["sweep", str(cfg), "--out", str(tmp_path / "o"),
                      "--grid", "workload.num_requests=10:20"], "num_requests",
                     "valid integer")


def test_sweep_product_is_bounded_before_expansion(tmp_path: Path) -> None:
    axes = [(f"a{i}", list(range(10_000))) for i in range(3)]
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"1,000,000,000,000 points \(10000 x 10000 x "):
        expand_points(axes)
    assert time.monotonic() - t0 < 1.0
    assert len(expand_points([("a", list(range(MAX_SWEEP_POINTS)))])) == MAX_SWEEP_POINTS
    with pytest.raises(ConfigError, match="3 explicit points"):
        expand_points([("a", list(range(MAX_SWEEP_POINTS)))], [{"b": 1}] * 3)
    cfg = write_yaml(tmp_path / "c.yaml", small())
    t0 = time.monotonic()
    assert_cli_error(["sweep", str(cfg), "--out", str(tmp_path / "o"),
                      "--grid", "workload.num_requests=1:100:1",
                      "--grid", "workload.arrivals.rate_per_s=1:100:1",
                      "--grid", "seed=1:100:1"], "1,000,000 points", "100 x 100 x 100")
    assert time.monotonic() - t0 < 10.0
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ never lose a result

DATA = Path(__file__).resolve().parents[1] / "data"


def _run(args: list[str]) -> str:
    from typer.testing import CliRunner

    from pdsim.cli import app

    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.stdout


def test_a_plot_failure_leaves_the_previous_result_readable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pdsim.run_folder import STAGE_PREFIX, check_folder

    cfg = write_yaml(tmp_path / "c.yaml", small())
    out = tmp_path / "o"
    _run(["run", str(cfg), "--out", str(out)])
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def plots_fail(*args: object) -> list[Path]:
        raise ValueError("matplotlib could not draw it")

    monkeypatch.setattr("pdsim.plots.write_run_plots", plots_fail)
    with pytest.raises(ValueError, match="could not draw"):
        from pdsim.loader import load_config as lc
        from pdsim.simulation import simulate
        from pdsim.writers import write_run

        write_run(simulate(lc(small(seed=8))), out, plots=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert check_folder(out)["seed"] == 7
    assert not any(p.name.startswith(STAGE_PREFIX) for p in out.iterdir())


def test_names_matplotlib_would_read_as_mathtext_plot(tmp_path: Path) -> None:
    from pdsim.run_folder import check_folder

    cfg = write_yaml(tmp_path / "c.yaml", small(name="$\\bad$"))
    out = tmp_path / "o"
    _run(["run", str(cfg), "--out", str(out), "--plots"])
    manifest = check_folder(out)
    assert manifest["name"] == "$\\bad$"
    assert "latency_cdf.png" in manifest["files"]
    _run(["plot", str(out), "--out", str(tmp_path / "p")])
    assert (tmp_path / "p" / "latency_cdf.png").stat().st_size > 1000


@pytest.mark.parametrize("option", ["--out", "-o"])
def test_an_empty_output_path_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         option: str) -> None:
    cfg = write_yaml(tmp_path / "c.yaml", small())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    if option == "--out":
        args = ["run", str(cfg), "--out", ""]
    else:
        scrape = tmp_path / "m.txt"
        scrape.write_text("# TYPE vllm:spec_decode_num_drafts counter\n")
        args = ["import-metrics", str(scrape), "-o", ""]
    assert_cli_error(args, "is empty", "working folder")
    assert list(work.iterdir()) == []


def test_import_metrics_never_writes_over_its_scrape(tmp_path: Path) -> None:
    scrape = tmp_path / "m.txt"
    lines = []
    for name, value in (("num_drafts", 100), ("num_draft_tokens", 300),
                        ("num_accepted_tokens", 150)):
        lines += [f"# TYPE vllm:spec_decode_{name} counter",
                  f'vllm:spec_decode_{name}_total{{engine="0"}} {value}.0']
    text = "\n".join(lines) + "\n"
    scrape.write_text(text)
    assert_cli_error(["import-metrics", str(scrape), "-o", str(scrape)], "is the input")
    assert_cli_error(["import-metrics", str(scrape), "-o", str(tmp_path / "." / "m.txt")],
                     "is the input")
    assert scrape.read_text() == text


def test_import_vllm_never_writes_over_its_deployment(tmp_path: Path) -> None:
    import shutil

    hf = tmp_path / "Llama-3.1-8B.config.json"
    shutil.copy(DATA / "hf_configs" / "Llama-3.1-8B.config.json", hf)
    dep = tmp_path / "config.yaml"
    dep.write_text((DATA / "vllm_deployments" / "llama-3.1-8b-1p1d.yaml").read_text()
                   .replace("../hf_configs/", ""))
    before = dep.read_text()
    assert_cli_error(["import-vllm", "--deployment", str(dep), "--out", str(tmp_path)],
                     "config.yaml: is the input")
    assert dep.read_text() == before
    _run(["import-vllm", "--deployment", str(dep), "--out", str(tmp_path / "new")])
    assert (tmp_path / "new" / "config.yaml").is_file()


# ------------------------------------------------------------------ hostile config.json

def _import_vllm(tmp_path: Path, hf_text: str) -> list[str]:
    hf = tmp_path / "config.json"
    hf.write_text(hf_text)
    return ["import-vllm", "--hf-config", str(hf), "--prefill", "vllm serve m",
            "--decode", "vllm serve m", "--out", str(tmp_path / "o")]


@pytest.mark.parametrize(("key", "value", "phrase"), [
    ("num_attention_heads", "0", "num_attention_heads: expected a (>= 1) whole number"),
    ("hidden_size", "0", "no valid model"),
    ("num_key_value_heads", "0", "no valid model"),
    ("num_key_value_heads", "-4", "non-negative whole number"),
    ("intermediate_size", '"14336"', "non-negative whole number"),
    ("vocab_size", "NaN", "non-negative whole number"),
    ("max_position_embeddings", "1e400", "max_position_embeddings"),
    ("num_hidden_layers", "10000000000000000000", "too large"),
    ("num_hidden_layers", "10000000", "builds at most 10,000"),
    ("sliding_window", "Infinity", "sliding_window"),
    ("sliding_window", "NaN", "sliding_window"),
    ("num_attention_heads", "10000000", "no valid model"),
])
def test_hostile_config_json_values_are_one_clean_error(
        tmp_path: Path, key: str, value: str, phrase: str) -> None:
    import json

    base = json.loads((DATA / "hf_configs" / "Llama-3.1-8B.config.json").read_text())
    text = json.dumps({k: v for k, v in base.items() if k != key})
    text = text[:-1] + f', "{key}": {value}}}'
    t0 = time.monotonic()
    assert_cli_error(_import_vllm(tmp_path, text), "config.json", phrase)
    assert time.monotonic() - t0 < 5.0  # bounds are checked before anything is built
    assert not (tmp_path / "o").exists()


def test_a_deeply_nested_config_json_is_one_clean_error(tmp_path: Path) -> None:
    text = '{"rope_scaling": ' + "[" * 2000 + "]" * 2000 + "}"
    assert_cli_error(_import_vllm(tmp_path, text), "config.json", "nested too deeply")


def test_a_string_where_the_moe_reader_compares_is_one_clean_error(tmp_path: Path) -> None:
    import json

    base = json.loads((DATA / "hf_configs" / "DeepSeek-V3.config.json").read_text())
    base["first_k_dense_replace"] = "8"
    assert_cli_error(_import_vllm(tmp_path, json.dumps(base)), "config.json",
                     "no valid model")


@pytest.mark.parametrize(("prefill", "phrase"), [
    ("vllm serve m --max-model-len infk", "'infk' is not a whole number"),
    ("vllm serve m --max-model-len nank", "'nank' is not a whole number"),
    ("vllm serve m --speculative-config.num_speculative_tokens 3 "
     "--speculative-config.num_speculative_tokens.x 4", "has no key 'x'"),
    ("vllm serve m --speculative-config.a.b 3 --speculative-config.a 4",
     "has keys set and cannot also be 4"),
    ("vllm serve m --kv-transfer-config '{\"kv_connector\":[\"NixlConnector\"]}'",
     "kv_connector ['NixlConnector']: pdsim models"),
])
def test_hostile_vllm_serve_lines_are_one_clean_error(tmp_path: Path, prefill: str,
                                                      phrase: str) -> None:
    args = ["import-vllm", "--hf-config", str(DATA / "hf_configs" / "Llama-3.1-8B.config.json"),
            "--prefill", prefill, "--decode", "vllm serve m", "--out", str(tmp_path / "o")]
    assert_cli_error(args, "--prefill", phrase)


# ------------------------------------------------------------------ odd result files read back

@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pdsim.simulation import simulate
    from pdsim.writers import write_run

    out = tmp_path_factory.mktemp("good") / "o"
    write_run(simulate(load_config(small())), out)
    return out


@pytest.mark.parametrize(("patch", "phrase"), [
    ({"name": [1, 2]}, "name: [1, 2] is not what pdsim writes there (text)"),
    ({"summary": {"per_position_acceptance_rates": "abc"}}, "per_position_acceptance_rates"),
    ({"summary": {"per_position_acceptance_rates": ["a"]}}, "per_position_acceptance_rates"),
    ({"summary": {"mean_ttft_s": "x"}}, "mean_ttft_s: \"x\""),
])
@pytest.mark.parametrize("command", ["plot", "report"])
def test_odd_summary_json_is_one_clean_error(tmp_path: Path, run_folder: Path,
                                             patch: dict[str, object], phrase: str,
                                             command: str) -> None:
    import json
    import shutil

    from pdsim.run_folder import check_folder, finish_folder

    d = tmp_path / "o"
    shutil.copytree(run_folder, d)
    manifest = check_folder(d)
    doc = json.loads((d / "summary.json").read_text())
    for key, value in patch.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) else value
    (d / "summary.json").write_text(json.dumps(doc))
    run = {k: v for k, v in manifest.items() if k != "files"}
    run.update({k: v for k, v in patch.items() if k in run})  # the manifest agrees
    finish_folder(d, list(manifest["files"]), run)  # sealed as edited
    if command == "report":
        pytest.importorskip("plotly")
    args = [command, str(d)] + (["--out", str(tmp_path / "p")] if command == "plot" else [])
    assert_cli_error(args, "summary.json", phrase)


@pytest.mark.parametrize(("summaries", "phrase"), [
    ({"a": "x"}, "summaries.a: a summary must be a JSON object"),
    ({"a": {"mean_ttft_s": "x"}}, "summaries.a: mean_ttft_s"),
    ({"a": {"name": [1]}}, "summaries.a: name"),
])
def test_odd_compare_json_is_one_clean_error(tmp_path: Path, summaries: object,
                                             phrase: str) -> None:
    import json

    (tmp_path / "compare.json").write_text(json.dumps({"headline": {}, "table": [],
                                                       "summaries": summaries}))
    assert_cli_error(["plot", str(tmp_path), "--out", str(tmp_path / "p")], "compare.json",
                     phrase)


@pytest.mark.parametrize(("ts", "phrase"), [
    ("1" + "0" * 400, "a 401-digit number"), ("1e300", "at most 1e+15 ms (got 1e+300)"),
    ("-1" + "0" * 30, "a 31-digit number")])
def test_huge_mooncake_timestamps_are_one_clean_error(tmp_path: Path, ts: str,
                                                      phrase: str) -> None:
    from pdsim.errors import InputFileError
    from pdsim.workload.traces import read_mooncake

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                     f'{{"timestamp": {ts}, "input_length": 10, "output_length": 5}}\n')
    with pytest.raises(InputFileError, match=re.escape("t.jsonl:2: timestamp must be at "
                                                       "most 1e+15 ms")) as err:
        read_mooncake(trace)
    assert phrase in str(err.value)


def test_epoch_millisecond_mooncake_timestamps_are_read(tmp_path: Path) -> None:
    from pdsim.workload.traces import read_mooncake

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 1764633600000, "input_length": 10, "output_length": 5}\n'
                     '{"timestamp": 1764633600250, "input_length": 10, "output_length": 5}\n')
    assert list(read_mooncake(trace).time_s) == [0.0, 0.25]


# ------------------------------------------------------------------ inert settings, names

TOPOLOGY = {"connector": {"topology": {"gpus_per_node": 8, "nics_per_node": 8}}}


@pytest.mark.parametrize(("patch", "path", "phrase"), [
    ({"connector": {"topology": {"gpus_per_node": 8, "nics_per_node": 8},
                    "link_bandwidth_gb_per_s": 50.0}},
     "connector.link_bandwidth_gb_per_s", "would change nothing: connector.topology"),
    ({**TOPOLOGY, "faults": {"link_degradations": [
        {"link": "node00/nic01", "start_s": 0.0, "end_s": 1.0, "bandwidth_factor": 0.5}]}},
     "faults.link_degradations.0.link", "write 'node0/nic1'"),
    ({**TOPOLOGY, "faults": {"link_degradations": [
        {"link": "node01", "start_s": 0.0, "end_s": 1.0, "bandwidth_factor": 0.5}]}},
     "faults.link_degradations.0.link", "write 'node1'"),
    ({"faults": {"link_degradations": [
        {"link": "P00->D0", "start_s": 0.0, "end_s": 1.0, "bandwidth_factor": 0.5}]}},
     "faults.link_degradations.0.link", "write 'P0->D0'"),
])
def test_inert_settings_and_names_no_link_has_are_load_errors(
        patch: dict[str, object], path: str, phrase: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(small(patch))
    assert any(p == path and phrase in m for p, m in info.value.issues), info.value.issues


def test_a_sweep_over_an_inert_setting_fails_before_any_point(tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "c.yaml", small(TOPOLOGY))
    assert_cli_error(["sweep", str(cfg), "--out", str(tmp_path / "o"), "--grid",
                      "connector.link_bandwidth_gb_per_s=7,14"], "would change nothing",
                     "sweep point 1")
    assert not (tmp_path / "o").exists()


def test_the_default_link_bandwidth_beside_a_topology_still_loads() -> None:
    cfg = load_config(small(TOPOLOGY))
    assert cfg.connector.topology is not None
    assert load_config(small(TOPOLOGY, **{"faults__link_degradations": [
        {"link": "node0/nic1", "start_s": 0.0, "end_s": 1.0, "bandwidth_factor": 0.5}]}))


# ------------------------------------------------------------------ sweep resume

@pytest.mark.parametrize("run_files", [True, False])
def test_a_sweep_resume_recomputes_a_point_whose_files_were_edited(
        tmp_path: Path, run_files: bool) -> None:
    import json

    from pdsim.sweep import Sweep

    base = load_config(small({"workload": {"num_requests": 8}}))
    points = [{"workload.arrivals.rate_per_s": r} for r in (5.0, 10.0)]
    first = Sweep(base, points)
    rows = first.run(tmp_path, workers=1, run_files=run_files)
    summary = first.point_dir(tmp_path, first.points[1]) / "summary.json"
    doc = json.loads(summary.read_text())
    doc["summary"]["output_throughput_tok_s"] = 1e9  # edited by hand
    summary.write_text(json.dumps(doc))
    again = Sweep(base, points)
    rerun = again.run(tmp_path, workers=1, run_files=run_files)
    assert again.cached == [0] and again.computed == [1]
    assert rerun[1]["output_throughput_tok_s"] == rows[1]["output_throughput_tok_s"] < 1e9
    third = Sweep(base, points)
    third.run(tmp_path, workers=1, run_files=run_files)
    assert third.cached == [0, 1] and third.computed == []


@pytest.mark.parametrize("swapped", ["summary.json", "config.resolved.yaml"])
def test_a_folder_sealed_over_two_runs_is_refused(tmp_path: Path, swapped: str) -> None:
    import shutil

    from pdsim.run_folder import check_folder, finish_folder
    from pdsim.simulation import simulate
    from pdsim.writers import write_run

    a, b = tmp_path / "a", tmp_path / "b"
    write_run(simulate(load_config(small(seed=0))), a)
    write_run(simulate(load_config(small(seed=1, name="other"))), b)
    manifest = check_folder(a)
    shutil.copy(b / swapped, a / swapped)  # a seed-1 file in the seed-0 folder, resealed
    finish_folder(a, list(manifest["files"]), {k: v for k, v in manifest.items()
                                               if k != "files"})
    assert_cli_error(["plot", str(a), "--out", str(tmp_path / "p")], swapped,
                     "mixes two runs")
    if swapped == "config.resolved.yaml":
        pytest.importorskip("plotly")
        assert_cli_error(["report", str(a)], swapped, "mixes two runs")


def test_speculative_config_keys_pdsim_does_not_read_are_listed_as_ignored(
        tmp_path: Path) -> None:
    kv = " --kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'"
    spec = " --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":1%s}'"
    args = ["import-vllm", "--hf-config", str(DATA / "hf_configs" / "DeepSeek-V3.config.json"),
            "--prefill", "vllm serve m --tensor-parallel-size 8" + kv
            + spec % ',"bogus":1,"draft_tensor_parallel_size":1',
            "--decode", "vllm serve m --tensor-parallel-size 8" + kv + spec % "",
            "--out", str(tmp_path / "o")]
    from typer.testing import CliRunner

    from pdsim.cli import app

    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stdout + res.stderr
    text = " ".join(res.stderr.split())
    assert "--prefill: --speculative-config bogus (pdsim's drafter does not read it)" in text
    assert "--prefill: --speculative-config draft_tensor_parallel_size" in text
    assert "--speculative-config method" not in text


def test_calibrate_never_writes_over_its_config(tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "c.yaml", small())
    before = cfg.read_text()
    result = tmp_path / "r.json"
    result.write_text("{}")
    for out in (cfg, result):
        assert_cli_error(["calibrate", str(cfg), "--against", str(result), "--out",
                          str(out)], "is the input")
    assert cfg.read_text() == before and result.read_text() == "{}"


@pytest.mark.parametrize(("names", "phrase"), [
    (["decode.1", None], "automatic name 'decode.1' of cluster.decode.1 is already the name "
                         "of cluster.decode.0"),
    ([None, "decode.0"], "pool name 'decode.0' of cluster.decode.1 is already the automatic "
                         "name of cluster.decode.0"),
])
def test_a_pool_name_equal_to_another_pools_automatic_name_is_refused(
        names: list[str | None], phrase: str) -> None:
    sched = {"num_blocks": 512, "block_size": 16}
    pools = [{"count": 1, "scheduler": sched, **({"name": n} if n else {})} for n in names]
    with pytest.raises(ConfigError, match=re.escape(phrase)):
        load_config(small({"cluster": {"decode": pools}}))
    named = [{"count": 1, "scheduler": sched, "name": "a"}, {"count": 1, "scheduler": sched}]
    assert [p.name for p in load_config(small({"cluster": {"decode": named}})).cluster.pools()
            ] == ["", "a", "decode.1"]


@pytest.mark.parametrize("method", ["awq", "gptq", "modelopt_fp4"])
def test_a_prequantized_method_on_an_unquantised_checkpoint_is_refused(
        tmp_path: Path, method: str) -> None:
    kv = " --kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'"
    args = ["import-vllm", "--hf-config", str(DATA / "hf_configs" / "Llama-3.1-8B.config.json"),
            "--prefill", f"vllm serve m --quantization {method}" + kv,
            "--decode", "vllm serve m" + kv, "--out", str(tmp_path / "o")]
    assert_cli_error(args, f"--prefill: --quantization: {method} loads weights",
                     "this checkpoint is not quantized")
    assert not (tmp_path / "o").exists()


def test_import_metrics_refuses_accepted_totals_the_positions_contradict(
        tmp_path: Path) -> None:
    lines = []
    for name, value in (("num_drafts", 100), ("num_draft_tokens", 300),
                        ("num_accepted_tokens", 150)):
        lines += [f"# TYPE vllm:spec_decode_{name} counter",
                  f'vllm:spec_decode_{name}_total{{engine="0"}} {value}.0']
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}}'
              f" {c}.0" for i, c in enumerate([60, 20, 10])]  # 90, not 150
    scrape = tmp_path / "m.txt"
    scrape.write_text("\n".join(lines) + "\n")
    text = assert_cli_error(["import-metrics", str(scrape)],
                            "num_accepted_tokens (150) is not the sum of",
                            "num_accepted_tokens_per_pos (90)")
    assert "speculative:" not in text
