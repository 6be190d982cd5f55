"""pass@k against a direct computation: brute force over subsets, and exact fractions."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.sandbox import evalgate_case_pass_at_k, evalgate_pass_at_k


def _brute_force(n: int, c: int, k: int) -> Fraction:
    """The share of k-subsets of n samples (the first c pass) holding at least one pass."""
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(1 for subset in subsets if any(i < c for i in subset))
    return Fraction(hits, len(subsets))


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_the_share_of_subsets_with_a_pass(n: int) -> None:
    for k in range(1, n + 1):
        for c in range(n + 1):
            expected = float(_brute_force(n, c, k))
            assert evalgate_pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_pass_at_1_is_the_pass_rate() -> None:
    assert evalgate_pass_at_k(10, 3, 1) == pytest.approx(0.3, abs=1e-15)
    assert evalgate_pass_at_k(200, 37, 1) == pytest.approx(37 / 200, abs=1e-15)


@pytest.mark.parametrize(("n", "c", "k"), [(200, 3, 10), (200, 100, 100), (1000, 1, 500)])
def test_large_n_matches_exact_binomials(n: int, c: int, k: int) -> None:
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert evalgate_pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)


def test_edges_nothing_passed_and_too_few_failures_to_fill_k() -> None:
    assert evalgate_pass_at_k(5, 0, 3) == 0.0
    assert evalgate_pass_at_k(5, 3, 3) == 1.0  # only 2 failures: every 3-subset has a pass
    assert evalgate_pass_at_k(5, 5, 5) == 1.0


def test_a_case_s_repetitions_give_its_pass_at_k() -> None:
    flags = [True, False, False, True, False]
    assert evalgate_case_pass_at_k(flags, 2) == pytest.approx(float(_brute_force(5, 2, 2)))


def test_fewer_repetitions_than_k_are_refused() -> None:
    with pytest.raises(
        EvalgateConfigError, match="at least 5 repetitions per case, the suite has 3"
    ):
        evalgate_pass_at_k(3, 1, 5)
    with pytest.raises(EvalgateConfigError, match="pass_at_k"):
        evalgate_case_pass_at_k([True], 2)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 1, 0), (5, -1, 1), (5, 6, 1)])
def test_impossible_arguments_are_refused(n: int, c: int, k: int) -> None:
    with pytest.raises(EvalgateConfigError):
        evalgate_pass_at_k(n, c, k)
