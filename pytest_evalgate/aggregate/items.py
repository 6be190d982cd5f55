"""What each item shows under ``--evalgate-aggregate``: its stored outcome.

Aggregate mode sends no requests, so an item's record can only come from the store. It reads
what aggregation reads, verified the same way (the newest generation of each candidate folder,
every record checked by type and against the suite, judged answers graded by their judgments),
so an item passes, fails or errors as its committed record says, and the item counts agree with
the summary. An identity with a result gets it; one whose records are all errors gets its latest
error; an identity with neither (nothing committed, or only records the reader refused) gets
no entry, and its item reports it as missing.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_evalgate.aggregate.judged import evalgate_judge_overlay
from pytest_evalgate.aggregate.suitecheck import evalgate_suite_check
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateIdentity,
    EvalgateRecord,
    EvalgateStoreBackend,
    EvalgateStoreView,
    evalgate_candidate_prefix,
    evalgate_read_candidate,
)


def evalgate_stored_outcomes(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    names: Iterable[str],
    pair: tuple[str, str] | None,
) -> dict[EvalgateIdentity, EvalgateRecord]:
    """Identity -> the record its item reports, for candidates ``names`` (see the module)."""
    views = {name: _view(backend, manifest, name) for name in names}
    views = evalgate_judge_overlay(backend, manifest, views, pair)  # judged suites only
    outcomes: dict[EvalgateIdentity, EvalgateRecord] = {}
    for view in views.values():
        outcomes.update(view.errors)
        outcomes.update(view.results)  # a result supersedes an error of the same identity
    return outcomes


def _view(
    backend: EvalgateStoreBackend, manifest: EvalgateManifest, name: str
) -> EvalgateStoreView:
    key = manifest.candidates[name].key
    prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
    check = evalgate_suite_check(manifest, name)
    expect = EvalgateExpectation(manifest.definition_digest, manifest.dataset_revision, key, check)
    return evalgate_read_candidate(backend, prefix, expect)
