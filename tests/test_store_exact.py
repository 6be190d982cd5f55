"""store/: exact results of reading, writing and generations on a folder store, one fact each.

Line numbers count every line of a segment (blank ones too) from 1; a problem names file, line,
identity and reason exactly; counts (duplicates, segments, committed records) are exact; the
newest generation is the one read. Expected values come from the bytes the test wrote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateIdentity,
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    EvalgateStoreFollower,
    evalgate_candidate_prefix,
    evalgate_generations,
    evalgate_read_candidate,
    evalgate_read_generation,
    evalgate_seal,
    evalgate_use_generation,
)
from pytest_evalgate.store.generations import evalgate_generation_prefix
from pytest_evalgate.store.records import EVALGATE_RECORD_FIELDS, evalgate_has_fields
from pytest_evalgate.store.seal import evalgate_checksum_ok, evalgate_record, evalgate_seal_line

DIGEST = "e" * 64
REVISION = "rev-7"
KEY = "cand-key-0001"
EXPECT = EvalgateExpectation(DIGEST, REVISION, KEY)
PREFIX = evalgate_candidate_prefix("suite", DIGEST, KEY)


def record(case_id: str, output: str | None = "42", rep: int = 0, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "identity": {"dataset_revision": REVISION, "case_id": case_id, "candidate": "cand",
                     "repetition": rep},
        "definition_digest": DIGEST, "candidate_key": KEY, "category": "billing",
        "cluster": case_id, "output": output, "score": float(output == "42"),
        "passed": output == "42", "attempts": 1, "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": 0.01, "tpot_s": None, "e2e_s": 0.02},
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}, "finish_reason": "stop",
        "shard": 0, "writer": "w", "started_at": "t0", "finished_at": "t1",
    }  # fmt: skip
    body.update(changes)
    return evalgate_seal(body)


def errored(case_id: str, category: str = "timeout") -> dict[str, Any]:
    error = {"category": category, "status": None, "message": "m"}
    return record(case_id, output=None, score=None, passed=None, error=error)


def line(rec: dict[str, Any]) -> bytes:
    return evalgate_canonical_json(rec) + b"\n"


@pytest.fixture
def store(tmp_path: Path) -> EvalgateLocalStore:
    return EvalgateLocalStore(str(tmp_path / "store"))


def put(store: EvalgateLocalStore, name: str, data: bytes, prefix: str = PREFIX) -> str:
    relpath = f"{prefix}/shard-0-of-1/{name}.jsonl"
    store.evalgate_write_atomic(relpath, data)
    return relpath


def test_problems_name_file_line_identity_and_reason(store: EvalgateLocalStore) -> None:
    bad_digest = record("c3", definition_digest="f" * 64)
    data = b"".join(
        [line(record("c1")), b"\n", b"{not json\n", line(bad_digest), b"[1, 2]\n",
         line(record("c5", candidate_key="other-key"))]
    )  # fmt: skip
    relpath = put(store, "seg-a", data)
    view = evalgate_read_generation(store, PREFIX, EXPECT)
    assert [(p.file, p.line, p.identity, p.reason) for p in view.problems] == [
        (relpath, 3, "<unreadable identity>",
         "malformed line (not JSON): a truncated or corrupted record"),
        (relpath, 4, "rev-7/cand/c3[r0]", f"foreign definition digest {'f' * 16}"),
        (relpath, 5, "<unreadable identity>",
         "malformed record: fields differ from the record schema"),
        (relpath, 6, "rev-7/cand/c5[r0]", "foreign candidate key other-key"),
    ]  # fmt: skip
    assert (
        str(view.problems[1])
        == f"{relpath}:4: rev-7/cand/c3[r0]: foreign definition digest ffffffffffffffff"
    )
    assert list(view.results) == [EvalgateIdentity(REVISION, "c1", "cand", 0)]
    assert view.segments == 1 and view.duplicates == 0


def test_a_foreign_revision_and_a_flipped_byte(store: EvalgateLocalStore) -> None:
    foreign = record("c1")
    foreign["identity"] = {**foreign["identity"], "dataset_revision": "rev-6"}
    altered = line(record("c2")).replace(b'"42"', b'"43"')
    relpath = put(store, "seg-a", line(evalgate_seal(foreign)) + altered)
    reasons = [(p.line, p.reason) for p in evalgate_read_generation(store, PREFIX, EXPECT).problems]
    assert reasons == [
        (1, "foreign dataset revision"),
        (2, "checksum mismatch: the record was altered or corrupted"),
    ]
    assert relpath.endswith("seg-a.jsonl")


def test_duplicates_are_counted_and_conflicts_point_at_the_first(
    store: EvalgateLocalStore,
) -> None:
    first = put(store, "seg-a", line(record("c1")) * 3)
    later = record("c1", attempts=3, timing={"queued_s": 1.0, "ttft_s": 0.5, "tpot_s": None,
                                            "e2e_s": 0.9})  # fmt: skip
    conflict = record("c1", finish_reason="length")
    second = put(store, "seg-b", line(later) + line(conflict))
    view = evalgate_read_generation(store, PREFIX, EXPECT)
    assert view.duplicates == 3  # two copies in seg-a, the retimed copy in seg-b
    assert [(p.file, p.line, p.identity) for p in view.problems] == [
        (second, 2, "rev-7/cand/c1[r0]")
    ]
    assert view.problems[0].reason == (
        f"conflicting duplicate: same identity, different output or score than {first}:1"
    )
    assert view.segments == 2


def test_the_first_error_is_kept_until_a_success_replaces_it(store: EvalgateLocalStore) -> None:
    put(store, "seg-a", line(errored("c1", "timeout")) + line(errored("c1", "rate_limit")))
    view = evalgate_read_generation(store, PREFIX, EXPECT)
    key = EvalgateIdentity(REVISION, "c1", "cand", 0)
    assert view.errors[key]["error"]["category"] == "timeout" and key not in view.results
    put(store, "seg-b", line(record("c1")) + line(errored("c1", "server")))
    view = evalgate_read_generation(store, PREFIX, EXPECT)
    assert view.results[key]["passed"] is True  # the success stands, before or after errors


def test_a_follower_reads_each_segment_once(store: EvalgateLocalStore) -> None:
    follower = EvalgateStoreFollower(store, PREFIX, EXPECT)
    put(store, "seg-a", line(record("c1")))
    assert follower.evalgate_poll().segments == 1
    assert follower.evalgate_poll().segments == 1  # nothing new: no re-read, no duplicate
    put(store, "seg-b", line(record("c2")))
    view = follower.evalgate_poll()
    assert (view.segments, view.duplicates, len(view.results)) == (2, 0, 2)


def test_the_newest_generation_is_read_and_a_run_id_rejoins_its_own(
    store: EvalgateLocalStore,
) -> None:
    assert evalgate_generations(store, PREFIX) == []
    assert evalgate_use_generation(store, PREFIX) == f"{PREFIX}/gen-1"
    assert evalgate_use_generation(store, PREFIX) == f"{PREFIX}/gen-1"  # resume: the newest
    assert evalgate_use_generation(store, PREFIX, "run-a") == f"{PREFIX}/gen-2"
    assert evalgate_use_generation(store, PREFIX, "run-b") == f"{PREFIX}/gen-3"
    assert evalgate_use_generation(store, PREFIX, "run-a") == f"{PREFIX}/gen-2"  # joins its own
    assert evalgate_generations(store, PREFIX) == [1, 2, 3]
    marker = json.loads(store.evalgate_read(f"{PREFIX}/gen-2/GENERATION.json"))
    assert (marker["generation"], marker["run"]) == (2, "run-a")
    put(store, "seg-a", line(record("old")), evalgate_generation_prefix(PREFIX, 2))
    put(store, "seg-b", line(record("new")), evalgate_generation_prefix(PREFIX, 3))
    view = evalgate_read_candidate(store, PREFIX, EXPECT)
    assert [key.case_id for key in view.results] == ["new"]


def test_a_folder_named_like_a_generation_without_marker_is_not_one(
    store: EvalgateLocalStore,
) -> None:
    put(store, "seg-a", line(record("c1")), f"{PREFIX}/gen-5")  # no GENERATION.json
    put(store, "seg-b", line(record("c2")), f"{PREFIX}/gen-x")
    assert evalgate_generations(store, PREFIX) == []
    assert evalgate_use_generation(store, PREFIX) == f"{PREFIX}/gen-1"
    assert evalgate_generations(store, PREFIX) == [1]


def test_the_writer_names_segments_per_folder_and_counts_records(
    store: EvalgateLocalStore,
) -> None:
    writer = EvalgateSegmentWriter(store, "shard-1-of-2", writer="w1", max_records=3)
    other = evalgate_candidate_prefix("suite", DIGEST, "other-key")
    writer.evalgate_add(PREFIX, record("c1"))
    writer.evalgate_add(other, record("c2", candidate_key="other-key"))
    assert not writer.evalgate_due()
    writer.evalgate_add(PREFIX, record("c3"))
    assert writer.evalgate_due()  # 3 pending = max_records
    taken = writer.evalgate_take()
    assert [(s.relpath, s.records) for s in taken] == [
        (f"{PREFIX}/shard-1-of-2/seg-w1-000001.jsonl", 2),
        (f"{other}/shard-1-of-2/seg-w1-000002.jsonl", 1),
    ]
    assert taken[0].data == line(record("c1")) + line(record("c3"))
    assert not writer.evalgate_due() and writer.committed == 0
    writer.evalgate_write(taken)
    assert writer.committed == 3
    assert store.evalgate_read(taken[1].relpath) == taken[1].data


def test_a_taken_segment_name_moves_to_the_next_number(store: EvalgateLocalStore) -> None:
    store.evalgate_write_atomic(f"{PREFIX}/s/seg-w2-000001.jsonl", b"theirs\n")
    writer = EvalgateSegmentWriter(store, "s", writer="w2")
    writer.evalgate_add(PREFIX, record("c1"))
    writer.evalgate_commit()
    assert store.evalgate_read(f"{PREFIX}/s/seg-w2-000001.jsonl") == b"theirs\n"
    assert store.evalgate_read(f"{PREFIX}/s/seg-w2-000002.jsonl") == line(record("c1"))
    assert writer.committed == 1


def test_record_fields_with_and_without_the_optional_sandbox() -> None:
    fields = set(EVALGATE_RECORD_FIELDS)
    assert evalgate_has_fields(fields, EVALGATE_RECORD_FIELDS)
    assert evalgate_has_fields(fields | {"sandbox"}, EVALGATE_RECORD_FIELDS)
    assert not evalgate_has_fields(fields | {"stdout"}, EVALGATE_RECORD_FIELDS)
    assert not evalgate_has_fields((fields - {"score"}) | {"sandbox"}, EVALGATE_RECORD_FIELDS)
    assert not evalgate_has_fields(fields - {"checksum"}, EVALGATE_RECORD_FIELDS)


def test_checksum_on_canonical_and_on_relaid_lines() -> None:
    sealed = record("c1")
    canonical = line(sealed)
    assert evalgate_checksum_ok(canonical, sealed)
    relaid = json.dumps(sealed, indent=1).encode()
    assert evalgate_checksum_ok(relaid, json.loads(relaid))
    forged = {**sealed, "checksum": "0" * 64}
    assert not evalgate_checksum_ok(evalgate_canonical_json(forged), forged)


def test_a_code_record_copies_exactly_the_sandbox_facts_of_the_schema() -> None:
    facts = {"outcome": "tests_failed", "message": "1 of 4 failed", "exit_status": 1,
             "start_s": 0.012, "run_s": 0.25, "isolation": "bwrap", "sandboxed": True,
             "stdout": "model-written output stays out"}  # fmt: skip
    outcome: Any = {
        "output": "def f(): ...", "finish_reason": "stop", "attempts": 1, "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": 0.01, "tpot_s": 0.001, "e2e_s": 0.02,
                   "itl_p95_s": None, "extra": 1},
        "usage": {"prompt_tokens": 5, "completion_tokens": 9}, "started_at": "t0",
        "finished_at": "t1", "sandbox": facts,
    }  # fmt: skip
    identity = EvalgateIdentity(REVISION, "c1", "cand", 1)
    made = evalgate_record(
        identity, outcome, lambda output: (0.0, False), definition_digest=DIGEST,
        candidate_key=KEY, category="code", cluster="k", shard=2, writer="w9",
    )  # fmt: skip
    assert made["sandbox"] == {k: v for k, v in facts.items() if k != "stdout"}
    assert set(made["timing"]) == {"queued_s", "ttft_s", "tpot_s", "e2e_s", "itl_p95_s"}
    assert (made["score"], made["passed"], made["shard"], made["writer"]) == (0.0, False, 2, "w9")
    assert made["identity"]["repetition"] == 1
    assert evalgate_checksum_ok(line(made), made)
    plain = evalgate_record(
        identity, {**outcome, "sandbox": None}, lambda output: (1.0, True),
        definition_digest=DIGEST, candidate_key=KEY, category="code", cluster="k", shard=2,
        writer="w9",
    )  # fmt: skip
    assert "sandbox" not in plain and plain["passed"] is True


def test_the_sealed_line_is_the_canonical_json_of_the_sealed_record() -> None:
    # The line is built by splicing the checksum into the hashed body; it must be exactly the
    # canonical JSON of the sealed record, whatever the strings hold (quotes, the member's own
    # text, non-ASCII), with and without the optional sandbox member, and for a hand-made shape.
    tricky = ["42", 'a,"cluster":"x"', '","checksum":"0', "naïve \u2028 \\", "", '"cluster":']
    for text in tricky:
        for rec in (record("a", output=text, category=text), errored("b")):
            sealed, stored = evalgate_seal_line(rec)
            assert stored == evalgate_canonical_json(sealed) + b"\n"
            assert sealed == evalgate_seal(rec)
            assert evalgate_checksum_ok(stored, json.loads(stored))
    with_sandbox = dict(record("c"), sandbox={"passed": 1, "total": 2})
    sealed, stored = evalgate_seal_line(with_sandbox)
    assert stored == evalgate_canonical_json(sealed) + b"\n"
    odd = {"zeta": 1, "cluster": 2, "ch": 3}  # not a record: encoded twice, still canonical
    sealed, stored = evalgate_seal_line(odd)
    assert stored == evalgate_canonical_json(sealed) + b"\n"
    assert list(json.loads(stored)) == ["ch", "checksum", "cluster", "zeta"]
