"""Verified lines of committed segments, kept compact (what ``store.table`` reads into columns).

``evalgate_taken`` reduces one verified record to what the column table keeps of it (its
identity, error category, a 128-bit content fingerprint, score, passed, category, canary flag,
perf samples). ``EvalgateVerifiedSegments`` holds, per segment this process committed, the sha256
of its bytes and each line's verified outcome, computed by the very checks of the reader on the
very bytes written, right after the commit (the segment writer's ``on_commit``);
``table.evalgate_read_table`` replays a segment from it when its bytes still hash the same.
No numpy here: the pytest process imports this module before its first request.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from pytest_evalgate.store.reader import (
    EvalgateExpectation,
    evalgate_content,
    evalgate_identity_text,
    evalgate_segment_lines,
    evalgate_verify_line,
)
from pytest_evalgate.store.records import EvalgateIdentity, EvalgateRecord

EvalgateRecordCheck = Callable[[EvalgateRecord], str]
"""A per-record check against the suite: ``""`` to accept a verified record, else the reason
it is a problem (reported with its file, line and identity, like a checksum failure)."""

EVALGATE_TABLE_PERF = {
    "ttft": ("timing", "ttft_s"),
    "tpot": ("timing", "tpot_s"),
    "itl": ("timing", "itl_p95_s"),
    "e2e": ("timing", "e2e_s"),
    "output_tokens": ("usage", "completion_tokens"),
    "chunk_counted": ("usage", "source"),
}
"""The perf samples a table keeps per result (NaN when the record has no number there).
``chunk_counted`` is 1 for a result whose token count was counted from stream chunks
(``usage.source == "chunks"``), else no sample: its ``n`` is how many were."""


def evalgate_perf_sample(value: object) -> float:
    """A record member as a perf sample: a number as it is, ``"chunks"`` (a usage source) as 1,
    anything else NaN (no sample; a hand-made store may leave a timing out)."""
    if isinstance(value, int | float):
        return float(value)
    return 1.0 if value == "chunks" else math.nan


class EvalgateTaken(NamedTuple):
    """What the table keeps of one verified record (``evalgate_taken``)."""

    key: EvalgateIdentity
    error: str | None  # the error's category; None for a result
    mark: bytes  # the content fingerprint (results only)
    score: float
    passed: bool
    category: str
    leaked: bool
    perf: tuple[float, ...]  # in EVALGATE_TABLE_PERF order


class EvalgateLineOutcome(NamedTuple):
    """One line of a segment, verified: its number, and what it gave (``taken``) or why it is a
    problem (``identity`` as problems name it, ``reason``)."""

    number: int
    taken: EvalgateTaken | None
    identity: str
    reason: str


@dataclass(frozen=True)
class EvalgateVerifiedSegment:
    """A committed segment, verified once: the digest of its bytes and each line's outcome."""

    digest: bytes
    expect: tuple[str, str, str]  # (definition digest, dataset revision, candidate key)
    canary: str | None
    lines: tuple[EvalgateLineOutcome, ...]


class EvalgateVerifiedSegments:
    """The segments this process committed, verified as they were committed (thread-safe:
    the committer thread adds, the gate reads)."""

    def __init__(self) -> None:
        self._segments: dict[str, EvalgateVerifiedSegment] = {}
        self._watched: list[tuple[str, EvalgateExpectation, str | None]] = []
        self._lock = threading.Lock()

    def evalgate_watch(self, prefix: str, expect: EvalgateExpectation, canary: str | None) -> None:
        """Verify what is committed under the folder ``prefix`` with ``expect`` and ``canary``
        (the expectation and canary the gate will read that candidate folder with)."""
        self._watched.append((prefix.rstrip("/") + "/", expect, canary))

    def evalgate_on_commit(self, relpath: str, data: bytes) -> None:
        """A segment writer's ``on_commit``: verify a committed segment under a watched folder."""
        for prefix, expect, canary in self._watched:
            if relpath.startswith(prefix):
                self.evalgate_add(relpath, data, expect, canary)
                return

    def evalgate_add(
        self, relpath: str, data: bytes, expect: EvalgateExpectation, canary: str | None
    ) -> None:
        """Verify ``data`` (committed at ``relpath``) line by line and keep the outcome."""
        lines = tuple(evalgate_verified_lines(data, expect, canary))
        entry = EvalgateVerifiedSegment(
            hashlib.sha256(data).digest(), evalgate_expect_key(expect), canary, lines
        )
        with self._lock:
            self._segments[relpath] = entry

    def evalgate_get(self, relpath: str) -> EvalgateVerifiedSegment | None:
        """The outcome kept for ``relpath``, if this process committed it."""
        with self._lock:
            return self._segments.get(relpath)

    def __len__(self) -> int:
        with self._lock:
            return len(self._segments)


def evalgate_expect_key(expect: EvalgateExpectation) -> tuple[str, str, str]:
    return (expect.definition_digest, expect.dataset_revision, expect.candidate_key)


def evalgate_verified_lines(
    data: bytes,
    expect: EvalgateExpectation,
    canary: str | None,
    check: EvalgateRecordCheck | None = None,
) -> Iterator[EvalgateLineOutcome]:
    """Each line of a segment, verified (the stream's checks, in its order)."""
    for number, line in evalgate_segment_lines(data):
        record, reason = evalgate_verify_line(line, expect)
        if record is not None and check is not None:
            reason = check(record)
            record = None if reason else record
        if record is None:
            yield EvalgateLineOutcome(number, None, evalgate_identity_text(line), reason)
        else:
            yield EvalgateLineOutcome(number, evalgate_taken(record, canary), "", "")


def evalgate_taken(record: EvalgateRecord, canary: str | None) -> EvalgateTaken:
    """What the table keeps of one verified record (its fingerprint only for a result)."""
    key = EvalgateIdentity.evalgate_from(record["identity"])
    error = record["error"]
    if error is not None:
        return EvalgateTaken(key, error["category"], b"", math.nan, False, "", False, ())
    score = record["score"]
    perf = []
    for group, member in EVALGATE_TABLE_PERF.values():
        value = (record.get(group) or {}).get(member)  # type: ignore[attr-defined]
        perf.append(evalgate_perf_sample(value))
    return EvalgateTaken(
        key,
        None,
        _fingerprint(record),
        score if isinstance(score, int | float) else math.nan,
        bool(record["passed"]),
        record["category"],
        canary is not None and canary != "" and canary in (record["output"] or ""),
        tuple(perf),
    )


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
