"""The row schema and the harness arithmetic, without simulating anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from validation.harness import RowResult, metric, summarize
from validation.rows import Kind, Role, Row, load_rows


def _row(**over: Any) -> Row:
    data: dict[str, Any] = {
        "id": "r", "title": "t", "kind": Kind.RATIO, "role": Role.FIT, "category": "c",
        "published": {"value": 2.0, "unit": "x"},
        "source": {"key": "k", "title": "t", "url": "u", "locator": "l", "quote": "q"},
        "assumptions": ["a"], "tolerance_pct": 10.0, "tolerance_reason": "why",
        "config": {}, "runs": {"a": [], "b": []},
        "measure": {"metric": "tpot_ms", "ratio": ("a", "b")},
    }
    data.update(over)
    return Row.model_validate(data)


def test_error_sign_and_tolerance() -> None:
    res = RowResult(_row(), 2.3, {}, 0.0)
    assert res.error_pct == pytest.approx(15.0)
    assert not res.passed and not res.needs_explanation
    assert RowResult(_row(), 1.85, {}, 0.0).passed
    assert RowResult(_row(), 1.3, {}, 0.0).needs_explanation


def test_measure_needs_exactly_one_form_and_known_runs() -> None:
    with pytest.raises(ValueError):
        _row(measure={"metric": "tpot_ms"})
    with pytest.raises(ValueError):
        _row(measure={"metric": "tpot_ms", "run": "missing"})


def test_unknown_metric_is_named() -> None:
    with pytest.raises(ValueError, match="unknown metric 'nope'"):
        metric("nope", {})
    assert metric("tpot_ms", {"mean_tpot_s": 0.005}) == pytest.approx(5.0)


def test_summary_splits_roles_and_kinds() -> None:
    results = [RowResult(_row(id="a"), 2.2, {}, 0.0),
               RowResult(_row(id="b", role=Role.HOLDOUT), 1.0, {}, 0.0)]
    groups = {g.label: g for g in summarize(results).groups}
    assert groups["fit, ratio"].median_abs_error_pct == pytest.approx(10.0)
    assert groups["holdout, ratio"].worst_row == "b"
    assert groups["all rows"].count == 2 and groups["fit, absolute"].count == 0


def test_load_rows_filters_and_rejects_duplicates(tmp_path: Path) -> None:
    rows = load_rows()
    assert {r.role for r in load_rows(role="fit")} == {Role.FIT}
    assert [r.id for r in load_rows(ids=[rows[0].id])] == [rows[0].id]
    with pytest.raises(ValueError, match="unknown row id"):
        load_rows(ids=["no-such-row"])
    text = (Path(__file__).parents[2] / "validation" / "rows" / rows[0].path).read_text()
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match="duplicate row id"):
        load_rows(tmp_path)
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"id": "x"}))
    with pytest.raises(ValueError, match=r"b\.yaml"):
        load_rows(tmp_path)
