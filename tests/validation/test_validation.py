"""The published-measurement table: rows stay within tolerance and the doc is current."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from validation.__main__ import DOC
from validation.harness import EXPLAIN_ABOVE_PCT, RowResult, run_rows
from validation.report import parse_meta, render
from validation.rows import Kind, Role, load_rows

# the docs lane: executes the docs, the notebook or the validation rows (conftest.py)
pytestmark = pytest.mark.docs_lane

ROWS = load_rows()


@pytest.fixture(scope="module")
def results() -> dict[str, RowResult]:
    return {r.row.id: r for r in run_rows(ROWS)}


@pytest.mark.parametrize("row_id", [r.id for r in ROWS])
def test_row_within_tolerance(row_id: str, results: dict[str, RowResult],
                              request: pytest.FixtureRequest) -> None:
    res = results[row_id]
    if res.row.known_failure:
        # strict: a known failure that starts passing must have its marker removed
        request.applymarker(pytest.mark.xfail(strict=True, reason=res.row.known_failure))
    assert math.isfinite(res.pdsim_value) and res.pdsim_value > 0
    assert abs(res.error_pct) <= res.row.tolerance_pct, (
        f"{row_id}: pdsim {res.pdsim_value:.4g} vs published {res.published:.4g} "
        f"{res.row.published.unit}: error {res.error_pct:+.1f}% beyond "
        f"{res.row.tolerance_pct:.0f}%")


def test_rows_far_off_are_explained(results: dict[str, RowResult]) -> None:
    missing = [i for i, r in results.items() if r.needs_explanation and not r.row.explanation]
    assert not missing, f"rows more than {EXPLAIN_ABOVE_PCT:.0f}% off need an explanation"


def test_doc_is_what_the_command_regenerates(results: dict[str, RowResult]) -> None:
    text = DOC.read_text(encoding="utf-8")
    meta = parse_meta(text)
    assert meta is not None, f"{DOC} has no generated-by header"
    assert render([results[r.id] for r in ROWS], meta) == text, (
        f"{DOC} is stale: regenerate it with `{meta.command}`")


def test_row_set_meets_the_issue() -> None:
    sources = {r.source.key for r in ROWS}
    assert len(ROWS) >= 15 and len(sources) >= 6
    holdout = [r for r in ROWS if r.role is Role.HOLDOUT]
    assert Fraction(len(holdout), len(ROWS)) >= Fraction(1, 3)
    for role in Role:
        for kind in Kind:
            assert any(r.role is role and r.kind is kind for r in ROWS), (role, kind)


def test_every_row_cites_and_assumes() -> None:
    for r in ROWS:
        assert r.source.url and r.source.locator and r.source.quote, r.id
        assert r.assumptions and r.tolerance_reason, r.id
