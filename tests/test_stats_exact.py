"""stats.py: exact values on small inputs, computed by hand, by closed forms or by brute force.

Each expected number here is derived independently of the code under test (a formula written
out, a Python loop over every outcome, scipy's own distribution functions), and each edge of a
branch (``k == n``, ``se == 0``, a mean of exactly 0, a percentile on an order-statistic
boundary) is pinned, so that a changed operator or constant in ``stats.py`` fails a test.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import scipy.special
from scipy import stats as sps

from pytest_evalgate import stats
from pytest_evalgate.errors import EvalgateConfigError

Z_975 = float(sps.norm.ppf(0.975))
Z_80 = float(sps.norm.ppf(0.8))


# --------------------------------------------------------------------------- clusters


def test_cluster_sums_are_per_label_in_sorted_order() -> None:
    sums, sizes = stats.evalgate_cluster_sums([1.0, 2.0, 3.0, 4.5], ["b", "a", "b", "c"])
    assert sums.tolist() == [2.0, 4.0, 4.5]
    assert sizes.tolist() == [1.0, 2.0, 1.0]
    assert sums.dtype == np.float64 and sizes.dtype == np.float64


def test_bootstrap_totals_equal_a_direct_gather_of_the_same_draws() -> None:
    sums = np.array([1.0, -2.0, 5.0])
    sizes = np.array([1.0, 2.0, 3.0])
    totals, counts = stats.evalgate_bootstrap_totals(sums, sizes, 7, [3, 9])
    index = np.random.default_rng(np.random.SeedSequence([3, 9])).integers(0, 3, size=(7, 3))
    assert totals.tolist() == sums[index].sum(axis=1).tolist()
    assert counts.tolist() == sizes[index].sum(axis=1).tolist()
    assert counts.min() >= 3.0  # sizes are added, never subtracted


def test_bootstrap_totals_in_several_chunks_equal_one_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    sums, sizes = np.arange(5.0), np.ones(5)
    whole, whole_counts = stats.evalgate_bootstrap_totals(sums, sizes, 9, 4)
    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", 10)  # 2 rows per chunk: 5 chunks, last short
    parts, part_counts = stats.evalgate_bootstrap_totals(sums, sizes, 9, 4)
    assert parts.tolist() == whole.tolist()
    assert part_counts.tolist() == whole_counts.tolist() == [5.0] * 9


def test_cluster_bootstrap_returns_the_per_case_mean_of_each_resample() -> None:
    diffs, clusters = [0.0, 1.0, 1.0], ["x", "y", "y"]
    lo, hi, boot = stats.evalgate_cluster_bootstrap(diffs, clusters, 50, 1, 0.9)
    index = np.random.default_rng(np.random.SeedSequence(1)).integers(0, 2, size=(50, 2))
    sums, sizes = np.array([0.0, 2.0]), np.array([1.0, 2.0])
    expected = sums[index].sum(axis=1) / sizes[index].sum(axis=1)
    assert boot.tolist() == expected.tolist()
    assert (lo, hi) == tuple(np.quantile(expected, [0.05, 0.95]).tolist())


# --------------------------------------------------------------------------- intervals, p-values


def test_percentile_interval_is_the_linear_quantile_pair() -> None:
    boot = np.arange(101, dtype=float)  # quantile q of 0..100 is exactly 100 q
    assert stats.evalgate_percentile_interval(boot, 0.9) == pytest.approx((5.0, 95.0), abs=1e-12)
    assert stats.evalgate_percentile_interval(boot, 0.5) == (25.0, 75.0)


def test_percentile_interval_with_infinite_values_uses_the_nearest_rank() -> None:
    boot = np.array([1.0, 2.0, 3.0, math.inf])
    lo, hi = stats.evalgate_percentile_interval(boot, 0.5)
    assert (lo, hi) == tuple(np.quantile(boot, [0.25, 0.75], method="nearest").tolist())
    assert (lo, hi) == (2.0, 3.0)
    assert stats.evalgate_percentile_interval(boot, 0.98)[1] == math.inf


def test_clustered_se_by_hand() -> None:
    # mean 0.5; residuals +.5 -.5 | -.5 | +.5; cluster sums 0, -.5, .5; C = 3, n = 4
    mean, se, dof = stats.evalgate_clustered_se([1.0, 0.0, 0.0, 1.0], ["a", "a", "b", "c"])
    assert mean == 0.5
    assert se == pytest.approx(math.sqrt(3 / 2 * 0.5 / 16), rel=1e-12)
    assert dof == 2


def test_clustered_se_of_two_clusters() -> None:
    # mean 0.5, residual sums +.5 and -.5: var = 2/1 * 0.5 / 2^2 = 0.25
    assert stats.evalgate_clustered_se([1.0, 0.0], ["a", "b"]) == (0.5, 0.5, 1)


def test_clustered_se_of_one_cluster_and_of_nothing() -> None:
    assert stats.evalgate_clustered_se([1.0, 3.0], ["a", "a"])[0] == 2.0
    mean, se, dof = stats.evalgate_clustered_se([], [])
    assert math.isnan(mean) and math.isnan(se) and dof == 0


def test_t_interval_at_one_degree_of_freedom_and_its_refusals() -> None:
    half = float(sps.t.ppf(0.975, 1)) * 0.5  # 6.353...
    assert stats.evalgate_t_interval(1.0, 0.5, 1, 0.95) == (1.0 - half, 1.0 + half)
    half90 = float(sps.t.ppf(0.95, 4)) * 2.0
    assert stats.evalgate_t_interval(0.0, 2.0, 4, 0.9) == (-half90, half90)
    assert all(math.isnan(v) for v in stats.evalgate_t_interval(1.0, 0.5, 0, 0.95))
    assert all(math.isnan(v) for v in stats.evalgate_t_interval(1.0, math.inf, 3, 0.95))


def test_t_pvalue_drop_edges() -> None:
    assert stats.evalgate_t_pvalue_drop(-1.0, 0.5, 1) == float(sps.t.cdf(-2.0, 1))
    assert stats.evalgate_t_pvalue_drop(0.3, 0.1, 5) == float(sps.t.cdf(3.0, 5))
    assert stats.evalgate_t_pvalue_drop(-0.1, 0.0, 5) == 0.0
    assert stats.evalgate_t_pvalue_drop(0.0, 0.0, 5) == 1.0  # no drop at all: not significant
    assert stats.evalgate_t_pvalue_drop(0.1, 0.0, 5) == 1.0
    assert math.isnan(stats.evalgate_t_pvalue_drop(-1.0, 0.5, 0))
    assert math.isnan(stats.evalgate_t_pvalue_drop(-1.0, math.nan, 4))


def test_bootstrap_pvalue_counts_zero_as_not_a_drop() -> None:
    assert stats.evalgate_bootstrap_pvalue_drop(np.array([-1.0, 0.0, 1.0, -2.0])) == 3 / 5
    assert stats.evalgate_bootstrap_pvalue_drop(np.array([-1.0, -2.0, -3.0])) == 1 / 4
    assert stats.evalgate_bootstrap_pvalue_drop(np.array([0.0, 0.0])) == 1.0


# --------------------------------------------------------------------------- exact rate bounds


@pytest.mark.parametrize("n", [1, 10, 50])
def test_clopper_pearson_closed_forms_at_zero_and_all(n: int) -> None:
    # k = 0: P(Binom(n, U) <= 0) = (1 - U)^n = 1 - c  =>  U = 1 - (1 - c)^(1/n)
    assert stats.evalgate_clopper_pearson_upper(0, n, 0.975) == pytest.approx(
        1.0 - 0.025 ** (1.0 / n), rel=1e-12
    )
    # k = n: P(Binom(n, L) >= n) = L^n = 1 - c  =>  L = (1 - c)^(1/n)
    assert stats.evalgate_clopper_pearson_lower(n, n, 0.975) == pytest.approx(
        0.025 ** (1.0 / n), rel=1e-12
    )
    assert stats.evalgate_clopper_pearson_upper(n, n, 0.975) == 1.0
    assert stats.evalgate_clopper_pearson_lower(0, n, 0.975) == 0.0


def test_clopper_pearson_with_no_trials_is_the_whole_unit_interval() -> None:
    assert stats.evalgate_clopper_pearson_upper(0, 0, 0.975) == 1.0
    assert stats.evalgate_clopper_pearson_lower(0, 0, 0.975) == 0.0


def test_clopper_pearson_inner_values_solve_the_binomial_tail() -> None:
    upper = stats.evalgate_clopper_pearson_upper(3, 20, 0.975)
    lower = stats.evalgate_clopper_pearson_lower(3, 20, 0.975)
    assert float(sps.binom.cdf(3, 20, upper)) == pytest.approx(0.025, abs=1e-10)
    assert float(sps.binom.sf(2, 20, lower)) == pytest.approx(0.025, abs=1e-10)
    assert 0.0 < lower < 3 / 20 < upper < 1.0
    one_less = stats.evalgate_clopper_pearson_upper(19, 20, 0.975)
    assert one_less == pytest.approx(float(sps.beta.ppf(0.975, 20, 1)), rel=1e-12) and one_less < 1


# --------------------------------------------------------------------------- corrections


def test_bonferroni_and_holm_by_hand() -> None:
    p = [0.04, 0.01, 0.5, 0.03]
    bonferroni = stats.evalgate_adjust_pvalues(p, "bonferroni")
    assert bonferroni.tolist() == [0.16, 0.04, 1.0, 0.12]
    # holm: sorted 0.01*4, 0.03*3, 0.04*2, 0.5*1 = .04 .09 .08 .5 -> running max .04 .09 .09 .5
    holm = stats.evalgate_adjust_pvalues(p, "holm")
    assert holm.tolist() == pytest.approx([0.09, 0.04, 0.5, 0.09], abs=1e-15)
    assert stats.evalgate_adjust_pvalues([0.6, 0.7], "holm").tolist() == [1.0, 1.0]


def test_bh_by_hand() -> None:
    # sorted .01 .02 .03 .5 -> p*m/rank .04 .04 .04 .5 (step-up minimum from the top)
    bh = stats.evalgate_adjust_pvalues([0.03, 0.5, 0.01, 0.02], "bh")
    assert bh.tolist() == pytest.approx([0.04, 0.5, 0.04, 0.04], abs=1e-15)


def test_none_and_empty_return_copies() -> None:
    p = np.array([0.2, 0.01])
    same = stats.evalgate_adjust_pvalues(p, "none")
    assert same.tolist() == [0.2, 0.01] and same is not p
    assert stats.evalgate_adjust_pvalues([], "holm").tolist() == []
    with pytest.raises(EvalgateConfigError, match="unknown 'sidak'"):
        stats.evalgate_adjust_pvalues([0.1], "sidak")


# --------------------------------------------------------------------------- sample sizes


def test_cases_needed_by_hand() -> None:
    # (1.95996 + 0.84162)^2 * 1.0 / 0.1^2 = 784.89 -> 785
    assert stats.evalgate_cases_needed(1.0, 0.1, 0.95) == 785
    assert stats.evalgate_cases_needed(1.0, -0.1, 0.95) == 785  # the sign of delta does not matter
    z = float(sps.norm.ppf(0.95) + sps.norm.ppf(0.9))
    assert stats.evalgate_cases_needed(0.5, 0.2, 0.9, power=0.9) == math.ceil(z**2 * 0.5 / 0.04)
    assert stats.evalgate_cases_needed(1e-9, 0.5, 0.95) == 1


def test_cases_needed_refuses_what_no_sample_settles() -> None:
    assert stats.evalgate_cases_needed(1.0, 0.0, 0.95) is None
    assert stats.evalgate_cases_needed(math.nan, 0.1, 0.95) is None
    assert stats.evalgate_cases_needed(1.0, math.inf, 0.95) is None


def _smallest_settling(k: int, n: int, max_rate: float) -> int:
    """Brute force: the first N whose CP upper bound at the observed rate is <= max_rate."""
    trials = 1
    while stats.evalgate_clopper_pearson_upper(round(k / n * trials), trials, 0.975) > max_rate:
        trials += 1
    return trials


def test_floor_cases_needed_by_closed_form_and_brute_force() -> None:
    # no failures: 1 - 0.025^(1/N) <= 0.05  <=>  N >= ln 0.025 / ln 0.95 = 71.9
    assert stats.evalgate_floor_cases_needed(0, 10, 0.05, 0.975) == 72
    assert math.ceil(math.log(0.025) / math.log(0.95)) == 72
    assert stats.evalgate_floor_cases_needed(0, 0, 0.2, 0.975) == _smallest_settling(0, 1, 0.2)
    # one trial already settles a max_rate above 0.975 (the bound of 0 of 1): the answer is 1
    assert stats.evalgate_floor_cases_needed(0, 1, 0.98, 0.975) == 1


@pytest.mark.parametrize(
    ("k", "n", "max_rate"), [(1, 100, 0.05), (1, 10, 0.3), (3, 7, 0.6), (0, 3, 0.5)]
)
def test_floor_cases_needed_equals_a_linear_search(k: int, n: int, max_rate: float) -> None:
    assert stats.evalgate_floor_cases_needed(k, n, max_rate, 0.975) == _smallest_settling(
        k, n, max_rate
    )


def test_floor_cases_needed_is_locally_smallest_where_rounding_breaks_monotonicity() -> None:
    # At rate 0.1 the bound at round(0.1 N) failures is not monotone in N (33 settles 0.25, 35
    # does not): bisection finds a settling N whose predecessor does not, not the global first.
    needed = stats.evalgate_floor_cases_needed(2, 20, 0.25, 0.975)
    assert needed == 38 and _smallest_settling(2, 20, 0.25) == 33

    def bound(trials: int) -> float:
        return stats.evalgate_clopper_pearson_upper(round(0.1 * trials), trials, 0.975)

    assert bound(38) <= 0.25 < bound(37)


def test_floor_cases_needed_refusals() -> None:
    assert stats.evalgate_floor_cases_needed(5, 100, 0.05, 0.975) is None  # rate == max_rate
    assert stats.evalgate_floor_cases_needed(6, 100, 0.05, 0.975) is None
    # rate 0.1, 1e-5 below the limit: about 3.5e9 trials, past the 10^9 search limit
    assert stats.evalgate_floor_cases_needed(1, 10, 0.10001, 0.975) is None


# --------------------------------------------------------------------------- percentiles


def test_percentile_picks_the_ceil_n_q_order_statistic() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert stats.evalgate_percentile(values, 50) == 3.0  # ceil(2.5) = 3rd smallest
    assert stats.evalgate_percentile(values, 40) == 2.0  # ceil(2.0) = 2nd, not the 3rd
    assert stats.evalgate_percentile(values, 41) == 3.0
    assert stats.evalgate_percentile(values, 0) == 1.0
    assert stats.evalgate_percentile(values, 100) == 5.0
    assert math.isnan(stats.evalgate_percentile([], 50))


def _order_statistic_cdf(n: int, k: int) -> list[float]:
    """P(J <= j) for j = 1..n: at least k of n uniform draws land in the first j positions."""
    out = []
    for j in range(1, n + 1):
        p = j / n
        out.append(sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))
    return out


@pytest.mark.parametrize(("n", "q"), [(4, 50.0), (5, 95.0), (3, 10.0)])
def test_bootstrap_percentiles_draw_the_order_statistic_by_its_exact_cdf(n: int, q: float) -> None:
    values = np.array([10.0 * (i + 1) for i in range(n)])[::-1]  # unsorted on purpose
    boot = stats.evalgate_bootstrap_percentiles(values, q, 200, np.random.default_rng(5))
    k = min(n, max(1, math.ceil(n * q / 100.0 - 1e-12)))
    cdf = _order_statistic_cdf(n, k)
    uniforms = np.random.default_rng(5).random(200)
    expected = [10.0 * (next(j for j in range(n) if cdf[j] >= u - 1e-12) + 1) for u in uniforms]
    assert boot.tolist() == expected


def test_percentile_ratio_is_candidate_over_baseline() -> None:
    cand, base = [2.0, 4.0, 6.0, 8.0], [1.0, 2.0, 3.0, 4.0, 5.0]
    estimate, lo, hi, ratios = stats.evalgate_percentile_ratio_ci(cand, base, 50, 300, 2, 0.9)
    assert estimate == 4.0 / 3.0  # p50 of 4 values is the 2nd (4.0), of 5 the 3rd (3.0)
    rng = stats.evalgate_rng(2)
    cand_boot = stats.evalgate_bootstrap_percentiles(cand, 50, 300, rng)  # candidate drawn first
    base_boot = stats.evalgate_bootstrap_percentiles(base, 50, 300, rng)
    assert ratios.tolist() == (cand_boot / base_boot).tolist()
    assert (lo, hi) == tuple(np.quantile(cand_boot / base_boot, [0.05, 0.95]).tolist())


def test_percentile_ratio_constant_samples_are_exact() -> None:
    estimate, lo, hi, _ = stats.evalgate_percentile_ratio_ci([3.0] * 6, [2.0] * 4, 95, 100, 0, 0.95)
    assert (estimate, lo, hi) == (1.5, 1.5, 1.5)
    small = stats.evalgate_percentile_ratio_ci([0.5] * 3, [0.25] * 2, 50, 100, 0, 0.95)
    assert small[:3] == (2.0, 2.0, 2.0)  # a baseline below 1 is still a baseline


def test_percentile_ratio_with_a_zero_baseline_is_infinite() -> None:
    estimate, lo, hi, ratios = stats.evalgate_percentile_ratio_ci([1.0], [0.0], 50, 100, 0, 0.95)
    assert estimate == math.inf and lo == math.inf and hi == math.inf
    assert np.all(np.isinf(ratios))


def test_the_distribution_functions_are_scipy_stats_own_without_importing_it() -> None:
    # stats takes t, normal, beta and binomial functions from scipy.special, so a gate does not
    # import scipy.stats (~1 s): t and normal are the very functions scipy.stats calls (equal),
    # beta's and binomial's public inverses differ from scipy.stats' private ones by an ulp.
    ours = stats
    for dof in (1, 2, 9, 40, 1000):
        for confidence in (0.8, 0.9, 0.95, 0.99):
            half = float(sps.t.ppf((1 + confidence) / 2, dof)) * 0.02
            assert ours.evalgate_t_interval(0.1, 0.02, dof, confidence) == (0.1 - half, 0.1 + half)
            assert ours.evalgate_t_pvalue_drop(-0.03, 0.02, dof) == float(sps.t.cdf(-1.5, dof))
    for k, n in ((0, 10), (3, 10), (12, 40), (399, 400), (5, 60)):
        if k < n:
            upper = ours.evalgate_clopper_pearson_upper(k, n, 0.975)
            assert upper == pytest.approx(float(sps.beta.ppf(0.975, k + 1, n - k)), rel=1e-13)
        if k > 0:
            lower = ours.evalgate_clopper_pearson_lower(k, n, 0.975)
            assert lower == pytest.approx(float(sps.beta.ppf(0.025, k, n - k + 1)), rel=1e-13)
    rng = np.random.default_rng(4)
    for size in (1, 2, 5, 11):
        p = rng.random(size)
        expected = sps.false_discovery_control(p, method="bh")
        assert ours.evalgate_adjust_pvalues(p, "bh").tolist() == expected.tolist()
    ties = np.array([0.01, 0.04, 0.04, 0.2, 0.9])
    assert (
        ours.evalgate_adjust_pvalues(ties, "bh").tolist()
        == sps.false_discovery_control(ties, method="bh").tolist()
    )
    n = 50
    positions = np.arange(1, n + 1) / n
    for k in (1, 25, 50):
        ref = sps.binom.sf(k - 1, n, positions)
        np.testing.assert_allclose(scipy.special.bdtrc(k - 1, n, positions), ref, rtol=1e-10)


def test_a_gate_evaluation_never_imports_scipy_stats() -> None:
    code = (
        "import sys\n"
        "from pytest_evalgate import stats\n"
        "stats.evalgate_t_interval(0.1, 0.02, 9, 0.95)\n"
        "stats.evalgate_t_pvalue_drop(-0.1, 0.02, 9)\n"
        "stats.evalgate_clopper_pearson_upper(3, 10, 0.975)\n"
        "stats.evalgate_clopper_pearson_lower(3, 10, 0.975)\n"
        "stats.evalgate_adjust_pvalues([0.01, 0.2], 'bh')\n"
        "stats.evalgate_cases_needed(0.05, 0.01, 0.95)\n"
        "import numpy as np\n"
        "stats.evalgate_bootstrap_percentiles([1.0, 2.0, 3.0], 0.5, 10, np.random.default_rng(0))\n"
        "assert 'scipy.special' in sys.modules and 'scipy.stats' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
