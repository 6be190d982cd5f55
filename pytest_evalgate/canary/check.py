"""``evalgate canary check``: the online rules evaluated now against a Prometheus HTTP API.

For each rule, the query is ``promql.evalgate_rule_query`` (the string in the rendered
AnalysisTemplate), evaluated at one instant shared by every query of the check, so canary and
stable are compared over the same window. Two traffic queries count each side's samples in
that window; a rule is judged only when they are enough to tell a canary sitting at the rule's
bound from an equal one (``plan.evalgate_traffic_scale`` <= 1, the plan's test and variance
assumptions). Result per rule: ``pass``, ``fail`` or ``too little traffic`` (with how many
times the traffic is needed). The check fails when a judged rule fails; otherwise it has too
little traffic when a rule had too little; otherwise it passes. Exit status 0, 1, 2.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from pytest_evalgate.canary.analysis import evalgate_online_rules_of
from pytest_evalgate.canary.plan import (
    EvalgatePlanAssumptions,
    evalgate_duration_text,
    evalgate_traffic_scale,
)
from pytest_evalgate.canary.promql import evalgate_rule_query, evalgate_traffic_query
from pytest_evalgate.errors import EvalgatePrometheusError
from pytest_evalgate.policy.online import EvalgateOnlineRule, evalgate_duration_seconds
from pytest_evalgate.policy.values import EvalgatePolicy

EVALGATE_CHECK_PASS = "pass"
EVALGATE_CHECK_FAIL = "fail"
EVALGATE_CHECK_LOW_TRAFFIC = "too little traffic"
EVALGATE_CHECK_EXIT = {
    EVALGATE_CHECK_PASS: 0,
    EVALGATE_CHECK_FAIL: 1,
    EVALGATE_CHECK_LOW_TRAFFIC: 2,
}


class EvalgatePrometheus:
    """Instant queries against the Prometheus HTTP API at ``url`` (``/api/v1/query``).

    ``transport`` is an httpx transport (a swappable part, per the house style); the default
    is httpx's own. Use as a context manager or call ``close``.
    """

    def __init__(
        self, url: str, timeout_s: float = 10.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, timeout=timeout_s, transport=transport)

    def __enter__(self) -> EvalgatePrometheus:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def query(self, promql: str, at: float) -> float:
        """The single value of ``promql`` at unix time ``at``: NaN for an empty result; raises
        ``EvalgatePrometheusError`` when unreachable, refused, or more than one series came."""
        return _value(self._data(promql, at), promql)

    def count(self, promql: str, at: float) -> float:
        """A count of samples (a traffic query) at ``at``: 0 for an empty result; a NaN, an
        infinite or a negative value is ``EvalgatePrometheusError`` (a broken exporter: never
        no traffic, and never enough of it)."""
        data = self._data(promql, at)
        if data.get("resultType") == "vector" and data.get("result") == []:
            return 0.0
        value = _value(data, promql)
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise EvalgatePrometheusError(f"{promql!r} returned {value:g}, which is not a count")
        return value

    def _data(self, promql: str, at: float) -> dict[str, Any]:
        try:
            response = self._client.get(
                "/api/v1/query", params={"query": promql, "time": f"{at:.3f}"}
            )
        except httpx.HTTPError as error:
            raise EvalgatePrometheusError(
                f"cannot query Prometheus at {self.url}: {error}"
            ) from error
        return _payload(response, self.url)


def _payload(response: httpx.Response, url: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or body.get("status") != "success":
        detail = body.get("error") if isinstance(body, dict) else response.text[:200]
        reason = f"Prometheus at {url} answered HTTP {response.status_code}: {detail}"
        raise EvalgatePrometheusError(reason)
    data = body.get("data")
    if not isinstance(data, dict):
        raise EvalgatePrometheusError(f"Prometheus at {url} answered without data")
    return data


def _value(data: Mapping[str, object], promql: str) -> float:
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return _sample(result, promql)
    if kind != "vector" or not isinstance(result, list):
        raise EvalgatePrometheusError(f"expected a vector for {promql!r}, got {kind}")
    if not result:
        return math.nan
    if len(result) > 1:
        reason = f"{promql!r} returned {len(result)} series; a rule's query must return one"
        raise EvalgatePrometheusError(reason)
    series = result[0]
    return _sample(series.get("value") if isinstance(series, dict) else None, promql)


def _sample(pair: object, promql: str) -> float:
    # A sample is [unix time, "value"] with the value a string Prometheus formats from a float
    # ("NaN", "+Inf" included). Anything else is refused naming the query: a check that cannot
    # read its number fails closed with a reason, never with a traceback.
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        raise EvalgatePrometheusError(f"{promql!r} returned a sample that is not [time, value]")
    try:
        return float(pair[1])
    except ValueError:
        reason = f"{promql!r} returned the sample value {pair[1][:40]!r}, not a number"
        raise EvalgatePrometheusError(reason) from None


@dataclass(frozen=True)
class EvalgateRuleCheck:
    """One rule evaluated: its query and value, each side's samples, and the traffic factor."""

    rule: EvalgateOnlineRule
    window: str
    query: str
    value: float
    canary_samples: float
    stable_samples: float
    traffic_scale: float  # times the observed traffic needed to judge; <= 1 is enough

    @property
    def result(self) -> str:
        """``pass``, ``fail`` or ``too little traffic``."""
        if math.isnan(self.value) or not self.traffic_scale <= 1.0:
            return EVALGATE_CHECK_LOW_TRAFFIC
        return EVALGATE_CHECK_PASS if self.rule.holds(self.value) else EVALGATE_CHECK_FAIL


@dataclass(frozen=True)
class EvalgateCanaryCheck:
    """Every online rule of a policy, evaluated at ``at`` against ``address``."""

    address: str
    at: float
    rules: tuple[EvalgateRuleCheck, ...]

    @property
    def result(self) -> str:
        """``fail`` if a judged rule failed, else ``too little traffic`` if any rule had too
        little, else ``pass``."""
        results = {rule.result for rule in self.rules}
        for outcome in (EVALGATE_CHECK_FAIL, EVALGATE_CHECK_LOW_TRAFFIC):
            if outcome in results:
                return outcome
        return EVALGATE_CHECK_PASS

    @property
    def exit_status(self) -> int:
        """0 pass, 1 fail, 2 too little traffic."""
        return EVALGATE_CHECK_EXIT[self.result]


def evalgate_canary_check(
    policy: EvalgatePolicy,
    prometheus: EvalgatePrometheus,
    *,
    window: str | None = None,
    selector: str = "",
    at: float | None = None,
    assumptions: EvalgatePlanAssumptions | None = None,
) -> EvalgateCanaryCheck:
    """Evaluate ``policy``'s online rules now (or at ``at``); ``window`` overrides theirs."""
    instant = time.time() if at is None else at
    checks = tuple(
        _check_rule(rule, prometheus, instant, window, selector, assumptions)
        for rule in evalgate_online_rules_of(policy)
    )
    return EvalgateCanaryCheck(prometheus.url, instant, checks)


def _check_rule(
    rule: EvalgateOnlineRule,
    prometheus: EvalgatePrometheus,
    at: float,
    window: str | None,
    selector: str,
    assumptions: EvalgatePlanAssumptions | None,
) -> EvalgateRuleCheck:
    query = evalgate_rule_query(rule, window, selector)
    value = prometheus.query(query, at)
    canary, stable = (
        prometheus.count(traffic, at)
        for traffic in (
            evalgate_traffic_query(rule, version, window, selector)
            for version in ("canary", "stable")
        )
    )
    scale = evalgate_traffic_scale(rule.metric, rule.threshold, canary, stable, assumptions)
    return EvalgateRuleCheck(rule, window or rule.window, query, value, canary, stable, scale)


# --------------------------------------------------------------------------- what to print


def evalgate_check_lines(check: EvalgateCanaryCheck) -> list[str]:
    """The check as lines for a terminal: one per rule, then the verdict."""
    lines = [f"canary check against {check.address} at {_clock(check.at)} (canary vs stable)"]
    lines += [evalgate_rule_line(rule) for rule in check.rules]
    lines.append(f"canary: {check.result} (exit {check.exit_status})")
    return lines


def evalgate_rule_line(rule: EvalgateRuleCheck) -> str:
    """``metric  value  bound  result: detail`` for one rule."""
    bound = f"{rule.rule.bound} {rule.rule.threshold:g}"
    head = f"{rule.rule.metric:<20} {_number(rule.value):>10}  {bound}"
    samples = _samples(rule)
    if rule.result != EVALGATE_CHECK_LOW_TRAFFIC:
        return f"{head}  {rule.result}  ({samples})"
    return f"{head}  {rule.result}: {samples}; {_more_needed(rule)}"


def _unit(rule: EvalgateRuleCheck) -> str:
    units = {
        "judge_score_delta": "judged requests",
        "refusal_rate_delta": "judged answers",
        "tool_call_failure_delta": "tool calls",
    }
    return units.get(rule.rule.metric, "requests")


def _samples(rule: EvalgateRuleCheck) -> str:
    counts = f"canary {rule.canary_samples:,.0f}, stable {rule.stable_samples:,.0f}"
    return f"{counts} {_unit(rule)} in {rule.window}"


def _more_needed(rule: EvalgateRuleCheck) -> str:
    if rule.canary_samples <= 0 or rule.stable_samples <= 0:
        side = "canary" if rule.canary_samples <= 0 else "stable"
        return f"no {side} traffic in the window: is the {side} pool serving and labelled?"
    if math.isnan(rule.value) and rule.traffic_scale <= 1.0:
        return "the query gave NaN: a side has requests but no samples of this metric"
    scale = rule.traffic_scale
    need = math.ceil(scale * rule.canary_samples)
    more = need - round(rule.canary_samples)  # against the count as printed
    longer = evalgate_duration_text(scale * evalgate_duration_seconds(rule.window))
    return (
        f"judging {rule.rule.bound} {rule.rule.threshold:g} needs about {scale:.1f}x that "
        f"(about {need:,} canary {_unit(rule)} in the window, {more:,} more): raise the canary "
        f"weight, or bake and check over a window of about {longer}"
    )


def _number(value: float) -> str:
    return "NaN" if math.isnan(value) else f"{value:.4g}"


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
