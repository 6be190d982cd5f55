"""Pairwise judging: the two orders of a (case, repetition) -> win, loss or tie; the statistics.

Contracts
---------
- ``evalgate_pair_outcome(candidate_first, baseline_first)`` reads each verdict from the
  candidate's side (candidate first: A is the candidate; baseline first: A is the baseline).
  When both orders say the same (win, loss or tie) that is the outcome; otherwise the pair is
  a **tie flagged position-inconsistent**. Scores: win 1, tie 0.5, loss 0; net: +1, 0, -1.
- ``evalgate_pairwise_cases`` groups complete pairs by case (sorted by case id): per case the
  fractions of its repetitions won, lost and tied, its score (the mean of 1/0.5/0) and its
  net ``wins - losses`` (in [-1, 1], equal to ``2 * score - 1``). A (case, repetition) given
  twice is an integrity error: exactly-once is checked before any statistic.
- ``evalgate_net_win_rate``: the net win rate ``sum over cases of (w_c - l_c) / cases`` with a
  cluster-bootstrap percentile interval over the cases' clusters (``stats``' helpers: seeded,
  bit-reproducible). The ``pairwise`` rule passes when ``lo > -margin``.
- ``evalgate_inconsistency_by_slice``: per category and ``"all"``, the share of judged pairs
  (case, repetition) whose two orders disagreed.
- Pairs with an errored or unparseable side never reach this module: they have no outcome and
  are retried by the next run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from pytest_evalgate.errors import EvalgateIntegrityError
from pytest_evalgate.judge.parse import EvalgateWinner
from pytest_evalgate.stats import EvalgateSeed, evalgate_cluster_bootstrap

EvalgatePairResult = Literal["win", "loss", "tie"]
EVALGATE_ALL_SLICES = "all"

_FROM_CANDIDATE_FIRST: dict[EvalgateWinner, EvalgatePairResult] = {
    "A": "win",
    "B": "loss",
    "tie": "tie",
}
_FROM_BASELINE_FIRST: dict[EvalgateWinner, EvalgatePairResult] = {
    "A": "loss",
    "B": "win",
    "tie": "tie",
}
_SCORES: dict[EvalgatePairResult, float] = {"win": 1.0, "tie": 0.5, "loss": 0.0}


@dataclass(frozen=True)
class EvalgatePairOutcome:
    """The candidate's result on one (case, repetition) after both orders."""

    result: EvalgatePairResult
    inconsistent: bool

    @property
    def score(self) -> float:
        """Win 1, tie 0.5, loss 0."""
        return _SCORES[self.result]

    @property
    def net(self) -> float:
        """Win +1, tie 0, loss -1."""
        return 2.0 * _SCORES[self.result] - 1.0


@dataclass(frozen=True)
class EvalgatePairJudgment:
    """One complete pair: the case's slice and cluster, the repetition and its outcome."""

    case_id: str
    category: str
    cluster: str
    repetition: int
    outcome: EvalgatePairOutcome


@dataclass(frozen=True)
class EvalgatePairwiseCases:
    """Per case (sorted by id): fractions of repetitions won, lost, tied and inconsistent."""

    case_ids: tuple[str, ...]
    categories: npt.NDArray[np.str_]
    clusters: npt.NDArray[np.str_]
    wins: npt.NDArray[np.float64]
    losses: npt.NDArray[np.float64]
    ties: npt.NDArray[np.float64]
    inconsistent: npt.NDArray[np.float64]
    repetitions: npt.NDArray[np.int64]

    @property
    def scores(self) -> npt.NDArray[np.float64]:
        """Per case, the mean of win 1 / tie 0.5 / loss 0 over its repetitions."""
        return self.wins + 0.5 * self.ties

    @property
    def net(self) -> npt.NDArray[np.float64]:
        """Per case, the fraction won minus the fraction lost."""
        return self.wins - self.losses


@dataclass(frozen=True)
class EvalgateNetWinRate:
    """The net win rate of a set of cases with its cluster-bootstrap interval.

    ``wins``, ``losses`` and ``ties`` are sums of per-case fractions (so they add up to
    ``cases``); ``mean_score`` is the mean per-case score (win 1, tie 0.5, loss 0).
    """

    cases: int
    wins: float
    losses: float
    ties: float
    estimate: float
    lo: float
    hi: float
    mean_score: float
    confidence: float


@dataclass(frozen=True)
class EvalgateInconsistency:
    """Position inconsistency of one slice: inconsistent pairs out of judged pairs."""

    slice: str
    inconsistent: int
    pairs: int

    @property
    def rate(self) -> float:
        """``inconsistent / pairs`` (NaN for no pairs)."""
        return self.inconsistent / self.pairs if self.pairs else math.nan


def evalgate_pair_outcome(
    candidate_first: EvalgateWinner, baseline_first: EvalgateWinner
) -> EvalgatePairOutcome:
    """Combine the two orders' verdicts (see the module contract)."""
    first = _FROM_CANDIDATE_FIRST[candidate_first]
    second = _FROM_BASELINE_FIRST[baseline_first]
    if first == second:
        return EvalgatePairOutcome(first, inconsistent=False)
    return EvalgatePairOutcome("tie", inconsistent=True)


def evalgate_pairwise_cases(judgments: Iterable[EvalgatePairJudgment]) -> EvalgatePairwiseCases:
    """Group complete pairs by case; a (case, repetition) seen twice raises."""
    grouped = _group(judgments)
    ids = tuple(sorted(grouped))
    rows = [grouped[case_id] for case_id in ids]
    return EvalgatePairwiseCases(
        case_ids=ids,
        categories=np.array([row[0].category for row in rows], dtype=np.str_),
        clusters=np.array([row[0].cluster for row in rows], dtype=np.str_),
        wins=_fraction(rows, lambda o: o.result == "win"),
        losses=_fraction(rows, lambda o: o.result == "loss"),
        ties=_fraction(rows, lambda o: o.result == "tie"),
        inconsistent=_fraction(rows, lambda o: o.inconsistent),
        repetitions=np.array([len(row) for row in rows], dtype=np.int64),
    )


def _group(judgments: Iterable[EvalgatePairJudgment]) -> dict[str, list[EvalgatePairJudgment]]:
    grouped: dict[str, list[EvalgatePairJudgment]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for judgment in judgments:
        key = (judgment.case_id, judgment.repetition)
        if key in seen:
            raise EvalgateIntegrityError(f"pair {key[0]!r} r{key[1]} judged twice")
        seen.add(key)
        grouped[judgment.case_id].append(judgment)
    return grouped


def _fraction(
    rows: Sequence[Sequence[EvalgatePairJudgment]], test: Callable[[EvalgatePairOutcome], bool]
) -> npt.NDArray[np.float64]:
    counts = [sum(1 for j in row if test(j.outcome)) / len(row) for row in rows]
    return np.array(counts, dtype=np.float64)


def evalgate_pairwise_slice(cases: EvalgatePairwiseCases, slice_: str) -> EvalgatePairwiseCases:
    """The cases of one category (``"all"``: every case)."""
    if slice_ == EVALGATE_ALL_SLICES:
        return cases
    keep = cases.categories == slice_
    return EvalgatePairwiseCases(
        case_ids=tuple(np.asarray(cases.case_ids, dtype=object)[keep]),
        categories=cases.categories[keep],
        clusters=cases.clusters[keep],
        wins=cases.wins[keep],
        losses=cases.losses[keep],
        ties=cases.ties[keep],
        inconsistent=cases.inconsistent[keep],
        repetitions=cases.repetitions[keep],
    )


def evalgate_net_win_rate(
    cases: EvalgatePairwiseCases, resamples: int, seed: EvalgateSeed, confidence: float
) -> EvalgateNetWinRate:
    """Net win rate and its cluster-bootstrap percentile interval (NaNs for no cases)."""
    count = len(cases.case_ids)
    if count == 0:
        nan = math.nan
        return EvalgateNetWinRate(0, 0.0, 0.0, 0.0, nan, nan, nan, nan, confidence)
    net = cases.net
    lo, hi, _ = evalgate_cluster_bootstrap(net, cases.clusters, resamples, seed, confidence)
    return EvalgateNetWinRate(
        cases=count,
        wins=float(cases.wins.sum()),
        losses=float(cases.losses.sum()),
        ties=float(cases.ties.sum()),
        estimate=float(net.mean()),
        lo=lo,
        hi=hi,
        mean_score=float(cases.scores.mean()),
        confidence=confidence,
    )


def evalgate_inconsistency_by_slice(
    judgments: Iterable[EvalgatePairJudgment],
) -> dict[str, EvalgateInconsistency]:
    """Inconsistent pairs out of judged pairs, per category and over ``"all"``."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for judgment in judgments:
        for name in (judgment.category, EVALGATE_ALL_SLICES):
            counts[name][0] += judgment.outcome.inconsistent
            counts[name][1] += 1
    return {
        name: EvalgateInconsistency(name, bad, total)
        for name, (bad, total) in sorted(counts.items())
    }
