"""The paired gate input: the cases with a complete result on both sides, as columns.

Built from whole records (``from_records``, the record path) or from the column path's arrays
(``from_columns``); both give the same ``EvalgateGateInput`` (see docs/architecture.md), the
gate's one input. ``flipped`` lists the cases whose pass flipped between the two sides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from pytest_evalgate.aggregate.code import evalgate_case_scores
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.store import EvalgateIdentity, EvalgateRecord
from pytest_evalgate.store.verified import EVALGATE_TABLE_PERF, evalgate_perf_sample


@dataclass(frozen=True)
class EvalgateGateInput:
    """Paired per-case data for the gate (see docs/architecture.md)."""

    case_ids: tuple[str, ...]
    categories: npt.NDArray[np.str_]
    clusters: npt.NDArray[np.str_]
    candidate_scores: npt.NDArray[np.float64]
    baseline_scores: npt.NDArray[np.float64]
    candidate_fail_counts: npt.NDArray[np.int64]
    candidate_trials: npt.NDArray[np.int64]
    repetitions: tuple[int, int] = (1, 1)
    perf: Mapping[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]] = field(
        default_factory=dict
    )
    error_rates: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    judge: Any = None  # judged suites: judged.EvalgateJudgeFacts (the judge rules' input)


class EvalgateFlip(TypedDict):
    """A case whose pass flipped: its id, category and both sides' mean scores."""

    case_id: str
    category: str
    baseline: float
    candidate: float


def from_records(
    manifest: EvalgateManifest,
    case_ids: Sequence[str],
    results: Mapping[EvalgateIdentity, EvalgateRecord],
    pair: tuple[str, str],
    expected: Sequence[EvalgateIdentity],
) -> EvalgateGateInput:
    """The gate input of the selected cases whose every repetition has a result on both sides
    of ``pair``, sorted by case id, from whole records."""
    candidate, baseline = pair
    reps = range(manifest.repetitions)
    revision = manifest.dataset_revision
    paired = [
        case_id
        for case_id in sorted(case_ids)
        if all(
            EvalgateIdentity(revision, case_id, name, r) in results for name in pair for r in reps
        )
    ]

    def scores(name: str) -> list[list[float | None]]:
        return [
            [results[EvalgateIdentity(revision, c, name, r)]["score"] for r in reps] for c in paired
        ]

    cand, base = np.array(scores(candidate), dtype=float), np.array(scores(baseline), dtype=float)
    cand_passed = np.array(
        [
            [bool(results[EvalgateIdentity(revision, c, candidate, r)]["passed"]) for r in reps]
            for c in paired
        ],
        dtype=bool,  # an empty list would otherwise give float64, which ``~`` refuses
    )
    shape = (len(paired), manifest.repetitions)
    cand, base, cand_passed = cand.reshape(shape), base.reshape(shape), cand_passed.reshape(shape)
    perf = _perf(results.values(), pair)
    return from_columns(
        manifest, tuple(paired), (cand, base, cand_passed), perf,
        _error_rates(expected, results, pair),
    )  # fmt: skip


def from_columns(
    manifest: EvalgateManifest,
    paired: tuple[str, ...],
    columns: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]],
    perf: dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]],
    error_rates: dict[str, tuple[int, int]],
) -> EvalgateGateInput:
    """The gate input of the paired cases from their (cases, repetitions) columns: scores of
    both sides and the candidate's passed flags."""
    cand, base, cand_passed = columns
    index = manifest.evalgate_case_index()
    k = manifest.evaluator.pass_at_k
    return EvalgateGateInput(
        case_ids=paired,
        categories=np.array([index[c].category for c in paired], dtype=str),
        clusters=np.array([index[c].cluster for c in paired], dtype=str),
        # pass@k per case with evaluator.pass_at_k (scorer: code), else the mean.
        candidate_scores=evalgate_case_scores(cand, k) if paired else np.zeros(0),
        baseline_scores=evalgate_case_scores(base, k) if paired else np.zeros(0),
        # Floors count a case as failed when any repetition failed, one trial per case: at
        # temperature 0 repetitions are copies, and counting them as independent trials would
        # shrink the exact bound; and for safety slices one success of an attack is a failure.
        candidate_fail_counts=np.asarray((~cand_passed).any(axis=1), dtype=np.int64),
        candidate_trials=np.ones(len(paired), dtype=np.int64),
        repetitions=(manifest.repetitions, manifest.repetitions),
        perf=perf,
        error_rates=error_rates,
    )


def _perf(
    records: Iterable[EvalgateRecord], pair: tuple[str, str]
) -> dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]:
    samples: dict[str, dict[str, list[float]]] = {
        m: {n: [] for n in pair} for m in EVALGATE_TABLE_PERF
    }
    for record in records:
        name = record["identity"]["candidate"]
        if name not in pair:
            continue
        for metric, (group, key) in EVALGATE_TABLE_PERF.items():
            value = evalgate_perf_sample(_member(record, group, key))
            if not math.isnan(value):
                samples[metric][name].append(value)
    return {
        metric: (np.array(by[pair[0]], dtype=float), np.array(by[pair[1]], dtype=float))
        for metric, by in samples.items()
    }


def _member(record: Mapping[str, object], group: str, key: str) -> object:
    # Tolerant: a hand-made store may leave a timing out; it is then no sample, not an error.
    members = record.get(group)
    return members.get(key) if isinstance(members, Mapping) else None


def _error_rates(
    expected: Sequence[EvalgateIdentity],
    results: Mapping[EvalgateIdentity, EvalgateRecord],
    pair: tuple[str, str],
) -> dict[str, tuple[int, int]]:
    rates: dict[str, tuple[int, int]] = {}
    for role, name in zip(("candidate", "baseline"), pair, strict=True):
        mine = [key for key in expected if key[2] == name]
        rates[role] = (sum(1 for key in mine if key not in results), len(mine))
    return rates


def flipped(data: EvalgateGateInput) -> list[EvalgateFlip]:
    # One comparison over the arrays (a per-case loop of numpy scalars took ~10 ms at 10,000
    # cases, on the tail after the last answer); a NaN counts as below 0.5 either way.
    before = np.asarray(data.baseline_scores, dtype=np.float64)
    after = np.asarray(data.candidate_scores, dtype=np.float64)
    return [
        EvalgateFlip(
            case_id=data.case_ids[i],
            category=str(data.categories[i]),
            baseline=float(before[i]),
            candidate=float(after[i]),
        )
        for i in np.flatnonzero((before >= 0.5) != (after >= 0.5)).tolist()
    ]
