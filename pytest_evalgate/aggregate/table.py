"""Aggregation over compact columns (``store.table``): counts, rates and gate input, vectorised.

The same arithmetic as ``aggregate``'s record path (``_classify``, ``_rates``, ``_gate_input``,
``_perf``, ``_error_rates``), with the same values in the same order, computed from
per-identity columns instead of a dict of records: a store of 1,000,000 identities is gated in
about 100 bytes per identity. ``aggregate.evalgate_aggregate`` takes this path for every suite
without a judge and without ``scorer: code`` (those read records whole: the judge overlay and
the sandbox facts need them).

Expected identities are (candidate, case id, repetition) of the selection, in its order; a case
id listed twice counts twice, as in the record path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from pytest_evalgate.store.records import EvalgateIdentityFields
from pytest_evalgate.store.table import (
    EVALGATE_ERROR_ONLY,
    EVALGATE_NO_RECORD,
    EVALGATE_RESULT,
    EvalgateCandidateTable,
)
from pytest_evalgate.store.verified import EVALGATE_TABLE_PERF

Tables = Mapping[str, EvalgateCandidateTable]
Perf = dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]


@dataclass
class EvalgateTableCounts:
    """Exactly-once counts over the expected identities, and what the results say."""

    expected: int = 0
    completed: int = 0
    missing: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    rates: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    canary_identities: list[EvalgateIdentityFields] = field(default_factory=list)


@dataclass(frozen=True)
class EvalgatePairedColumns:
    """The paired cases (sorted case ids) and their (cases, repetitions) columns."""

    case_ids: tuple[str, ...]
    candidate_scores: npt.NDArray[np.float64]
    baseline_scores: npt.NDArray[np.float64]
    candidate_passed: npt.NDArray[np.bool_]


def evalgate_table_rows(case_ids: Sequence[str], selected: Sequence[str]) -> dict[str, int]:
    """Row of every case id: the suite's in order, then selected ids the suite lacks."""
    rows = {case_id: i for i, case_id in enumerate(case_ids)}
    for case_id in selected:
        rows.setdefault(case_id, len(rows))
    return rows


def evalgate_table_counts(
    tables: Tables, candidates: Sequence[str], case_ids: Sequence[str], revision: str
) -> EvalgateTableCounts:
    """Completed, missing, errors by category, rates by slice, the canary's identities."""
    out = EvalgateTableCounts()
    names = list(dict.fromkeys(candidates))
    leaks: list[EvalgateIdentityFields] = []
    for name in names:
        table = tables[name]
        rows = _rows(table, case_ids)
        unique_ids = list(dict.fromkeys(case_ids))
        unique = _rows(table, unique_ids)
        state = table.state[rows]
        out.expected += state.size
        out.missing += int((state == EVALGATE_NO_RECORD).sum())
        failed = table.error[rows][state == EVALGATE_ERROR_ONLY].tolist()
        for code, count in Counter(failed).items():
            out.errors[table.evalgate_name(code)] += count
        done = table.state[unique] == EVALGATE_RESULT
        out.completed += int(done.sum())
        rate = _slice_rates(table, unique, done)
        if rate:
            out.rates[name] = rate
        leaks += _leaks(table, name, unique_ids, unique, done, revision)
    out.canary_identities = sorted(
        leaks, key=lambda i: (i["candidate"], i["case_id"], i["repetition"])
    )
    return out


def _rows(table: EvalgateCandidateTable, case_ids: Sequence[str]) -> npt.NDArray[np.intp]:
    return np.fromiter((table.rows[c] for c in case_ids), dtype=np.intp, count=len(case_ids))


def _slice_rates(
    table: EvalgateCandidateTable, rows: npt.NDArray[np.intp], done: npt.NDArray[np.bool_]
) -> dict[str, tuple[int, int]]:
    passed = table.passed[rows][done]
    categories = table.category[rows][done]
    if not passed.size:
        return {}
    cells = {"all": (int(passed.sum()), int(passed.size))}
    width = len(table.names)
    scored = np.bincount(categories, minlength=width)
    right = np.bincount(categories, weights=passed, minlength=width)
    for code in np.flatnonzero(scored):
        cells[table.evalgate_name(int(code))] = (int(right[code]), int(scored[code]))
    return dict(sorted(cells.items()))


def _leaks(
    table: EvalgateCandidateTable,
    name: str,
    ids: Sequence[str],
    rows: npt.NDArray[np.intp],
    done: npt.NDArray[np.bool_],
    revision: str,
) -> list[EvalgateIdentityFields]:
    if not table.canary:
        return []
    hits = np.argwhere(table.leaked[rows] & done)
    return [
        EvalgateIdentityFields(
            candidate=name, case_id=ids[i], dataset_revision=revision, repetition=int(r)
        )
        for i, r in hits.tolist()
    ]


def evalgate_table_paired(
    tables: Tables, case_ids: Sequence[str], pair: tuple[str, str]
) -> EvalgatePairedColumns:
    """The cases (sorted) with every repetition a result on both sides, and their columns."""
    candidate, baseline = tables[pair[0]], tables[pair[1]]
    ordered = sorted(case_ids)
    rows = _rows(candidate, ordered)
    whole = (candidate.state[rows] == EVALGATE_RESULT).all(axis=1)
    whole &= (baseline.state[rows] == EVALGATE_RESULT).all(axis=1)
    kept = rows[whole]
    return EvalgatePairedColumns(
        case_ids=tuple(c for c, ok in zip(ordered, whole.tolist(), strict=True) if ok),
        candidate_scores=candidate.score[kept],
        baseline_scores=baseline.score[kept],
        candidate_passed=candidate.passed[kept],
    )


def evalgate_table_perf(tables: Tables, case_ids: Sequence[str], pair: tuple[str, str]) -> Perf:
    """Per perf metric, the (candidate, baseline) samples of the results, in expected order."""
    unique = list(dict.fromkeys(case_ids))
    samples: dict[str, dict[str, npt.NDArray[np.float64]]] = {m: {} for m in EVALGATE_TABLE_PERF}
    for name in dict.fromkeys(pair):
        table = tables[name]
        rows = _rows(table, unique)
        done = table.state[rows] == EVALGATE_RESULT
        for metric in EVALGATE_TABLE_PERF:
            values = table.perf[metric][rows]
            samples[metric][name] = values[done & ~np.isnan(values)].astype(float)
    return {metric: (by[pair[0]], by[pair[1]]) for metric, by in samples.items()}


def evalgate_table_error_rates(
    tables: Tables, candidates: Sequence[str], case_ids: Sequence[str], pair: tuple[str, str]
) -> dict[str, tuple[int, int]]:
    """Per role, (expected identities without a result, expected identities)."""
    rates: dict[str, tuple[int, int]] = {}
    for role, name in zip(("candidate", "baseline"), pair, strict=True):
        if name not in candidates:
            rates[role] = (0, 0)
            continue
        table = tables[name]
        state = table.state[_rows(table, case_ids)]
        rates[role] = (int((state != EVALGATE_RESULT).sum()), int(state.size))
    return rates
