"""canary plan: the seed's numbers, the formula against scipy, refusals, and a simulation that
the planned bake detects the effect with the stated power (and no more false alarms than alpha).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from pytest_evalgate.canary.plan import (
    EVALGATE_DEFAULT_SD,
    EvalgatePlan,
    EvalgatePlanAssumptions,
    evalgate_plan,
    evalgate_quantile_factor,
    evalgate_traffic_scale,
)
from pytest_evalgate.errors import EvalgateConfigError

# --------------------------------------------------------------------------- the seed's numbers


def test_one_percent_of_2000_per_second_is_72000_requests_an_hour() -> None:
    plan = evalgate_plan("error_rate_delta", rate=2000, weight=0.01, effect=0.002)
    assert plan.canary_per_hour == pytest.approx(72_000)


@pytest.mark.parametrize(
    ("metric", "effect"),
    [("error_rate_delta", 0.002), ("ttft_p95_ratio", 1.05), ("tpot_p95_ratio", 1.05)],
)
def test_an_hour_at_one_percent_is_enough_for_error_rate_and_latency(
    metric: str, effect: float
) -> None:
    plan = evalgate_plan(metric, rate=2000, weight=0.01, effect=effect)
    assert plan.bake_s < 600  # minutes, not hours
    assert plan.n_canary < 72_000 / 6


def test_a_one_point_judge_change_sampled_on_two_percent_needs_hours() -> None:
    plan = evalgate_plan("judge_score_delta", rate=2000, weight=0.01, effect=0.01, sample=0.02)
    assert plan.canary_per_hour == pytest.approx(1_440)  # judged canary requests an hour
    assert 2 * 3600 < plan.bake_s < 4 * 3600
    assert plan.n_canary == pytest.approx(plan.bake_s * 0.4)
    # all traffic judged would take about a fiftieth of that: the sample is what costs hours
    everything = evalgate_plan("judge_score_delta", rate=2000, weight=0.01, effect=0.01)
    assert everything.bake_s == pytest.approx(plan.bake_s * 0.02)


# --------------------------------------------------------------------------- the formula


def _reference_bake(
    var_c: float, var_s: float, rate: float, weight: float, sample: float, scale: float
) -> float:
    z = stats.norm.ppf(0.95) + stats.norm.ppf(0.80)
    return float(z**2 * (var_c / weight + var_s / (1 - weight)) / (rate * sample * scale**2))


def test_judge_bake_matches_the_formula_computed_with_scipy() -> None:
    plan = evalgate_plan("judge_score_delta", 2000, 0.01, -0.01, 0.02)
    assert plan.bake_s == pytest.approx(_reference_bake(0.0625, 0.0625, 2000, 0.01, 0.02, 0.01))


def test_error_rate_uses_bernoulli_variances_under_the_effect() -> None:
    assumed = EvalgatePlanAssumptions(baseline_rate=0.01)
    plan = evalgate_plan("error_rate_delta", 300, 0.05, 0.005, assumptions=assumed)
    assert (plan.var_canary, plan.var_stable) == pytest.approx((0.015 * 0.985, 0.01 * 0.99))
    assert plan.bake_s == pytest.approx(
        _reference_bake(0.015 * 0.985, 0.01 * 0.99, 300, 0.05, 1.0, 0.005)
    )
    assert "stable rate 0.01, canary rate 0.015" in plan.variance_assumption


def test_latency_quantile_variance_factor_is_the_sample_quantile_formula() -> None:
    density = stats.norm.pdf(stats.norm.ppf(0.95))
    assert evalgate_quantile_factor(0.95) == pytest.approx(0.95 * 0.05 / density**2)
    plan = evalgate_plan("ttft_p95_ratio", 100, 0.1, 1.2)
    var = 0.5**2 * evalgate_quantile_factor(0.95)
    assert plan.scale == pytest.approx(math.log(1.2))
    assert plan.bake_s == pytest.approx(_reference_bake(var, var, 100, 0.1, 1.0, math.log(1.2)))
    assert "log-sd 0.5" in plan.variance_assumption


def test_bake_scales_with_effect_rate_sample_and_weight() -> None:
    def bake(**kw: float) -> float:
        args: dict[str, float] = {"rate": 100, "weight": 0.1, "effect": 0.02, "sample": 0.5}
        args.update(kw)
        return evalgate_plan("judge_score_delta", **args).bake_s  # type: ignore[arg-type]

    base = bake()
    assert bake(effect=0.04) == pytest.approx(base / 4)
    assert bake(rate=200) == pytest.approx(base / 2)
    assert bake(sample=0.25) == pytest.approx(base * 2)
    ratio = (1 / 0.01 + 1 / 0.99) / (1 / 0.1 + 1 / 0.9)
    assert bake(weight=0.01) == pytest.approx(base * ratio)


def test_stricter_alpha_power_or_spread_need_longer() -> None:
    base = evalgate_plan("tpot_p95_ratio", 100, 0.05, 1.1).bake_s
    for assumed in (
        EvalgatePlanAssumptions(alpha=0.01),
        EvalgatePlanAssumptions(power=0.95),
        EvalgatePlanAssumptions(sd=EVALGATE_DEFAULT_SD["tpot_p95_ratio"] * 2),
    ):
        assert evalgate_plan("tpot_p95_ratio", 100, 0.05, 1.1, assumptions=assumed).bake_s > base


def test_a_slower_or_faster_canary_of_the_same_factor_needs_the_same_bake() -> None:
    slower = evalgate_plan("output_length_ratio", 100, 0.05, 1.25).bake_s
    assert evalgate_plan("output_length_ratio", 100, 0.05, 0.8).bake_s == pytest.approx(slower)


@pytest.mark.parametrize(
    ("metric", "effect"),
    [
        ("error_rate_delta", 0.002),
        ("ttft_p95_ratio", 1.1),
        ("output_length_ratio", 1.15),
        ("judge_score_delta", -0.02),
    ],
)
def test_traffic_scale_is_one_at_the_planned_bake(metric: str, effect: float) -> None:
    plan = evalgate_plan(metric, 500, 0.05, effect)
    assert evalgate_traffic_scale(metric, effect, plan.n_canary, plan.n_stable) == pytest.approx(1)
    half = evalgate_traffic_scale(metric, effect, plan.n_canary / 2, plan.n_stable / 2)
    assert half == pytest.approx(2)
    assert evalgate_traffic_scale(metric, effect, 0, plan.n_stable) == math.inf
    assert evalgate_traffic_scale(metric, effect, plan.n_canary, 0) == math.inf


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"metric": "ttft_p50_ratio"}, "metric"),
        ({"rate": 0}, "rate"),
        ({"rate": math.inf}, "rate"),
        ({"weight": 0}, "weight"),
        ({"weight": 1}, "weight"),
        ({"weight": 5}, "weight"),
        ({"sample": 0}, "sample"),
        ({"sample": 1.5}, "sample"),
        ({"effect": 1.0}, "effect"),
        ({"effect": -1.1}, "effect"),
        ({"metric": "judge_score_delta", "effect": 0.0}, "effect"),
        ({"metric": "error_rate_delta", "effect": 1.5}, "effect"),
        ({"assumptions": EvalgatePlanAssumptions(alpha=0.6)}, "alpha"),
        ({"assumptions": EvalgatePlanAssumptions(power=0.01)}, "power"),
        ({"assumptions": EvalgatePlanAssumptions(sd=0)}, "sd"),
        ({"assumptions": EvalgatePlanAssumptions(baseline_rate=0)}, "baseline_rate"),
    ],
)
def test_out_of_range_inputs_are_refused_by_name(kwargs: dict[str, object], key: str) -> None:
    args: dict[str, object] = {
        "metric": "ttft_p95_ratio",
        "rate": 100,
        "weight": 0.05,
        "effect": 1.1,
    }
    args.update(kwargs)
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_plan(**args)  # type: ignore[arg-type]
    assert (caught.value.source, caught.value.key) == ("canary plan", key)


# --------------------------------------------------------------------------- simulation

Z_ALPHA = float(stats.norm.ppf(0.95))
REPLICATIONS = 2000
CHUNK = 250
Draw = Callable[
    [np.random.Generator, int, int, bool], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]
]
# Rubric-like judge scores on 0..1 (a 1-5 scale): mean 0.7175, sd 0.254.
LEVELS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
LEVEL_P = np.array([0.03, 0.07, 0.2, 0.4, 0.3])


def _errors(
    plan: EvalgatePlan, rng: np.random.Generator, nc: int, ns: int, null: bool
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    stable = plan.assumptions.baseline_rate
    canary = stable if null else stable + plan.effect
    pc = rng.binomial(nc, canary, CHUNK) / nc
    ps = rng.binomial(ns, stable, CHUNK) / ns
    return pc - ps, np.sqrt(pc * (1 - pc) / nc + ps * (1 - ps) / ns)


def _quantiles(
    plan: EvalgatePlan, rng: np.random.Generator, nc: int, ns: int, null: bool
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    sd = EVALGATE_DEFAULT_SD[plan.metric]
    shift = 0.0 if null else math.log(plan.effect)
    canary = rng.normal(shift, sd, (CHUNK, nc))  # log latencies (log-normal latencies)
    stable = rng.normal(0.0, sd, (CHUNK, ns))
    diff = np.quantile(canary, 0.95, axis=1) - np.quantile(stable, 0.95, axis=1)
    factor = evalgate_quantile_factor(0.95)
    se = np.sqrt(factor * (canary.var(axis=1, ddof=1) / nc + stable.var(axis=1, ddof=1) / ns))
    return diff, se


def _lengths(
    plan: EvalgatePlan, rng: np.random.Generator, nc: int, ns: int, null: bool
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    cv = EVALGATE_DEFAULT_SD[plan.metric]
    sigma = math.sqrt(math.log(1 + cv**2))  # a log-normal with that coefficient of variation
    shift = 0.0 if null else math.log(plan.effect)
    canary = 200 * np.exp(rng.normal(shift, sigma, (CHUNK, nc)))
    stable = 200 * np.exp(rng.normal(0.0, sigma, (CHUNK, ns)))
    diff = np.log(canary.mean(axis=1)) - np.log(stable.mean(axis=1))
    cv2 = [x.var(axis=1, ddof=1) / x.mean(axis=1) ** 2 for x in (canary, stable)]
    return diff, np.sqrt(cv2[0] / nc + cv2[1] / ns)


def _judge(
    plan: EvalgatePlan, rng: np.random.Generator, nc: int, ns: int, null: bool
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    def side(n: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        counts = rng.multinomial(n, LEVEL_P, CHUNK)
        mean = counts @ LEVELS / n
        return mean, (counts @ LEVELS**2 / n - mean**2) * n / (n - 1)

    (mc, vc), (ms, vs) = side(nc), side(ns)
    drop = 0.0 if null else abs(plan.effect)  # the canary scores lower by the effect
    return ms - (mc - drop), np.sqrt(vc / nc + vs / ns)


def _detections(
    plan: EvalgatePlan,
    draw: Callable[..., tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]],
    null: bool,
    seed: int,
) -> float:
    rng = np.random.default_rng(seed)
    nc, ns = round(plan.n_canary), round(plan.n_stable)
    hits = 0
    for _ in range(REPLICATIONS // CHUNK):
        diff, se = draw(plan, rng, nc, ns, null)
        hits += int(np.sum(diff / se > Z_ALPHA))  # the one-sided z-test the plan assumes
    return hits / REPLICATIONS


SIMULATED = {
    "error_rate_delta": (0.01, EvalgatePlanAssumptions(baseline_rate=0.02), _errors),
    "ttft_p95_ratio": (1.1, EvalgatePlanAssumptions(), _quantiles),
    "tpot_p95_ratio": (1.05, EvalgatePlanAssumptions(), _quantiles),
    "output_length_ratio": (1.1, EvalgatePlanAssumptions(), _lengths),
    "judge_score_delta": (-0.02, EvalgatePlanAssumptions(sd=0.254), _judge),
}


@pytest.mark.slow
@pytest.mark.parametrize("metric", sorted(SIMULATED))
def test_planned_bake_detects_the_effect_with_the_stated_power(metric: str) -> None:
    effect, assumed, draw = SIMULATED[metric]
    plan = evalgate_plan(metric, rate=50, weight=0.2, effect=effect, assumptions=assumed)
    assert 500 < plan.n_canary < 3000  # a realistic size where the approximations must hold
    power = _detections(plan, draw, null=False, seed=1)
    mc_error = math.sqrt(0.8 * 0.2 / REPLICATIONS)  # 0.009
    assert abs(power - assumed.power) < 4 * mc_error, f"simulated power {power:.3f}"
    false_alarms = _detections(plan, draw, null=True, seed=2)
    assert false_alarms < assumed.alpha + 4 * math.sqrt(0.05 * 0.95 / REPLICATIONS)
    # half the bake falls well short of the power: the plan is not merely generous
    half = EvalgatePlan(**{**plan.__dict__, "bake_s": plan.bake_s / 2})
    assert _detections(half, draw, null=False, seed=3) < assumed.power - 0.15
