"""store/table.py: the column path's reading, one exact fact each.

The aggregation tests (``tests/aggregatekit.py``) prove the column path and the record path give
the same aggregate; these pin what only the table does: which generation it reads, how a refused
or unreadable segment becomes a problem without stopping the reading, records outside the rows,
and the exact counters.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from test_store_exact import EXPECT, PREFIX, errored, line, put, record

from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    evalgate_use_generation,
)
from pytest_evalgate.store import verified as verified_module
from pytest_evalgate.store.table import (
    EVALGATE_ERROR_ONLY,
    EVALGATE_NO_RECORD,
    EVALGATE_RESULT,
    EvalgateCandidateTable,
    evalgate_read_table,
)
from pytest_evalgate.store.verified import EvalgateVerifiedSegments

ROWS = {"a": 0, "b": 1, "c": 2}


def table(store: EvalgateLocalStore, rows: dict[str, int] = ROWS) -> EvalgateCandidateTable:
    return evalgate_read_table(store, PREFIX, EXPECT, EvalgateCandidateTable(rows, 2))


@pytest.fixture
def store(tmp_path: Path) -> EvalgateLocalStore:
    return EvalgateLocalStore(str(tmp_path / "store"))


def test_a_fresh_table_counts_nothing() -> None:
    fresh = EvalgateCandidateTable(ROWS, 2)
    assert (fresh.duplicates, fresh.segments, fresh.problems, fresh.names) == (0, 0, [], [])
    assert fresh.state.shape == (3, 2) and not fresh.state.any()


def test_only_the_newest_generation_is_read(store: EvalgateLocalStore) -> None:
    first = evalgate_use_generation(store, PREFIX)
    second = evalgate_use_generation(store, PREFIX, "run-2")
    put(store, "seg-old", line(record("a")) + line(record("b")), first)
    put(store, "seg-new", line(record("c", rep=1)), second)
    read = table(store)
    assert read.segments == 1 and read.problems == []
    assert read.state.tolist() == [
        [EVALGATE_NO_RECORD, EVALGATE_NO_RECORD],
        [EVALGATE_NO_RECORD, EVALGATE_NO_RECORD],
        [EVALGATE_NO_RECORD, EVALGATE_RESULT],
    ]


def test_a_segment_that_leads_out_of_the_store_is_a_problem_and_the_rest_is_read(
    store: EvalgateLocalStore, tmp_path: Path
) -> None:
    good = put(store, "seg-b", line(record("b")))
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_bytes(line(record("a")))
    link = Path(store.root) / PREFIX / "shard-0-of-1" / "seg-a.jsonl"
    os.symlink(outside, link)
    read = table(store)
    [problem] = read.problems
    assert problem.file == f"{PREFIX}/shard-0-of-1/seg-a.jsonl"
    assert (problem.line, problem.identity) == (0, "<not read>")
    assert "leaves the store" in problem.reason
    assert read.segments == 2 and good.endswith("seg-b.jsonl")
    assert read.state[:, 0].tolist() == [EVALGATE_NO_RECORD, EVALGATE_RESULT, EVALGATE_NO_RECORD]


class _Unreadable(EvalgateLocalStore):
    """A folder store whose first segment cannot be read (a permission error as root cannot be
    made with chmod)."""

    def evalgate_read(self, relpath: str) -> bytes:
        if relpath.endswith("seg-a.jsonl"):
            raise PermissionError(13, "Permission denied")
        return super().evalgate_read(relpath)


def test_an_unreadable_segment_is_a_problem_and_the_next_one_is_still_read(
    tmp_path: Path,
) -> None:
    store = _Unreadable(str(tmp_path / "store"))
    put(store, "seg-a", line(record("a")))
    put(store, "seg-b", line(record("b")) + line(record("c")))
    read = table(store)
    [problem] = read.problems
    assert (problem.file, problem.line, problem.identity) == (
        f"{PREFIX}/shard-0-of-1/seg-a.jsonl", 0, "<segment>",
    )  # fmt: skip
    assert problem.reason == "unreadable segment: Permission denied"
    assert read.segments == 2
    assert read.state[:, 0].tolist() == [EVALGATE_NO_RECORD, EVALGATE_RESULT, EVALGATE_RESULT]


def test_duplicates_of_a_later_cell_compare_that_cells_own_fingerprint(
    store: EvalgateLocalStore,
) -> None:
    put(store, "seg-1", line(record("a")) + line(record("c", rep=1)))
    put(store, "seg-2", line(record("c", rep=1)) + line(record("a", output="41")))
    read = table(store)
    assert read.duplicates == 1  # c[r1] again, identical
    [problem] = read.problems  # a[r0] again with another answer: a conflict
    assert (problem.file, problem.line) == (f"{PREFIX}/shard-0-of-1/seg-2.jsonl", 2)
    assert f"{PREFIX}/shard-0-of-1/seg-1.jsonl:1" in problem.reason


def test_records_outside_the_rows_count_duplicates_and_conflicts_apart(
    store: EvalgateLocalStore,
) -> None:
    put(store, "seg-1", line(record("z")) + line(record("a", rep=5)) + line(errored("y")))
    put(store, "seg-2", line(record("z")) + line(record("a", rep=5, output="41")))
    read = table(store)
    assert read.duplicates == 1  # z again, identical
    [problem] = read.problems  # a[r5] again with another answer
    assert (problem.file, problem.line) == (f"{PREFIX}/shard-0-of-1/seg-2.jsonl", 2)
    assert f"{PREFIX}/shard-0-of-1/seg-1.jsonl:2" in problem.reason
    assert not read.state.any()  # nothing outside the rows enters the columns


def test_the_first_error_stays_until_a_result_replaces_it(store: EvalgateLocalStore) -> None:
    put(store, "seg-1", line(errored("b", "timeout")) + line(errored("b", "server_error")))
    read = table(store)
    assert read.state[1, 0] == EVALGATE_ERROR_ONLY
    assert read.evalgate_name(int(read.error[1, 0])) == "timeout"
    put(store, "seg-2", line(record("b")))
    again = table(store)
    assert again.state[1, 0] == EVALGATE_RESULT and again.problems == []
    assert np.isclose(again.score[1, 0], 1.0) and bool(again.passed[1, 0])


# -- segments this process committed and verified (EvalgateVerifiedSegments) ---------------


def _columns(read: EvalgateCandidateTable) -> tuple[object, ...]:
    # repr: NaN (no score, no sample) compares equal to itself there
    arrays = (read.state, read.score, read.passed, read.category, read.error, read.leaked)
    perf = tuple(repr(values.tolist()) for _, values in sorted(read.perf.items()))
    problems = [(p.file, p.line, p.identity, p.reason) for p in read.problems]
    return (*(repr(a.tolist()) for a in arrays), perf, read.names, read.duplicates, problems)


def _committed(store: EvalgateLocalStore, verified: EvalgateVerifiedSegments) -> list[str]:
    """Two segments through a real writer whose commits feed ``verified``, and one written
    by another process (not verified here); returns the written paths."""
    verified.evalgate_watch(PREFIX, EXPECT, "CANARY-1")
    writer = EvalgateSegmentWriter(
        store, "shard-0-of-1", writer="me", on_commit=verified.evalgate_on_commit
    )
    for rec in (record("a"), errored("b"), record("c", rep=1, output="says CANARY-1")):
        writer.evalgate_add(PREFIX, rec)
    writer.evalgate_commit()
    for rec in (record("a"), record("b", rep=1, output="41"), record("z")):
        writer.evalgate_add(PREFIX, rec)
    writer.evalgate_add(PREFIX, record("c", definition_digest="f" * 64))  # foreign
    writer.evalgate_commit()
    other = put(store, "seg-other", line(record("a", output="40")) + line(record("c")))
    return [*sorted(store.evalgate_list(PREFIX)), other]


def _read(store: EvalgateLocalStore, verified: EvalgateVerifiedSegments | None) -> object:
    fresh = EvalgateCandidateTable(ROWS, 2, "CANARY-1")
    return evalgate_read_table(store, PREFIX, EXPECT, fresh, verified)


def test_verified_segments_are_replayed_to_exactly_what_a_fresh_read_gives(
    store: EvalgateLocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    verified = EvalgateVerifiedSegments()
    _committed(store, verified)
    assert len(verified) == 2  # the writer's own two segments, not the other process's
    plain = _read(store, None)
    parsed: list[bytes] = []
    real = verified_module.evalgate_verify_line

    def counting(data: bytes, expect: object) -> object:
        parsed.append(data)
        return real(data, expect)  # type: ignore[arg-type]

    monkeypatch.setattr(verified_module, "evalgate_verify_line", counting)
    replayed = _read(store, verified)
    assert isinstance(plain, EvalgateCandidateTable) and isinstance(
        replayed, EvalgateCandidateTable
    )
    assert _columns(replayed) == _columns(plain)
    assert len(parsed) == 2  # only the other process's segment was parsed again
    # what the replay reproduces is not trivial: a leak, an error, a conflict, a foreign line
    assert bool(plain.leaked[2, 1]) and plain.state[1, 0] == EVALGATE_ERROR_ONLY
    reasons = " | ".join(p.reason for p in plain.problems)
    assert "foreign definition digest" in reasons and "conflict" in reasons.lower()


def test_a_verified_segment_whose_bytes_changed_is_verified_again(
    store: EvalgateLocalStore,
) -> None:
    verified = EvalgateVerifiedSegments()
    first, *_ = _committed(store, verified)
    path = Path(store.root) / first
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes().replace(b'"output":"42"', b'"output":"43"', 1))
    replayed = _read(store, verified)
    assert isinstance(replayed, EvalgateCandidateTable)
    assert _columns(replayed) == _columns(_read(store, None))  # type: ignore[arg-type]
    assert any("checksum mismatch" in p.reason and p.file == first for p in replayed.problems)


def test_a_verified_segment_is_not_replayed_under_another_expectation_or_canary(
    store: EvalgateLocalStore,
) -> None:
    verified = EvalgateVerifiedSegments()
    _committed(store, verified)
    other = EvalgateExpectation(EXPECT.definition_digest, "another-revision", EXPECT.candidate_key)
    read = evalgate_read_table(store, PREFIX, other, EvalgateCandidateTable(ROWS, 2), verified)
    plain = evalgate_read_table(store, PREFIX, other, EvalgateCandidateTable(ROWS, 2))
    assert _columns(read) == _columns(plain) and read.state.sum() == 0
    no_canary = evalgate_read_table(
        store, PREFIX, EXPECT, EvalgateCandidateTable(ROWS, 2), verified
    )
    assert not no_canary.leaked.any()  # the replay kept CANARY-1's flags: not used here
