"""Aggregation: accept a result set only when it is whole, then combine by denominators.

Expected identities are the selected cases x selected candidates x repetitions. Each must be in
the store exactly once: identical duplicates collapse (counted), while conflicting duplicates,
foreign digests or revisions, and malformed or checksum-failing rows make the set **invalid**
(listed by file and identity). Missing or errored identities make it **incomplete** (counted,
errors by category). A selection smaller than the suite makes the verdict **partial**.

Rates combine by denominators (9/10 and 10/20 give 19/30), per candidate and per category.
The paired gate input holds, per case with complete results for both sides, the mean score over
repetitions; everything the gate computes starts from it.

Both paths to the same aggregate live here (the column path, with its arithmetic in
``aggregate.table``, and the record path that judged and code suites need), so that the golden
test can hold them to one result; the paired gate input, their common output, is built in
``aggregate.paired``.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_evalgate.aggregate import paired
from pytest_evalgate.aggregate.code import EvalgateSandboxSummary, evalgate_sandbox_summary
from pytest_evalgate.aggregate.contamination import evalgate_canary_identities
from pytest_evalgate.aggregate.dialogue import EvalgateDialogueSummary, evalgate_dialogue_summary
from pytest_evalgate.aggregate.judged import evalgate_judge_overlay
from pytest_evalgate.aggregate.paired import EvalgateFlip, EvalgateGateInput
from pytest_evalgate.aggregate.sources import SourceLedger
from pytest_evalgate.aggregate.suitecheck import evalgate_expectation
from pytest_evalgate.aggregate.table import (
    EvalgateTableCounts,
    evalgate_table_counts,
    evalgate_table_error_rates,
    evalgate_table_paired,
    evalgate_table_perf,
    evalgate_table_rows,
)
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateIdentityFields,
    EvalgateRecord,
    EvalgateStoreBackend,
    EvalgateStoreProblem,
    EvalgateStoreView,
    evalgate_candidate_prefix,
    evalgate_read_candidate,
)
from pytest_evalgate.store.table import (
    EVALGATE_NO_RECORD,
    EvalgateCandidateTable,
    evalgate_read_table,
)
from pytest_evalgate.store.verified import EvalgateVerifiedSegments


@dataclass(frozen=True)
class EvalgateSelection:
    """What was selected of a suite: candidates and case ids."""

    candidates: tuple[str, ...]
    case_ids: tuple[str, ...]

    def evalgate_is_full(self, manifest: EvalgateManifest) -> bool:
        """Whether this selection is the whole suite."""
        return set(self.candidates) == set(manifest.candidates) and len(set(self.case_ids)) == len(
            manifest.cases
        )


@dataclass(frozen=True)
class EvalgateRate:
    """A rate with its denominator: passed of scored."""

    passed: int
    scored: int

    @property
    def rate(self) -> float | None:
        """passed / scored, or None with nothing scored."""
        return self.passed / self.scored if self.scored else None

    def evalgate_add(self, other: EvalgateRate) -> EvalgateRate:
        """Combine by denominators."""
        return EvalgateRate(self.passed + other.passed, self.scored + other.scored)


_MISSING_KEPT = 50  # missing identities named in the aggregate (the count is always whole)


@dataclass
class EvalgateAggregate:
    """The verified content of a store for one selection, and its status."""

    status: str
    partial: bool
    expected: int
    completed: int
    missing: int
    errors: Counter[str]
    duplicates: int
    problems: list[EvalgateStoreProblem]
    rates: dict[str, dict[str, EvalgateRate]]
    flipped: list[EvalgateFlip] = field(default_factory=list)
    canary_hits: int = 0
    canary_identities: list[EvalgateIdentityFields] = field(default_factory=list)
    gate_input: EvalgateGateInput | None = None
    sandbox: EvalgateSandboxSummary | None = None  # scorer: code (aggregate_code.py)
    dialogue: EvalgateDialogueSummary | None = None  # conversations, tools (aggregate.dialogue)
    # candidate -> the harness files its imported records came from (aggregate.sources)
    sources: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    missing_ids: list[str] = field(default_factory=list)  # the first missing identities


def evalgate_column_path(manifest: EvalgateManifest) -> bool:
    """Whether aggregation streams ``manifest``'s store into columns: suites without a judge
    and without ``scorer: code`` (the judge overlay and the sandbox facts need whole records),
    and without conversations or tools (their per-slice counts read the records' ``dialogue``).
    The tests run the aggregation tests over both paths by replacing this function."""
    dialogue = manifest.fixture is not None or any(case.turns for case in manifest.cases)
    return manifest.judged is None and manifest.sandbox is None and not dialogue


def evalgate_aggregate(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    selection: EvalgateSelection,
    pair: tuple[str, str] | None,
    verified: EvalgateVerifiedSegments | None = None,
) -> EvalgateAggregate:
    """Read, verify and combine what the store holds for ``selection``.

    ``pair`` is (candidate name, baseline name) for the paired gate input, or None. Suites
    without a judge and without ``scorer: code`` stream the store into compact columns
    (``aggregate_table``); the others read records whole (the judge overlay and the sandbox
    facts need them). Both give the same aggregate. ``verified``: the segments this process
    committed and verified as it did (``store.table``); the column path replays them when
    their bytes are unchanged.
    """
    if evalgate_column_path(manifest):
        return _aggregate_columns(backend, manifest, selection, pair, verified)
    ledger = SourceLedger()
    views = {name: _read(backend, manifest, name, ledger) for name in selection.candidates}
    views = evalgate_judge_overlay(backend, manifest, views, pair)  # judged suites only
    expected = _expected(manifest, selection)
    results, errors, missing = _classify(expected, views)
    problems = [problem for view in views.values() for problem in view.problems]
    aggregate = EvalgateAggregate(
        status=_status(problems, errors, missing),
        partial=not selection.evalgate_is_full(manifest),
        expected=len(expected),
        completed=len(results),
        missing=missing,
        errors=errors,
        duplicates=sum(view.duplicates for view in views.values()),
        problems=problems,
        rates=_rates(results.values()),
        canary_hits=_canary_hits(manifest.canary, results.values()),
        canary_identities=evalgate_canary_identities(manifest.canary, results.values()),
        sources=ledger.summary(),
        missing_ids=_missing_ids(expected, views),
    )
    pass_at_k = manifest.evaluator.pass_at_k
    if manifest.sandbox is not None:
        aggregate.sandbox = evalgate_sandbox_summary(results.values(), errors, pass_at_k)
    if not evalgate_column_path(manifest) and manifest.judged is None:
        summary = evalgate_dialogue_summary(results.values())
        aggregate.dialogue = summary or None
    if pair is not None and all(name in selection.candidates for name in pair):
        aggregate.gate_input = paired.from_records(
            manifest, selection.case_ids, results, pair, expected
        )
        aggregate.flipped = paired.flipped(aggregate.gate_input)
    return aggregate


def _aggregate_columns(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    selection: EvalgateSelection,
    pair: tuple[str, str] | None,
    verified: EvalgateVerifiedSegments | None,
) -> EvalgateAggregate:
    rows = evalgate_table_rows([case.case_id for case in manifest.cases], selection.case_ids)
    ledger = SourceLedger()
    tables = {
        name: _table(backend, manifest, name, rows, verified, ledger)
        for name in dict.fromkeys(selection.candidates)
    }
    counts = evalgate_table_counts(
        tables, selection.candidates, selection.case_ids, manifest.dataset_revision
    )
    problems = [problem for table in tables.values() for problem in table.problems]
    aggregate = EvalgateAggregate(
        status=_status(problems, counts.errors, counts.missing),
        partial=not selection.evalgate_is_full(manifest),
        expected=counts.expected,
        completed=counts.completed,
        missing=counts.missing,
        errors=counts.errors,
        duplicates=sum(table.duplicates for table in tables.values()),
        problems=problems,
        rates=_column_rates(counts),
        canary_hits=len(counts.canary_identities),
        canary_identities=counts.canary_identities,
        sources=ledger.summary(),
        missing_ids=_table_missing(tables, selection, manifest),
    )
    if pair is not None and all(name in selection.candidates for name in pair):
        both = evalgate_table_paired(tables, selection.case_ids, pair)
        aggregate.gate_input = paired.from_columns(
            manifest,
            both.case_ids,
            (both.candidate_scores, both.baseline_scores, both.candidate_passed),
            evalgate_table_perf(tables, selection.case_ids, pair),
            evalgate_table_error_rates(tables, selection.candidates, selection.case_ids, pair),
        )
        aggregate.flipped = paired.flipped(aggregate.gate_input)
    return aggregate


def _table(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    name: str,
    rows: dict[str, int],
    verified: EvalgateVerifiedSegments | None,
    ledger: SourceLedger,
) -> EvalgateCandidateTable:
    key = manifest.candidates[name].key
    prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
    table = EvalgateCandidateTable(rows, manifest.repetitions, manifest.canary)
    return evalgate_read_table(
        backend, prefix, evalgate_expectation(manifest, name, ledger), table, verified
    )


def _missing_ids(
    expected: Sequence[EvalgateIdentity], views: Mapping[str, EvalgateStoreView]
) -> list[str]:
    """The first ``_MISSING_KEPT`` expected identities without any record, as labels."""
    missing = (
        key.evalgate_label()
        for key in expected
        if key not in views[key[2]].results and key not in views[key[2]].errors
    )
    return list(itertools.islice(missing, _MISSING_KEPT))


def _table_missing(
    tables: Mapping[str, EvalgateCandidateTable],
    selection: EvalgateSelection,
    manifest: EvalgateManifest,
) -> list[str]:
    """``_missing_ids`` of the column path: cells without any record, as labels."""
    labels: list[str] = []
    for name in dict.fromkeys(selection.candidates):
        table = tables[name]
        for case_id in dict.fromkeys(selection.case_ids):
            row = table.state[table.rows[case_id]]
            for repetition in np.flatnonzero(row == EVALGATE_NO_RECORD).tolist():
                key = EvalgateIdentity(manifest.dataset_revision, case_id, name, repetition)
                labels.append(key.evalgate_label())
                if len(labels) >= _MISSING_KEPT:
                    return labels
    return labels


def _column_rates(counts: EvalgateTableCounts) -> dict[str, dict[str, EvalgateRate]]:
    return {
        name: {slice_name: EvalgateRate(p, n) for slice_name, (p, n) in slices.items()}
        for name, slices in sorted(counts.rates.items())
    }


def _read(
    backend: EvalgateStoreBackend, manifest: EvalgateManifest, name: str, ledger: SourceLedger
) -> EvalgateStoreView:
    key = manifest.candidates[name].key
    prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
    expect = evalgate_expectation(manifest, name, ledger)
    return evalgate_read_candidate(backend, prefix, expect)


def _expected(manifest: EvalgateManifest, selection: EvalgateSelection) -> list[EvalgateIdentity]:
    revision = manifest.dataset_revision
    return [
        EvalgateIdentity(revision, case_id, name, repetition)
        for name in selection.candidates
        for case_id in selection.case_ids
        for repetition in range(manifest.repetitions)
    ]


def _classify(
    expected: Sequence[EvalgateIdentity], views: Mapping[str, EvalgateStoreView]
) -> tuple[dict[EvalgateIdentity, EvalgateRecord], Counter[str], int]:
    results: dict[EvalgateIdentity, EvalgateRecord] = {}
    errors: Counter[str] = Counter()
    missing = 0
    for key in expected:
        view = views[key[2]]
        if key in view.results:
            results[key] = view.results[key]
        elif key in view.errors:
            error = view.errors[key]["error"]
            assert error is not None  # the view keeps only records with an error there
            errors[error["category"]] += 1
        else:
            missing += 1
    return results, errors, missing


def _status(problems: Sequence[EvalgateStoreProblem], errors: Counter[str], missing: int) -> str:
    if problems:
        return "invalid"
    if missing or sum(errors.values()):
        return "incomplete"
    return "complete"


def _rates(records: Iterable[EvalgateRecord]) -> dict[str, dict[str, EvalgateRate]]:
    counts: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for record in records:
        name = record["identity"]["candidate"]
        for slice_name in ("all", record["category"]):
            cell = counts[name][slice_name]
            cell[0] += bool(record["passed"])
            cell[1] += 1
    return {
        name: {slice_name: EvalgateRate(p, n) for slice_name, (p, n) in sorted(slices.items())}
        for name, slices in sorted(counts.items())
    }


def _canary_hits(canary: str | None, records: Iterable[EvalgateRecord]) -> int:
    if not canary:
        return 0
    return sum(1 for record in records if canary in (record["output"] or ""))
