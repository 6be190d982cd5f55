"""Reading the store: every line verified, problems named, results keyed by identity.

Malformed JSON, missing fields, values of the wrong type or NaN (``recordcheck``), checksum
failures, records of another definition digest, dataset
revision or candidate key, and conflicting duplicates are reported as ``EvalgateStoreProblem``
(file, line, identity, reason); identical duplicates collapse and are counted. An identity whose
records are all errors has no result; a later success supersedes them. Reading changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from pytest_evalgate.errors import EvalgateStorePathError
from pytest_evalgate.store.backend import EvalgateStoreBackend
from pytest_evalgate.store.generations import evalgate_generation_prefix, evalgate_generations
from pytest_evalgate.store.recordcheck import evalgate_record_problem
from pytest_evalgate.store.records import (
    EVALGATE_RECORD_FIELDS,
    EvalgateIdentity,
    EvalgateRecord,
    evalgate_has_fields,
)
from pytest_evalgate.store.seal import evalgate_checksum_ok


@dataclass(frozen=True)
class EvalgateStoreProblem:
    """One thing wrong in the store, with where it is."""

    file: str
    line: int
    identity: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.identity}: {self.reason}"


@dataclass
class EvalgateStoreView:
    """What a store holds for one candidate under one definition, verified."""

    results: dict[EvalgateIdentity, EvalgateRecord] = field(default_factory=dict)
    errors: dict[EvalgateIdentity, EvalgateRecord] = field(default_factory=dict)
    duplicates: int = 0
    problems: list[EvalgateStoreProblem] = field(default_factory=list)
    segments: int = 0
    where: dict[EvalgateIdentity, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class EvalgateExpectation:
    """What every record in a candidate folder must agree with.

    ``check`` (optional) is called once per record that passed every other check and returns
    why the record does not belong (a store problem), or None: aggregation passes the suite
    check (``suitecheck``), so a record moved to another slice makes the run invalid.
    """

    definition_digest: str
    dataset_revision: str
    candidate_key: str
    check: Callable[[Mapping[str, Any]], str | None] | None = field(default=None, compare=False)


def evalgate_read_candidate(
    backend: EvalgateStoreBackend, prefix: str, expect: EvalgateExpectation
) -> EvalgateStoreView:
    """Read and verify the newest generation of a candidate folder (what aggregation sees).

    A folder without generations (the layout before generations existed) is read whole.
    """
    try:
        generations = evalgate_generations(backend, prefix)
    except EvalgateStorePathError as exc:
        view = EvalgateStoreView()
        evalgate_path_problem(view.problems, prefix, exc)
        return view
    folder = evalgate_generation_prefix(prefix, generations[-1]) if generations else prefix
    return evalgate_read_generation(backend, folder, expect)


def evalgate_read_generation(
    backend: EvalgateStoreBackend, prefix: str, expect: EvalgateExpectation
) -> EvalgateStoreView:
    """Read and verify every committed record under ``prefix`` (one generation folder)."""
    return EvalgateStoreFollower(backend, prefix, expect).evalgate_poll()


class EvalgateStoreFollower:
    """Reads one folder incrementally: each poll reads only segments it has not read before.

    Segments are immutable once visible, so a segment read once never needs reading again; a
    process uses this to learn what other writers committed since it last looked.
    """

    def __init__(
        self, backend: EvalgateStoreBackend, prefix: str, expect: EvalgateExpectation
    ) -> None:
        self.backend = backend
        self.prefix = prefix
        self.expect = expect
        self.view = EvalgateStoreView()
        self._seen: set[str] = set()

    def evalgate_poll(self) -> EvalgateStoreView:
        """Read the segments committed since the last poll; returns the cumulative view.

        A folder or segment whose path leads out of the store (a symlink) is a problem of the
        view, named with its path and target, and is not read."""
        try:
            listed = self.backend.evalgate_list(self.prefix)
        except EvalgateStorePathError as exc:
            evalgate_path_problem(self.view.problems, self.prefix, exc)
            return self.view
        for relpath in listed:
            if relpath in self._seen:
                continue
            self._seen.add(relpath)
            self.view.segments += 1
            try:
                data = self.backend.evalgate_read(relpath)
            except EvalgateStorePathError as exc:
                evalgate_path_problem(self.view.problems, relpath, exc)
                continue
            except OSError as exc:  # permissions, a vanished file: the run cannot be whole
                reason = f"unreadable segment: {exc.strerror or exc}"
                self.view.problems.append(EvalgateStoreProblem(relpath, 0, "<segment>", reason))
                continue
            for number, line in _lines(data):
                _take(self.view, relpath, number, line, self.expect)
        return self.view


def evalgate_path_problem(
    problems: list[EvalgateStoreProblem], relpath: str, exc: EvalgateStorePathError
) -> None:
    """Record a refused store path (a symlink out of the store) as a problem of a view."""
    problems.append(EvalgateStoreProblem(relpath, 0, "<not read>", exc.reason))


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    yield from evalgate_segment_lines(data)


def evalgate_segment_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of one segment's bytes, with their 1-based line numbers."""
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            yield number, line


def _take(
    view: EvalgateStoreView, relpath: str, number: int, line: bytes, expect: EvalgateExpectation
) -> None:
    record, reason = evalgate_verify_line(line, expect)
    if record is None:
        view.problems.append(
            EvalgateStoreProblem(relpath, number, evalgate_identity_text(line), reason)
        )
        return
    key = EvalgateIdentity.evalgate_from(record["identity"])
    if record["error"] is not None:
        view.errors.setdefault(key, record)
        return
    _merge_result(view, relpath, number, key, record)


def _merge_result(
    view: EvalgateStoreView,
    relpath: str,
    number: int,
    key: EvalgateIdentity,
    record: EvalgateRecord,
) -> None:
    existing = view.results.get(key)
    if existing is None:
        view.results[key] = record
        view.where[key] = f"{relpath}:{number}"
        view.errors.pop(key, None)
    elif evalgate_content(existing) == evalgate_content(record):
        view.duplicates += 1
    else:
        reason = evalgate_conflict_reason(view.where[key])
        view.problems.append(EvalgateStoreProblem(relpath, number, key.evalgate_label(), reason))


def evalgate_conflict_reason(first: str) -> str:
    """The problem of a result that conflicts with the one at ``first`` (``file:line``)."""
    return "conflicting duplicate: same identity, different output or score than " + first


def evalgate_content(record: EvalgateRecord) -> tuple[Any, ...]:
    """What two results of one identity must agree on to be identical duplicates."""
    return (record["output"], record["score"], record["passed"], record["finish_reason"])


def evalgate_verify_line(
    line: bytes, expect: EvalgateExpectation
) -> tuple[EvalgateRecord | None, str]:
    """The record of one stored line, verified (JSON, schema fields, checksum, definition
    digest, candidate key, dataset revision), or (None, the reason it is a problem)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None, "malformed line (not JSON): a truncated or corrupted record"
    if not isinstance(record, dict) or not evalgate_has_fields(record, EVALGATE_RECORD_FIELDS):
        return None, "malformed record: fields differ from the record schema"
    problem = evalgate_record_problem(record)  # before the checksum: it may re-canonicalise
    if problem is not None:
        return None, problem
    if not evalgate_checksum_ok(line, record):
        return None, "checksum mismatch: the record was altered or corrupted"
    return _check_expectation(record, expect)


def _check_expectation(
    record: Mapping[str, object], expect: EvalgateExpectation
) -> tuple[EvalgateRecord | None, str]:
    if record["definition_digest"] != expect.definition_digest:
        return None, f"foreign definition digest {str(record['definition_digest'])[:16]}"
    if record["candidate_key"] != expect.candidate_key:
        return None, f"foreign candidate key {record['candidate_key']}"
    identity = record["identity"]
    if (
        not isinstance(identity, dict)
        or identity.get("dataset_revision") != expect.dataset_revision
    ):
        return None, "foreign dataset revision"
    # Its fields are the schema's, each of the right type (recordcheck), and its checksum holds.
    problem = None if expect.check is None else expect.check(record)
    if problem is not None:
        return None, problem
    return cast(EvalgateRecord, record), ""


def evalgate_identity_text(line: bytes) -> str:
    """How a problem names the identity of a line that failed verification."""
    try:
        identity = json.loads(line)["identity"]
        return EvalgateIdentity.evalgate_from(identity).evalgate_label()
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "<unreadable identity>"
