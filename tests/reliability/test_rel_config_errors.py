"""Bad input through the CLI: ``error: <dotted.path>: <what is wrong and what is allowed>``,
exit code 2, no traceback, for every kind of config problem issue 7 lists."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from rel_support import small, write_yaml
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.errors import ConfigError, InputFileError
from pdsim.loader import load_config


def run_cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def joined(text: str) -> str:
    """The text with rich's line wrapping undone (see test_error_lines_are_not_wrapped)."""
    return " ".join(text.split())


def assert_user_error(code: int, out: str, err: str, path: str, *phrases: str) -> None:
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    text = joined(err)
    prefix = f"error: {path}: " if path else "error: "
    assert prefix in text, text
    for phrase in phrases:
        assert phrase in text, (phrase, text)


def error_of(tmp_path: Path, data: dict[str, Any], *sets: str,
             command: str = "run") -> tuple[int, str, str]:
    cfg = write_yaml(tmp_path / "cfg.yaml", data)
    args = [command, str(cfg)]
    for s in sets:
        args += ["--set", s]
    return run_cli(*args)


# (case id, patch of the small config, expected dotted path, phrases the message holds)
CASES: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
    # unknown keys, at the top, nested, and in a union member other than the first
    ("unknown_top_level_key", {"bogus": 1}, "bogus",
     ("unknown key", "allowed: cluster, connector")),
    ("unknown_nested_key", {"cluster": {"decode": {"scheduler": {"max_num_seq": 8}}}},
     "cluster.decode.scheduler.max_num_seq", ("unknown key", "max_num_seqs")),
    ("unknown_key_in_gamma_arrivals",
     {"workload": {"arrivals": {"kind": "gamma", "rate_per_s": 1, "cv": 1, "burst": 2}}},
     "workload.arrivals.burst", ("unknown key", "allowed: burstiness, cv, kind, rate_per_s")),
    ("unknown_key_in_layer_group",
     {"model": {"layer_groups": [{"kind": "attention", "num_layers": 2, "kv_bytes": 3}]}},
     "model.layer_groups.0.kv_bytes", ("unknown key", "kv_bytes_per_token_per_layer")),
    ("unknown_kind", {"workload": {"arrivals": {"kind": "weibull", "rate_per_s": 1}}},
     "workload.arrivals",
     ("unknown kind 'weibull'", "allowed: poisson, gamma, constant, closed_loop")),
    ("missing_kind", {"step_time": {"overhead_s": 0.001}},
     "step_time", ("kind is missing", "allowed: simple, roofline, measured")),
    ("missing_required_field", {"workload": {"arrivals": {"kind": "poisson"}}},
     "workload.arrivals.rate_per_s", ("required field is missing",)),
    # wrong types (the config is strict: no coercion from strings)
    ("string_for_int", {"cluster": {"decode": {"count": "two"}}}, "cluster.decode.count",
     ("valid integer", "got 'two'")),
    ("string_for_bool", {"cluster": {"decode": {"scheduler": {"enable_prefix_caching": "yes"}}}},
     "cluster.decode.scheduler.enable_prefix_caching", ("valid boolean", "got 'yes'")),
    ("mapping_for_number", {"connector": {"link_bandwidth_gb_per_s": {"gb": 7}}},
     "connector.link_bandwidth_gb_per_s", ("valid number",)),
    ("scalar_for_section", {"speculative": 3}, "speculative", ("object",)),
    ("float_for_int", {"seed": 1.5}, "seed", ("valid integer", "got 1.5")),
    ("bad_list_item",
     {"speculative": {"acceptance": {"kind": "per_position", "rates": [0.8, "x", 0.4]}}},
     "speculative.acceptance.rates.1", ("valid number", "got 'x'")),
    ("bad_literal", {"connector": {"transfer_mode": "udp"}}, "connector.transfer_mode",
     ("'pull' or 'push'", "got 'udp'")),
    ("plain_union_wrong_type",
     {"step_time": {"kind": "roofline", "model": 3, "hardware": "h200"}}, "step_time.model",
     ("a valid string or an object", "got 3")),
    # out-of-range numbers
    ("probability_above_one", {"speculative": {"acceptance": {"kind": "constant", "rate": 1.5}}},
     "speculative.acceptance.rate", ("less than or equal to 1", "got 1.5")),
    ("negative_count", {"cluster": {"prefill": {"count": -1}}}, "cluster.prefill.count",
     ("greater than or equal to 0", "got -1")),
    ("zero_bandwidth", {"connector": {"link_bandwidth_gb_per_s": 0}},
     "connector.link_bandwidth_gb_per_s", ("greater than 0", "got 0")),
    ("zero_block_size", {"cluster": {"decode": {"scheduler": {"block_size": 0}}}},
     "cluster.decode.scheduler.block_size", ("greater than or equal to 1",)),
    ("model_validator_in_union_member",
     {"workload": {"arrivals": {"kind": "gamma", "rate_per_s": 2}}}, "workload.arrivals",
     ("exactly one of cv or burstiness",)),
    ("unknown_profile", {"step_time": {"kind": "roofline", "model": "gpt-9",
                                       "hardware": "h200"}},
     "step_time.model", ("unknown model profile 'gpt-9'", "deepseek-v3")),
    # impossible combinations
    ("weights_do_not_fit_memory",
     {"step_time": {"kind": "roofline", "model": "deepseek-v3", "hardware": "h100-sxm"}},
     "step_time", ("does not fit on h100-sxm", "tensor_parallel_size >= ")),
    ("prefix_caching_multi_module_mtp_small_blocks",
     {"cluster": {"decode": {"scheduler": {"enable_prefix_caching": True, "block_size": 2}}}},
     "cluster.decode.scheduler.block_size",
     ("prefix caching with multi-module MTP needs block_size >= num_speculative_tokens (3)",)),
    ("more_drafts_than_mtp_modules",
     {"model": {"num_mtp_modules": 4},
      "speculative": {"num_speculative_tokens": 6,
                      "acceptance": {"kind": "constant", "rate": 0.5}},
      "cluster": {"decode": {"scheduler": {"max_num_batched_tokens": 512}}}},
     "speculative.num_speculative_tokens",
     ("6 drafts but the model has only 4 MTP modules", "allowed: 1..4")),
    ("mtp_without_modules", {"model": {"num_mtp_modules": 0}}, "speculative.method",
     ("mtp needs a model with MTP modules",)),
    ("pd_without_prefill", {"cluster": {"prefill": {"count": 0}}}, "cluster.prefill.count",
     ("disaggregated mode needs at least one prefill instance",)),
    ("pd_without_decode", {"cluster": {"decode": {"count": 0}}}, "cluster.decode.count",
     ("disaggregated mode needs at least one decode instance",)),
    ("colocated_without_instances", {"cluster": {"mode": "colocated",
                                                 "colocated": {"count": 0}}},
     "cluster.colocated.count", ("at least one instance",)),
    ("decode_budget_below_batch",
     {"cluster": {"decode": {"scheduler": {"max_num_batched_tokens": 32}}}},
     "cluster.decode.scheduler.max_num_batched_tokens", ("cannot hold a full decode batch",)),
    ("acceptance_rates_too_short", {"speculative": {"num_speculative_tokens": 5}},
     "speculative", ("acceptance.rates has 3 entries", "num_speculative_tokens is 5")),
    ("drafter_missing_from_roofline_profile",
     {"model": {"profile": "llama-3.1-8b"},
      "step_time": {"kind": "roofline", "hardware": "h200"},
      "cluster": {"prefill": {"scheduler": {"num_blocks": None}, "kv_cache_gib": 4},
                  "decode": {"scheduler": {"num_blocks": None}, "kv_cache_gib": 4}}},
     "speculative.method", ("ships a eagle3 drafter, not mtp",)),
    # values YAML can write but a config cannot hold
    # (YAML 1.2 has no timestamps: an unquoted date is the string it reads as)
    ("yaml_date", {"seed": "DATE"}, "seed", ("valid integer", "2024-05-01")),
]


@pytest.mark.parametrize(("patch", "path", "phrases"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_config_problem_is_one_located_line(tmp_path: Path, patch: dict[str, Any], path: str,
                                            phrases: tuple[str, ...]) -> None:
    data = small(patch)
    cfg = write_yaml(tmp_path / "cfg.yaml", data)
    if data.get("seed") == "DATE":  # a YAML timestamp, unquoted
        cfg.write_text(cfg.read_text().replace("seed: DATE", "seed: 2024-05-01"))
    code, out, err = run_cli("run", str(cfg))
    assert_user_error(code, out, err, path, *phrases)


def test_single_module_mtp_may_draft_more_tokens_than_modules() -> None:
    """'More drafts than modules' matters only for multi-module MTP: one module repeats."""
    cfg = load_config(small({"model": {"num_mtp_modules": 1},
                             "speculative": {"num_speculative_tokens": 3}}))
    assert not cfg.use_multi_module_mtp


def test_several_problems_are_each_reported(tmp_path: Path) -> None:
    code, out, err = error_of(tmp_path, small({
        "bogus": 1, "connector": {"transfer_mode": "udp"},
        "workload": {"arrivals": {"kind": "gamma", "rate_per_s": -1, "cv": 1}}}))
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in joined(err).split("error: ") if ln]
    paths = sorted(ln.split(":", 1)[0] for ln in lines)
    assert paths == ["bogus", "connector.transfer_mode", "workload.arrivals.rate_per_s"]


@pytest.mark.parametrize(("patch", "path"), [
    ({"cluster": {"decode": {"scheduler": {"num_blocks": 4}}}},
     "cluster.decode.scheduler.num_blocks"),
    ({"cluster": {"prefill": {"scheduler": {"num_blocks": 4}}}},
     "cluster.prefill.scheduler.num_blocks"),
    ({"cluster": {"decode": {"scheduler": {"num_blocks": None}, "kv_cache_gib": 0.0001}}},
     "cluster.decode.kv_cache_gib"),
], ids=["decode_blocks", "prefill_blocks", "decode_gib"])
def test_kv_pool_smaller_than_one_max_length_request(tmp_path: Path, patch: dict[str, Any],
                                                     path: str) -> None:
    # 4 blocks of 16 tokens = 64 tokens; the small workload's longest request is 240
    code, out, err = error_of(tmp_path, small(patch))
    assert_user_error(code, out, err, path, "cannot hold one maximum-length request",
                      "model.max_model_len")


def test_error_lines_are_not_wrapped(tmp_path: Path) -> None:
    code, _, err = error_of(tmp_path, small({"cluster": {"decode": {"scheduler": {"x": 1}}}}))
    assert code == 2
    assert all(line.startswith("error: ") for line in err.splitlines() if line.strip())


# ------------------------------------------------------------------ overrides


@pytest.mark.parametrize(("override", "path", "phrase"), [
    ("speculative.acceptance.rate=2", "speculative.acceptance.rate",
     "unknown key; allowed: kind, rates"),
    ("workload.arrivals.kind=gamma", "workload.arrivals", "exactly one of cv or burstiness"),
    ("cluster.decode.count=abc", "cluster.decode.count", "valid integer"),
    ("nonsense", "nonsense", "an override must look like dotted.key=value"),
    ("=3", "", "an override key must be a non-empty dotted path"),
    ("a..b=3", "a..b", "non-empty dotted path"),
    ("seed.x=1", "seed", "is a value (7), not a section"),
    ("model.layer_groups.5.kind=x", "model.layer_groups.5",
     "model.layer_groups has 1 item(s), model.layer_groups.0 .. model.layer_groups.0; "
     "there is no item 5"),
])
def test_bad_override(tmp_path: Path, override: str, path: str, phrase: str) -> None:
    code, out, err = error_of(tmp_path, small(), override, command="show-config")
    assert_user_error(code, out, err, path, phrase)


HETERO = Path(__file__).resolve().parents[2] / "configs" / "hetero_pd.yaml"


@pytest.mark.parametrize(("override", "path", "phrase"), [
    ("cluster.decode.count=3", "cluster.decode.count",
     "cluster.decode is a list of 2 item(s): name one by its position, "
     "e.g. cluster.decode.0.count"),
    ("cluster.decode.2.count=3", "cluster.decode.2",
     "cluster.decode has 2 item(s), cluster.decode.0 .. cluster.decode.1; there is no item 2"),
    ("cluster.decode.2=3", "cluster.decode.2", "there is no item 2"),
])
def test_override_into_a_list_of_pools_names_the_positions(
        override: str, path: str, phrase: str) -> None:
    """A role's pools are a list: a key that names no item says which positions exist."""
    code, out, err = run_cli("show-config", str(HETERO), "--set", override)
    assert_user_error(code, out, err, path, phrase)
    with pytest.raises(ConfigError) as exc:
        load_config(HETERO, [override])
    assert exc.value.path == path


def test_override_into_a_list_of_pools_sets_that_pool() -> None:
    cfg = load_config(HETERO, ["cluster.decode.1.count=3"])
    assert [p.group.count for p in cfg.cluster.pools()] == [1, 2, 3]


# -------------------------------------------------------------- input files


def test_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    cfg = tmp_path / "broken.yaml"
    cfg.write_text("seed: 1\nworkload:\n  num_requests: [1, 2\n  arrivals: {}\n")
    code, out, err = run_cli("run", str(cfg))
    assert code == 2 and "Traceback" not in out + err
    m = re.search(r"error: (\S+):(\d+):(\d+): YAML syntax error: ", joined(err))
    assert m is not None, err
    assert Path(m.group(1)).name == "broken.yaml"
    assert (int(m.group(2)), int(m.group(3))) == (4, 11)


def test_yaml_bad_indentation_gives_line_and_column(tmp_path: Path) -> None:
    cfg = tmp_path / "indent.yaml"
    cfg.write_text("model:\n  num_mtp_modules: 3\n   max_model_len: 9\n")
    code, out, err = run_cli("show-config", str(cfg))
    assert_user_error(code, out, err, f"{cfg}:3:17", "YAML syntax error")


def test_missing_file_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    code, out, err = run_cli("run", str(missing))
    assert_user_error(code, out, err, str(missing), "no such file")


def test_directory_is_not_a_yaml_file(tmp_path: Path) -> None:
    code, out, err = run_cli("run", str(tmp_path))
    assert_user_error(code, out, err, str(tmp_path), "is a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_says_so(tmp_path: Path) -> None:
    cfg = write_yaml(tmp_path / "secret.yaml", small())
    cfg.chmod(0)
    try:
        code, out, err = run_cli("run", str(cfg))
    finally:
        cfg.chmod(0o644)
    assert_user_error(code, out, err, str(cfg), "cannot be read", "Permission denied")


def test_unreadable_file_says_so_simulated(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The same through a simulated EACCES, so the path is tested when run as root."""
    cfg = write_yaml(tmp_path / "secret.yaml", small())
    real = Path.read_text

    def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        if self.name == "secret.yaml":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    code, out, err = run_cli("run", str(cfg))
    assert_user_error(code, out, err, str(cfg), "cannot be read", "Permission denied")


def test_binary_file_says_so(tmp_path: Path) -> None:
    cfg = tmp_path / "bin.yaml"
    cfg.write_bytes(b"\xff\xfe\x00seed")
    code, out, err = run_cli("run", str(cfg))
    assert_user_error(code, out, err, str(cfg), "cannot be read")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    cfg = tmp_path / "list.yaml"
    cfg.write_text("- seed\n- 3\n")
    code, out, err = run_cli("run", str(cfg))
    assert_user_error(code, out, err, f"{cfg}:1", "top level must be a mapping")


def test_python_tags_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "evil.yaml"
    cfg.write_text("seed: !!python/object/apply:os.system ['true']\n")
    code, out, err = run_cli("run", str(cfg))
    assert_user_error(code, out, err, f"{cfg}:1:7", "could not determine a constructor")


@pytest.mark.parametrize(("text", "path", "phrase"), [
    ("seed: .nan\n", "seed", "must be a finite number"),
    ("seed: !!binary aGVsbG8=\n", "seed", "bytes value is not allowed"),
    ("name: &x [*x]\n", "name.0", "refers to itself"),
])
def test_values_json_cannot_hold_are_located(tmp_path: Path, text: str, path: str,
                                             phrase: str) -> None:
    cfg = tmp_path / "odd.yaml"
    cfg.write_text(text)
    code, out, err = run_cli("show-config", str(cfg))
    assert_user_error(code, out, err, path, phrase)


def test_deep_nesting_is_located() -> None:
    node: Any = 1
    for _ in range(400):
        node = {"k": node}
    with pytest.raises(ConfigError) as info:
        load_config({"model": node})
    assert str(info.value) == "model.k: nested too deeply"


def test_deeply_nested_yaml_file_is_a_located_error(tmp_path: Path) -> None:
    cfg = tmp_path / "deep.yaml"
    cfg.write_text("seed: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(InputFileError, match="nested too deeply"):
        load_config(cfg)


@pytest.mark.parametrize(("instance", "phrases"), [
    ("D3", ["no instance 'D3'; this cluster has P0 (pool p-h100-tp8); "
            "D0, D1 (pool d-h200-tp4-fp8kv); D2 (pool d-h100-tp4)"]),
    ("d-h100-tp4", ["d-h100-tp4 is a pool: an outage names one of its instances, D2"]),
])
def test_outage_of_an_unknown_instance_lists_instances_by_pool(
        instance: str, phrases: list[str]) -> None:
    """With several pools per role a user cannot guess that D2 is the H100 pool: the
    error says which instances each pool holds, and a pool's name points at them."""
    code, out, err = run_cli("show-config", str(HETERO), "--set",
                             f"faults.instance_outages=[{{instance: {instance}, start_s: 1, "
                             f"end_s: 2}}]")
    assert_user_error(code, out, err, "faults.instance_outages.0.instance", *phrases)
