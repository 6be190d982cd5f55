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
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Callable, Mapping

import numpy as np
import numpy.typing as npt

from pytest_evalgate.errors import EvalgateStorePathError
from pytest_evalgate.store.backend import EvalgateStoreBackend
from pytest_evalgate.store.generations import evalgate_generation_prefix, evalgate_generations
from pytest_evalgate.store.reader import (
    EvalgateExpectation,
    EvalgateStoreProblem,
    evalgate_conflict_reason,
    evalgate_content,
    evalgate_identity_text,
    evalgate_path_problem,
    evalgate_segment_lines,
    evalgate_verify_line,
)
from pytest_evalgate.store.records import EvalgateIdentity, EvalgateRecord

EVALGATE_NO_RECORD, EVALGATE_ERROR_ONLY, EVALGATE_RESULT = 0, 1, 2

EvalgateRecordCheck = Callable[[EvalgateRecord], str]
"""A per-record check against the suite: ``""`` to accept a verified record, else the reason
it is a problem (reported with its file, line and identity, like a checksum failure)."""

EVALGATE_TABLE_PERF = {
    "ttft": ("timing", "ttft_s"),
    "tpot": ("timing", "tpot_s"),
    "itl": ("timing", "itl_p95_s"),
    "e2e": ("timing", "e2e_s"),
    "output_tokens": ("usage", "completion_tokens"),
}
"""The perf samples a table keeps per result (NaN when the record has no number there)."""


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
) -> EvalgateCandidateTable:
    """Stream the newest generation of the candidate folder ``prefix`` into ``table``
    (a folder without generations is read whole, as ``reader.evalgate_read_candidate``)."""
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
        for number, line in evalgate_segment_lines(data):
            record, reason = evalgate_verify_line(line, expect)
            if record is not None and table.check is not None:
                reason = table.check(record)
                record = None if reason else record
            if record is None:
                problem = EvalgateStoreProblem(
                    relpath, number, evalgate_identity_text(line), reason
                )
                table.problems.append(problem)
            else:
                _take(table, record, file, number)
    return table


def _take(table: EvalgateCandidateTable, record: EvalgateRecord, file: int, number: int) -> None:
    """One verified record into the table (the single per-record point of the stream)."""
    key = EvalgateIdentity.evalgate_from(record["identity"])
    row = table.rows.get(key.case_id)
    if row is None or not 0 <= key.repetition < table.repetitions:
        if record["error"] is None:
            _outside(table, key, record, f"{table._files[file]}:{number}")
        return
    cell = row * table.repetitions + key.repetition
    state = table._state[cell]
    error = record["error"]
    if error is not None:
        if state == EVALGATE_NO_RECORD:  # the first error counts, until a result supersedes it
            table._state[cell] = EVALGATE_ERROR_ONLY
            table._error[cell] = table._code(error["category"])
        return
    mark = _fingerprint(record)
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
    score = record["score"]
    table._score[cell] = score if isinstance(score, int | float) else math.nan
    table._passed[cell] = 1 if record["passed"] else 0
    table._category[cell] = table._code(record["category"])
    if table.canary:
        table._leaked[cell] = table.canary in (record["output"] or "")
    for metric, (group, member) in EVALGATE_TABLE_PERF.items():
        value = (record.get(group) or {}).get(member)  # type: ignore[attr-defined]
        # Tolerant: a hand-made store may leave a timing out; it is then no sample.
        table._perf[metric][cell] = value if isinstance(value, int | float) else math.nan


def _outside(
    table: EvalgateCandidateTable, key: EvalgateIdentity, record: EvalgateRecord, place: str
) -> None:
    mark = _fingerprint(record)
    first = table._outside.get(key)
    if first is None:
        table._outside[key] = (mark, place)
    elif first[0] == mark:
        table.duplicates += 1
    else:
        file, number = place.rsplit(":", 1)
        reason = evalgate_conflict_reason(first[1])
        table.problems.append(EvalgateStoreProblem(file, int(number), key.evalgate_label(), reason))


def _fingerprint(record: EvalgateRecord) -> bytes:
    # 128 bits of the compared content: two results differing there collide with probability
    # 2**-128, so "identical duplicate" stays a proof, not a guess. The repr of a tuple of
    # str/float/bool/None is unambiguous; numbers compare as numbers (1 and 1.0 are equal, as
    # in reader's tuple comparison).
    output, score, passed, finish = evalgate_content(record)
    if isinstance(score, int | float):
        score = float(score)
    text = repr((output, score, passed, finish)).encode("utf-8", "backslashreplace")
    return hashlib.blake2b(text, digest_size=16).digest()
