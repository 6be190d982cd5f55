"""stats.py: properties that must hold for every input (hypothesis), each checked against an
independent statement of it: numpy's own percentile, a brute-force search, an inequality chain.

Examples stay small and few (``max_examples``) so the file runs in seconds; the database is
off so a run never writes into the work tree.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_evalgate import stats

FAST = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@FAST
@given(st.lists(floats, min_size=1, max_size=30), st.floats(min_value=0.0, max_value=100.0))
def test_percentile_is_numpy_inverted_cdf_and_an_observed_value(
    values: list[float], q: float
) -> None:
    got = stats.evalgate_percentile(values, q)
    assert got in values
    assert got == float(np.percentile(values, q, method="inverted_cdf"))


@FAST
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=12))
def test_corrections_are_ordered_none_le_bh_le_holm_le_bonferroni(p: list[float]) -> None:
    raw = np.array(p)
    bh, holm, bonferroni = (
        stats.evalgate_adjust_pvalues(raw, m) for m in ("bh", "holm", "bonferroni")
    )
    tolerance = 1e-12
    assert np.all(raw <= bh + tolerance) and np.all(bh <= holm + tolerance)
    assert np.all(holm <= bonferroni + tolerance) and np.all(bonferroni <= 1.0)
    order = np.argsort(raw, kind="stable")
    assert np.all(np.diff(holm[order]) >= -tolerance)  # monotone in the raw p-values


@FAST
@given(st.integers(min_value=1, max_value=200), st.data())
def test_exact_bounds_bracket_the_observed_rate(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n))
    lower = stats.evalgate_clopper_pearson_lower(k, n, 0.975)
    upper = stats.evalgate_clopper_pearson_upper(k, n, 0.975)
    assert 0.0 <= lower <= k / n <= upper <= 1.0
    assert upper > 0.0 and lower < 1.0  # never the degenerate normal-approximation bound
    wider = stats.evalgate_clopper_pearson_upper(k, n, 0.995)
    assert wider >= upper


@FAST
@given(st.integers(min_value=1, max_value=60), st.floats(min_value=0.02, max_value=0.5))
def test_floor_cases_needed_without_failures_is_the_smallest_settling_n(
    n: int, max_rate: float
) -> None:
    needed = stats.evalgate_floor_cases_needed(0, n, max_rate, 0.975)
    assert needed is not None
    closed_form = math.ceil(math.log(0.025) / math.log(1.0 - max_rate) - 1e-9)
    if closed_form > n:  # the rule failed at n, so the count is above it
        assert needed == closed_form
        assert stats.evalgate_clopper_pearson_upper(0, needed, 0.975) <= max_rate
        assert stats.evalgate_clopper_pearson_upper(0, needed - 1, 0.975) > max_rate


@FAST
@given(st.lists(st.tuples(floats, st.integers(min_value=0, max_value=5)), min_size=2, max_size=25))
def test_clustered_se_does_not_depend_on_labels_or_order(rows: list[tuple[float, int]]) -> None:
    values = np.array([value for value, _ in rows])
    labels = np.array([f"c{label}" for _, label in rows])
    renamed = np.array([f"z{9 - label}" for _, label in rows])
    mean, se, dof = stats.evalgate_clustered_se(values, labels)
    again = stats.evalgate_clustered_se(values[::-1], renamed[::-1])
    assert dof == len(set(labels.tolist())) - 1 == again[2]
    assert again[0] == np.float64(mean) or math.isclose(again[0], mean, rel_tol=1e-9, abs_tol=1e-6)
    if dof >= 1:
        assert math.isclose(again[1], se, rel_tol=1e-6, abs_tol=1e-6)


@FAST
@given(
    st.lists(st.floats(min_value=-1.0, max_value=1.0), min_size=2, max_size=20),
    st.integers(min_value=0, max_value=2**32),
)
def test_bootstrap_means_stay_within_the_cluster_means(diffs: list[float], seed: int) -> None:
    clusters = [f"c{i % 4}" for i in range(len(diffs))]
    lo, hi, boot = stats.evalgate_cluster_bootstrap(diffs, clusters, 100, seed, 0.95)
    sums, sizes = stats.evalgate_cluster_sums(diffs, clusters)
    means = sums / sizes
    assert means.min() - 1e-12 <= boot.min() and boot.max() <= means.max() + 1e-12
    assert lo <= hi
