"""Grid axes, ranges, sweep files and point validation (nothing is simulated here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_support import small_config

import pdsim.simulation
from pdsim.errors import ConfigError, InputFileError
from pdsim.sweep import (
    Sweep,
    expand_points,
    load_sweep_file,
    parse_grid,
    parse_range,
    parse_values,
    point_id,
    resolve_points,
    set_dotted,
)


def test_float_range_includes_stop_and_has_clean_values() -> None:
    vals = parse_range("0.5:0.95:0.05")
    assert vals == [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
    assert parse_range("0.1:0.3:0.1") == [0.1, 0.2, 0.3]
    assert parse_range("0:1:0.3") == [0.0, 0.3, 0.6, 0.9]  # stop not on the grid


def test_int_and_descending_ranges() -> None:
    assert parse_range("1:9:2") == [1, 3, 5, 7, 9]
    assert all(isinstance(v, int) for v in parse_range("1:9:2") or [])
    assert parse_range("4:1:-1") == [4, 3, 2, 1]
    assert parse_range("1e-3:3e-3:1e-3") == [0.001, 0.002, 0.003]


@pytest.mark.parametrize("text", ["1:5:0", "5:1:1"])
def test_bad_ranges(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_range(text)


def test_not_a_range() -> None:
    assert parse_range("abc") is None and parse_range("1:2") is None


def test_values_are_yaml_typed() -> None:
    assert parse_values("1,2.5,true,off,auto,null") == [1, 2.5, True, "off", "auto", None]
    assert parse_values("[1, 2],{a: 1}") == [[1, 2], {"a": 1}]
    assert parse_values("1,2:4:1") == [1, 2, 3, 4]


def test_parse_grid() -> None:
    assert parse_grid("workload.arrivals.rate_per_s=1,2,4") == (
        "workload.arrivals.rate_per_s", [1, 2, 4])
    assert parse_grid("seed=0:2:1") == ("seed", [0, 1, 2])
    for bad in ("no_equals", "=1,2", "a..b=1", "a=1,,2"):
        with pytest.raises(ConfigError):
            parse_grid(bad)


def test_expand_order_last_axis_fastest() -> None:
    pts = expand_points([("a", [1, 2]), ("b", ["x", "y"])])
    assert pts == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"},
                   {"a": 2, "b": "y"}]
    assert expand_points([]) == [{}]


def test_points_crossed_with_grid() -> None:
    pts = expand_points([("g", [1, 2])], [{"name": "p"}, {"name": "q", "k": 0}])
    assert pts == [{"name": "p", "g": 1}, {"name": "p", "g": 2},
                   {"name": "q", "k": 0, "g": 1}, {"name": "q", "k": 0, "g": 2}]
    with pytest.raises(ConfigError, match="twice"):
        expand_points([("a", [1]), ("a", [2])])
    with pytest.raises(ConfigError, match="both"):
        expand_points([("a", [1])], [{"a": 2}])


def test_sweep_file(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("""
base_overrides: [workload.num_requests=50]
grid:
  speculative.acceptance.rate: "0.5:0.7:0.1"
  seed: [0, 1]
points:
  - {name: before, connector.prefill_backoff: "off"}
  - {name: after}
""")
    spec = load_sweep_file(f)
    assert spec.base_overrides == [("workload.num_requests", 50)]
    assert spec.grid == [("speculative.acceptance.rate", [0.5, 0.6, 0.7]), ("seed", [0, 1])]
    pts = spec.expand()
    assert len(pts) == 12 and pts[0] == {"name": "before", "connector.prefill_backoff": "off",
                                         "speculative.acceptance.rate": 0.5, "seed": 0}
    g = tmp_path / "m.yaml"
    g.write_text("base_overrides: {workload.num_requests: 50}\ngrid: {seed: 3}\n")
    spec = load_sweep_file(g)
    assert spec.base_overrides == [("workload.num_requests", 50)] and spec.grid == [("seed", [3])]


def test_sweep_file_errors(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("grids: {seed: [1]}\n")
    with pytest.raises(InputFileError, match="grids"):
        load_sweep_file(f)
    f.write_text("points: [1, 2]\n")
    with pytest.raises(InputFileError, match="points"):
        load_sweep_file(f)


def test_unknown_key_is_named_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("simulated before validating every point")

    monkeypatch.setattr(pdsim.simulation, "simulate", boom)
    cfg = small_config()
    pts = expand_points([("workload.arrivals.rate_per_s", [1, 2]),
                         ("speculative.acceptance.rtae", [0.5])])
    with pytest.raises(ConfigError) as err:
        Sweep(cfg, pts).run(workers=1)
    assert any("speculative.acceptance" in p for p, _ in err.value.issues)
    assert "speculative.acceptance.rtae" in str(err.value)
    # a bad value in a late point fails before the first point runs
    with pytest.raises(ConfigError) as err:
        Sweep(cfg, [{"workload.arrivals.rate_per_s": 1}, {"workload.arrivals.rate_per_s": -1}])
    assert err.value.issues[0][0] == "workload.arrivals.rate_per_s"
    assert "sweep point 1" in str(err.value)
    with pytest.raises(ConfigError, match="not a section"):
        Sweep(cfg, [{"seed.x": 1}])


def test_point_ids_depend_on_the_resolved_config_only() -> None:
    cfg = small_config()
    a, b, c = resolve_points(cfg, [{"seed": 1}, {"seed": 2}, {}])
    assert len({a.point_id, b.point_id, c.point_id}) == 3
    assert c.point_id == point_id(cfg)
    # the same config reached by different keys is the same point
    (d,) = resolve_points(small_config("seed=1"), [{}])
    assert d.point_id == a.point_id
    with pytest.raises(ConfigError, match="same config"):
        Sweep(cfg, [{"seed": 0}, {}])


def test_set_dotted_list_items() -> None:
    data = {"a": [{"b": 1}, {"b": 2}]}
    set_dotted(data, "a.1.b", 5)
    assert data == {"a": [{"b": 1}, {"b": 5}]}
    with pytest.raises(ConfigError, match=r"a has 2 item\(s\), a.0 .. a.1; there is no item 7"):
        set_dotted(data, "a.7.b", 1)
    with pytest.raises(ConfigError, match=r"a is a list of 2 item\(s\): name one by its "
                                          r"position, e.g. a.0.b") as exc:
        set_dotted(data, "a.b", 1)
    assert exc.value.path == "a.b"
