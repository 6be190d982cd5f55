"""Agreement between the pinned judge and people: Cohen's kappa, confusion, bootstrap.

Contracts
---------
- Labels are categories from an ordered tuple ``labels``: the scale's points for pointwise
  judging (``scale.evalgate_points()``), ``EVALGATE_PREFERENCES = ("A", "tie", "B")`` for pairwise
  preferences. The confusion matrix has people (the golden label) in rows and the judge in
  columns, in that order.
- Cohen's kappa ``1 - sum(W * O) / sum(W * E)`` with ``O`` the confusion counts, ``E[i, j] =
  row_i * col_j / n`` and ``W[i, j] = 1 - [i == j]`` (unweighted) or ``(i - j)^2``
  (``"quadratic"``, for ordinal scales; ``i, j`` are positions in ``labels``, so pass every point
  of the scale). It equals ``sklearn.metrics.cohen_kappa_score(human, judge, labels=labels,
  weights=None | "quadratic")``. It is NaN when ``sum(W * E) = 0`` (both raters used one single
  category: chance explains everything).
- The interval is a percentile bootstrap that resamples **clusters** of golden rows (by
  default each row its own cluster; the golden-set helpers cluster by ``case_id``, since rows
  of one case share its input), seeded and reproducible; a resample whose kappa is undefined
  counts as 0 (no agreement beyond chance), which can only lower the bound.
- A pointwise judge's score becomes a label by rounding half up to the nearest scale point
  (``evalgate_pointwise_label``).
- The golden sets the agreement is measured on are read by ``judge.golden``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from pytest_evalgate.judge.golden import (
    EVALGATE_PREFERENCES,
    EvalgateGoldenPairwise,
    EvalgateGoldenPointwise,
)
from pytest_evalgate.judge.parse import EvalgateWinner
from pytest_evalgate.judge.spec import EvalgateJudgeScale
from pytest_evalgate.stats import EvalgateSeed, evalgate_percentile_interval, evalgate_rng

EvalgateKappaWeights = Literal["none", "quadratic"]
FloatArray = npt.NDArray[np.float64]

# Resample-by-cluster multiplicities materialised at once (rows x clusters), as in stats.py.
_CHUNK_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class EvalgateAgreement:
    """Judge versus people on ``n`` golden rows (see the module contract)."""

    n: int
    labels: tuple[Hashable, ...]
    weights: EvalgateKappaWeights
    raw_agreement: float
    kappa: float
    lo: float
    hi: float
    confidence: float
    resamples: int
    confusion: tuple[tuple[int, ...], ...]

    def evalgate_json(self) -> dict[str, Any]:
        """Builtins for ``decision.json`` and the ``judge-agreement`` command (NaN -> None)."""
        return {
            "n": self.n,
            "labels": list(self.labels),
            "weights": self.weights,
            "raw_agreement": _finite(self.raw_agreement),
            "kappa": _finite(self.kappa),
            "interval": [_finite(self.lo), _finite(self.hi)],
            "confidence": self.confidence,
            "resamples": self.resamples,
            "confusion": [list(row) for row in self.confusion],
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


# --------------------------------------------------------------------------- kappa


def evalgate_confusion(
    human: Sequence[Hashable], judge: Sequence[Hashable], labels: Sequence[Hashable]
) -> npt.NDArray[np.int64]:
    """Counts ``[i, j]`` of rows labelled ``labels[i]`` by people and ``labels[j]`` by the judge."""
    size = len(labels)
    codes = _codes(human, judge, labels)
    return np.bincount(codes, minlength=size * size).reshape(size, size).astype(np.int64)


def _codes(
    human: Sequence[Hashable], judge: Sequence[Hashable], labels: Sequence[Hashable]
) -> npt.NDArray[np.int64]:
    if len(human) != len(judge):
        raise ValueError(f"{len(human)} human labels but {len(judge)} judge labels")
    index = {label: position for position, label in enumerate(labels)}
    unknown = sorted({repr(x) for x in (*human, *judge) if x not in index})
    if unknown:
        raise ValueError(f"labels not among {list(labels)!r}: {', '.join(unknown)}")
    pairs = [index[h] * len(labels) + index[j] for h, j in zip(human, judge, strict=True)]
    return np.array(pairs, dtype=np.int64)


def evalgate_kappa_weights(size: int, weights: EvalgateKappaWeights) -> FloatArray:
    """The disagreement weights ``W`` for ``size`` ordered categories."""
    positions = np.arange(size, dtype=np.float64)
    if weights == "quadratic":
        return np.asarray((positions[:, None] - positions[None, :]) ** 2, dtype=np.float64)
    if weights == "none":
        return 1.0 - np.eye(size, dtype=np.float64)
    raise ValueError(f"weights must be 'none' or 'quadratic', not {weights!r}")


def evalgate_kappa_from_confusion(
    confusion: npt.ArrayLike, weights: EvalgateKappaWeights = "none"
) -> float:
    """Cohen's kappa of one confusion matrix (NaN when undefined)."""
    matrix = np.asarray(confusion, dtype=np.float64)
    size = matrix.shape[0]
    kappas = _kappas(matrix.reshape(1, size, size), evalgate_kappa_weights(size, weights))
    return float(kappas[0])


def evalgate_cohen_kappa(
    human: Sequence[Hashable],
    judge: Sequence[Hashable],
    labels: Sequence[Hashable],
    weights: EvalgateKappaWeights = "none",
) -> float:
    """Cohen's kappa between people and the judge over ``labels`` (see the module contract)."""
    return evalgate_kappa_from_confusion(evalgate_confusion(human, judge, labels), weights)


def _kappas(confusions: FloatArray, weight: FloatArray) -> FloatArray:
    """Kappa of each ``(K, K)`` matrix in a ``(B, K, K)`` stack; NaN where undefined."""
    total = confusions.sum(axis=(1, 2))
    rows, cols = confusions.sum(axis=2), confusions.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = rows[:, :, None] * cols[:, None, :] / total[:, None, None]
        observed_cost = (weight * confusions).sum(axis=(1, 2))
        chance_cost = (weight * expected).sum(axis=(1, 2))
        kappas = 1.0 - observed_cost / chance_cost
    return np.where((total > 0) & (chance_cost > 0), kappas, math.nan)


# --------------------------------------------------------------------------- the interval


def evalgate_kappa_bootstrap(
    codes: npt.ArrayLike,
    size: int,
    clusters: npt.ArrayLike,
    weights: EvalgateKappaWeights,
    resamples: int,
    seed: EvalgateSeed,
) -> FloatArray:
    """Kappas of ``resamples`` cluster resamples of rows coded ``human * size + judge``.

    Resample b draws ``C`` clusters uniformly with replacement (``C`` = distinct clusters, in
    sorted label order, the same draw as ``stats.evalgate_bootstrap_totals``) and adds up the
    drawn clusters' confusion matrices. An undefined kappa counts as 0.
    """
    per_cluster = _cluster_confusions(np.asarray(codes, dtype=np.int64), size, clusters)
    count = per_cluster.shape[0]
    weight = evalgate_kappa_weights(size, weights)
    rng = evalgate_rng(seed)
    rows = max(1, _CHUNK_ELEMENTS // max(count, 1))
    out = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        drawn = _multiplicities(rng.integers(0, count, size=(stop - start, count)), count)
        stacked = (drawn @ per_cluster).reshape(stop - start, size, size)
        out[start:stop] = _kappas(stacked, weight)
    return np.nan_to_num(out, nan=0.0)


def _cluster_confusions(
    codes: npt.NDArray[np.int64], size: int, clusters: npt.ArrayLike
) -> FloatArray:
    _, inverse = np.unique(np.asarray(clusters), return_inverse=True)
    inverse = inverse.ravel()
    cells = size * size
    flat = np.bincount(inverse * cells + codes, minlength=(inverse.max() + 1) * cells)
    return flat.reshape(-1, cells).astype(np.float64)


def _multiplicities(index: npt.NDArray[np.int64], count: int) -> FloatArray:
    """How often each cluster was drawn in each row of ``index``."""
    rows = index.shape[0]
    offsets = index + (np.arange(rows, dtype=np.int64) * count)[:, None]
    return np.bincount(offsets.ravel(), minlength=rows * count).reshape(rows, count).astype(float)


def evalgate_agreement(
    human: Sequence[Hashable],
    judge: Sequence[Hashable],
    labels: Sequence[Hashable],
    *,
    weights: EvalgateKappaWeights,
    clusters: Sequence[Hashable] | None = None,
    resamples: int = 10000,
    seed: EvalgateSeed = 0,
    confidence: float = 0.95,
) -> EvalgateAgreement:
    """Raw agreement, kappa with its cluster-bootstrap interval, and the confusion matrix."""
    if not human:
        raise ValueError("agreement needs at least one labelled row")
    codes = _codes(human, judge, labels)
    size = len(labels)
    confusion = np.bincount(codes, minlength=size * size).reshape(size, size)
    groups = np.arange(len(human)) if clusters is None else np.asarray(clusters, dtype=object)
    boot = evalgate_kappa_bootstrap(codes, size, groups.astype(str), weights, resamples, seed)
    lo, hi = evalgate_percentile_interval(boot, confidence)
    return EvalgateAgreement(
        n=len(human),
        labels=tuple(labels),
        weights=weights,
        raw_agreement=float(np.trace(confusion)) / len(human),
        kappa=evalgate_kappa_from_confusion(confusion, weights),
        lo=lo,
        hi=hi,
        confidence=confidence,
        resamples=resamples,
        confusion=tuple(tuple(int(x) for x in row) for row in confusion),
    )


def evalgate_pointwise_label(score: float, scale: EvalgateJudgeScale) -> int:
    """A judge's score as a category: the nearest scale point, halves rounded up."""
    return min(scale.max, max(scale.min, math.floor(score + 0.5)))


def evalgate_pointwise_agreement(
    golden: Sequence[EvalgateGoldenPointwise],
    judge_scores: Sequence[float],
    scale: EvalgateJudgeScale,
    *,
    resamples: int = 10000,
    seed: EvalgateSeed = 0,
    confidence: float = 0.95,
) -> EvalgateAgreement:
    """Quadratic-weighted agreement of a judge's scores with the golden labels, by case."""
    judged = [evalgate_pointwise_label(score, scale) for score in judge_scores]
    human = [row.label for row in golden]
    clusters = [row.case_id for row in golden]
    points = scale.evalgate_points()
    return evalgate_agreement(
        human,
        judged,
        points,
        weights="quadratic",
        clusters=clusters,
        resamples=resamples,
        seed=seed,
        confidence=confidence,
    )


def evalgate_pairwise_agreement(
    golden: Sequence[EvalgateGoldenPairwise],
    judge_preferences: Sequence[EvalgateWinner],
    *,
    resamples: int = 10000,
    seed: EvalgateSeed = 0,
    confidence: float = 0.95,
) -> EvalgateAgreement:
    """Unweighted agreement of a judge's preferences with the golden ones, by case."""
    human = [row.preferred for row in golden]
    clusters = [row.case_id for row in golden]
    return evalgate_agreement(
        human,
        list(judge_preferences),
        EVALGATE_PREFERENCES,
        weights="none",
        clusters=clusters,
        resamples=resamples,
        seed=seed,
        confidence=confidence,
    )
