"""Contamination (SPEC section 12): the suite's canary string in answers and in training data.

An answer that contains the manifest's ``canary`` means the model has seen the suite: the
verdict is ``fail`` whatever the rules say (an ``invalid`` store stays invalid: its records
cannot be trusted to say anything), and the decision names the identities.
``evalgate_scan_file`` streams a file of any size in fixed chunks (the canary may straddle two)
and reports each line that holds the canary, for ``evalgate canary-scan``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypedDict

from pytest_evalgate.store.records import EvalgateIdentityFields, EvalgateRecord

EVALGATE_CONTAMINATED = "contaminated: the model has seen this suite"
_IDENTITIES_KEPT = 50


class EvalgateContaminationRecord(TypedDict):
    """The decision's ``contamination`` member."""

    reason: str
    canary_hits: int
    identities: list[EvalgateIdentityFields]  # the first 50, sorted


_CHUNK = 1 << 20


def evalgate_canary_identities(
    canary: str | None, records: Iterable[EvalgateRecord]
) -> list[EvalgateIdentityFields]:
    """The identities (as dicts, sorted) of the records whose output contains ``canary``."""
    if not canary:
        return []
    hits = [
        EvalgateIdentityFields(**r["identity"])
        for r in records
        if canary in (r.get("output") or "")
    ]
    return sorted(hits, key=lambda i: (i["candidate"], i["case_id"], i["repetition"]))


def evalgate_contaminated_verdict(verdict: str, identities: list[EvalgateIdentityFields]) -> str:
    """``fail`` when any identity leaked the canary, unless the store is ``invalid``."""
    return "fail" if identities and verdict != "invalid" else verdict


def evalgate_contamination_record(
    identities: list[EvalgateIdentityFields],
) -> EvalgateContaminationRecord:
    """The decision's ``contamination`` member: the reason, the count, the first identities."""
    return {
        "reason": EVALGATE_CONTAMINATED,
        "canary_hits": len(identities),
        "identities": identities[:_IDENTITIES_KEPT],
    }


def evalgate_contamination_note(identities: list[EvalgateIdentityFields]) -> str:
    """One terminal line naming the leaking identities (the first five)."""
    names = [f"{i['candidate']}::{i['case_id']}[r{i['repetition']}]" for i in identities[:5]]
    more = f" and {len(identities) - 5} more" if len(identities) > 5 else ""
    return f"CONTAMINATED: {EVALGATE_CONTAMINATED}; canary in {', '.join(names)}{more}"


@dataclass(frozen=True)
class EvalgateCanaryHit:
    """One line of a scanned file that holds the canary (1-based line number)."""

    path: str
    line: int


def evalgate_scan_file(path: str, canary: str, chunk: int = _CHUNK) -> Iterator[EvalgateCanaryHit]:
    """Each line of ``path`` holding ``canary`` once, in order; memory is O(chunk + canary).

    Bytes, not text: training data need not be valid UTF-8. A canary straddling two chunks is
    found because the last ``len(canary) - 1`` bytes of one chunk start the next search.
    """
    needle = canary.encode("utf-8")
    keep = len(needle) - 1
    tail, tail_line, reported = b"", 1, 0
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            window = tail + block
            for line in _lines_with(window, needle, tail_line):
                if line > reported:
                    reported = line
                    yield EvalgateCanaryHit(path, line)
            cut = max(len(window) - keep, 0)
            tail_line += window.count(b"\n", 0, cut)
            tail = window[cut:]


def _lines_with(window: bytes, needle: bytes, first_line: int) -> Iterator[int]:
    start, line, counted = window.find(needle), first_line, 0
    while start >= 0:
        line += window.count(b"\n", counted, start)
        counted = start
        yield line
        start = window.find(needle, start + 1)


def evalgate_scan_paths(paths: Iterable[str], canary: str) -> Iterator[EvalgateCanaryHit]:
    """``evalgate_scan_file`` over every path, in the order given (``OSError`` propagates)."""
    for path in paths:
        yield from evalgate_scan_file(path, canary)
