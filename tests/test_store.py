"""The result store: atomic segments, verified reading, corruption reports, generations."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from suitekit import write_suite

from pytest_evalgate.aggregate.combine import EvalgateSelection, evalgate_aggregate
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateLocalStore,
    EvalgateS3Store,
    EvalgateSegmentWriter,
    EvalgateStoreBackend,
    EvalgateStoreFollower,
    evalgate_candidate_prefix,
    evalgate_generations,
    evalgate_read_candidate,
    evalgate_read_generation,
    evalgate_seal,
    evalgate_use_generation,
)

DIGEST = "d" * 64
REVISION = "rev-1"
KEY = "candidate-0123456789ab"
EXPECT = EvalgateExpectation(DIGEST, REVISION, KEY)
PREFIX = evalgate_candidate_prefix("suite", DIGEST, KEY)


def record(case_id: str, output: str | None = "42", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "identity": {
            "dataset_revision": REVISION,
            "case_id": case_id,
            "candidate": "candidate",
            "repetition": 0,
        },
        "definition_digest": DIGEST,
        "candidate_key": KEY,
        "category": "billing",
        "cluster": case_id,
        "output": output,
        "score": 1.0 if output == "42" else 0.0,
        "passed": output == "42",
        "attempts": 1,
        "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": 0.01, "tpot_s": None, "e2e_s": 0.02},
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        "finish_reason": "stop",
        "shard": 0,
        "writer": "w",
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:00:01+00:00",
    }
    body.update(changes)
    return evalgate_seal(body)


def errored(case_id: str) -> dict[str, Any]:
    error = {"category": "timeout", "status": None, "message": "read timed out"}
    return record(case_id, output=None, score=None, passed=None, error=error)


def segment(store: EvalgateStoreBackend, name: str, *records: dict[str, Any]) -> str:
    relpath = f"{PREFIX}/shard-0-of-1/{name}.jsonl"
    data = b"".join(evalgate_canonical_json(r) + b"\n" for r in records)
    store.evalgate_write_atomic(relpath, data)
    return relpath


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> EvalgateStoreBackend:
    """Every test below runs against the folder store and the S3 store (a real SeaweedFS)."""
    if request.param == "folder":
        return EvalgateLocalStore(str(tmp_path / "store"))
    seaweed = request.getfixturevalue("seaweed")
    return EvalgateS3Store(seaweed.new_store(), client=seaweed.client())


def overwrite(store: EvalgateStoreBackend, relpath: str, data: bytes) -> None:
    """Replace a published object behind the store's back (a corruption, a killed writer)."""
    if isinstance(store, EvalgateLocalStore):
        Path(store.root, relpath).write_bytes(data)
    else:
        assert isinstance(store, EvalgateS3Store)
        store.client.put_object(Bucket=store.bucket, Key=store._key(relpath), Body=data)


def read(store: EvalgateStoreBackend) -> Any:
    return evalgate_read_generation(store, PREFIX, EXPECT)


def only_problem(store: EvalgateStoreBackend) -> Any:
    problems = read(store).problems
    assert len(problems) == 1, problems
    return problems[0]


# -- committing -----------------------------------------------------------------------------


def test_writer_commits_one_atomic_segment_per_folder(store: EvalgateStoreBackend) -> None:
    writer = EvalgateSegmentWriter(store, "shard-0-of-1", writer="w1", max_records=3)
    writer.evalgate_add(PREFIX, record("a"))
    writer.evalgate_add(PREFIX, record("b"))
    writer.evalgate_maybe_commit()
    assert read(store).segments == 0  # below both thresholds: nothing visible yet
    writer.evalgate_add(PREFIX, record("c"))
    writer.evalgate_maybe_commit()
    view = read(store)
    assert (view.segments, len(view.results), writer.committed) == (1, 3, 3)
    assert store.evalgate_list(PREFIX) == [f"{PREFIX}/shard-0-of-1/seg-w1-000001.jsonl"]


def test_writer_commits_by_age(store: EvalgateStoreBackend) -> None:
    writer = EvalgateSegmentWriter(store, "shard-0-of-1", max_records=1000, max_age_s=0.0)
    writer.evalgate_add(PREFIX, record("a"))
    writer.evalgate_maybe_commit()
    assert set(read(store).results) == {(REVISION, "a", "candidate", 0)}


def test_committed_segment_is_never_replaced(store: EvalgateStoreBackend) -> None:
    relpath = segment(store, "seg-w-000001", record("a"))
    before = store.evalgate_read(relpath)
    with pytest.raises(FileExistsError):
        store.evalgate_write_atomic(relpath, b"other\n")
    assert store.evalgate_read(relpath) == before


def test_temp_files_of_a_killed_writer_are_not_read(store: EvalgateStoreBackend) -> None:
    segment(store, "seg-w-000001", record("a"))
    overwrite(store, f"{PREFIX}/shard-0-of-1/.tmp-deadbeef", b'{"identity": half a rec')
    view = read(store)
    assert (view.problems, len(view.results)) == ([], 1)


# -- verified reading -----------------------------------------------------------------------


def test_identical_duplicates_collapse_and_are_counted(store: EvalgateStoreBackend) -> None:
    segment(store, "seg-w1-000001", record("a"), record("b"))
    segment(store, "seg-w2-000001", record("a"))
    view = read(store)
    assert (len(view.results), view.duplicates, view.problems) == (2, 1, [])


def test_conflicting_duplicate_is_named(store: EvalgateStoreBackend) -> None:
    segment(store, "seg-w1-000001", record("a"))
    relpath = segment(store, "seg-w2-000001", record("b"), record("a", output="41"))
    problem = only_problem(store)
    assert (problem.file, problem.line) == (relpath, 2)
    assert problem.identity == f"{REVISION}/candidate/a[r0]"
    assert "conflicting duplicate" in problem.reason
    assert f"{relpath}:2: {REVISION}/candidate/a[r0]: conflicting" in str(problem)


def test_truncated_segment_reports_the_cut_line(store: EvalgateStoreBackend) -> None:
    relpath = segment(store, "seg-w-000001", record("a"), record("b"))
    data = store.evalgate_read(relpath)
    overwrite(store, relpath, data[: len(data) - 40])  # cut inside the second record
    view = read(store)
    assert set(view.results) == {(REVISION, "a", "candidate", 0)}
    problem = only_problem(store)
    assert (problem.file, problem.line) == (relpath, 2)
    assert "malformed line" in problem.reason
    assert problem.identity == "<unreadable identity>"


def test_flipped_byte_fails_the_checksum(store: EvalgateStoreBackend) -> None:
    relpath = segment(store, "seg-w-000001", record("a"), record("b"))
    data = bytearray(store.evalgate_read(relpath))
    at = data.index(b'"output":"42"', data.index(b"\n")) + len(b'"output":"')
    data[at] = ord("7")  # "42" -> "72" in the second record: still valid JSON
    overwrite(store, relpath, bytes(data))
    problem = only_problem(store)
    assert (problem.file, problem.line, problem.identity) == (relpath, 2, "rev-1/candidate/b[r0]")
    assert "checksum mismatch" in problem.reason
    assert (REVISION, "b", "candidate", 0) not in read(store).results


def test_a_damaged_line_with_an_infinite_repetition_is_a_problem(
    store: EvalgateStoreBackend,
) -> None:
    # found by test_hardening_properties: Python's json reads Infinity, and naming the identity
    # of the line that failed its checksum raised OverflowError out of the reader
    relpath = segment(store, "seg-w-000001", record("a"), record("b"))
    first, second = store.evalgate_read(relpath).splitlines(keepends=True)
    damaged = second.replace(b'"repetition":0', b'"repetition":Infinity')
    assert damaged != second
    overwrite(store, relpath, first + damaged)
    problem = only_problem(store)
    assert (problem.file, problem.line, problem.identity) == (relpath, 2, "<unreadable identity>")
    assert set(read(store).results) == {(REVISION, "a", "candidate", 0)}


def test_a_record_written_non_canonically_still_verifies(store: EvalgateStoreBackend) -> None:
    # The reader's fast path hashes the stored line itself; a line that is valid but not in
    # canonical form (spaces, other key order) must still verify through the full path.
    relpath = f"{PREFIX}/shard-0-of-1/seg-w-000001.jsonl"
    sealed = record("a")
    reordered = dict(reversed(list(sealed.items())))
    store.evalgate_write_atomic(relpath, (json.dumps(reordered, indent=None) + "\n").encode())
    view = read(store)
    assert view.problems == [] and (REVISION, "a", "candidate", 0) in view.results


def test_a_forged_checksum_member_does_not_pass(store: EvalgateStoreBackend) -> None:
    sealed = record("a")
    forged = dict(sealed, output="43")  # content changed, old checksum kept
    segment(store, "seg-w-000001", forged)
    assert "checksum mismatch" in only_problem(store).reason


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"definition_digest": "e" * 64}, "foreign definition digest eeeeeeeeeeeeeeee"),
        ({"candidate_key": "candidate-ffffffffffff"}, "foreign candidate key"),
        (
            {
                "identity": {
                    "dataset_revision": "rev-0",
                    "case_id": "a",
                    "candidate": "candidate",
                    "repetition": 0,
                }
            },
            "foreign dataset revision",
        ),
    ],
)
def test_foreign_records_are_named(
    store: EvalgateStoreBackend, changes: dict[str, Any], reason: str
) -> None:
    relpath = segment(store, "seg-w-000001", record("b"), record("a", **changes))
    problem = only_problem(store)
    assert (problem.file, problem.line) == (relpath, 2)
    assert reason in problem.reason
    assert "/candidate/a[r0]" in problem.identity
    assert (REVISION, "a", "candidate", 0) not in read(store).results


def test_record_with_missing_field_is_malformed(store: EvalgateStoreBackend) -> None:
    bad = record("a")
    del bad["writer"]
    relpath = segment(store, "seg-w-000001", bad)
    problem = only_problem(store)
    assert (problem.file, problem.line) == (relpath, 1)
    assert "fields differ" in problem.reason


def test_error_is_superseded_by_a_later_success(store: EvalgateStoreBackend) -> None:
    segment(store, "seg-w-000001", errored("a"), errored("b"))
    segment(store, "seg-w-000002", record("a"))
    view = read(store)
    assert set(view.results) == {(REVISION, "a", "candidate", 0)}
    assert set(view.errors) == {(REVISION, "b", "candidate", 0)}
    assert view.problems == []


def test_follower_reads_only_new_segments(store: EvalgateStoreBackend) -> None:
    follower = EvalgateStoreFollower(store, PREFIX, EXPECT)
    segment(store, "seg-w-000001", record("a"))
    assert (follower.evalgate_poll().segments, len(follower.view.results)) == (1, 1)
    assert follower.evalgate_poll().duplicates == 0  # a segment read once is not read again
    segment(store, "seg-w-000002", record("b"))
    assert (follower.evalgate_poll().segments, len(follower.view.results)) == (2, 2)


# -- aggregation turns problems into an invalid run -----------------------------------------


def test_corrupt_store_makes_the_run_invalid(tmp_path: Path, store: EvalgateStoreBackend) -> None:
    manifest = evalgate_load_manifest(
        str(write_suite(tmp_path / "suite", {"candidate": "http://127.0.0.1:9/v1"}))
    )
    cand = manifest.candidates["candidate"]
    prefix = evalgate_use_generation(
        store, evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, cand.key)
    )
    rows = []
    for case in manifest.cases:
        identity = {
            "dataset_revision": manifest.dataset_revision,
            "case_id": case.case_id,
            "candidate": "candidate",
            "repetition": 0,
        }
        rows.append(
            record(
                case.case_id,
                identity=identity,
                definition_digest=manifest.definition_digest,
                candidate_key=cand.key,
                category=case.category,
                cluster=case.cluster,
            )
        )
    rows[3] = dict(rows[3], score=0.5)  # altered after sealing
    data = b"".join(evalgate_canonical_json(r) + b"\n" for r in rows)
    store.evalgate_write_atomic(f"{prefix}/shard-0-of-1/seg-w-000001.jsonl", data)
    selection = EvalgateSelection(("candidate",), tuple(c.case_id for c in manifest.cases))
    result = evalgate_aggregate(store, manifest, selection, None)
    assert result.status == "invalid"
    assert [p.line for p in result.problems] == [4]
    assert manifest.cases[3].case_id in result.problems[0].identity
    assert "gen-1/shard-0-of-1/seg-w-000001.jsonl" in result.problems[0].file


# -- generations ----------------------------------------------------------------------------


def test_resume_uses_the_newest_generation(store: EvalgateStoreBackend) -> None:
    first = evalgate_use_generation(store, PREFIX)
    assert first == f"{PREFIX}/gen-1"
    assert evalgate_use_generation(store, PREFIX) == first
    assert evalgate_generations(store, PREFIX) == [1]


def test_fresh_run_starts_a_new_generation_and_keeps_the_old(
    store: EvalgateStoreBackend,
) -> None:
    old = evalgate_use_generation(store, PREFIX)
    store.evalgate_write_atomic(
        f"{old}/shard-0-of-1/seg-w-000001.jsonl", evalgate_canonical_json(record("a")) + b"\n"
    )
    before = {p: store.evalgate_read(p) for p in store.evalgate_list(PREFIX)}
    fresh = evalgate_use_generation(store, PREFIX, fresh_run="run-2")
    assert fresh == f"{PREFIX}/gen-2"
    assert evalgate_use_generation(store, PREFIX, fresh_run="run-2") == fresh  # joins, no gen-3
    assert evalgate_use_generation(store, PREFIX) == fresh  # a plain rerun resumes gen-2
    assert evalgate_read_candidate(store, PREFIX, EXPECT).results == {}  # old results hidden
    assert {p: store.evalgate_read(p) for p in before} == before  # ... but untouched
    marker = json.loads(store.evalgate_read(f"{fresh}/GENERATION.json"))
    assert (marker["generation"], marker["run"]) == (2, "run-2")


def test_folder_without_generations_is_read_whole(store: EvalgateStoreBackend) -> None:
    segment(store, "seg-w-000001", record("a"))  # the layout before generations
    assert len(evalgate_read_candidate(store, PREFIX, EXPECT).results) == 1


def test_concurrent_processes_of_one_run_claim_one_generation(
    store: EvalgateStoreBackend,
) -> None:
    evalgate_use_generation(store, PREFIX)
    found: list[str] = []
    start = threading.Barrier(8)

    def claim() -> None:
        start.wait()
        found.append(evalgate_use_generation(store, PREFIX, fresh_run="job-7"))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert found == [f"{PREFIX}/gen-2"] * 8
    assert evalgate_generations(store, PREFIX) == [1, 2]


def test_two_fresh_runs_get_two_generations(store: EvalgateStoreBackend) -> None:
    assert evalgate_use_generation(store, PREFIX, fresh_run="a").endswith("/gen-1")
    assert evalgate_use_generation(store, PREFIX, fresh_run="b").endswith("/gen-2")
    assert evalgate_use_generation(store, PREFIX, fresh_run="a").endswith("/gen-1")
