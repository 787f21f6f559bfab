"""The strict, frozen pydantic base every config section derives from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Frozen and strict: unknown keys are errors, values are never coerced from strings."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True,
                              use_attribute_docstrings=True)
