"""How long a canary step must bake to detect an effect (``evalgate canary plan``).

The test behind every number: a one-sided z-test of canary against stable at level ``alpha``
with power ``power``, on an estimate D (a difference of means or rates, or a difference of logs
for a ratio) whose variance is ``var_canary / n_canary + var_stable / n_stable``. With total
traffic R requests/s, canary weight W and a sampled fraction S (the share of requests that are
judged; 1 for what every request reports), a bake of t seconds holds ``n_canary = R W S t`` and
``n_stable = R (1 - W) S t`` samples, so detecting an effect E needs::

    t = (z_{1-alpha} + z_{power})^2 * (var_canary / W + var_stable / (1 - W)) / (R * S * E^2)

Per-request variances (the assumptions; each can be changed with ``sd`` or ``baseline_rate``):

- ``error_rate_delta`` and the other shares (``refusal_rate_delta``,
  ``length_stop_share_delta``, ``tool_call_failure_delta``): Bernoulli, ``p (1 - p)``, with the
  stable rate ``baseline_rate`` (default 0.1 %: pass the metric's own, e.g. 5 % for length
  stops) and the canary rate ``baseline_rate + E``.
- ``ttft_p95_ratio``, ``tpot_p95_ratio``: log-normal latencies with log-scale standard
  deviation ``sd`` (default 0.5 for TTFT, 0.3 for TPOT); the estimate is the log of the sample
  p95, whose asymptotic variance is ``sd^2 * 0.95 * 0.05 / phi(z_0.95)^2 / n`` (the sample
  quantile's ``p (1 - p) / (n f(q)^2)``); E is ``ln(ratio)``.
- ``output_length_ratio``: the log of a mean output length with coefficient of variation ``sd``
  (default 1.0), variance ``sd^2 / n`` (delta method); E is ``ln(ratio)``.
- ``judge_score_delta``: judge scores on 0..1 with standard deviation ``sd`` (default 0.25); a
  "1-point" change is E = 0.01.

``evalgate_traffic_scale`` turns the same formula around for ``check``: how many times the
traffic a window held is needed to tell a canary sitting at a rule's bound from an equal one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.policy.online import (
    EVALGATE_ONLINE_METRICS,
    EVALGATE_RATE_METRICS,
    EVALGATE_RATIO_METRICS,
)

_P = 0.95  # the quantile the latency rules compare
EVALGATE_DEFAULT_SD = {
    "ttft_p95_ratio": 0.5,
    "tpot_p95_ratio": 0.3,
    "output_length_ratio": 1.0,
    "judge_score_delta": 0.25,
}
EVALGATE_DEFAULT_BASELINE_RATE = 0.001
EVALGATE_DEFAULT_ALPHA = 0.05
EVALGATE_DEFAULT_POWER = 0.8
_SOURCE = "canary plan"


@dataclass(frozen=True)
class EvalgatePlanAssumptions:
    """The test and variance assumptions shared by ``plan`` and ``check``."""

    alpha: float = EVALGATE_DEFAULT_ALPHA
    power: float = EVALGATE_DEFAULT_POWER
    sd: float | None = None  # None: EVALGATE_DEFAULT_SD[metric]
    baseline_rate: float = EVALGATE_DEFAULT_BASELINE_RATE

    @property
    def z(self) -> float:
        """``z_{1-alpha} + z_{power}``."""
        normal = NormalDist()
        return normal.inv_cdf(1.0 - self.alpha) + normal.inv_cdf(self.power)


@dataclass(frozen=True)
class EvalgatePlan:
    """A bake time and what it rests on; counts are samples (requests times the fraction S)."""

    metric: str
    rate: float
    weight: float
    sample: float
    effect: float
    assumptions: EvalgatePlanAssumptions
    scale: float  # E on the scale of the test: |delta| or |ln ratio|
    var_canary: float
    var_stable: float
    bake_s: float

    @property
    def canary_per_hour(self) -> float:
        """Sampled canary requests an hour at this traffic."""
        return self.rate * self.weight * self.sample * 3600.0

    @property
    def n_canary(self) -> float:
        """Sampled canary requests in the bake."""
        return self.rate * self.weight * self.sample * self.bake_s

    @property
    def n_stable(self) -> float:
        """Sampled stable requests in the bake."""
        return self.rate * (1.0 - self.weight) * self.sample * self.bake_s

    @property
    def variance_assumption(self) -> str:
        """The per-request variance used, in words."""
        return evalgate_variance_assumption(self.metric, self.effect, self.assumptions)


def evalgate_plan(
    metric: str,
    rate: float,
    weight: float,
    effect: float,
    sample: float = 1.0,
    assumptions: EvalgatePlanAssumptions | None = None,
) -> EvalgatePlan:
    """The bake time to detect ``effect`` on ``metric`` at ``rate`` req/s, canary ``weight``
    (0..1) and sampled fraction ``sample``; ``EvalgateConfigError`` for values out of range.

    ``effect`` is in the rule's unit: a ratio (1.05) for the ratio metrics, an absolute change
    for the deltas (0.002 error rate, 0.01 judge score).
    """
    assumed = assumptions or EvalgatePlanAssumptions()
    _check_plan_inputs(metric, rate, weight, sample, assumed)
    scale = evalgate_effect_scale(metric, effect)
    var_c, var_s = evalgate_variances(metric, effect, assumed)
    per_second = var_c / weight + var_s / (1.0 - weight)
    bake = assumed.z**2 * per_second / (rate * sample * scale**2)
    return EvalgatePlan(metric, rate, weight, sample, effect, assumed, scale, var_c, var_s, bake)


def evalgate_effect_scale(metric: str, effect: float) -> float:
    """``effect`` on the test's scale (``|ln ratio|`` or ``|delta|``); refuses a null effect."""
    if metric in EVALGATE_RATIO_METRICS:
        if not effect > 0.0 or effect == 1.0 or not math.isfinite(effect):
            raise EvalgateConfigError(_SOURCE, "effect", f"a ratio other than 1 (got {effect!r})")
        return abs(math.log(effect))
    if not 0.0 < abs(effect) <= 1.0:
        raise EvalgateConfigError(_SOURCE, "effect", f"a change in (0, 1] (got {effect!r})")
    return abs(effect)


def evalgate_variances(
    metric: str, effect: float, assumptions: EvalgatePlanAssumptions
) -> tuple[float, float]:
    """Per-sample variance of the estimate for (canary, stable) under ``effect``."""
    if metric in EVALGATE_RATE_METRICS:
        stable = assumptions.baseline_rate
        canary = min(1.0, stable + abs(effect))
        return canary * (1.0 - canary), stable * (1.0 - stable)
    sd = _sd(metric, assumptions)
    if metric in ("ttft_p95_ratio", "tpot_p95_ratio"):
        var = sd**2 * evalgate_quantile_factor(_P)
        return var, var
    return sd**2, sd**2


def evalgate_quantile_factor(p: float) -> float:
    """``p (1 - p) / phi(z_p)^2``: the variance of a sample p-quantile of a standard normal
    (times n), which is the log-scale factor for a log-normal's quantile."""
    normal = NormalDist()
    return p * (1.0 - p) / normal.pdf(normal.inv_cdf(p)) ** 2


def evalgate_variance_assumption(
    metric: str, effect: float, assumptions: EvalgatePlanAssumptions
) -> str:
    """The variance assumption of ``metric`` in one sentence."""
    if metric in EVALGATE_RATE_METRICS:
        p = assumptions.baseline_rate
        return (
            f"Bernoulli events, p(1-p) per request: stable rate {p:g}, canary rate "
            f"{min(1.0, p + abs(effect)):g}"
        )
    sd = _sd(metric, assumptions)
    if metric in ("ttft_p95_ratio", "tpot_p95_ratio"):
        factor = evalgate_quantile_factor(_P)
        return (
            f"log-normal latency, log-sd {sd:g}; log of the sample p95 has variance "
            f"sd^2 * 0.95*0.05/phi(1.645)^2 = {sd**2 * factor:.3f} / n"
        )
    if metric == "output_length_ratio":
        return (
            f"output length with coefficient of variation {sd:g}; log of the mean: {sd**2:.3f} / n"
        )
    return f"judge scores on 0..1 with sd {sd:g} per judged request: {sd**2:.4f} / n"


def evalgate_traffic_scale(
    metric: str,
    threshold: float,
    n_canary: float,
    n_stable: float,
    assumptions: EvalgatePlanAssumptions | None = None,
) -> float:
    """How many times the observed samples (``n_canary``, ``n_stable``) are needed to tell a
    canary at ``threshold`` from an equal one (<= 1: enough); ``inf`` when a side has none."""
    if n_canary <= 0 or n_stable <= 0:
        return math.inf
    assumed = assumptions or EvalgatePlanAssumptions()
    scale = evalgate_effect_scale(metric, threshold)
    var_c, var_s = evalgate_variances(metric, threshold, assumed)
    return assumed.z**2 * (var_c / n_canary + var_s / n_stable) / scale**2


def _sd(metric: str, assumptions: EvalgatePlanAssumptions) -> float:
    return assumptions.sd if assumptions.sd is not None else EVALGATE_DEFAULT_SD[metric]


def _check_plan_inputs(
    metric: str, rate: float, weight: float, sample: float, assumed: EvalgatePlanAssumptions
) -> None:
    checks = (
        (
            "metric",
            metric in EVALGATE_ONLINE_METRICS,
            f"one of {', '.join(EVALGATE_ONLINE_METRICS)}",
        ),
        ("rate", rate > 0.0 and math.isfinite(rate), "requests per second above 0"),
        ("weight", 0.0 < weight < 1.0, "a canary share in (0, 1), e.g. 0.01 or 1%"),
        ("sample", 0.0 < sample <= 1.0, "a sampled fraction in (0, 1], e.g. 0.02 or 2%"),
        ("alpha", 0.0 < assumed.alpha < 0.5, "a one-sided level in (0, 0.5)"),
        ("power", assumed.alpha < assumed.power < 1.0, "a power in (alpha, 1)"),
        ("sd", assumed.sd is None or assumed.sd > 0.0, "a standard deviation above 0"),
        ("baseline_rate", 0.0 < assumed.baseline_rate < 1.0, "a stable error rate in (0, 1)"),
    )
    for key, ok, reason in checks:
        if not ok:
            raise EvalgateConfigError(_SOURCE, key, reason)


# --------------------------------------------------------------------------- what to print


def evalgate_duration_text(seconds: float) -> str:
    """``45s``, ``38m`` or ``2.7h`` (rounded up to the unit shown)."""
    if seconds < 120:
        return f"{math.ceil(seconds)}s"
    if seconds < 7200:
        return f"{math.ceil(seconds / 60)}m"
    return f"{seconds / 3600:.1f}h"


def evalgate_plan_lines(plan: EvalgatePlan) -> list[str]:
    """The plan for a terminal: traffic, bake, test, formula and variance assumption."""
    assumed, unit = plan.assumptions, _unit(plan)
    sampled = f" x sample {_percent(plan.sample)}" if plan.sample < 1.0 else ""
    per_second = plan.rate * plan.weight * plan.sample
    stable = plan.rate * (1 - plan.weight) * plan.sample
    return [
        f"canary plan: {plan.metric}, effect {plan.effect:g} (E = {plan.scale:.4g} in the test)",
        f"traffic: {plan.rate:,.6g} req/s x weight {_percent(plan.weight)}{sampled} = "
        f"{per_second:,.4g} {unit}/s ({plan.canary_per_hour:,.0f} an hour); stable {stable:,.4g}/s",
        f"bake: {evalgate_duration_text(plan.bake_s)} ({plan.bake_s:,.0f} s), holding "
        f"{plan.n_canary:,.0f} {unit} and {plan.n_stable:,.0f} stable",
        f"an hour at this weight: {plan.canary_per_hour:,.0f} {unit}, {plan.n_canary:,.0f} needed "
        f"({'enough' if plan.bake_s <= 3600 else 'not enough'})",
        f"test: one-sided z-test at alpha {assumed.alpha:g} with power {assumed.power:g}; "
        f"z_(1-alpha) + z_power = {assumed.z:.3f}",
        "formula: t = (z_(1-alpha) + z_power)^2 * (var_canary / W + var_stable / (1 - W))"
        " / (R * S * E^2)",
        f"variance: {plan.variance_assumption}",
    ]


def _unit(plan: EvalgatePlan) -> str:
    return "canary requests" if plan.sample >= 1.0 else "sampled canary requests"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"
