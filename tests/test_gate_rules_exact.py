"""gate.py and gate_single.py: every rule kind where it must pass and where it must fail, with
several slices present, on hand-built gate inputs whose numbers are known exactly.

The inputs are chosen so that the expected values follow from arithmetic, not from the code:
a slice whose paired differences are all equal has a bootstrap distribution that is that one
value (so ``lo == hi == estimate``); a floor over ``k = 0`` failures has the closed form
``1 - (1 - c)^(1/n)``; perf samples that are constant per side have the ratio of the constants.
Each test holds at least two slices (or metrics) with different data, so a rule that reads the
wrong slice, the wrong side or the wrong metric gets a different number.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from gatekit import WORSE_BETTER, Z_SUM, by_name, make, on_metric, on_slice, policy
from scipy import stats as sps

from pytest_evalgate import stats
from pytest_evalgate.gate import rules as gate
from pytest_evalgate.gate.metrics import EVALGATE_AA_MIN_SAMPLES, evalgate_aa_noise

# --------------------------------------------------------------------------- quality rules


def test_non_inferior_reads_its_own_slice_and_fails_a_constant_drop() -> None:
    result = gate.evalgate_evaluate(
        policy(
            on_slice("non_inferior", "alpha", 0.2),
            on_slice("non_inferior", "alpha", 0.3, 1),
            on_slice("non_inferior", "beta", 0.0, 2),
        ),
        make(WORSE_BETTER),
    )
    tight, loose, beta = result.rules
    assert tight.name == "non_inferior[alpha]" and loose.name == "non_inferior[alpha]@rules[1]"
    assert (tight.estimate, tight.lo, tight.hi, tight.limit) == (-0.25, -0.25, -0.25, 0.2)
    assert (tight.se, tight.t_lo, tight.t_hi) == (0.0, -0.25, -0.25)
    assert (tight.n_cases, tight.n_clusters, tight.passed) == (4, 4, False)
    assert tight.reason == "regression: the candidate is worse (upper bound -0.2500 < 0)"
    assert tight.p_value == 1 / 201  # no resample at or above 0
    assert loose.passed and loose.reason == "passes: lower bound -0.2500 > -0.3000"
    assert (beta.estimate, beta.lo, beta.hi, beta.limit) == (0.5, 0.5, 0.5, 0.0)
    assert beta.passed and beta.p_value == 1.0
    assert not result.passed


def test_slice_all_is_the_stratified_mean_of_every_case() -> None:
    (only,) = gate.evalgate_evaluate(
        policy(on_slice("non_inferior", "all", 0.1)), make(WORSE_BETTER)
    ).rules
    # (4 * -0.25 + 4 * 0.5) / 8; each stratum's resample is its constant, so the interval is too
    assert (only.estimate, only.lo, only.hi) == (0.125, 0.125, 0.125)
    assert (only.n_cases, only.n_clusters, only.passed) == (8, 8, True)


def test_must_improve_needs_the_lower_bound_strictly_above_the_target() -> None:
    on_target, below, negative, alpha_short = gate.evalgate_evaluate(
        policy(
            on_slice("must_improve", "beta", 0.5),
            on_slice("must_improve", "beta", 0.4, 1),
            on_slice("must_improve", "alpha", -0.3, 2),
            on_slice("must_improve", "alpha", -0.2, 3),
        ),
        make(WORSE_BETTER),
    ).rules
    assert not on_target.passed and on_target.limit == 0.5
    assert on_target.reason == "short of target: upper bound +0.5000 <= +0.5000"
    assert below.passed and below.reason == "passes: lower bound +0.5000 > +0.4000"
    assert negative.passed and negative.limit == -0.3  # the target is not negated
    assert not alpha_short.passed and alpha_short.reason.startswith("regression")


# diffs 0.375, -0.25, 0.125, -0.125 (mean 0.03125) over 4 single-case clusters; beta differs
SPREAD = {
    "alpha": ([0.875, 0.25, 0.625, 0.375], [0.5] * 4),
    "beta": ([1.0, 1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0, 0.0]),
}


def test_too_little_evidence_gives_the_miller_case_count() -> None:
    (only,) = gate.evalgate_evaluate(
        policy(on_slice("non_inferior", "alpha", 0.0625)), make(SPREAD)
    ).rules
    residuals = np.array([0.375, -0.25, 0.125, -0.125]) - 0.03125
    se = math.sqrt(4 / 3 * float(np.sum(residuals**2)) / 16)  # CR1, one case per cluster
    assert only.estimate == 0.03125 and only.se == pytest.approx(se, rel=1e-12)
    assert only.lo <= -0.0625 < only.hi and only.hi >= 0  # neither a pass nor a regression
    needed = math.ceil(Z_SUM**2 * se**2 * 4 / (0.03125 + 0.0625) ** 2)  # distance to -margin
    assert needed == 69
    assert only.reason == "too little evidence: about 65 more cases would settle it"


def test_no_regression_corrects_over_evaluated_slices_only() -> None:
    data = make({**WORSE_BETTER, "gamma": ([1.0, 0.0], [0.0, 1.0])}, cluster_of={"gamma": 2})
    holm = by_name(gate.evalgate_evaluate(policy(on_slice("no_regression", "*")), data))
    assert list(holm) == ["no_regression[alpha]", "no_regression[beta]", "no_regression[gamma]"]
    alpha, beta, gamma = holm.values()
    assert not gamma.evaluated and not gamma.passed and gamma.n_clusters == 1
    assert alpha.p_value == 1 / 201 and alpha.p_adjusted == 2 * (1 / 201)  # m = 2, not 3
    assert not alpha.passed and alpha.limit == 1.0 - 0.95
    assert alpha.reason == "regression: significant drop (adjusted p 0.00995 < 0.05, holm)"
    assert beta.passed and beta.p_adjusted == 1.0
    assert beta.reason == "no significant drop (adjusted p 1 >= 0.05, holm)"
    raw = gate.evalgate_evaluate(policy(on_slice("no_regression", "*"), correction="none"), data)
    assert raw.rules[0].p_adjusted == 1 / 201 and raw.rules[0].reason.endswith(", none)")


def test_no_regression_passes_a_drop_that_is_not_significant() -> None:
    data = make({"alpha": ([1.0] * 3, [1.0] * 3), "beta": ([0.0, 1.0], [1.0, 1.0])})
    result = by_name(gate.evalgate_evaluate(policy(on_slice("no_regression", "*")), data))
    beta = result["no_regression[beta]"]
    assert beta.estimate == -0.5 and beta.passed  # 2 clusters: a quarter of resamples are 0
    assert 0.05 < beta.p_value < 0.5 and beta.p_adjusted == min(1.0, 2 * beta.p_value)
    assert result["no_regression[alpha]"].p_value == 1.0


# --------------------------------------------------------------------------- floors


FLOOR_SLICES = {
    "alpha": ([1.0] * 40, [1.0] * 40),
    "beta": ([0.0] * 12 + [1.0] * 28, [1.0] * 40),
    "gamma": ([1.0] * 10, [1.0] * 10),
}


def test_floor_counts_the_failures_of_its_own_slice() -> None:
    result = by_name(
        gate.evalgate_evaluate(
            policy(
                on_slice("floor", "alpha", 0.1),
                on_slice("floor", "beta", 0.1, 1),
                on_slice("floor", "all", 0.2, 2),
            ),
            make(FLOOR_SLICES),
        )
    )
    alpha, beta, everything = result["floor[alpha]"], result["floor[beta]"], result["floor[all]"]
    upper = 1.0 - 0.025 ** (1 / 40)  # 0 of 40: closed form
    assert alpha.passed and alpha.estimate == 0.0 and alpha.lo == 0.0
    assert alpha.hi == pytest.approx(upper, rel=1e-12) and alpha.limit == 0.1
    assert alpha.reason == f"passes: 0/40 failed, upper bound {upper:.4f} <= 0.1"
    assert (alpha.n_cases, alpha.n_clusters) == (40, 40)
    low = float(sps.binomtest(12, 40).proportion_ci(0.95).low)
    assert not beta.passed and beta.estimate == 12 / 40
    assert beta.lo == pytest.approx(low, rel=1e-9) and beta.lo > 0.1
    assert (
        beta.reason == f"regression: failure rate 12/40 is above max_rate (lower bound {low:.4f})"
    )
    high = float(sps.binomtest(12, 90).proportion_ci(0.95).high)
    assert everything.estimate == 12 / 90 and everything.hi == pytest.approx(high, rel=1e-9)
    assert everything.passed is (high <= 0.2) and everything.n_cases == 90


def test_floor_too_little_evidence_scales_trials_back_to_cases() -> None:
    one, two = (
        gate.evalgate_evaluate(
            policy(on_slice("floor", "gamma", 0.05)), make(FLOOR_SLICES, trials=t)
        ).rules[0]
        for t in (1, 2)
    )
    # 0 failures need 72 trials (1 - 0.025^(1/72) <= 0.05 < 1 - 0.025^(1/71))
    assert one.reason == "too little evidence: about 62 more cases would settle it"  # 72 - 10
    assert two.reason == "too little evidence: about 26 more cases would settle it"  # 36 - 10
    assert two.n_cases == 10 and two.estimate == 0.0


def test_floor_of_zero_fails_without_failures_and_says_why() -> None:
    (only,) = gate.evalgate_evaluate(
        policy(on_slice("floor", "alpha", 0.0)), make(FLOOR_SLICES)
    ).rules
    assert not only.passed and only.limit == 0.0
    assert only.reason == (
        "too little evidence: 0/40 failed, not below max_rate; "
        "more cases at this rate would not pass"
    )


def test_floor_without_trials_is_not_evaluated() -> None:
    data = make(FLOOR_SLICES, trials=0)
    (only,) = gate.evalgate_evaluate(policy(on_slice("floor", "beta", 0.5)), data).rules
    assert not only.evaluated and not only.passed
    assert only.reason == "not evaluated: no scored trials"


# --------------------------------------------------------------------------- perf and errors


PERF = {
    "ttft": ([0.25] * 5, [0.125] * 7),
    "tpot": ([0.01] * 3, [0.01] * 4),
    "output_tokens": ([float(i) for i in range(1, 11)], [1.0] * 6),
}


def test_perf_ratio_is_candidate_over_baseline_per_metric_and_level() -> None:
    data = make(WORSE_BETTER, perf=PERF)
    ttft, tpot, tokens50, tokens95 = gate.evalgate_evaluate(
        policy(
            on_metric("perf_ratio", "ttft_p95", 1.5),
            on_metric("perf_ratio", "tpot_p95", 1.05, 1),
            on_metric("perf_ratio", "output_tokens_p50", 5.0, 2),
            on_metric("perf_ratio", "output_tokens_p95", 10.0, 3),
        ),
        data,
    ).rules
    assert (ttft.estimate, ttft.lo, ttft.hi, ttft.n_cases) == (2.0, 2.0, 2.0, 5)
    assert not ttft.passed and ttft.reason == "regression: ratio lower bound 2.0000 > max_ratio 1.5"
    assert (tpot.estimate, tpot.hi, tpot.n_cases) == (1.0, 1.0, 3) and tpot.passed
    assert tpot.reason == "passes: ratio upper bound 1.0000 <= 1.05"
    assert tokens50.estimate == 5.0 and tokens95.estimate == 10.0
    assert tokens95.hi == 10.0 and tokens95.passed  # the bound may equal max_ratio


@pytest.mark.parametrize(("factor", "max_ratio"), [(1 / 0.95, 1.1), (0.85, 0.9)])
def test_perf_too_little_evidence_counts_samples_from_the_log_ratio_spread(
    factor: float, max_ratio: float
) -> None:
    base = [float(i) for i in range(1, 11)]
    cand = [factor * v for v in base]
    data = make(WORSE_BETTER, perf={"ttft": (cand, base)})
    rules = policy(on_metric("perf_ratio", "ttft_p95", max_ratio))
    (only,) = gate.evalgate_evaluate(rules, data).rules
    # the documented per-rule seed: [policy seed, first 8 bytes of sha256("perf:<metric>")]
    key = int.from_bytes(hashlib.sha256(b"perf:ttft_p95").digest()[:8], "big")
    estimate, lo, hi, boot = stats.evalgate_percentile_ratio_ci(cand, base, 95, 200, [0, key], 0.95)
    assert (only.estimate, only.lo, only.hi) == (estimate, lo, hi)
    assert estimate == pytest.approx(factor, rel=1e-12)
    assert lo <= max_ratio < hi  # neither a pass nor a regression
    logs = np.log(boot[np.isfinite(boot) & (boot > 0)])
    variance = float(np.var(logs)) * 10
    needed = math.ceil(Z_SUM**2 * variance / (math.log(estimate) - math.log(max_ratio)) ** 2)
    assert needed > 11
    assert only.reason == f"too little evidence: about {needed - 10} more samples would settle it"


def _jittery(rng: np.random.Generator, n: int, stall: float) -> list[float]:
    """Latencies of about 10 ms where a share ``stall`` of requests stalls for tens of ms (a
    busy machine's scheduler, not the model)."""
    stalls = rng.random(n) < stall
    return list(np.where(stalls, 10 + rng.exponential(30, n), rng.normal(10, 0.2, n)))


def test_a_perf_rule_on_a_jittery_window_says_too_noisy_not_regression() -> None:
    rng = np.random.default_rng(3)
    base = _jittery(rng, 200, 0.07)
    cand = _jittery(rng, 200, 0.07)  # the same model: only the machine jitters
    data = make(WORSE_BETTER, perf={"ttft": (cand, base)})
    (only,) = gate.evalgate_evaluate(policy(on_metric("perf_ratio", "ttft_p95", 1.25)), data).rules
    first, second = np.asarray(base)[0::2], np.asarray(base)[1::2]
    aa = stats.evalgate_percentile(first, 95) / stats.evalgate_percentile(second, 95)
    assert not 0.8 <= aa <= 1.25  # the A/A ratio itself spans the margin
    assert not only.passed
    assert only.reason.startswith(
        "too noisy to judge: the baseline against itself (A/A, alternate samples) gives ratio "
        f"{aa:.4f}"
    )


def test_a_perf_regression_on_a_quiet_window_is_still_a_regression() -> None:
    rng = np.random.default_rng(4)
    base = list(rng.normal(10, 0.2, 200))
    cand = list(rng.normal(20, 0.4, 200))
    data = make(WORSE_BETTER, perf={"ttft": (cand, base)})
    (only,) = gate.evalgate_evaluate(policy(on_metric("perf_ratio", "ttft_p95", 1.25)), data).rules
    assert evalgate_aa_noise(np.asarray(base), 95, 1.25) is None
    assert only.reason.startswith("regression: ratio lower bound")


def test_a_small_sample_is_left_to_too_little_evidence() -> None:
    base = np.asarray([1.0, 50.0] * 19)  # 19 per half: below the A/A minimum
    assert EVALGATE_AA_MIN_SAMPLES == 20
    assert evalgate_aa_noise(base, 95, 1.25) is None
    assert evalgate_aa_noise(np.concatenate([base, [1.0, 50.0, 50.0, 1.0]]), 95, 1.25)


def test_perf_ratio_without_one_side_is_not_evaluated() -> None:
    perf = {"ttft": ([0.2] * 5, [])}
    (only,) = gate.evalgate_evaluate(
        policy(on_metric("perf_ratio", "ttft_p95", 1.1)), make(WORSE_BETTER, perf=perf)
    ).rules
    assert not only.evaluated and not only.passed
    assert only.reason == "not evaluated: no ttft samples (candidate 5, baseline 0)"


def test_max_delta_of_zero_refuses_any_rise_in_errors() -> None:
    rates = {"candidate": (3, 100), "baseline": (1, 100)}
    zero, wide = gate.evalgate_evaluate(
        policy(
            on_metric("max_delta", "error_rate", 0.0), on_metric("max_delta", "error_rate", 0.05, 1)
        ),
        make(WORSE_BETTER, error_rates=rates),
    ).rules
    assert zero.estimate == 3 / 100 - 1 / 100 and zero.limit == 0.0
    assert not zero.passed and zero.reason == "regression: error rate rose by +0.0200 > 0.0"
    assert wide.passed and wide.reason == "passes: error rate delta +0.0200 <= 0.05"
    same = make(WORSE_BETTER, error_rates={"candidate": (1, 100), "baseline": (1, 100)})
    (equal,) = gate.evalgate_evaluate(policy(on_metric("max_delta", "error_rate", 0.0)), same).rules
    assert equal.passed and equal.estimate == 0.0


def test_max_delta_reads_rates_by_role_or_by_name() -> None:
    named = make(WORSE_BETTER, error_rates={"r17": (5, 50), "r16": (0, 50)})
    rules = policy(on_metric("max_delta", "error_rate", 0.05), candidate="r17", baseline="r16")
    (only,) = gate.evalgate_evaluate(rules, named).rules
    assert only.estimate == 0.1 and not only.passed
    missing = make(WORSE_BETTER, error_rates={"candidate": (1, 10), "baseline": (0, 0)})
    (none,) = gate.evalgate_evaluate(
        policy(on_metric("max_delta", "error_rate", 0.5)), missing
    ).rules
    assert not none.evaluated and none.reason == "not evaluated: no expected identities"
