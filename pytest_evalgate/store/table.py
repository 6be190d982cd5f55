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

``_take`` is the one place a verified record enters the table: a per-record check against the
suite belongs there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pytest_evalgate.store.backend import EvalgateStoreBackend
from pytest_evalgate.store.generations import evalgate_generation_prefix, evalgate_generations
from pytest_evalgate.store.reader import (
    EvalgateExpectation,
    EvalgateStoreProblem,
    evalgate_conflict_reason,
    evalgate_content,
    evalgate_identity_text,
    evalgate_segment_lines,
    evalgate_verify_line,
)
from pytest_evalgate.store.records import EvalgateIdentity, EvalgateRecord

EVALGATE_NO_RECORD, EVALGATE_ERROR_ONLY, EVALGATE_RESULT = 0, 1, 2

EVALGATE_TABLE_PERF = {
    "ttft": ("timing", "ttft_s"),
    "tpot": ("timing", "tpot_s"),
    "itl": ("timing", "itl_p95_s"),
    "e2e": ("timing", "e2e_s"),
    "output_tokens": ("usage", "completion_tokens"),
}
"""The perf samples a table keeps per result (NaN when the record has no number there)."""


@dataclass
class EvalgateCandidateTable:
    """What a candidate folder holds, verified, as columns of shape (rows, repetitions)."""

    rows: Mapping[str, int]
    repetitions: int
    canary: str | None = None
    state: npt.NDArray[np.int8] = field(init=False)
    score: npt.NDArray[np.float64] = field(init=False)
    passed: npt.NDArray[np.bool_] = field(init=False)
    category: npt.NDArray[np.int32] = field(init=False)
    error: npt.NDArray[np.int32] = field(init=False)
    leaked: npt.NDArray[np.bool_] = field(init=False)
    perf: dict[str, npt.NDArray[np.float64]] = field(init=False)
    names: list[str] = field(default_factory=list)  # category and error names by code
    duplicates: int = 0
    problems: list[EvalgateStoreProblem] = field(default_factory=list)
    segments: int = 0
    _codes: dict[str, int] = field(default_factory=dict, repr=False)
    _print: npt.NDArray[np.uint64] = field(init=False, repr=False)
    _where: npt.NDArray[np.int64] = field(init=False, repr=False)
    _files: list[str] = field(default_factory=list, repr=False)
    _outside: dict[EvalgateIdentity, tuple[bytes, str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        shape = (max(self.rows.values(), default=-1) + 1, self.repetitions)
        self.state = np.zeros(shape, dtype=np.int8)
        self.score = np.full(shape, np.nan)
        self.passed = np.zeros(shape, dtype=bool)
        self.category = np.zeros(shape, dtype=np.int32)
        self.error = np.zeros(shape, dtype=np.int32)
        self.leaked = np.zeros(shape, dtype=bool)
        self.perf = {metric: np.full(shape, np.nan) for metric in EVALGATE_TABLE_PERF}
        self._print = np.zeros((*shape, 2), dtype=np.uint64)
        self._where = np.zeros((*shape, 2), dtype=np.int64)

    def evalgate_name(self, code: int) -> str:
        """The category (or error category) behind a code."""
        return self.names[code]

    def _code(self, name: str) -> int:
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def _place(self, row: int, rep: int) -> str:
        file, line = self._where[row, rep]
        return f"{self._files[file]}:{line}"


def evalgate_read_table(
    backend: EvalgateStoreBackend,
    prefix: str,
    expect: EvalgateExpectation,
    table: EvalgateCandidateTable,
) -> EvalgateCandidateTable:
    """Stream the newest generation of the candidate folder ``prefix`` into ``table``
    (a folder without generations is read whole, as ``reader.evalgate_read_candidate``)."""
    generations = evalgate_generations(backend, prefix)
    folder = evalgate_generation_prefix(prefix, generations[-1]) if generations else prefix
    for relpath in backend.evalgate_list(folder):
        table.segments += 1
        file = len(table._files)
        table._files.append(relpath)
        for number, line in evalgate_segment_lines(backend.evalgate_read(relpath)):
            record, reason = evalgate_verify_line(line, expect)
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
    rep = key.repetition
    state = table.state[row, rep]
    if record["error"] is not None:
        if state == EVALGATE_NO_RECORD:  # the first error counts, until a result supersedes it
            table.state[row, rep] = EVALGATE_ERROR_ONLY
            table.error[row, rep] = table._code(record["error"]["category"])
        return
    mark = _fingerprint(record)
    if state == EVALGATE_RESULT:
        if (table._print[row, rep] == mark).all():
            table.duplicates += 1
        else:
            reason = evalgate_conflict_reason(table._place(row, rep))
            table.problems.append(
                EvalgateStoreProblem(table._files[file], number, key.evalgate_label(), reason)
            )
        return
    table.state[row, rep] = EVALGATE_RESULT
    table._print[row, rep] = mark
    table._where[row, rep] = (file, number)
    table.score[row, rep] = _number(record["score"])
    table.passed[row, rep] = bool(record["passed"])
    table.category[row, rep] = table._code(record["category"])
    if table.canary:
        table.leaked[row, rep] = table.canary in (record["output"] or "")
    for metric, (group, member) in EVALGATE_TABLE_PERF.items():
        table.perf[metric][row, rep] = _number(_member(record, group, member))


def _outside(
    table: EvalgateCandidateTable, key: EvalgateIdentity, record: EvalgateRecord, place: str
) -> None:
    mark = _fingerprint_bytes(record)
    first = table._outside.get(key)
    if first is None:
        table._outside[key] = (mark, place)
    elif first[0] == mark:
        table.duplicates += 1
    else:
        file, number = place.rsplit(":", 1)
        reason = evalgate_conflict_reason(first[1])
        table.problems.append(EvalgateStoreProblem(file, int(number), key.evalgate_label(), reason))


def _fingerprint_bytes(record: EvalgateRecord) -> bytes:
    # 128 bits of the compared content: two results differing there collide with probability
    # 2**-128, so "identical duplicate" stays a proof, not a guess. Numbers compare as numbers
    # (1 and 1.0 are equal, as in reader's tuple comparison).
    output, score, passed, finish = evalgate_content(record)
    if isinstance(score, int | float) and not isinstance(score, bool):
        score = float(score)
    text = json.dumps([output, score, passed, finish], ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _fingerprint(record: EvalgateRecord) -> npt.NDArray[np.uint64]:
    return np.frombuffer(_fingerprint_bytes(record), dtype=np.uint64)


def _member(record: Mapping[str, Any], group: str, key: str) -> object:
    # Tolerant: a hand-made store may leave a timing out; it is then no sample, not an error.
    return (record.get(group) or {}).get(key)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else float("nan")
