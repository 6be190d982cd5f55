"""Calibration by seeded simulation: coverage, false-pass rate, familywise false alarms.

Where the bootstrap itself is under test (coverage, the non_inferior decision) it runs with
small resample counts (1,000); where the correction is under test (200 slices) the p-values come
from the t/SE path, vectorised over all simulated runs, so the file stays fast. One end-to-end
run through ``evalgate_evaluate`` checks the same on the real bootstrap path with fewer runs.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from pytest_evalgate import stats
from pytest_evalgate.aggregate.paired import EvalgateGateInput as GateInput
from pytest_evalgate.gate import rules as gate
from pytest_evalgate.policy import values as policy_values


def clustered_diffs(
    rng: np.random.Generator, clusters: int, effect: float
) -> tuple[np.ndarray, np.ndarray]:
    """Paired differences with a cluster effect, uneven cluster sizes 1..7, true mean ``effect``."""
    sizes = rng.integers(1, 8, clusters)
    labels = np.repeat(np.arange(clusters), sizes)
    diffs = effect + rng.normal(0, 0.3, clusters)[labels] + rng.normal(0, 0.5, labels.size)
    return diffs, labels


def mc_error(rate: float, runs: int) -> float:
    return 3.0 * float(np.sqrt(rate * (1 - rate) / runs))


def test_cluster_bootstrap_interval_covers_the_true_effect_95_percent() -> None:
    rng = np.random.default_rng(20240601)
    runs, hits, t_hits = 800, 0, 0
    for run in range(runs):
        diffs, labels = clustered_diffs(rng, 120, effect=-0.03)
        lo, hi, _ = stats.evalgate_cluster_bootstrap(diffs, labels, 1_000, run, 0.95)
        hits += lo <= -0.03 <= hi
        mean, se, dof = stats.evalgate_clustered_se(diffs, labels)
        t_lo, t_hi = stats.evalgate_t_interval(mean, se, dof, 0.95)
        t_hits += t_lo <= -0.03 <= t_hi
    assert abs(hits / runs - 0.95) <= 0.02
    assert abs(t_hits / runs - 0.95) <= 0.02


def test_iid_bootstrap_on_clustered_data_would_undercover() -> None:
    # The same check with clusters ignored must fail: proves the coverage test has teeth.
    rng = np.random.default_rng(7)
    runs, hits = 300, 0
    for run in range(runs):
        diffs, _ = clustered_diffs(rng, 120, effect=0.0)
        lo, hi, _ = stats.evalgate_cluster_bootstrap(diffs, np.arange(diffs.size), 1_000, run, 0.95)
        hits += lo <= 0.0 <= hi
    assert hits / runs < 0.85


def gate_input(diffs: np.ndarray, labels: np.ndarray, categories: np.ndarray) -> GateInput:
    n = diffs.size
    return GateInput(
        case_ids=tuple(str(i) for i in range(n)),
        categories=categories,
        clusters=labels.astype(str),
        candidate_scores=diffs,
        baseline_scores=np.zeros(n),
        candidate_fail_counts=np.zeros(n, dtype=int),
        candidate_trials=np.ones(n, dtype=int),
    )


def test_non_inferior_false_pass_rate_is_at_most_alpha_at_the_margin() -> None:
    margin = 0.05
    rules = (policy_values.EvalgateRule("non_inferior", 0, slice="all", limit=margin),)
    rng = np.random.default_rng(99)
    runs, passes = 800, 0
    for run in range(runs):
        diffs, labels = clustered_diffs(rng, 100, effect=-margin)  # truly at -margin: must fail
        policy = policy_values.EvalgatePolicy(version="cal", rules=rules, resamples=1_000, seed=run)
        data = gate_input(diffs, labels, np.full(diffs.size, "all-cases"))
        passes += gate.evalgate_evaluate(policy, data).rules[0].passed
    # The lower bound is one-sided 2.5 %; the false-pass rate must stay there (plus MC error).
    assert passes / runs <= 0.025 + mc_error(0.025, runs)
    assert passes / runs >= 0.005  # and is not trivially 0 (the bound sits at the margin)


def t_drop_pvalues(rng: np.random.Generator, runs: int, slices: int, cases: int) -> np.ndarray:
    """One-sided t p-values for a drop, (runs, slices), every slice with no true difference."""
    diffs = rng.normal(0.0, 1.0, (runs, slices, cases))
    mean = diffs.mean(axis=2)
    se = diffs.std(axis=2, ddof=1) / np.sqrt(cases)
    return np.asarray(sps.t.cdf(mean / se, cases - 1))


def test_holm_holds_familywise_false_alarms_over_200_identical_slices() -> None:
    p = t_drop_pvalues(np.random.default_rng(5), runs=2_000, slices=200, cases=30)
    raw_alarms = (p < 0.05).sum(axis=1)
    holm_alarms = np.array([(stats.evalgate_adjust_pvalues(row, "holm") < 0.05).sum() for row in p])
    bh_alarms = np.array([(stats.evalgate_adjust_pvalues(row, "bh") < 0.05).sum() for row in p])
    assert abs(raw_alarms.mean() - 10.0) < 0.5  # 200 checks at 5 %: about ten false alarms a run
    assert (holm_alarms > 0).mean() <= 0.05 + mc_error(0.05, 2_000)
    assert (bh_alarms > 0).mean() <= 0.05 + mc_error(0.05, 2_000)  # all nulls true: FDR = FWER
    assert (raw_alarms > 0).mean() > 0.99


def test_end_to_end_no_regression_star_with_holm_and_without() -> None:
    cats = np.array([f"s{i:03d}" for i in range(200)])
    rng = np.random.default_rng(11)
    holm_runs, raw_alarms, runs = 0, [], 12
    for run in range(runs):
        diffs = rng.normal(0.0, 1.0, 200 * 40)
        labels = np.arange(diffs.size)
        data = gate_input(diffs, labels, np.repeat(cats, 40))
        rules = (policy_values.EvalgateRule("no_regression", 0, slice="*"),)
        for correction in ("holm", "none"):
            policy = policy_values.EvalgatePolicy(
                "cal", rules, correction=correction, resamples=2_000, seed=run
            )
            alarms = sum(not r.passed for r in gate.evalgate_evaluate(policy, data).rules)
            holm_runs += correction == "holm" and alarms > 0
            raw_alarms += [alarms] if correction == "none" else []
    assert holm_runs <= 2  # expected 0.6 of 12 runs at 5 %
    assert 6.0 < np.mean(raw_alarms) < 16.0  # about ten; the percentile bootstrap runs a bit hot
