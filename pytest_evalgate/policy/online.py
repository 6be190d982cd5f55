"""The ``online:`` rules of ``gate.yaml``: what a live canary must hold (SPEC section 15).

Each rule is ``{metric: M, max: X | min: X, interval: 5m, window: 10m, failure_limit: 2}``:

| metric | bound | compares canary with stable over the same window |
|---|---|---|
| ``error_rate_delta`` | max | share of requests answered 5xx, canary minus stable |
| ``ttft_p95_ratio`` | max | p95 time to first token, canary over stable |
| ``tpot_p95_ratio`` | max | p95 time per output token, canary over stable |
| ``output_length_ratio`` | max | mean output tokens per finished request, canary over stable |
| ``judge_score_delta`` | min | mean online judge score (0..1), canary minus stable |
| ``refusal_rate_delta`` | max | share of sampled answers that refuse, canary minus stable |
| ``length_stop_share_delta`` | max | share of ``length`` stops, canary minus stable |
| ``tool_call_failure_delta`` | max | share of tool calls that failed, canary minus stable |

``window`` is the PromQL range both sides are measured over, ``interval`` how often Argo Rollouts
measures, ``failure_limit`` how many failed measurements it tolerates. A bound must leave room for
an equal canary: a delta's bound is away from 0 on the side it guards, a ratio's above 1 (so the
traffic needed to judge a rule is finite, see ``canary.plan``). Online rules never take part in
the offline verdict; ``policy.evalgate_load_policy`` validates them with the rest of the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pydantic
from pydantic_core import ErrorDetails

from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.formats.strictmodel import EVALGATE_STRICT_MODEL

# metric -> the bound it takes ("max": larger is worse; "min": smaller is worse)
EVALGATE_ONLINE_METRICS: Mapping[str, str] = {
    "error_rate_delta": "max",
    "ttft_p95_ratio": "max",
    "tpot_p95_ratio": "max",
    "output_length_ratio": "max",
    "judge_score_delta": "min",
    "refusal_rate_delta": "max",
    "length_stop_share_delta": "max",
    "tool_call_failure_delta": "max",
}
EVALGATE_RATE_METRICS = (
    "error_rate_delta", "refusal_rate_delta", "length_stop_share_delta", "tool_call_failure_delta",
)  # fmt: skip
"""The rules on a share of Bernoulli events (``canary.plan``'s variance ``p (1 - p)``)."""
EVALGATE_RATIO_METRICS = ("ttft_p95_ratio", "tpot_p95_ratio", "output_length_ratio")
_UNITS = {"s": 1, "m": 60, "h": 3600}
EVALGATE_DURATION_PATTERN = r"^[1-9][0-9]*[smh]$"  # a PromQL range and an Argo Rollouts duration


@dataclass(frozen=True)
class EvalgateOnlineRule:
    """One validated online rule; ``index`` is its position in ``online:`` (for messages)."""

    metric: str
    bound: str  # "max" or "min"
    threshold: float
    interval: str = "5m"
    window: str = "10m"
    failure_limit: int = 2
    index: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The rule in its ``gate.yaml`` form, defaults filled in (builtins only)."""
        return {
            "metric": self.metric,
            self.bound: self.threshold,
            "interval": self.interval,
            "window": self.window,
            "failure_limit": self.failure_limit,
        }

    def holds(self, value: float) -> bool:
        """Whether a measured ``value`` satisfies the bound (NaN never does)."""
        return value <= self.threshold if self.bound == "max" else value >= self.threshold


def evalgate_duration(text: str, source: str, key: str) -> str:
    """``text`` when it is a duration like ``30s``, ``10m`` or ``2h``; else
    ``EvalgateConfigError(source, key, reason)``."""
    if not re.fullmatch(EVALGATE_DURATION_PATTERN, text):
        raise EvalgateConfigError(source, key, f"a duration like 30s, 10m or 2h (got {text!r})")
    return text


def evalgate_duration_seconds(text: str) -> int:
    """Seconds in a duration of the form ``30s``, ``10m`` or ``2h`` (already validated)."""
    return int(text[:-1]) * _UNITS[text[-1]]


class _OnlineRule(pydantic.BaseModel):
    model_config = EVALGATE_STRICT_MODEL
    metric: Literal[tuple(EVALGATE_ONLINE_METRICS)]  # type: ignore[valid-type]
    max: float | None = None
    min: float | None = None
    interval: Annotated[str, pydantic.Field(pattern=EVALGATE_DURATION_PATTERN)] = "5m"
    window: Annotated[str, pydantic.Field(pattern=EVALGATE_DURATION_PATTERN)] = "10m"
    failure_limit: Annotated[int, pydantic.Field(ge=0, le=1000)] = 2


EVALGATE_ONLINE_RULE_MODEL: type[pydantic.BaseModel] = _OnlineRule
"""One rule's schema (``policy.reference`` documents it)."""


def evalgate_online_rules(raw: object, source: str) -> tuple[EvalgateOnlineRule, ...]:
    """Validate the ``online:`` list of ``source``; raise ``EvalgatePolicyError`` naming the key.

    ``None`` (no ``online:`` key) gives no rules. Refused: a non-list, unknown keys, a metric
    outside ``EVALGATE_ONLINE_METRICS``, the wrong bound for the metric (or both, or none), a
    bound that an equal canary would not pass with room to spare, durations other than
    ``<n>s|m|h``, and two rules on one metric.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise EvalgatePolicyError(source, "online", "must be a list of rules")
    rules = tuple(_one_rule(index, item, source) for index, item in enumerate(raw))
    _refuse_duplicates(rules, source)
    return rules


def _one_rule(index: int, item: object, source: str) -> EvalgateOnlineRule:
    where = f"online[{index}]"
    if not isinstance(item, dict):
        raise EvalgatePolicyError(source, where, "a rule must be a mapping")
    try:
        model = _OnlineRule.model_validate(item)
    except pydantic.ValidationError as error:
        key, reason = _describe(error.errors()[0])
        raise EvalgatePolicyError(source, f"{where}{key}", reason) from None
    bound = _bound(model, where, source)
    threshold = float(getattr(model, bound))
    _check_room(model.metric, bound, threshold, f"{where}.{bound}", source)
    return EvalgateOnlineRule(
        model.metric, bound, threshold, model.interval, model.window, model.failure_limit, index
    )


def _describe(error: ErrorDetails) -> tuple[str, str]:
    """pydantic's first error as (``.key`` suffix, reason)."""
    key = "".join(f".{part}" for part in error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        return key, "unknown key"
    if kind == "missing":
        return key, "missing required key"
    if kind == "literal_error":
        return (
            key,
            f"unknown metric {error['input']!r}; expected {', '.join(EVALGATE_ONLINE_METRICS)}",
        )
    if kind == "string_pattern_mismatch":
        return key, f"a duration like 30s, 10m or 2h is expected (got {error['input']!r})"
    return key, f"{error['msg']} (got {error['input']!r})"


def _bound(model: _OnlineRule, where: str, source: str) -> str:
    want = EVALGATE_ONLINE_METRICS[model.metric]
    other = "min" if want == "max" else "max"
    if getattr(model, other) is not None:
        reason = f"{model.metric} takes {want}, not {other} (a {want} is what can be breached)"
        raise EvalgatePolicyError(source, f"{where}.{other}", reason)
    if getattr(model, want) is None:
        raise EvalgatePolicyError(source, f"{where}.{want}", f"{model.metric} needs a {want}")
    return want


def _check_room(metric: str, bound: str, value: float, key: str, source: str) -> None:
    """A bound an equal canary sits on (or beyond) would fail it about half the time or more."""
    if metric in EVALGATE_RATIO_METRICS:
        ok, reason = 1.0 < value <= 100.0, "a ratio's max must be above 1 (1 is an equal canary)"
    elif bound == "max":
        ok, reason = 0.0 < value <= 1.0, "a rate delta's max must be in (0, 1]"
    else:
        ok, reason = -1.0 <= value < 0.0, "a score delta's min must be in [-1, 0)"
    if not ok:
        raise EvalgatePolicyError(source, key, f"{reason} (got {value!r})")


def _refuse_duplicates(rules: Sequence[EvalgateOnlineRule], source: str) -> None:
    seen: set[str] = set()
    for rule in rules:
        if rule.metric in seen:
            reason = f"a second rule on {rule.metric} (one rule per metric)"
            raise EvalgatePolicyError(source, f"online[{rule.index}].metric", reason)
        seen.add(rule.metric)
