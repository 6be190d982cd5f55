"""stats.py against independent references: statsmodels, scipy, and plain Python loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from pytest_evalgate import stats
from pytest_evalgate.errors import EvalgateConfigError


def _clustered(seed: int, clusters: int, effect: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Per-case differences with a shared cluster effect and uneven cluster sizes (1..7)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 8, clusters)
    labels = np.repeat(np.arange(clusters), sizes)
    shared = rng.normal(0.0, 0.3, clusters)[labels]
    diffs = effect + shared + rng.normal(0.0, 0.5, labels.size)
    return diffs, np.array([f"c{label}" for label in labels])


def test_clustered_se_equals_statsmodels_cluster_robust_ols() -> None:
    diffs, clusters = _clustered(1, 60)
    mean, se, dof = stats.evalgate_clustered_se(diffs, clusters)
    groups = np.unique(clusters, return_inverse=True)[1]
    fit = sm.OLS(diffs, np.ones((diffs.size, 1))).fit(
        cov_type="cluster", cov_kwds={"groups": groups}
    )
    assert mean == pytest.approx(float(fit.params[0]), rel=1e-12)
    assert se == pytest.approx(float(fit.bse[0]), rel=1e-10)
    assert dof == 59


def test_clustered_se_is_wider_than_iid_se_on_correlated_clusters() -> None:
    diffs, clusters = _clustered(2, 200)
    _, clustered, _ = stats.evalgate_clustered_se(diffs, clusters)
    _, iid, _ = stats.evalgate_clustered_se(diffs, np.arange(diffs.size))
    assert iid == pytest.approx(diffs.std(ddof=1) / math.sqrt(diffs.size), rel=1e-9)
    assert clustered > 1.2 * iid


def test_clustered_se_needs_two_clusters() -> None:
    mean, se, dof = stats.evalgate_clustered_se([0.1, 0.3], ["a", "a"])
    assert mean == pytest.approx(0.2)
    assert math.isnan(se) and dof == 0
    assert all(math.isnan(x) for x in stats.evalgate_t_interval(mean, se, dof, 0.95))


def test_t_interval_and_drop_pvalue_use_t_on_c_minus_1_dof() -> None:
    lo, hi = stats.evalgate_t_interval(0.1, 0.02, 9, 0.95)
    half = sps.t.ppf(0.975, 9) * 0.02
    assert (lo, hi) == pytest.approx((0.1 - half, 0.1 + half))
    assert stats.evalgate_t_pvalue_drop(-0.05, 0.02, 9) == pytest.approx(sps.t.cdf(-2.5, 9))
    assert stats.evalgate_t_pvalue_drop(0.05, 0.02, 9) > 0.5


def _loop_bootstrap(
    diffs: np.ndarray, clusters: np.ndarray, resamples: int, seed: int
) -> np.ndarray:
    """The textbook reference: one Python iteration per resample over cluster sums."""
    sums, sizes = stats.evalgate_cluster_sums(diffs, clusters)
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    for b in range(resamples):
        drawn = rng.integers(0, sums.size, sums.size)
        out[b] = sums[drawn].sum() / sizes[drawn].sum()
    return out


def test_cluster_bootstrap_matches_python_loop_within_monte_carlo_error() -> None:
    diffs, clusters = _clustered(3, 150, effect=-0.02)
    lo, hi, boot = stats.evalgate_cluster_bootstrap(diffs, clusters, 20_000, 7, 0.95)
    loop = _loop_bootstrap(diffs, clusters, 4_000, 8)
    spread = loop.std()
    # SE of a 2.5 % bootstrap quantile ~ 2.7 sd / sqrt(B); 4 combined SEs ~ 0.2 sd.
    assert lo == pytest.approx(np.quantile(loop, 0.025), abs=0.2 * spread)
    assert hi == pytest.approx(np.quantile(loop, 0.975), abs=0.2 * spread)
    assert boot.mean() == pytest.approx(loop.mean(), abs=0.1 * spread)
    assert boot.std() == pytest.approx(spread, rel=0.06)
    _, se, _ = stats.evalgate_clustered_se(diffs, clusters)
    assert boot.std() == pytest.approx(se, rel=0.1)


def test_cluster_bootstrap_resamples_clusters_not_cases() -> None:
    diffs, clusters = _clustered(4, 100)
    _, _, by_cluster = stats.evalgate_cluster_bootstrap(diffs, clusters, 4_000, 0, 0.95)
    _, _, by_case = stats.evalgate_cluster_bootstrap(diffs, np.arange(diffs.size), 4_000, 0, 0.95)
    assert by_cluster.std() > 1.2 * by_case.std()


def test_cluster_bootstrap_is_seeded_and_reproducible() -> None:
    diffs, clusters = _clustered(5, 80)
    first = stats.evalgate_cluster_bootstrap(diffs, clusters, 3_000, 11, 0.95)
    again = stats.evalgate_cluster_bootstrap(diffs, clusters, 3_000, 11, 0.95)
    other = stats.evalgate_cluster_bootstrap(diffs, clusters, 3_000, 12, 0.95)
    np.testing.assert_array_equal(first[2], again[2])
    assert first[:2] == again[:2]
    assert not np.array_equal(first[2], other[2])


def test_cluster_bootstrap_chunks_do_not_change_the_statistic() -> None:
    # More clusters than one chunk row budget forces several chunks; totals must still add up.
    sums = np.ones(3_000)
    sizes = np.full(3_000, 2.0)
    totals, counts = stats.evalgate_bootstrap_totals(sums, sizes, 1_000, 0)
    np.testing.assert_array_equal(totals, np.full(1_000, 3_000.0))
    np.testing.assert_array_equal(counts, np.full(1_000, 6_000.0))


def test_bootstrap_drop_pvalue_counts_resamples_at_or_above_zero() -> None:
    boot = np.array([-0.3, -0.2, -0.1, 0.0, 0.1])
    assert stats.evalgate_bootstrap_pvalue_drop(boot) == pytest.approx(3 / 6)
    assert stats.evalgate_bootstrap_pvalue_drop(-np.ones(999)) == pytest.approx(1 / 1000)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (0, 368), (1, 50), (7, 200), (49, 50), (3, 3)])
def test_clopper_pearson_one_sided_equals_binomtest_two_sided_at_2c_minus_1(k: int, n: int) -> None:
    upper = stats.evalgate_clopper_pearson_upper(k, n, 0.975)
    lower = stats.evalgate_clopper_pearson_lower(k, n, 0.975)
    reference = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert upper == pytest.approx(reference.high, rel=1e-9, abs=1e-12)
    assert lower == pytest.approx(reference.low, rel=1e-9, abs=1e-12)


def test_clopper_pearson_upper_is_not_zero_without_failures() -> None:
    upper = stats.evalgate_clopper_pearson_upper(0, 100, 0.975)
    assert upper == pytest.approx(1 - 0.025 ** (1 / 100))
    assert upper > 0.03
    assert stats.evalgate_clopper_pearson_upper(0, 0, 0.975) == 1.0


@pytest.mark.parametrize(
    ("ours", "theirs"), [("bonferroni", "bonferroni"), ("holm", "holm"), ("bh", "fdr_bh")]
)
def test_adjusted_pvalues_match_statsmodels_multipletests(ours: str, theirs: str) -> None:
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.uniform(0, 0.05, 20), rng.uniform(0, 1, 80), [0.01, 0.01, 0.5]])
    expected = multipletests(p, alpha=0.05, method=theirs)[1]
    np.testing.assert_allclose(stats.evalgate_adjust_pvalues(p, ours), expected, rtol=1e-12)


def test_adjust_none_copies_and_unknown_method_is_refused() -> None:
    p = np.array([0.01, 0.2])
    np.testing.assert_array_equal(stats.evalgate_adjust_pvalues(p, "none"), p)
    with pytest.raises(EvalgateConfigError, match="sidak"):
        stats.evalgate_adjust_pvalues(p, "sidak")


def test_cases_needed_follows_miller_eq_9() -> None:
    # (z_.975 + z_.8)^2 * v / delta^2 = (1.95996 + 0.84162)^2 * 1 / 0.01 = 784.9
    assert stats.evalgate_cases_needed(1.0, 0.1, 0.95) == 785
    assert stats.evalgate_cases_needed(1.0, -0.1, 0.95) == 785
    assert stats.evalgate_cases_needed(4.0, 0.1, 0.95) == 3_140
    assert stats.evalgate_cases_needed(1.0, 0.0, 0.95) is None


def test_floor_cases_needed_reaches_the_bound_exactly() -> None:
    needed = stats.evalgate_floor_cases_needed(0, 100, 0.01, 0.975)
    assert needed == 368  # ln(0.025) / ln(0.99) = 367.04
    assert stats.evalgate_clopper_pearson_upper(0, 368, 0.975) <= 0.01
    assert stats.evalgate_clopper_pearson_upper(0, 367, 0.975) > 0.01
    assert stats.evalgate_floor_cases_needed(5, 100, 0.01, 0.975) is None


@pytest.mark.parametrize("n", [1, 2, 7, 19, 20, 21, 100, 1001])
@pytest.mark.parametrize("q", [0, 50, 90, 95, 99, 100])
def test_percentile_is_numpy_inverted_cdf(n: int, q: float) -> None:
    x = np.random.default_rng(n).lognormal(size=n)
    assert stats.evalgate_percentile(x, q) == np.percentile(x, q, method="inverted_cdf")


def test_order_statistic_bootstrap_matches_brute_force_resampling() -> None:
    x = np.random.default_rng(1).lognormal(size=300)
    exact = stats.evalgate_bootstrap_percentiles(x, 95, 20_000, np.random.default_rng(2))
    rng = np.random.default_rng(3)
    brute = np.percentile(rng.choice(x, (4_000, x.size)), 95, axis=1, method="inverted_cdf")
    grid = np.sort(x)[270:300]
    gap = np.abs(
        np.searchsorted(np.sort(exact), grid, "right") / exact.size
        - np.searchsorted(np.sort(brute), grid, "right") / brute.size
    )
    assert gap.max() < 0.035  # KS distance; 1.63 * sqrt(1/4000 + 1/20000) = 0.028 at 1 %


def test_percentile_ratio_ci_covers_a_known_ratio_and_is_reproducible() -> None:
    rng = np.random.default_rng(4)
    base = rng.lognormal(0.0, 0.5, 3_000)
    cand = 1.2 * rng.lognormal(0.0, 0.5, 3_000)
    est, lo, hi, boot = stats.evalgate_percentile_ratio_ci(cand, base, 95, 5_000, 0, 0.95)
    assert lo < 1.2 < hi and lo < est < hi
    assert hi - lo < 0.2
    again = stats.evalgate_percentile_ratio_ci(cand, base, 95, 5_000, 0, 0.95)
    np.testing.assert_array_equal(boot, again[3])


def test_percentile_ratio_with_zero_baseline_is_infinite_not_nan() -> None:
    est, lo, hi, _ = stats.evalgate_percentile_ratio_ci([1.0, 2.0], [0.0, 0.0], 50, 200, 0, 0.95)
    assert est == math.inf and hi == math.inf and not math.isnan(lo)
