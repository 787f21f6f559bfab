"""Step-time section of the config (kinds: simple; extended with roofline and measured)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from pdsim._model import StrictModel


class SimpleStepTimeConfig(StrictModel):
    """A linear, memory-floor model good enough to run without hardware profiles.

    target_s = overhead_s + max(weights_floor_s, target_tokens * per_token_s)
               + decode_context_tokens * per_context_token_s
               + prefill_attention_pairs * per_attention_pair_s
    drafter_s = drafter passes, each max(drafter_floor_s, tokens * per_token_s *
                drafter_token_cost_ratio)
    """

    kind: Literal["simple"] = "simple"
    overhead_s: Annotated[float, Field(ge=0)] = 0.003
    weights_floor_s: Annotated[float, Field(ge=0)] = 0.012
    per_token_s: Annotated[float, Field(ge=0)] = 4.0e-5
    per_context_token_s: Annotated[float, Field(ge=0)] = 2.0e-9
    per_attention_pair_s: Annotated[float, Field(ge=0)] = 2.0e-12
    drafter_floor_s: Annotated[float, Field(ge=0)] = 0.0006
    drafter_token_cost_ratio: Annotated[float, Field(ge=0)] = 0.04


StepTimeConfig = Annotated[SimpleStepTimeConfig, Field(discriminator="kind")]
