"""Checkpoints of one suite side by side: pass rate per slice and its exact interval (``trend``).

Contracts
---------
- ``evalgate_trend(backend, manifest, names)`` reads, for each named candidate of the manifest
  (a checkpoint), what the store holds under the manifest's definition, through aggregation:
  every identity of the suite verified exactly once, as for a gate. A checkpoint whose store is
  ``incomplete`` or ``invalid`` gets no rates, only its status and the reason: a rate over a
  part of the suite, or over records that failed verification, is never shown as the trend.
- Rates count cases, like ``min_rate``: a case passes when none of its repetitions failed, one
  trial per case. The interval is the two-sided exact (Clopper-Pearson) interval at
  ``confidence``, equal to ``scipy.stats.binomtest(k, n).proportion_ci(confidence, "exact")``.
- Slices are ``all`` then the suite's categories, sorted.
- ``evalgate_trend_lines`` is the table people read (one row per slice and checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pytest_evalgate import stats
from pytest_evalgate.aggregate.combine import (
    EvalgateAggregate,
    EvalgateSelection,
    evalgate_aggregate,
)
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.store import EvalgateStoreBackend

EVALGATE_TREND_ALL = "all"


@dataclass(frozen=True)
class EvalgateTrendCell:
    """One slice of one checkpoint: ``passed`` of ``cases``, the rate and its exact interval."""

    passed: int
    cases: int
    rate: float
    lo: float
    hi: float


@dataclass(frozen=True)
class EvalgateTrendPoint:
    """One checkpoint: its status (``complete``, ``incomplete``, ``invalid``), why it has no
    rates when it is not complete, and its cells by slice (empty then)."""

    candidate: str
    model: str
    status: str
    reason: str = ""
    cells: Mapping[str, EvalgateTrendCell] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalgateTrend:
    """The checkpoints of one suite, in the order asked for."""

    suite: str
    definition_digest: str
    confidence: float
    slices: tuple[str, ...]
    points: tuple[EvalgateTrendPoint, ...]

    @property
    def complete(self) -> bool:
        """Whether every checkpoint's store was complete and verified."""
        return all(point.status == "complete" for point in self.points)


def evalgate_trend(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    names: Sequence[str],
    confidence: float = 0.95,
) -> EvalgateTrend:
    """The trend of the candidates ``names`` (see the module contract).

    Raises ``EvalgateConfigError(manifest, "candidates", reason)`` for a name the manifest does
    not hold, or one given twice.
    """
    _check_names(manifest, names)
    slices = (EVALGATE_TREND_ALL, *manifest.categories)
    points = tuple(_point(backend, manifest, name, slices, confidence) for name in names)
    return EvalgateTrend(manifest.suite, manifest.definition_digest, confidence, slices, points)


def _check_names(manifest: EvalgateManifest, names: Sequence[str]) -> None:
    if not names:
        raise EvalgateConfigError(manifest.path, "candidates", "name at least one checkpoint")
    known = ", ".join(manifest.candidates)
    for position, name in enumerate(names):
        if name not in manifest.candidates:
            reason = f"no candidate {name!r} in the manifest (candidates: {known})"
            raise EvalgateConfigError(manifest.path, "candidates", reason)
        if name in names[:position]:
            raise EvalgateConfigError(manifest.path, "candidates", f"{name!r} is named twice")


def _point(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    name: str,
    slices: Sequence[str],
    confidence: float,
) -> EvalgateTrendPoint:
    selection = EvalgateSelection((name,), tuple(case.case_id for case in manifest.cases))
    aggregate = evalgate_aggregate(backend, manifest, selection, (name, name))
    model = manifest.candidates[name].model
    data = aggregate.gate_input
    if aggregate.status != "complete" or data is None:
        return EvalgateTrendPoint(name, model, aggregate.status, _why(aggregate))
    categories = np.asarray(data.categories).astype(str)
    passes = np.asarray(data.candidate_trials) - np.asarray(data.candidate_fail_counts)
    cells = {}
    for slice_name in slices:
        mask = np.ones(categories.size, bool) if slice_name == "all" else categories == slice_name
        cells[slice_name] = _cell(int(passes[mask].sum()), int(mask.sum()), confidence)
    return EvalgateTrendPoint(name, model, "complete", cells=cells)


def _cell(passed: int, cases: int, confidence: float) -> EvalgateTrendCell:
    one_sided = (1.0 + confidence) / 2.0
    lo = stats.evalgate_clopper_pearson_lower(passed, cases, one_sided)
    hi = stats.evalgate_clopper_pearson_upper(passed, cases, one_sided)
    return EvalgateTrendCell(passed, cases, passed / cases if cases else float("nan"), lo, hi)


def _why(aggregate: EvalgateAggregate) -> str:
    if aggregate.status == "invalid":
        first = aggregate.problems[0] if aggregate.problems else "see the store"
        return (
            f"the store failed verification ({len(aggregate.problems)} problem(s), first: {first})"
        )
    errored = sum(aggregate.errors.values())
    return (
        f"only {aggregate.completed} of {aggregate.expected} identities have a result "
        f"({aggregate.missing} missing, {errored} errored)"
    )


def _percent(value: float) -> str:
    return f"{100.0 * value:.1f} %"


def evalgate_trend_lines(trend: EvalgateTrend) -> list[str]:
    """The table: a header, then per slice one row per checkpoint (passed/cases, rate, exact
    interval); a checkpoint without rates shows its status in each row and its reason below."""
    level = f"{100.0 * trend.confidence:g} %"
    width = max([10, *(len(point.candidate) for point in trend.points)])
    lines = [
        f"trend of {trend.suite} (definition {trend.definition_digest[:16]}): pass rate per "
        f"slice, one trial per case, exact {level} interval",
        f"{'slice':<12} {'checkpoint':<{width}} {'passed/cases':>13} {'rate':>8}  {level} interval",
    ]
    for slice_name in trend.slices:
        for position, point in enumerate(trend.points):
            label = slice_name if position == 0 else ""
            lines.append(f"{label:<12} {point.candidate:<{width}} {_row(point, slice_name)}")
    for point in trend.points:
        if point.status != "complete":
            lines.append(f"{point.candidate}: {point.status}, not shown: {point.reason}")
    return lines


def _row(point: EvalgateTrendPoint, slice_name: str) -> str:
    cell = point.cells.get(slice_name)
    if cell is None:
        return f"{point.status:>13}"
    counts = f"{cell.passed}/{cell.cases}"
    return f"{counts:>13} {_percent(cell.rate):>8}  [{_percent(cell.lo)}, {_percent(cell.hi)}]"
