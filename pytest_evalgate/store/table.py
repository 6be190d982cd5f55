"""Streaming verified reading into compact per-identity columns (aggregation at scale).

``evalgate_read_table`` reads one candidate folder line by line with the very checks of
``reader`` (JSON, schema fields, checksum, definition digest, candidate key, dataset revision;
the same ``EvalgateStoreProblem`` for each failure, in the same order) and the same
exactly-once rules (an identical duplicate is counted, a conflicting one is a problem naming
both places, a later success supersedes errors, the first error of an identity without a
result is the one counted). What it keeps per identity is not the record but a few numbers in
numpy columns indexed by (case row, repetition): state, score, passed, the record's category,
the first error's category, the perf samples, a canary flag, a 128-bit fingerprint of the
content the duplicate check compares, and where the first result is. A record is dropped as
soon as its line is taken, so memory is about 100 bytes per identity instead of a few KB.

Identities outside the table (a case id the index does not hold, a repetition out of range)
keep only their fingerprint and place in a dict, so their duplicates are counted and their
conflicts reported exactly as ``reader`` does; aggregation never counts them.

``EvalgateCandidateTable(check=...)`` is the one per-record point after verification: a check
against the suite (category, cluster, case id, repetition, score range) returns a reason and the
record becomes a problem instead of entering the columns (``_take``).

Segments this process committed need not be parsed twice. ``EvalgateVerifiedSegments`` holds,
per committed segment, the sha256 of its bytes and the outcome of verifying each of its lines
(the same ``evalgate_verify_line`` with the same expectation and check, run on those very bytes
right after the commit, while the requests are still out). ``evalgate_read_table(verified=...)``
still lists and reads every segment; when a segment's bytes hash to the digest it was verified
under (and with the same expectation and canary), its lines are replayed from that outcome in
their place in the listing, instead of being parsed again. Any other segment, or one whose bytes
changed, is verified line by line as always, so a tampered file is found as before.
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Iterator, Mapping

import numpy as np
import numpy.typing as npt

from pytest_evalgate.errors import EvalgateStorePathError
from pytest_evalgate.store.backend import EvalgateStoreBackend
from pytest_evalgate.store.generations import evalgate_generation_prefix, evalgate_generations
from pytest_evalgate.store.reader import (
    EvalgateExpectation,
    EvalgateStoreProblem,
    evalgate_conflict_reason,
    evalgate_path_problem,
)
from pytest_evalgate.store.records import EvalgateIdentity
from pytest_evalgate.store.verified import (
    EVALGATE_TABLE_PERF,
    EvalgateLineOutcome,
    EvalgateRecordCheck,
    EvalgateTaken,
    EvalgateVerifiedSegments,
    evalgate_expect_key,
    evalgate_verified_lines,
)

EVALGATE_NO_RECORD, EVALGATE_ERROR_ONLY, EVALGATE_RESULT = 0, 1, 2


class EvalgateCandidateTable:
    """What a candidate folder holds, verified, as columns of shape (rows, repetitions).

    While reading, the columns are flat ``array``/``bytearray`` buffers (an item write costs a
    few tens of nanoseconds, a numpy scalar write ten times more); the properties are numpy
    views of them, without a copy.
    """

    def __init__(
        self,
        rows: Mapping[str, int],
        repetitions: int,
        canary: str | None = None,
        check: EvalgateRecordCheck | None = None,
    ) -> None:
        self.rows = rows
        self.repetitions = repetitions
        self.canary = canary
        self.check = check
        self.shape = (max(rows.values(), default=-1) + 1, repetitions)
        size = self.shape[0] * repetitions
        self.names: list[str] = []  # category and error names by code
        self.duplicates = 0
        self.problems: list[EvalgateStoreProblem] = []
        self.segments = 0
        self._codes: dict[str, int] = {}
        self._state = bytearray(size)
        self._score = array("d", [math.nan]) * size
        self._passed = bytearray(size)
        self._category = array("i", [0]) * size
        self._error = array("i", [0]) * size
        self._leaked = bytearray(size)
        self._perf = {metric: array("d", [math.nan]) * size for metric in EVALGATE_TABLE_PERF}
        self._print = bytearray(16 * size)
        self._where = array("q", [0]) * (2 * size)
        self._files: list[str] = []
        self._outside: dict[EvalgateIdentity, tuple[bytes, str]] = {}

    @property
    def state(self) -> npt.NDArray[np.int8]:
        """``EVALGATE_NO_RECORD``, ``EVALGATE_ERROR_ONLY`` or ``EVALGATE_RESULT`` per identity."""
        return np.frombuffer(self._state, dtype=np.int8).reshape(self.shape)

    @property
    def score(self) -> npt.NDArray[np.float64]:
        """The result's score (NaN without a result, or for a None score)."""
        return np.frombuffer(self._score, dtype=np.float64).reshape(self.shape)

    @property
    def passed(self) -> npt.NDArray[np.bool_]:
        """``bool(passed)`` of the result."""
        return np.frombuffer(self._passed, dtype=np.bool_).reshape(self.shape)

    @property
    def category(self) -> npt.NDArray[np.int32]:
        """The code of the result's own ``category`` (``evalgate_name``)."""
        return np.frombuffer(self._category, dtype=np.int32).reshape(self.shape)

    @property
    def error(self) -> npt.NDArray[np.int32]:
        """The code of the first error's category (an identity without a result)."""
        return np.frombuffer(self._error, dtype=np.int32).reshape(self.shape)

    @property
    def leaked(self) -> npt.NDArray[np.bool_]:
        """Whether the result's output holds the canary."""
        return np.frombuffer(self._leaked, dtype=np.bool_).reshape(self.shape)

    @property
    def perf(self) -> dict[str, npt.NDArray[np.float64]]:
        """Per metric of ``EVALGATE_TABLE_PERF``, the result's sample (NaN: none)."""
        return {
            metric: np.frombuffer(values, dtype=np.float64).reshape(self.shape)
            for metric, values in self._perf.items()
        }

    def evalgate_name(self, code: int) -> str:
        """The category (or error category) behind a code."""
        return self.names[code]

    def _code(self, name: str) -> int:
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def _place(self, cell: int) -> str:
        return f"{self._files[self._where[2 * cell]]}:{self._where[2 * cell + 1]}"


def evalgate_read_table(
    backend: EvalgateStoreBackend,
    prefix: str,
    expect: EvalgateExpectation,
    table: EvalgateCandidateTable,
    verified: EvalgateVerifiedSegments | None = None,
) -> EvalgateCandidateTable:
    """Stream the newest generation of the candidate folder ``prefix`` into ``table``
    (a folder without generations is read whole, as ``reader.evalgate_read_candidate``);
    segments found in ``verified`` with the same bytes are replayed, not parsed again."""
    try:
        generations = evalgate_generations(backend, prefix)
        folder = evalgate_generation_prefix(prefix, generations[-1]) if generations else prefix
        listed = backend.evalgate_list(folder)
    except EvalgateStorePathError as exc:  # a symlink out of the store: named, not followed
        evalgate_path_problem(table.problems, prefix, exc)
        return table
    for relpath in listed:
        table.segments += 1
        file = len(table._files)
        table._files.append(relpath)
        try:
            data = backend.evalgate_read(relpath)
        except EvalgateStorePathError as exc:
            evalgate_path_problem(table.problems, relpath, exc)
            continue
        except OSError as exc:  # permissions, a vanished file: the run cannot be whole
            reason = f"unreadable segment: {exc.strerror or exc}"
            table.problems.append(EvalgateStoreProblem(relpath, 0, "<segment>", reason))
            continue
        for outcome in _segment_outcomes(data, relpath, expect, table, verified):
            if outcome.taken is None:
                problem = EvalgateStoreProblem(
                    relpath, outcome.number, outcome.identity, outcome.reason
                )
                table.problems.append(problem)
            else:
                _take_row(table, outcome.taken, file, outcome.number)
    return table


def _segment_outcomes(
    data: bytes,
    relpath: str,
    expect: EvalgateExpectation,
    table: EvalgateCandidateTable,
    verified: EvalgateVerifiedSegments | None,
) -> Iterator[EvalgateLineOutcome] | tuple[EvalgateLineOutcome, ...]:
    entry = None if verified is None or table.check is not None else verified.evalgate_get(relpath)
    if (
        entry is not None
        and entry.expect == evalgate_expect_key(expect)
        and entry.canary == table.canary
        and hashlib.sha256(data).digest() == entry.digest
    ):
        return entry.lines
    return evalgate_verified_lines(data, expect, table.canary, table.check)


def _take_row(table: EvalgateCandidateTable, taken: EvalgateTaken, file: int, number: int) -> None:
    """One verified record into the table (the single per-record point of the stream)."""
    key = taken.key
    row = table.rows.get(key.case_id)
    if row is None or not 0 <= key.repetition < table.repetitions:
        if taken.error is None:
            _outside(table, key, taken.mark, f"{table._files[file]}:{number}")
        return
    cell = row * table.repetitions + key.repetition
    state = table._state[cell]
    if taken.error is not None:
        if state == EVALGATE_NO_RECORD:  # the first error counts, until a result supersedes it
            table._state[cell] = EVALGATE_ERROR_ONLY
            table._error[cell] = table._code(taken.error)
        return
    mark = taken.mark
    if state == EVALGATE_RESULT:
        if table._print[16 * cell : 16 * cell + 16] == mark:
            table.duplicates += 1
        else:
            reason = evalgate_conflict_reason(table._place(cell))
            table.problems.append(
                EvalgateStoreProblem(table._files[file], number, key.evalgate_label(), reason)
            )
        return
    table._state[cell] = EVALGATE_RESULT
    table._print[16 * cell : 16 * cell + 16] = mark
    table._where[2 * cell] = file
    table._where[2 * cell + 1] = number
    table._score[cell] = taken.score
    table._passed[cell] = 1 if taken.passed else 0
    table._category[cell] = table._code(taken.category)
    table._leaked[cell] = 1 if taken.leaked else 0
    for metric, value in zip(EVALGATE_TABLE_PERF, taken.perf, strict=True):
        table._perf[metric][cell] = value


def _outside(table: EvalgateCandidateTable, key: EvalgateIdentity, mark: bytes, place: str) -> None:
    first = table._outside.get(key)
    if first is None:
        table._outside[key] = (mark, place)
    elif first[0] == mark:
        table.duplicates += 1
    else:
        file, number = place.rsplit(":", 1)
        reason = evalgate_conflict_reason(first[1])
        table.problems.append(EvalgateStoreProblem(file, int(number), key.evalgate_label(), reason))
