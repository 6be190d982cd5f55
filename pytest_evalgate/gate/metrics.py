"""The metric rules of the gate (rules without a slice): ``perf_ratio`` (a percentile's ratio,
bootstrapped, with the A/A noise check), ``perf_ratio_min`` (``max_rate_at_slo``, from
``gate/slo.py``) and ``max_delta`` (the error rate's rise over the baseline).

``gate.rules`` dispatches each expanded rule here; the results are built from
``gate.result.base_result``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from pytest_evalgate import stats
from pytest_evalgate.gate import slo
from pytest_evalgate.gate.result import (
    EvalgateGateInputLike,
    EvalgateRuleResult,
    ExpandedRule,
    base_result,
    more_cases,
    rule_seed,
)
from pytest_evalgate.perf.metrics import SWEEP_KEYS
from pytest_evalgate.policy.values import EvalgatePolicy


def perf_rule(
    item: ExpandedRule, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    metric, _, level = item.target.rpartition("_")
    cand, base_samples = gate_input.perf.get(metric, (np.empty(0), np.empty(0)))
    cand, base_samples = np.asarray(cand, np.float64), np.asarray(base_samples, np.float64)
    max_ratio = float(item.rule.limit or 0.0)
    base = base_result(item, n_cases=int(cand.size), limit=max_ratio)
    if cand.size == 0 or base_samples.size == 0:
        counts = f"candidate {cand.size}, baseline {base_samples.size}"
        reason = f"not evaluated: no {metric} samples ({counts})"
        return dataclasses.replace(base, evaluated=False, reason=reason)
    q = float(level.lstrip("p"))
    seed = rule_seed(policy.seed, f"perf:{item.target}")
    est, lo, hi, boot = stats.evalgate_percentile_ratio_ci(
        cand, base_samples, q, policy.resamples, seed, policy.confidence
    )
    numbers = dataclasses.replace(base, estimate=est, lo=lo, hi=hi)
    if hi <= max_ratio:
        return dataclasses.replace(
            numbers, passed=True, reason=f"passes: ratio upper bound {hi:.4f} <= {max_ratio}"
        )
    noise = evalgate_aa_noise(base_samples, q, max_ratio)
    if noise is not None:
        return dataclasses.replace(numbers, reason=noise)
    return dataclasses.replace(numbers, reason=_perf_failure(numbers, boot, policy.confidence))


def rate_at_slo_rule(item: ExpandedRule, gate_input: EvalgateGateInputLike) -> EvalgateRuleResult:
    """``max_rate_at_slo`` (``gate/slo.py``): the candidate's highest swept rate meeting the SLO
    over the baseline's, at least ``min_ratio``."""
    min_ratio = float(item.rule.limit or 0.0)
    slo_limits = item.rule.slo or (math.inf, math.inf)
    verdict = slo.evaluate(gate_input.perf, slo_limits, min_ratio)
    steps = int(np.asarray(gate_input.perf.get(SWEEP_KEYS[0], (np.empty(0),))[0]).size)
    base = base_result(item, n_cases=steps, estimate=verdict.ratio, limit=min_ratio)
    return dataclasses.replace(
        base, evaluated=verdict.evaluated, passed=verdict.passed, reason=verdict.reason
    )


# Samples per half below which an A/A comparison is left out: its percentile is then mostly the
# sample's own spread, which more samples settle ("too little evidence" says how many).
EVALGATE_AA_MIN_SAMPLES = 20


def evalgate_aa_noise(base: npt.NDArray[np.float64], q: float, max_ratio: float) -> str | None:
    """ "Too noisy to judge" when the baseline against itself (an A/A comparison: its alternate
    samples, which the load phase's paired arrivals spread over the same window) already differs
    by the rule's whole margin: the machine's jitter, not the candidate, would then decide the
    rule. None when the A/A ratio lies inside ``[1 / max_ratio, max_ratio]``, or when either
    half has fewer than :data:`EVALGATE_AA_MIN_SAMPLES` samples (then the sample is small, and
    "too little evidence" says how many more would settle it)."""
    first, second = base[0::2], base[1::2]
    if min(first.size, second.size) < EVALGATE_AA_MIN_SAMPLES or max_ratio <= 1.0:
        return None
    low = stats.evalgate_percentile(second, q)
    aa = stats.evalgate_percentile(first, q) / low if low > 0 else math.inf
    if 1.0 / max_ratio <= aa <= max_ratio:
        return None
    return (
        f"too noisy to judge: the baseline against itself (A/A, alternate samples) gives ratio "
        f"{aa:.4f}, outside [{1.0 / max_ratio:.4f}, {max_ratio}]: the measurement's jitter is "
        "as large as the margin; rerun on a quieter machine or with a longer perf.duration_s"
    )


def _perf_failure(
    result: EvalgateRuleResult, boot: npt.NDArray[np.float64], confidence: float
) -> str:
    if result.lo > result.limit:
        return f"regression: ratio lower bound {result.lo:.4f} > max_ratio {result.limit}"
    logs = np.log(boot[np.isfinite(boot) & (boot > 0)])
    if logs.size < 2 or not (math.isfinite(result.estimate) and result.estimate > 0):
        return more_cases(None, result.n_cases, "samples")
    variance = float(np.var(logs)) * result.n_cases  # the log-ratio SE scales as 1/sqrt(n)
    delta = math.log(result.estimate) - math.log(result.limit)
    return more_cases(
        stats.evalgate_cases_needed(variance, delta, confidence), result.n_cases, "samples"
    )


def max_delta_rule(
    item: ExpandedRule, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    max_delta = float(item.rule.limit or 0.0)
    cand = _rate(gate_input.error_rates, policy.candidate, "candidate")
    base_rate = _rate(gate_input.error_rates, str(policy.baseline), "baseline")
    base = base_result(item, limit=max_delta)
    if cand is None or base_rate is None:
        return dataclasses.replace(
            base, evaluated=False, reason="not evaluated: no expected identities"
        )
    delta = cand - base_rate
    numbers = dataclasses.replace(base, estimate=delta, passed=delta <= max_delta)
    if numbers.passed:
        return dataclasses.replace(
            numbers, reason=f"passes: error rate delta {delta:+.4f} <= {max_delta}"
        )
    return dataclasses.replace(
        numbers, reason=f"regression: error rate rose by {delta:+.4f} > {max_delta}"
    )


def _rate(rates: Mapping[str, tuple[int, int]], name: str, role: str) -> float | None:
    # The contract keys error_rates by role; a policy naming its candidates may also key by name.
    errored, expected = rates.get(role, rates.get(name, (0, 0)))
    return errored / expected if expected else None
