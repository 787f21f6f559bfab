"""Model profiles given as files (a path ending in .yaml): read from the config file's
folder, checked like shipped ones, re-read when edited."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pdsim.errors import ConfigError
from pdsim.loader import load_config
from pdsim.perf.profiles import load_model_architecture


def _profile(folder: Path, layers: int = 32) -> Path:
    data = load_model_architecture("llama-3.1-8b").model_dump(mode="json")
    data["name"] = "my-llama"
    data["blocks"][0]["num_layers"] = layers
    path = folder / "my-llama.model.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _config(folder: Path, profile: str) -> Path:
    cfg = {"model": {"profile": profile},
           "step_time": {"kind": "roofline", "hardware": "h100-sxm"},
           "cluster": {"mode": "colocated", "colocated": {"count": 1}},
           "workload": {"num_requests": 4}}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def test_a_relative_profile_file_is_read_next_to_the_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    _profile(folder)
    config = _config(folder, "my-llama.model.yaml")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(Path("configs/config.yaml"))
    assert cfg.model.name == "my-llama"
    assert cfg.model.layer_groups[0].num_layers == 32
    assert cfg.step_time.resolved_model().name == "my-llama"  # type: ignore[union-attr]
    # the resolved config names the file absolutely, so it loads from anywhere
    assert Path(str(cfg.model.profile)).is_absolute()
    assert load_config(config).model == cfg.model


def test_an_edited_profile_file_is_read_again(tmp_path: Path) -> None:
    path = _profile(tmp_path, layers=32)
    assert load_model_architecture(str(path)).num_layers == 32
    _profile(tmp_path, layers=30)
    assert load_model_architecture(str(path)).num_layers == 30


def test_a_missing_or_bad_profile_file_is_named(tmp_path: Path) -> None:
    config = _config(tmp_path, "nowhere.model.yaml")
    with pytest.raises(ConfigError, match=r"model.profile: no model profile file .*nowhere"):
        load_config(config)
    (tmp_path / "bad.model.yaml").write_text("name: x\nhidden_size: -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.model.yaml.hidden_size"):
        load_config(_config(tmp_path, "bad.model.yaml"))


def test_a_set_override_names_a_profile_file_relative_to_the_config(tmp_path: Path) -> None:
    _profile(tmp_path)
    config = _config(tmp_path, "llama-3.1-8b")
    cfg = load_config(config, ["model.profile=my-llama.model.yaml"])
    assert cfg.model.name == "my-llama"
