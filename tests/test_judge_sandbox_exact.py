"""judge/agreement.py and sandbox/passk.py: exact pass@k by brute force, refusals that name
their key, and the documented defaults of the agreement interval.
"""

from __future__ import annotations

import itertools
import math

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.judge.agreement import evalgate_agreement, evalgate_pointwise_agreement
from pytest_evalgate.judge.golden import EvalgateGoldenPointwise
from pytest_evalgate.judge.spec import EvalgateJudgeScale
from pytest_evalgate.sandbox.passk import evalgate_case_pass_at_k, evalgate_pass_at_k


def brute_pass_at_k(passed: list[bool], k: int) -> float:
    """The share of k-subsets of the samples that hold at least one pass."""
    subsets = list(itertools.combinations(range(len(passed)), k))
    return sum(any(passed[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_pass_at_k_equals_the_share_of_k_subsets_with_a_pass(n: int) -> None:
    for c in range(n + 1):
        flags = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            got = evalgate_case_pass_at_k(flags, k)
            assert got == pytest.approx(brute_pass_at_k(flags, k), abs=1e-12), (n, c, k)
            assert got == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


@pytest.mark.parametrize(
    ("n", "c", "k", "reason"),
    [
        (3, 1, 0, "must be >= 1, not 0"),
        (2, 1, 3, "needs at least 3 repetitions per case, the suite has 2"),
        (3, 4, 2, "4 passes out of 3 samples"),
        (3, -1, 2, "-1 passes out of 3 samples"),
    ],
)
def test_pass_at_k_refusals_name_the_evaluator_key(n: int, c: int, k: int, reason: str) -> None:
    with pytest.raises(EvalgateConfigError) as refused:
        evalgate_pass_at_k(n, c, k)
    assert (refused.value.source, refused.value.key) == ("evaluator", "pass_at_k")
    assert refused.value.reason == reason


def test_agreement_defaults_are_seed_0_and_10000_resamples() -> None:
    human = [1, 2, 3, 3, 2, 1, 3, 2]
    judge = [1, 2, 3, 2, 2, 1, 3, 3]
    default = evalgate_agreement(human, judge, [1, 2, 3], weights="quadratic")
    explicit = evalgate_agreement(
        human, judge, [1, 2, 3], weights="quadratic", resamples=10_000, seed=0, confidence=0.95
    )
    assert default == explicit and default.resamples == 10_000
    other = evalgate_agreement(human, judge, [1, 2, 3], weights="quadratic", seed=1)
    assert (other.lo, other.hi) != (default.lo, default.hi)  # the seed matters, so 0 is pinned


def test_pointwise_agreement_defaults_are_seed_0_and_10000_resamples() -> None:
    scale = EvalgateJudgeScale(1, 5, 4)
    labels = [1, 2, 5, 4, 3, 5, 1, 2, 4, 5]
    golden = [
        EvalgateGoldenPointwise(f"case-{i // 2}", f"answer {i}", label, i + 1)
        for i, label in enumerate(labels)
    ]
    scores = [1.0, 3.0, 5.0, 4.0, 3.0, 4.0, 1.0, 2.0, 5.0, 5.0]
    default = evalgate_pointwise_agreement(golden, scores, scale)
    assert default == evalgate_pointwise_agreement(golden, scores, scale, seed=0, resamples=10_000)
    other = evalgate_pointwise_agreement(golden, scores, scale, seed=1)
    assert (other.lo, other.hi) != (default.lo, default.hi)
