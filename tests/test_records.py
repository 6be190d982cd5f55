"""The record contract beside the store: builder, seal, checksum, identity, stand-ins.

The golden lines below were written by the builder before it moved from the runner into the
store (``store.seal`` now): the bytes on disk must not change.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest

import pytest_evalgate.store as store
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.store import (
    EVALGATE_OUTCOME_FIELDS,
    EVALGATE_RECORD_FIELDS,
    EvalgateIdentity,
    EvalgateOutcome,
    evalgate_checksum_ok,
    evalgate_not_requested,
    evalgate_record,
    evalgate_seal,
)

IDENTITY = EvalgateIdentity("rev-1", "case-1", "cand", 2)
META: dict[str, Any] = {
    "definition_digest": "d" * 64,
    "candidate_key": "cand-0123456789ab",
    "category": "math",
    "cluster": "p1",
    "shard": 3,
    "writer": "host-1-abc",
}
STARTED, FINISHED = "2026-01-02T03:04:05.000006+00:00", "2026-01-02T03:04:05.100006+00:00"

GOLDEN_ANSWER = (
    '{"attempts":1,"candidate_key":"cand-0123456789ab","category":"math",'
    '"checksum":"bc1f966c22607efd49621f35d62b151c5dffe81f48514bf7ac264be5716c1e1c",'
    '"cluster":"p1","definition_digest":"' + "d" * 64 + '","error":null,'
    '"finish_reason":"stop","finished_at":"2026-01-02T03:04:05.100006+00:00",'
    '"identity":{"candidate":"cand","case_id":"case-1","dataset_revision":"rev-1",'
    '"repetition":2},"output":"4","passed":true,"score":1.0,"shard":3,'
    '"started_at":"2026-01-02T03:04:05.000006+00:00","timing":{"e2e_s":0.05,'
    '"itl_p95_s":0.004,"queued_s":0.001,"tpot_s":0.003,"ttft_s":0.0125},'
    '"usage":{"completion_tokens":1,"prompt_tokens":11},"writer":"host-1-abc"}'
)
GOLDEN_ERROR = (
    '{"attempts":4,"candidate_key":"cand-0123456789ab","category":"math",'
    '"checksum":"e363eb2ffb5212a810316c10f4b8b8d8720d30727081101fb5b4da3278bd8154",'
    '"cluster":"p1","definition_digest":"' + "d" * 64 + '","error":{"category":"timeout",'
    '"message":"gateway timeout","status":504},"finish_reason":null,'
    '"finished_at":"2026-01-02T03:04:05.100006+00:00","identity":{"candidate":"cand",'
    '"case_id":"case-1","dataset_revision":"rev-1","repetition":2},"output":"partial ünï",'
    '"passed":null,"score":null,"shard":3,"started_at":"2026-01-02T03:04:05.000006+00:00",'
    '"timing":{"e2e_s":0.5,"itl_p95_s":null,"queued_s":0.25,"tpot_s":null,"ttft_s":null},'
    '"usage":{"completion_tokens":null,"prompt_tokens":null},"writer":"host-1-abc"}'
)


def answer() -> EvalgateOutcome:
    return {
        "output": "4",
        "finish_reason": "stop",
        "attempts": 1,
        "error": None,
        "timing": {
            "queued_s": 0.001, "ttft_s": 0.0125, "tpot_s": 0.003, "e2e_s": 0.05,
            "itl_p95_s": 0.004,
        },
        "usage": {"prompt_tokens": 11, "completion_tokens": 1},
        "started_at": STARTED,
        "finished_at": FINISHED,
    }  # fmt: skip


def failure() -> EvalgateOutcome:
    return {
        "output": "partial ünï",
        "finish_reason": None,
        "attempts": 4,
        "error": {"category": "timeout", "status": 504, "message": "gateway timeout"},
        "timing": {
            "queued_s": 0.25, "ttft_s": None, "tpot_s": None, "e2e_s": 0.5, "itl_p95_s": None,
        },
        "usage": {"prompt_tokens": None, "completion_tokens": None},
        "started_at": STARTED,
        "finished_at": FINISHED,
    }  # fmt: skip


class Grader:
    """A grade that remembers what it was asked: right is "4", anything else scores 0.25."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, output: str) -> tuple[float, bool]:
        self.asked.append(output)
        score = 1.0 if output == "4" else 0.25
        return score, score >= 1.0


def test_an_answer_record_has_the_bytes_it_had_before_the_move() -> None:
    record = evalgate_record(IDENTITY, answer(), Grader(), **META)
    assert evalgate_canonical_json(record).decode() == GOLDEN_ANSWER


def test_an_error_record_has_the_bytes_it_had_before_the_move() -> None:
    record = evalgate_record(IDENTITY, failure(), Grader(), **META)
    assert evalgate_canonical_json(record).decode() == GOLDEN_ERROR


def test_an_error_record_has_no_score_and_is_not_graded() -> None:
    grader = Grader()
    record = evalgate_record(IDENTITY, failure(), grader, **META)
    assert record["score"] is None and record["passed"] is None
    assert record["error"] == {"category": "timeout", "status": 504, "message": "gateway timeout"}
    assert record["output"] == "partial ünï"  # kept for the report, never scored
    assert grader.asked == []


def test_an_answer_is_graded_once_on_its_output() -> None:
    grader = Grader()
    wrong = {**answer(), "output": "5"}
    record = evalgate_record(IDENTITY, wrong, grader, **META)  # type: ignore[arg-type]
    assert (record["score"], record["passed"]) == (0.25, False)
    assert grader.asked == ["5"]


def test_a_missing_output_is_graded_as_the_empty_string() -> None:
    grader = Grader()
    silent = {**answer(), "output": None}
    record = evalgate_record(IDENTITY, silent, grader, **META)  # type: ignore[arg-type]
    assert grader.asked == [""] and record["output"] is None and record["passed"] is False


def test_the_record_has_exactly_the_fields_of_spec_section_5() -> None:
    record = evalgate_record(IDENTITY, answer(), Grader(), **META)
    assert set(record) == EVALGATE_RECORD_FIELDS
    assert set(record["identity"]) == {"dataset_revision", "case_id", "candidate", "repetition"}
    assert set(record["timing"]) == {"queued_s", "ttft_s", "tpot_s", "e2e_s", "itl_p95_s"}
    assert set(record["usage"]) == {"prompt_tokens", "completion_tokens"}
    assert record["identity"] == {
        "dataset_revision": "rev-1", "case_id": "case-1", "candidate": "cand", "repetition": 2,
    }  # fmt: skip
    for name, value in META.items():
        assert record[name] == value  # type: ignore[literal-required]
    assert (record["started_at"], record["finished_at"]) == (STARTED, FINISHED)


def test_the_record_keeps_only_schema_fields_of_what_the_child_sent() -> None:
    sent: Any = answer()
    sent["timing"]["surplus_s"] = 9.0
    sent["usage"]["cached_tokens"] = 3
    sent_error: Any = failure()
    sent_error["error"]["fatal"] = True
    record = evalgate_record(IDENTITY, sent, Grader(), **META)
    errored = evalgate_record(IDENTITY, sent_error, Grader(), **META)
    assert "surplus_s" not in record["timing"] and "cached_tokens" not in record["usage"]
    assert evalgate_canonical_json(errored).decode() == GOLDEN_ERROR


def test_outcome_fields_are_the_record_fields_the_call_decides() -> None:
    assert set(answer()) == EVALGATE_OUTCOME_FIELDS
    assert EVALGATE_OUTCOME_FIELDS <= EVALGATE_RECORD_FIELDS


# -- seal and checksum ------------------------------------------------------------------------


def test_the_checksum_is_the_sha256_of_the_canonical_record_without_it() -> None:
    record = evalgate_record(IDENTITY, answer(), Grader(), **META)
    body = {k: v for k, v in record.items() if k != "checksum"}
    assert record["checksum"] == hashlib.sha256(evalgate_canonical_json(body)).hexdigest()
    assert evalgate_seal(record) == record  # resealing a sealed record changes nothing


def test_sealing_replaces_a_stale_checksum_and_leaves_the_input_alone() -> None:
    record = evalgate_record(IDENTITY, answer(), Grader(), **META)
    edited = {**record, "output": "5", "checksum": record["checksum"]}
    sealed = evalgate_seal(edited)
    assert sealed["checksum"] != record["checksum"] and edited["checksum"] == record["checksum"]


def test_a_stored_line_verifies_by_its_bytes_and_by_its_content() -> None:
    record = evalgate_record(IDENTITY, answer(), Grader(), **META)
    canonical = evalgate_canonical_json(record)
    assert evalgate_checksum_ok(canonical, json.loads(canonical))
    spaced = json.dumps(record, indent=1).encode()  # not canonical: the slow path
    assert evalgate_checksum_ok(spaced, json.loads(spaced))
    tampered = canonical.replace(b'"output":"4"', b'"output":"5"')
    assert not evalgate_checksum_ok(tampered, json.loads(tampered))


# -- identity ---------------------------------------------------------------------------------


def test_identities_sort_field_by_field_with_the_repetition_as_a_number() -> None:
    shuffled = [
        EvalgateIdentity("rev-2", "a", "baseline", 0),
        EvalgateIdentity("rev-1", "b", "baseline", 10),
        EvalgateIdentity("rev-1", "b", "baseline", 2),
        EvalgateIdentity("rev-1", "b", "aaa", 99),
        EvalgateIdentity("rev-1", "a", "zzz", 0),
    ]
    assert sorted(shuffled) == [
        shuffled[4], shuffled[3], shuffled[2], shuffled[1], shuffled[0],
    ]  # fmt: skip


def test_an_identity_is_its_tuple_for_lookups() -> None:
    key = EvalgateIdentity("rev-1", "case-1", "cand", 2)
    assert key == ("rev-1", "case-1", "cand", 2) and hash(key) == hash(tuple(key))
    assert {("rev-1", "case-1", "cand", 2): "x"}[key] == "x"
    assert key.case_id == "case-1" and key.repetition == 2
    revision, case_id, candidate, repetition = key
    assert (revision, case_id, candidate, repetition) == ("rev-1", "case-1", "cand", 2)


def test_an_identity_comes_from_a_record_and_goes_back() -> None:
    record = evalgate_record(IDENTITY, answer(), Grader(), **META)
    assert EvalgateIdentity.evalgate_from(record["identity"]) == IDENTITY
    assert IDENTITY.evalgate_fields() == record["identity"]
    read = EvalgateIdentity.evalgate_from(json.loads(evalgate_canonical_json(record))["identity"])
    assert read == IDENTITY and isinstance(read, EvalgateIdentity)


def test_an_identity_from_loose_json_is_coerced() -> None:
    loose = {"dataset_revision": 3, "case_id": 17, "candidate": "c", "repetition": "1"}
    assert EvalgateIdentity.evalgate_from(loose) == EvalgateIdentity("3", "17", "c", 1)


@pytest.mark.parametrize(
    ("identity", "error"),
    [
        ({"case_id": "a", "candidate": "c", "repetition": 0}, KeyError),
        (
            {"dataset_revision": "r", "case_id": "a", "candidate": "c", "repetition": "x"},
            ValueError,
        ),
        (
            {"dataset_revision": "r", "case_id": "a", "candidate": "c", "repetition": None},
            TypeError,
        ),
        (  # JSON's Infinity, as a damaged line may carry it: ValueError, not OverflowError
            {"dataset_revision": "r", "case_id": "a", "candidate": "c", "repetition": math.inf},
            ValueError,
        ),
        (
            {"dataset_revision": "r", "case_id": "a", "candidate": "c", "repetition": -math.inf},
            ValueError,
        ),
    ],
)
def test_an_unreadable_identity_raises(identity: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        EvalgateIdentity.evalgate_from(identity)


def test_an_identity_label_names_candidate_case_and_repetition() -> None:
    assert IDENTITY.evalgate_label() == "rev-1/cand/case-1[r2]"


# -- stand-ins and the package surface ----------------------------------------------------------


def test_a_not_requested_stand_in_says_which_candidate_stopped_and_why() -> None:
    stand_in = evalgate_not_requested("cand", "auth: bad key")
    assert stand_in == {
        "error": {
            "category": "not_requested",
            "status": None,
            "message": "not requested: candidate 'cand' was stopped after auth: bad key",
        }
    }


def test_the_store_package_exports_every_public_name_it_lists() -> None:
    assert sorted(store.__all__) == store.__all__
    for name in store.__all__:
        assert getattr(store, name) is not None, name
    assert all(name.startswith(("evalgate_", "Evalgate", "EVALGATE_")) for name in store.__all__)
    public = {n for n in vars(store) if n.startswith(("evalgate_", "Evalgate", "EVALGATE_"))}
    assert public == set(store.__all__)
