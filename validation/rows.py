"""Row files: a published measurement, its source, and the pdsim runs that reproduce it."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

ROWS_DIR = Path(__file__).parent / "rows"


class Kind(StrEnum):
    """Ratios (speedups, before/after) and absolute times or rates are judged apart."""

    RATIO = "ratio"
    ABSOLUTE = "absolute"


class Role(StrEnum):
    """``fit`` rows may be used to fit defaults; ``holdout`` rows never are."""

    FIT = "fit"
    HOLDOUT = "holdout"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Published(_Strict):
    """The figure as the source prints it (after unit conversion stated in ``derivation``)."""

    value: float = Field(gt=0)
    unit: str
    derivation: str = ""


class Source(_Strict):
    """Where the figure was read: ``key`` groups rows from one independent source."""

    key: str
    title: str
    url: str
    locator: str
    quote: str


class Measure(_Strict):
    """How pdsim's figure is read: one run's metric, or a ratio of two runs' metric."""

    metric: str
    run: str | None = None
    ratio: tuple[str, str] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Measure:
        if (self.run is None) == (self.ratio is None):
            raise ValueError("measure needs exactly one of `run` or `ratio: [numerator, "
                             "denominator]`")
        return self

    @property
    def runs(self) -> tuple[str, ...]:
        return (self.run,) if self.run is not None else tuple(self.ratio or ())


class Row(_Strict):
    """One published measurement and the pdsim setup that should reproduce it."""

    id: str
    title: str
    kind: Kind
    role: Role
    category: str
    published: Published
    source: Source
    assumptions: list[str]
    tolerance_pct: float = Field(gt=0, le=100)
    tolerance_reason: str
    explanation: str = ""
    known_failure: str = ""
    config: dict[str, Any]
    runs: dict[str, list[str]]
    measure: Measure
    path: str = ""

    @model_validator(mode="after")
    def _runs_exist(self) -> Row:
        missing = [r for r in self.measure.runs if r not in self.runs]
        if missing:
            raise ValueError(f"measure names runs {missing} that `runs` does not define")
        return self


def _row_from_file(path: Path) -> Row:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a row file must be a mapping")
    enums: dict[str, Any] = {"kind": Kind, "role": Role}
    for key, enum in enums.items():
        if key in data:
            data[key] = enum(data[key])
    for key in ("runs",):
        data[key] = {name: list(ov or []) for name, ov in (data.get(key) or {}).items()}
    measure = data.get("measure") or {}
    if isinstance(measure.get("ratio"), list):
        measure["ratio"] = tuple(measure["ratio"])
    data["path"] = path.name
    try:
        return Row.model_validate(data)
    except Exception as exc:
        raise ValueError(f"{path}: {exc}") from exc


def load_rows(directory: Path = ROWS_DIR, role: Literal["fit", "holdout"] | None = None,
              ids: list[str] | None = None) -> list[Row]:
    """Every row file in ``directory`` (sorted by file name), optionally filtered."""
    rows = [_row_from_file(p) for p in sorted(directory.glob("*.yaml"))]
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise ValueError(f"duplicate row id {row.id!r}")
        seen.add(row.id)
    if role is not None:
        rows = [r for r in rows if r.role.value == role]
    if ids:
        unknown = sorted(set(ids) - {r.id for r in rows})
        if unknown:
            raise ValueError(f"unknown row id(s): {', '.join(unknown)}")
        rows = [r for r in rows if r.id in ids]
    return rows
