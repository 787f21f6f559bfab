"""Reliability round 3 (issue 26), the reproductions still open after its first pass:
all-sliding-window models, names of the transfer network checked at load, inert settings,
bytes that never landed, and writers that bound their memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rel_support import assert_cli_error, small, small_cfg, write_yaml

from pdsim.config import Role
from pdsim.engine.kv_manager import KVManager
from pdsim.errors import ConfigError
from pdsim.importers.deployment import RoleCommand, import_deployment
from pdsim.loader import load_config

# ----------------------------------------------------------- all-sliding-window models

# The fields of Mistral-7B-v0.1's published config.json (every layer slides, 4096 tokens)
# and Phi-3-mini-4k-instruct's (every layer slides, 2047 tokens; 32 KV heads).
MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32000}
PHI3_MINI = {
    "architectures": ["Phi3ForCausalLM"], "hidden_act": "silu", "hidden_size": 3072,
    "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 2047,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32064}
NIXL = "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'"


@pytest.mark.parametrize(("hf", "window"), [(MISTRAL_7B, 4096), (PHI3_MINI, 2047)])
def test_all_sliding_window_models_import_and_run(tmp_path: Path, hf: dict[str, Any],
                                                  window: int) -> None:
    from pdsim.importers.render import profile_yaml
    from pdsim.simulation import simulate

    res = import_deployment([RoleCommand("prefill", f"vllm serve m {NIXL}"),
                             RoleCommand("decode", f"vllm serve m {NIXL}")], hf)
    profile = tmp_path / res.profile_file
    profile.write_text(profile_yaml(res.profile, []), encoding="utf-8")
    data = json.loads(json.dumps(res.config))
    data["model"]["profile"] = str(profile)
    cfg = load_config(data, overrides=["workload.num_requests=20"])
    assert [g.kind for g in cfg.model.layer_groups] == ["sliding_window"]
    layout = cfg.kv_layout(16, cfg.pool(Role.DECODE).group)
    # a block is 16 tokens of the layers' KV; a request never holds more than its window's
    head_dim = hf["hidden_size"] // hf["num_attention_heads"]
    per_token = 32 * 2 * hf["num_key_value_heads"] * head_dim * 2  # layers, K+V, bf16
    assert layout.block_bytes == 16 * per_token
    assert layout.blocks_for(10 * window) == layout.blocks_for(window) == -(-window // 16)
    # the pool is counted in the same blocks (the roofline's memory over block_bytes)
    results = simulate(cfg)
    assert results.summary.completed == 20


def _sliding(**sched: Any) -> dict[str, Any]:
    return small({"model": {"layer_groups": [
        {"kind": "sliding_window", "num_layers": 4, "kv_bytes_per_token_per_layer": 256,
         "window_tokens": 64}]},
        "speculative": {"method": "none", "num_speculative_tokens": 0,
                        "acceptance": {"kind": "constant", "rate": 0.0}},
        "cluster": {"decode": {"scheduler": sched}, "prefill": {"scheduler": sched}}})


@pytest.mark.parametrize("sched", [{"num_blocks": 8}, {"num_blocks": None}])
def test_a_pdsim_config_whose_layers_all_slide_loads_and_runs(sched: dict[str, Any]) -> None:
    from pdsim.simulation import simulate

    data = _sliding(**sched)
    if sched["num_blocks"] is None:
        for role in ("prefill", "decode"):  # num_blocks None: deleted by the merge
            data["cluster"][role]["kv_cache_gib"] = 8 * 16 * 1024 / 2**30
    cfg = load_config(data)
    layout = cfg.kv_layout(16)
    assert layout.block_bytes == 16 * 4 * 256 and not layout.full
    assert layout.blocks_for(5) == 1 and layout.blocks_for(2000) == 4  # 64-token window
    assert cfg.num_blocks(Role.DECODE) == 8  # kv_cache_gib counted in the layout's blocks
    assert simulate(cfg).summary.completed == 30


def test_max_fit_tokens_stops_at_max_model_len_when_blocks_stop_growing() -> None:
    cfg = load_config(_sliding(num_blocks=8))
    kv = KVManager(cfg.kv_layout(16), 8, False, 16, 1)
    assert kv.max_fit_tokens(1, cfg.model.max_model_len) == cfg.model.max_model_len
    full = small_cfg()
    kv = KVManager(full.kv_layout(16), 512, False, 16, 1)
    assert kv.max_fit_tokens(4, 1 << 30) == 512 * 16 - 4


def test_a_hybrid_pool_is_counted_in_the_layouts_blocks() -> None:
    """One rule for pool sizing and block bytes: a pool of kv_cache_gib holds that many
    bytes in blocks of the full-attention layers, sliding layers charged in the same."""
    data = small({"model": {"layer_groups": [
        {"kind": "attention", "num_layers": 1, "kv_bytes_per_token_per_layer": 256},
        {"kind": "sliding_window", "num_layers": 5, "kv_bytes_per_token_per_layer": 256,
         "window_tokens": 64}]}})
    for role in ("prefill", "decode"):
        data["cluster"][role]["scheduler"].pop("num_blocks")
        data["cluster"][role]["kv_cache_gib"] = 1.0
    cfg = load_config(data)
    layout = cfg.kv_layout(16, cfg.pool(Role.DECODE).group)
    assert cfg.num_blocks(Role.DECODE) == 2**30 // layout.block_bytes
    with pytest.raises(ConfigError):
        load_config(small({"model": {"layer_groups": [{"kind": "sliding_window",
                                                        "num_layers": 1}]}}))


# ------------------------------------------------------------ bytes that never landed

@pytest.mark.parametrize("faults", [{"kv_transfer_failure_probability": 1.0},
                                    {"kv_transfer_timeout_s": 1e-6}])
def test_kv_bytes_transferred_counts_only_transfers_that_landed(
        faults: dict[str, Any]) -> None:
    from pdsim.simulation import simulate

    res = simulate(small_cfg({"faults": faults,
                              "connector": {"kv_load_failure_policy": "recompute"}}))
    assert res.summary.completed > 0  # recomputed on D
    assert res.summary.kv_bytes_transferred == 0
    assert not res.records.column("kv_bytes_transferred").any()


def test_kv_bytes_transferred_of_landed_transfers_are_whole_blocks() -> None:
    from pdsim.simulation import simulate

    cfg = small_cfg({"faults": {"kv_transfer_failure_probability": 0.5},
                     "connector": {"kv_load_failure_policy": "recompute"}})
    res = simulate(cfg)
    import numpy as np

    nbytes = np.asarray(res.records.column("kv_bytes_transferred"))
    landed = ~np.isnan(np.asarray(res.records.column("transfer_end_s"), dtype=float))
    assert 0 < landed.sum() < len(nbytes)
    assert not nbytes[~landed].any() and (nbytes[landed] > 0).all()
    assert res.summary.kv_bytes_transferred == int(nbytes.sum())


# ------------------------------------------------ the transfer network checked at load

def _degraded(link: str, **topology: Any) -> dict[str, Any]:
    return small({"connector": {"topology": {"gpus_per_node": 1, "nics_per_node": 1,
                                             **topology}},
                  "faults": {"link_degradations": [{"link": link, "start_s": 0.0,
                                                    "end_s": 1.0, "bandwidth_factor": 0.5}]}})


@pytest.mark.parametrize(("link", "phrase"), [
    ("node2", "no 'node2': the instances occupy 2 node(s), node0..node1"),
    ("node7/nic0", "no 'node7/nic0': the instances occupy 2 node(s)"),
    ("node01", "write 'node1'"),  # one problem, one line
])
def test_a_degradation_of_a_node_beyond_the_cluster_is_a_load_error(
        tmp_path: Path, link: str, phrase: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_degraded(link))
    [(path, message)] = info.value.issues
    assert path == "faults.link_degradations.0.link" and phrase in message
    cfg = write_yaml(tmp_path / "c.yaml", _degraded(link))
    assert_cli_error(["show-config", str(cfg)], "faults.link_degradations.0.link", phrase)
    assert load_config(_degraded("node1"))  # D0 sits on node1


def test_a_sweep_names_the_point_whose_degradation_names_no_node(tmp_path: Path) -> None:
    """The file is valid only after --set (2 P: 3 nodes, node2 among them), as `pdsim run`
    reads it; the point of 1 P occupies 2 nodes."""
    cfg = write_yaml(tmp_path / "c.yaml", _degraded("node2"))
    assert_cli_error(["sweep", str(cfg), "--out", str(tmp_path / "o"),
                      "--set", "cluster.prefill.count=2",
                      "--grid", "cluster.prefill.count=2,1"],
                     "no 'node2'", "(sweep point 1: cluster.prefill.count=1)")
    assert not (tmp_path / "o").exists()


def test_an_overfull_node_is_a_load_error() -> None:
    data = _degraded("node0", placement={"P0": 0, "D0": 0})
    with pytest.raises(ConfigError, match=r"placement\.D0: node 0 has 1 GPUs; the "
                                          r"instances placed on it need 2"):
        load_config(data)


def _roofline_tp4(**topology: Any) -> dict[str, Any]:
    st = {"kind": "roofline", "model": "llama-3.1-8b", "hardware": "h200",
          "tensor_parallel_size": 4}
    return small({"model": {"profile": "llama-3.1-8b", "num_mtp_modules": 0},
                  "speculative": {"method": "none", "num_speculative_tokens": 0,
                                  "acceptance": {"kind": "constant", "rate": 0.0}},
                  "step_time": st,
                  "connector": {"topology": {"gpus_per_node": 8, **topology}}})


def test_fewer_gpus_per_instance_than_tp_ranks_is_a_load_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_roofline_tp4(gpus_per_instance=1))
    assert info.value.issues == [(
        "connector.topology.gpus_per_instance",
        "1 GPU(s) per instance cannot hold cluster.prefill's tensor_parallel_size 4 (a GPU "
        "per TP rank); give at least 4, or null to take each pool's from its step time"),
        ("connector.topology.gpus_per_instance",
         "1 GPU(s) per instance cannot hold cluster.decode's tensor_parallel_size 4 (a GPU "
         "per TP rank); give at least 4, or null to take each pool's from its step time")]
    from pdsim.simulation import Simulation

    for ok in (None, 4, 8):  # derived, exact, and two data-parallel ranks of TP4
        sim = Simulation(load_config(_roofline_tp4(gpus_per_instance=ok)))
        assert sim.network.num_nodes == (2 if ok == 8 else 1)  # type: ignore[attr-defined]


# -------------------------------------------- a root step time every pool overrides

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _all_pools_own() -> dict[str, Any]:
    import yaml

    data = yaml.safe_load((CONFIGS / "hetero_pd.yaml").read_text())
    data["cluster"]["decode"][1]["step_time"] = {"kind": "roofline", "hardware": "h100-sxm",
                                                 "tensor_parallel_size": 4}
    data["workload"]["num_requests"] = 20
    return data  # type: ignore[no-any-return]


@pytest.mark.parametrize("key", ["step_time.hardware=h200",
                                 "step_time.tensor_parallel_size=1",
                                 "step_time={kind: simple}"])
def test_setting_the_root_step_time_every_pool_overrides_is_an_error(
        tmp_path: Path, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_all_pools_own(), overrides=[key])
    [(path, message)] = info.value.issues
    assert path == key.split("=")[0]
    assert message.startswith("would change nothing: every pool has its own step time "
                              "(cluster.prefill.step_time, cluster.decode.0.step_time, "
                              "cluster.decode.1.step_time)")
    cfg = write_yaml(tmp_path / "c.yaml", _all_pools_own())
    assert_cli_error(["sweep", str(cfg), "--out", str(tmp_path / "o"),
                      "--grid", "step_time.tensor_parallel_size=4,8"],
                     "step_time.tensor_parallel_size: would change nothing", "sweep point 0")
    assert not (tmp_path / "o").exists()


def test_an_unused_root_step_time_need_not_fit_and_is_named_in_a_warning() -> None:
    data = _all_pools_own()
    data["step_time"]["tensor_parallel_size"] = 1  # 70B bf16 weights on one H100: no fit
    cfg = load_config(data)
    assert cfg.root_step_time_users == []
    assert "step_time: every pool has its own step time, so the root step_time is used " \
           "by none" in cfg.warnings
    # a root some pool runs on is still checked
    data["cluster"]["decode"][1].pop("step_time")
    with pytest.raises(ConfigError, match="does not fit on h100-sxm"):
        load_config(data)
    # and a setting of the root a pool runs on is no error
    data = _all_pools_own()
    data["cluster"]["decode"][1].pop("step_time")
    assert load_config(data, overrides=["step_time.tensor_parallel_size=8"])


# ------------------------------------------------------- writers bound their memory

def test_timeseries_csv_is_streamed_a_track_at_a_time(tmp_path: Path) -> None:
    """write_timeseries makes and writes one track at a time (benchmarks/writer_memory.py
    measures the memory); the file is the text timeseries_csv gives, and reads back."""
    import numpy as np

    from pdsim.simulation import simulate
    from pdsim.timeseries import (
        bin_edges,
        horizon_s,
        iter_tracks,
        read_timeseries,
        timeseries,
        timeseries_csv,
        timeseries_csv_chunks,
        write_timeseries,
    )

    res = simulate(small_cfg(**{"cluster__prefill__count": 3, "cluster__decode__count": 4}))
    path = write_timeseries(res, tmp_path / "timeseries.csv")
    ts = timeseries(res)
    assert path.read_text(encoding="utf-8") == timeseries_csv(ts)
    back = read_timeseries(path)
    assert list(back.tracks) == list(ts.tracks)
    for name, track in ts.tracks.items():
        for metric, values in track.values.items():
            np.testing.assert_allclose(back.tracks[name].values[metric], values)
    edges = bin_edges(horizon_s(res))
    chunks = list(timeseries_csv_chunks(edges, iter_tracks(res, edges)))
    assert len(chunks) == len(ts.tracks) + 1  # the header goes with the first track
    assert all(c.count("\n") <= len(edges) for c in chunks)


def test_prefill_slots_of_every_instance_in_one_pass_agree_with_one_at_a_time() -> None:
    from pdsim.metrics import prefill_slot_intervals, prefill_slot_intervals_by_instance
    from pdsim.simulation import simulate

    res = simulate(small_cfg(**{"cluster__prefill__count": 3}))
    for records in (res.records, res.to_records()):  # the column store and plain dicts
        slots = prefill_slot_intervals_by_instance(records)
        assert sorted(slots) == ["P0", "P1", "P2"]
        for name, (start, end) in slots.items():
            one = prefill_slot_intervals(records, name)
            assert start.tolist() == one[0].tolist() and end.tolist() == one[1].tolist()
            assert len(start) and (end >= start).all()
    assert [len(a) for a in prefill_slot_intervals([], "P0")] == [0, 0]


# ---------------------------------------- compare, sweep and import: write beside, swap

def _cli(args: list[str]) -> str:
    from typer.testing import CliRunner

    from pdsim.cli import app

    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.stdout


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_compare_out_is_written_beside_and_sealed(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from pdsim.compare import Comparison, variant_configs
    from pdsim.run_folder import STAGE_PREFIX, check_folder
    from pdsim.simulation import simulate
    from pdsim.writers import write_compare

    cfg_file = write_yaml(tmp_path / "c.yaml", small(workload={"num_requests": 10}))
    out = tmp_path / "o"
    _cli(["compare", str(cfg_file), "--out", str(out)])
    manifest = check_folder(out, "compare.json")
    assert manifest["kind"] == "compare" and list(manifest["files"]) == ["compare.json"]
    before = _contents(out)

    def plots_fail(*args: object) -> list[Path]:
        raise ValueError("matplotlib could not draw it")

    monkeypatch.setattr("pdsim.writers.write_compare_plots", plots_fail)
    cfg = small_cfg(seed=8)
    cmp = Comparison({k: simulate(v) for k, v in variant_configs(cfg, False).items()})
    with pytest.raises(ValueError, match="could not draw"):
        write_compare(cmp, cfg, out, plots=True)
    assert _contents(out) == before  # the previous comparison, still sealed
    assert not any(p.name.startswith(STAGE_PREFIX) for p in out.iterdir())
    # a compare.json edited (or left by another command) is refused by the readers
    (out / "compare.json").write_text((out / "compare.json").read_text() + " ")
    assert_cli_error(["plot", str(out)], "compare.json", "does not match manifest.json")


def test_a_run_folder_that_a_compare_wrote_into_is_refused(tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "c.yaml", small(workload={"num_requests": 10}))
    out = tmp_path / "o"
    _cli(["run", str(cfg), "--out", str(out)])
    _cli(["compare", str(cfg), "--out", str(out)])
    assert_cli_error(["plot", str(out)], "summary.json",
                     "is not one of the files manifest.json seals")
    _cli(["run", str(cfg), "--out", str(out)])  # and a run into a compare folder
    assert_cli_error(["plot", str(out)], "compare.json",
                     "is not one of the files manifest.json seals")


def test_a_sweep_table_is_swapped_in_whole_and_sealed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pdsim.run_folder import check_folder
    from pdsim.sweep import write_table

    cfg = write_yaml(tmp_path / "c.yaml", small(workload={"num_requests": 10}))
    out = tmp_path / "o"
    _cli(["sweep", str(cfg), "--out", str(out), "--grid", "seed=1,2"])
    sealed = check_folder(out, "sweep.csv")["files"]
    assert "sweep.csv" in sealed
    before = _contents(out)

    def parquet_fails(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("pdsim.output.write_parquet", parquet_fails)
    with pytest.raises(OSError, match="disk full"):
        write_table(out, [{"point": 0, "point_id": "x", "seed": 3}])
    assert _contents(out) == before
    (out / "sweep.csv").write_text((out / "sweep.csv").read_text().replace(",", ";", 1))
    assert_cli_error(["plot", str(out)], "sweep.csv", "does not match manifest.json")


def test_import_vllm_swaps_in_config_and_profile_together(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(MISTRAL_7B))
    args = ["import-vllm", "--hf-config", str(hf), "--prefill", f"vllm serve m {NIXL}",
            "--decode", f"vllm serve m {NIXL}", "--out", str(tmp_path / "o")]
    _cli(args)
    before = _contents(tmp_path / "o")
    assert sorted(before) == ["config.yaml", "m.model.yaml"]
    import pdsim.output

    real, calls = pdsim.output.write_atomic, []

    def second_write_fails(path: Any, data: Any) -> Path:
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(path, data)

    monkeypatch.setattr(pdsim.output, "write_atomic", second_write_fails)
    from typer.testing import CliRunner

    from pdsim.cli import app

    res = CliRunner().invoke(app, [*args, "--hardware", "b200"])
    assert res.exit_code != 0 and len(calls) == 2
    assert _contents(tmp_path / "o") == before


def test_a_scrape_counter_of_hundreds_of_digits_is_one_clean_error(tmp_path: Path) -> None:
    """Found by test_rel_readers_fuzz: float() of a 401-digit counter raised
    OverflowError."""
    real = Path(__file__).resolve().parents[2] / "examples" / "real" / "metrics_after.txt"
    lines = real.read_text().splitlines()
    i = next(i for i, line in enumerate(lines)
             if line.startswith("vllm:spec_decode_num_drafts_total"))
    lines[i] = lines[i].rsplit(" ", 1)[0] + " 1" + "0" * 400
    scrape = tmp_path / "m.txt"
    scrape.write_text("\n".join(lines) + "\n")
    assert_cli_error(["import-metrics", str(scrape), "--label", "model_name=synthetic/mtp3-a"],
                     "m.txt", "vllm:spec_decode_num_drafts_total", "401 digits long")


def test_figures_drawn_again_into_a_sealed_folder_keep_it_readable(tmp_path: Path) -> None:
    """pdsim plot and pdsim report write into the folder they read: a sealed figure or
    page drawn again (other bytes, the same data) is resealed, never left refused."""
    from pdsim.errors import InputFileError
    from pdsim.run_folder import check_folder, reseal

    cfg = write_yaml(tmp_path / "c.yaml", small(workload={"num_requests": 10}))
    run = tmp_path / "run"
    _cli(["run", str(cfg), "--out", str(run), "--plots"])
    png = run / "latency_cdf.png"
    png.write_bytes(png.read_bytes() + b"\0")  # as if matplotlib drew other bytes
    with pytest.raises(InputFileError, match="does not match manifest"):
        check_folder(run, "summary.json")
    reseal(run, [png, tmp_path / "c.yaml", run / "not-sealed.png"])
    assert check_folder(run, "summary.json")["files"]["latency_cdf.png"]
    assert not (run / "not-sealed.png").exists()
    (run / "summary.json").write_text("{}")  # reseal never covers what readers read
    reseal(run, [png])
    with pytest.raises(InputFileError, match="does not match manifest"):
        check_folder(run, "summary.json")
    sweep = tmp_path / "sweep"
    _cli(["sweep", str(cfg), "--out", str(sweep), "--grid", "seed=1,2", "--report"])
    assert "report.html" in check_folder(sweep, "sweep.csv")["files"]
    _cli(["report", str(sweep)])
    _cli(["plot", str(sweep)])
    assert check_folder(sweep, "sweep.csv")


def test_a_sweep_files_base_override_of_an_unused_root_step_time_is_an_error(
        tmp_path: Path) -> None:
    import yaml

    cfg = write_yaml(tmp_path / "c.yaml", _all_pools_own())
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"base_overrides": {"step_time.hardware": "b200"},
                                    "grid": {"seed": [1, 2]}}))
    assert_cli_error(["sweep", str(cfg), "--out", str(tmp_path / "o"), "--sweep-file",
                      str(spec)], "step_time.hardware: would change nothing",
                     "(base overrides)")
    assert not (tmp_path / "o").exists()


def test_a_sliding_window_beyond_any_context_imports_as_full_attention() -> None:
    """A config.json window of 10^9 tokens (beyond pdsim's 2^24-token bound on any
    sequence) was refused as an out-of-range window_tokens; no request can outgrow it, so
    its layers attend every token."""
    roles = [RoleCommand("prefill", f"vllm serve m {NIXL}"),
             RoleCommand("decode", f"vllm serve m {NIXL}")]
    res = import_deployment(roles, {**MISTRAL_7B, "sliding_window": 10**9})
    assert [b.mixer.sliding_window_tokens for b in res.profile.blocks
            if hasattr(b.mixer, "sliding_window_tokens")] == [None]
    res = import_deployment(roles, MISTRAL_7B)
    assert {b.mixer.sliding_window_tokens for b in res.profile.blocks
            if hasattr(b.mixer, "sliding_window_tokens")} == {4096}
