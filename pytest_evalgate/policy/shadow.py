"""The ``shadow:`` rules of ``gate.yaml``: what shadowed answers must hold (SPEC 21).

Each rule is ``{metric: M, max: X, min_pairs: 30}`` over the answer pairs the shadow proxy kept
(one request, stable's answer and the candidate's):

| metric | bound | compares, over the pairs |
|---|---|---|
| ``error_rate_delta`` | max | share of pairs whose candidate answer failed, minus stable's share |
| ``refusal_rate_delta`` | max | share of refusals, candidate minus stable (both answered) |
| ``output_length_ratio`` | max | mean output length, candidate over stable (both answered) |
| ``latency_ratio`` | max | median time to the whole answer, candidate over stable (both answered) |
| ``judge_preference_delta`` | max | pairs the pinned judge prefers stable in, minus the candidate |

``judge_preference_delta`` is over the pairs the suite's pinned judge gave an outcome (both
answered and the question kept: ``shadow serve --keep-question``), as shares of those pairs.

A rule passes when the one-sided upper confidence bound of its estimate (a seeded bootstrap
over pairs, the policy's ``confidence`` and ``bootstrap``) is at most ``max``; fewer than
``min_pairs`` usable pairs leave it undecided. As for ``online:``, a bound must leave room for
an equal candidate (a ratio's above 1, a delta's above 0). Shadow rules never take part in the
offline verdict; ``policy.evalgate_load_policy`` validates them with the rest of the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pydantic

from pytest_evalgate.errors import EvalgatePolicyError
from pytest_evalgate.formats.strictmodel import EVALGATE_STRICT_MODEL

# metric -> the bound it takes (all are "larger is worse")
EVALGATE_SHADOW_METRICS: Mapping[str, str] = {
    "error_rate_delta": "max",
    "refusal_rate_delta": "max",
    "output_length_ratio": "max",
    "latency_ratio": "max",
    "judge_preference_delta": "max",
}
EVALGATE_SHADOW_RATIOS = ("output_length_ratio", "latency_ratio")


@dataclass(frozen=True)
class EvalgateShadowRule:
    """One validated shadow rule; ``index`` is its position in ``shadow:`` (for messages)."""

    metric: str
    threshold: float
    min_pairs: int = 30
    index: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The rule in its ``gate.yaml`` form, defaults filled in (builtins only)."""
        return {"metric": self.metric, "max": self.threshold, "min_pairs": self.min_pairs}


class _ShadowRule(pydantic.BaseModel):
    model_config = EVALGATE_STRICT_MODEL
    metric: Literal[tuple(EVALGATE_SHADOW_METRICS)]  # type: ignore[valid-type]
    max: float
    min_pairs: Annotated[int, pydantic.Field(ge=1, le=10_000_000)] = 30


EVALGATE_SHADOW_RULE_MODEL: type[pydantic.BaseModel] = _ShadowRule
"""One rule's schema (``policy.reference`` documents it)."""


def evalgate_shadow_rules(raw: object, source: str) -> tuple[EvalgateShadowRule, ...]:
    """Validate the ``shadow:`` list of ``source``; raise ``EvalgatePolicyError`` naming the key.

    ``None`` (no ``shadow:`` key) gives no rules. Refused: a non-list, unknown keys, a metric
    outside ``EVALGATE_SHADOW_METRICS``, a missing ``max``, a bound an equal candidate would not
    pass with room to spare, and two rules on one metric.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise EvalgatePolicyError(source, "shadow", "must be a list of rules")
    rules = tuple(_one_rule(index, item, source) for index, item in enumerate(raw))
    seen: set[str] = set()
    for rule in rules:
        if rule.metric in seen:
            reason = f"a second rule on {rule.metric} (one rule per metric)"
            raise EvalgatePolicyError(source, f"shadow[{rule.index}].metric", reason)
        seen.add(rule.metric)
    return rules


def _one_rule(index: int, item: object, source: str) -> EvalgateShadowRule:
    where = f"shadow[{index}]"
    if not isinstance(item, dict):
        raise EvalgatePolicyError(source, where, "a rule must be a mapping")
    try:
        model = _ShadowRule.model_validate(item)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        key = where + "".join(f".{part}" for part in first["loc"])
        raise EvalgatePolicyError(source, key, _reason(first["type"], first)) from None
    _check_room(model.metric, float(model.max), f"{where}.max", source)
    return EvalgateShadowRule(model.metric, float(model.max), model.min_pairs, index)


def _reason(kind: str, error: Any) -> str:
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing required key"
    if kind == "literal_error":
        expected = ", ".join(EVALGATE_SHADOW_METRICS)
        return f"unknown metric {error['input']!r}; expected {expected}"
    return f"{error['msg']} (got {error['input']!r})"


def _check_room(metric: str, value: float, key: str, source: str) -> None:
    if metric in EVALGATE_SHADOW_RATIOS:
        ok, reason = 1.0 < value <= 100.0, "a ratio's max must be above 1 (1 is an equal candidate)"
    else:
        ok, reason = 0.0 < value <= 1.0, "a rate delta's max must be in (0, 1]"
    if not ok:
        raise EvalgatePolicyError(source, key, f"{reason} (got {value!r})")
