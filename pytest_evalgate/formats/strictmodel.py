"""The one pydantic configuration of every configuration file's schema.

Manifests, policies, judge and sandbox blocks are validated by pydantic models that all share
``EVALGATE_STRICT_MODEL``:

- ``extra="forbid"``: an unknown key is a typo, refused with its name;
- ``strict=True``: numbers are numbers, strings are strings. ``repetitions: "1"`` is refused,
  and so is ``true`` where a number is expected (a YAML boolean is not ``1``); an integer is
  still accepted where a float is expected (``margin: 0`` means ``0.0``);
- ``allow_inf_nan=False``: every float read from a configuration file is finite. YAML spells
  ``.nan`` and ``.inf`` easily, and a NaN margin makes every comparison false, so a rule
  could neither pass nor fail for the reason written;
- ``frozen=True``: validated values are not changed afterwards.

Kept in its own module (it imports only pydantic) so every schema, upstream or downstream,
can share it without importing another stage. ``EvalgateUnit`` is the rules' number in
``[0, 1]``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

EVALGATE_STRICT_MODEL = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)
"""The model configuration of every configuration schema (see the module docstring)."""

EvalgateUnit = Annotated[float, Field(ge=0.0, le=1.0)]
# A request's ``seed``: servers take a signed 64-bit integer (vLLM and llama.cpp refuse a larger
# one, each request in its own words), so a larger one is refused at load, naming the key.
EvalgateRequestSeed = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
"""A schema's number in ``[0, 1]`` (a rate, a margin, a gap): finite by the strict model."""


class EvalgateBudgetSchema(BaseModel):
    """A run-wide load budget block: the manifest's ``budget`` and the judge's own
    ``judge.budget`` (counted apart from the candidates'), one set of keys, defaults and ranges
    (SPEC section 5)."""

    model_config = EVALGATE_STRICT_MODEL

    max_concurrency: int = Field(default=16, ge=1)
    requests_per_second: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    max_attempts: int = Field(default=4, ge=1, le=20)
    timeout_s: float = Field(default=120.0, gt=0)
