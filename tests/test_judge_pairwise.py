"""judge/pairwise.py: combining both orders, per-case scores, net win rate, inconsistency."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pytest_evalgate import stats
from pytest_evalgate.errors import EvalgateIntegrityError
from pytest_evalgate.judge import pairwise

Outcome = pairwise.EvalgatePairOutcome
WIN, LOSS, TIE = Outcome("win", False), Outcome("loss", False), Outcome("tie", False)
FLIP = Outcome("tie", True)

# candidate first (A = candidate), baseline first (A = baseline) -> candidate's outcome
TABLE = {
    ("A", "B"): WIN,
    ("B", "A"): LOSS,
    ("tie", "tie"): TIE,
    ("A", "A"): FLIP,  # A both times: the first position won, whoever sat there
    ("B", "B"): FLIP,
    ("A", "tie"): FLIP,
    ("tie", "B"): FLIP,
    ("B", "tie"): FLIP,
    ("tie", "A"): FLIP,
}


@pytest.mark.parametrize(("orders", "expected"), sorted(TABLE.items()))
def test_two_orders_combine_into_one_outcome(
    orders: tuple[pairwise.EvalgateWinner, pairwise.EvalgateWinner], expected: Outcome
) -> None:
    assert pairwise.evalgate_pair_outcome(*orders) == expected


def test_the_table_covers_every_pair_of_verdicts() -> None:
    assert set(TABLE) == set(itertools.product(("A", "B", "tie"), repeat=2))


def test_outcome_scores_and_nets() -> None:
    assert [(o.score, o.net) for o in (WIN, TIE, LOSS, FLIP)] == [
        (1.0, 1.0),
        (0.5, 0.0),
        (0.0, -1.0),
        (0.5, 0.0),
    ]


def _judgment(
    case: str, rep: int, outcome: Outcome, category: str = "billing", cluster: str | None = None
) -> pairwise.EvalgatePairJudgment:
    return pairwise.EvalgatePairJudgment(case, category, cluster or case, rep, outcome)


# --------------------------------------------------------------------------- per case


def test_repetitions_average_within_a_case_and_cases_sort_by_id() -> None:
    judgments = [
        _judgment("c2", 0, WIN),
        _judgment("c1", 1, LOSS, "refunds"),
        _judgment("c1", 0, WIN, "refunds"),
        _judgment("c2", 1, FLIP),
        _judgment("c3", 0, TIE),
    ]
    cases = pairwise.evalgate_pairwise_cases(judgments)
    assert cases.case_ids == ("c1", "c2", "c3")
    assert list(cases.categories) == ["refunds", "billing", "billing"]
    assert list(cases.wins) == [0.5, 0.5, 0.0]
    assert list(cases.losses) == [0.5, 0.0, 0.0]
    assert list(cases.ties) == [0.0, 0.5, 1.0]
    assert list(cases.inconsistent) == [0.0, 0.5, 0.0]
    assert list(cases.repetitions) == [2, 2, 1]
    assert list(cases.scores) == [0.5, 0.75, 0.5]
    assert list(cases.net) == [0.0, 0.5, 0.0]
    assert np.allclose(cases.net, 2 * cases.scores - 1)
    assert np.allclose(cases.wins + cases.losses + cases.ties, 1.0)


def test_a_pair_judged_twice_is_an_integrity_error() -> None:
    with pytest.raises(EvalgateIntegrityError, match="'c1' r0 judged twice"):
        pairwise.evalgate_pairwise_cases([_judgment("c1", 0, WIN), _judgment("c1", 0, WIN)])


def test_a_slice_keeps_only_its_cases() -> None:
    judgments = [
        _judgment("a", 0, WIN, "x"),
        _judgment("b", 0, LOSS, "y"),
        _judgment("c", 0, TIE, "x"),
    ]
    cases = pairwise.evalgate_pairwise_cases(judgments)
    only_x = pairwise.evalgate_pairwise_slice(cases, "x")
    assert only_x.case_ids == ("a", "c")
    assert list(only_x.net) == [1.0, 0.0] and list(only_x.clusters) == ["a", "c"]
    assert pairwise.evalgate_pairwise_slice(cases, "all") is cases
    assert pairwise.evalgate_pairwise_slice(cases, "nope").case_ids == ()


# --------------------------------------------------------------------------- net win rate


def _random_judgments(seed: int, cases: int, reps: int) -> list[pairwise.EvalgatePairJudgment]:
    rng = np.random.default_rng(seed)
    outcomes = [WIN, LOSS, TIE, FLIP]
    out = []
    for case in range(cases):
        cluster = f"passage-{case // 3}"  # clusters of three cases share a passage
        for rep in range(reps):
            outcome = outcomes[int(rng.choice(4, p=[0.45, 0.3, 0.15, 0.1]))]
            out.append(_judgment(f"case-{case:04d}", rep, outcome, f"s{case % 3}", cluster))
    return out


def _direct_bootstrap(
    net_by_case: dict[str, float], cluster_of: dict[str, str], resamples: int, seed: int
) -> np.ndarray:
    """The cluster bootstrap written out by hand: draw clusters, pool their cases, average."""
    labels = sorted(set(cluster_of.values()))
    members = {label: [c for c in net_by_case if cluster_of[c] == label] for label in labels}
    draws = np.random.default_rng(np.random.SeedSequence(seed)).integers(
        0, len(labels), size=(resamples, len(labels))
    )
    means = []
    for row in draws:
        pooled = [net_by_case[c] for index in row for c in members[labels[index]]]
        means.append(sum(pooled) / len(pooled))
    return np.array(means)


def test_net_win_rate_and_interval_match_a_direct_computation() -> None:
    judgments = _random_judgments(seed=3, cases=240, reps=2)
    net_by_case: dict[str, float] = {}
    for j in judgments:  # (wins - losses) per case, each repetition weighing 1/K
        net_by_case[j.case_id] = net_by_case.get(j.case_id, 0.0) + j.outcome.net / 2
    cluster_of = {j.case_id: j.cluster for j in judgments}
    wins = sum(j.outcome.result == "win" for j in judgments) / 2
    losses = sum(j.outcome.result == "loss" for j in judgments) / 2

    summary = pairwise.evalgate_net_win_rate(
        pairwise.evalgate_pairwise_cases(judgments), resamples=2000, seed=11, confidence=0.95
    )
    assert summary.cases == 240
    assert (summary.wins, summary.losses) == (wins, losses)
    assert summary.wins + summary.losses + summary.ties == 240
    assert summary.estimate == pytest.approx((wins - losses) / 240, abs=1e-12)
    assert summary.mean_score == pytest.approx((summary.estimate + 1) / 2, abs=1e-12)
    boot = _direct_bootstrap(net_by_case, cluster_of, 2000, 11)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    assert (summary.lo, summary.hi) == pytest.approx((lo, hi), abs=1e-12)
    assert summary.lo < summary.estimate < summary.hi


def test_the_interval_agrees_with_the_clustered_standard_error() -> None:
    judgments = _random_judgments(seed=5, cases=900, reps=1)
    cases = pairwise.evalgate_pairwise_cases(judgments)
    summary = pairwise.evalgate_net_win_rate(cases, resamples=4000, seed=0, confidence=0.95)
    mean, se, _ = stats.evalgate_clustered_se(cases.net, cases.clusters)
    assert summary.estimate == pytest.approx(mean)
    assert (summary.hi - summary.lo) / 2 == pytest.approx(1.96 * se, rel=0.12)


def test_clusters_widen_the_interval_when_cases_move_together() -> None:
    # Each passage's five cases share one outcome: as independent cases the interval is too
    # narrow by about sqrt(5); resampling clusters restores the honest width.
    judgments, alone = [], []
    rng = np.random.default_rng(8)
    for passage in range(60):
        outcome = [WIN, LOSS, TIE][int(rng.integers(3))]
        for k in range(5):
            case = f"p{passage:02d}-{k}"
            judgments.append(_judgment(case, 0, outcome, cluster=f"p{passage:02d}"))
            alone.append(_judgment(case, 0, outcome))
    clustered = pairwise.evalgate_net_win_rate(
        pairwise.evalgate_pairwise_cases(judgments), 3000, 1, 0.95
    )
    naive = pairwise.evalgate_net_win_rate(pairwise.evalgate_pairwise_cases(alone), 3000, 1, 0.95)
    assert clustered.estimate == naive.estimate
    ratio = (clustered.hi - clustered.lo) / (naive.hi - naive.lo)
    assert 1.7 < ratio < 2.8  # sqrt(5) = 2.24


def test_the_interval_is_seeded_and_reproducible() -> None:
    cases = pairwise.evalgate_pairwise_cases(_random_judgments(seed=9, cases=80, reps=3))
    one = pairwise.evalgate_net_win_rate(cases, 1000, 4, 0.9)
    assert one == pairwise.evalgate_net_win_rate(cases, 1000, 4, 0.9)
    assert (one.lo, one.hi) != (
        pairwise.evalgate_net_win_rate(cases, 1000, 5, 0.9).lo,
        pairwise.evalgate_net_win_rate(cases, 1000, 5, 0.9).hi,
    )
    wider = pairwise.evalgate_net_win_rate(cases, 1000, 4, 0.99)
    assert wider.lo < one.lo and wider.hi > one.hi


def test_no_cases_give_nan_not_a_pass() -> None:
    empty = pairwise.evalgate_net_win_rate(pairwise.evalgate_pairwise_cases([]), 100, 0, 0.95)
    assert empty.cases == 0
    assert all(math.isnan(x) for x in (empty.estimate, empty.lo, empty.hi, empty.mean_score))
    assert not empty.lo > -0.05  # a NaN bound can never pass "lo > -margin"


def test_all_wins_and_all_losses() -> None:
    wins = [_judgment(f"c{i}", 0, WIN) for i in range(20)]
    summary = pairwise.evalgate_net_win_rate(pairwise.evalgate_pairwise_cases(wins), 500, 0, 0.95)
    assert (summary.estimate, summary.lo, summary.hi, summary.mean_score) == (1.0, 1.0, 1.0, 1.0)
    losses = [_judgment(f"c{i}", 0, LOSS) for i in range(20)]
    summary = pairwise.evalgate_net_win_rate(pairwise.evalgate_pairwise_cases(losses), 500, 0, 0.95)
    assert (summary.estimate, summary.lo, summary.hi) == (-1.0, -1.0, -1.0)


# --------------------------------------------------------------------------- inconsistency


def test_inconsistency_is_counted_per_slice_over_pairs() -> None:
    judgments = [
        _judgment("a", 0, FLIP, "billing"),
        _judgment("a", 1, WIN, "billing"),
        _judgment("b", 0, FLIP, "billing"),
        _judgment("c", 0, TIE, "refunds"),
        _judgment("d", 0, LOSS, "refunds"),
        _judgment("d", 1, FLIP, "refunds"),
    ]
    by_slice = pairwise.evalgate_inconsistency_by_slice(judgments)
    assert list(by_slice) == ["all", "billing", "refunds"]
    assert (by_slice["billing"].inconsistent, by_slice["billing"].pairs) == (2, 3)
    assert (by_slice["refunds"].inconsistent, by_slice["refunds"].pairs) == (1, 3)
    assert (by_slice["all"].inconsistent, by_slice["all"].pairs) == (3, 6)
    assert by_slice["all"].rate == 0.5
    assert by_slice["billing"].rate == pytest.approx(2 / 3)
    assert math.isnan(pairwise.EvalgateInconsistency("x", 0, 0).rate)
    assert pairwise.evalgate_inconsistency_by_slice([]) == {}
