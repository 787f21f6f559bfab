"""Reliability round 3 (issue 26): regressions for the reproductions it lists."""

from __future__ import annotations

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
