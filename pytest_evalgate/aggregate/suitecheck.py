"""Records checked against the suite they are aggregated for (SPEC section 6).

A record's checksum proves only that nobody changed it after sealing; a record edited and
resealed (fields changed, checksum recomputed) still verifies. Aggregation therefore also
checks every record against the manifest: its case id is one of the suite's, its category and
cluster are that case's (so a result cannot be moved to another slice), its repetition is in
``0..repetitions-1``, its candidate is the folder's, and its score is a finite number in 0..1.
Anything else is a store problem, so the run is ``invalid``, naming the file and the identity.

``evalgate_suite_check(manifest, candidate)`` builds the check once per candidate (the case
index is built once); the reader calls it once per record (``EvalgateExpectation.check``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from pytest_evalgate.aggregate.sources import SourceLedger
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.store.reader import EvalgateExpectation

EvalgateRecordCheck = Callable[[Mapping[str, Any]], "str | None"]
"""A record in, the reason it does not belong (or None)."""


def evalgate_suite_problem(
    record: Mapping[str, Any],
    cases: Mapping[str, tuple[str, str]],
    repetitions: int,
    candidate: str,
) -> str | None:
    """Why ``record`` (type-checked already) does not belong to the suite whose case id ->
    (category, cluster) is ``cases``, or None."""
    identity = record["identity"]
    case = cases.get(identity["case_id"])
    if case is None:
        return f"case id {identity['case_id']!r} is not in the suite's dataset"
    if identity["candidate"] != candidate:
        return f"candidate {identity['candidate']!r} in the folder of {candidate!r}"
    if not 0 <= identity["repetition"] < repetitions:
        return f"repetition {identity['repetition']} is outside 0..{repetitions - 1}"
    if record["category"] != case[0]:
        return f"category {record['category']!r} differs from the dataset's {case[0]!r}"
    if record["cluster"] != case[1]:
        return f"cluster {record['cluster']!r} differs from the dataset's {case[1]!r}"
    score = record["score"]
    if score is not None and not (math.isfinite(score) and 0.0 <= score <= 1.0):
        return f"score {score!r} is not in 0..1"
    return None


def evalgate_suite_check(manifest: EvalgateManifest, candidate: str) -> EvalgateRecordCheck:
    """The check of every record read for ``candidate`` of ``manifest`` (see the module)."""
    # An excluded case's records (stored before it was excluded) are the suite's still: valid,
    # outside the selection, so neither counted nor a problem.
    every = (*manifest.cases, *manifest.excluded_cases)
    cases = {case.case_id: (case.category, case.cluster) for case in every}
    repetitions = manifest.repetitions

    def check(record: Mapping[str, Any]) -> str | None:
        return evalgate_suite_problem(record, cases, repetitions, candidate)

    return check


def evalgate_expectation(
    manifest: EvalgateManifest, name: str, sources: SourceLedger | None = None
) -> EvalgateExpectation:
    """What every stored record of candidate ``name`` must match: the definition digest, the
    dataset revision, the candidate key, and this module's check against the suite; with
    ``sources``, imported records also one task definition per candidate (``sources``)."""
    key = manifest.candidates[name].key
    check = evalgate_suite_check(manifest, name)
    if sources is not None:
        check = sources.wrap(name, check)
    return EvalgateExpectation(manifest.definition_digest, manifest.dataset_revision, key, check)
