"""A record built from an outcome and sealed: the builder, the seal and the checksum check.

``evalgate_record_line`` is the one builder of a generation record (it grades an answer, never an
error, and copies the nested members field by field); ``evalgate_seal_line`` seals it and encodes
its stored line once. The bytes on disk are the canonical JSON
(``canonical.evalgate_canonical_json``) of the sealed record; ``checksum`` is the sha256 of the
canonical JSON of the record without it (``evalgate_checksum_ok`` checks a stored line).
The types are ``store.records``'.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, TypedDict, Unpack, cast

from pytest_evalgate.formats.canonical import evalgate_canonical_json, evalgate_sha256_hex
from pytest_evalgate.store.records import (
    EVALGATE_OPTIONAL_FIELDS,
    EVALGATE_RECORD_FIELDS,
    EvalgateGrade,
    EvalgateIdentity,
    EvalgateOutcome,
    EvalgateRecord,
    EvalgateRecordError,
    EvalgateSandboxFacts,
    EvalgateTiming,
    EvalgateUsage,
)


class EvalgateRecordPlace(TypedDict):
    """Where a record belongs, beside its identity and outcome (keyword arguments of
    ``evalgate_record`` and ``evalgate_record_line``)."""

    definition_digest: str
    candidate_key: str
    category: str
    cluster: str
    shard: int
    writer: str


def evalgate_record_line(
    identity: EvalgateIdentity,
    outcome: EvalgateOutcome,
    grade: EvalgateGrade,
    **place: Unpack[EvalgateRecordPlace],
) -> tuple[EvalgateRecord, bytes]:
    """The sealed record of ``identity`` for ``outcome``, and its stored line.

    ``grade`` is called (with ``output``, ``""`` for None) only when the outcome has no error;
    an error record has ``score`` and ``passed`` None. The nested members are copied field by
    field, so the record holds exactly the schema's fields whatever else ``outcome`` carries.
    ``model`` and ``system_fingerprint`` are copied when ``outcome`` has them (the child's
    always do, null when the endpoint reported none); an outcome without them (journaled by an
    older child) gives a record of the older shape, byte for byte.
    """
    score: float | None = None
    passed: bool | None = None
    error = outcome["error"]
    if error is None:
        score, passed = grade(outcome["output"] or "")
    sandbox = outcome.get("sandbox")
    optional: dict[str, Any] = {} if sandbox is None else {"sandbox": _sandbox_fields(sandbox)}
    if "dialogue" in outcome:
        optional["dialogue"] = outcome["dialogue"]
    if "choice" in outcome:
        optional["choice"] = outcome["choice"]
    return evalgate_seal_line(
        {
            "identity": identity.evalgate_fields(),
            "definition_digest": place["definition_digest"],
            "candidate_key": place["candidate_key"],
            "category": place["category"],
            "cluster": place["cluster"],
            "output": outcome["output"],
            "score": score,
            "passed": passed,
            "attempts": outcome["attempts"],
            "error": None if error is None else _error_fields(error),
            "timing": _timing_fields(outcome["timing"]),
            "usage": _usage_fields(outcome["usage"]),
            "finish_reason": outcome["finish_reason"],
            "shard": place["shard"],
            "writer": place["writer"],
            "started_at": outcome["started_at"],
            "finished_at": outcome["finished_at"],
            **_served_fields(outcome),
            **optional,
        }
    )


# The copies below also give every record the same (interned) key strings: a dict decoded from a
# wire line has fresh ones, about 400 bytes per record more while pytest keeps its items.
def _error_fields(error: EvalgateRecordError) -> EvalgateRecordError:
    return {"category": error["category"], "status": error["status"], "message": error["message"]}


def _timing_fields(timing: EvalgateTiming) -> EvalgateTiming:
    return {
        "queued_s": timing["queued_s"],
        "ttft_s": timing["ttft_s"],
        "tpot_s": timing["tpot_s"],
        "e2e_s": timing["e2e_s"],
        "itl_p95_s": timing["itl_p95_s"],
    }


def _usage_fields(usage: EvalgateUsage) -> EvalgateUsage:
    fields: EvalgateUsage = {
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
    }
    if "flagged" in usage:
        fields["flagged"] = usage["flagged"]
    if "source" in usage:
        fields["source"] = usage["source"]
    return fields


def _served_fields(outcome: EvalgateOutcome) -> dict[str, str | None]:
    return {key: outcome[key] for key in ("model", "system_fingerprint") if key in outcome}


def _sandbox_fields(facts: EvalgateSandboxFacts) -> EvalgateSandboxFacts:
    return {
        "outcome": facts["outcome"],
        "message": facts["message"],
        "exit_status": facts["exit_status"],
        "start_s": facts["start_s"],
        "run_s": facts["run_s"],
        "isolation": facts["isolation"],
        "sandboxed": facts["sandboxed"],
    }


def evalgate_record(
    identity: EvalgateIdentity,
    outcome: EvalgateOutcome,
    grade: EvalgateGrade,
    **place: Unpack[EvalgateRecordPlace],
) -> EvalgateRecord:
    """``evalgate_record_line``'s record alone."""
    return evalgate_record_line(identity, outcome, grade, **place)[0]


_SPLICE = b',"cluster":'  # where "checksum" goes in a record's canonical JSON (sorted keys)
_SPLICE_KEYS = EVALGATE_RECORD_FIELDS | EVALGATE_OPTIONAL_FIELDS


def evalgate_seal_line(record: Mapping[str, object]) -> tuple[EvalgateRecord, bytes]:
    """``evalgate_seal(record)`` and the line a segment stores for it (its canonical JSON and a
    newline), encoded once: the checksum member is spliced into the hashed body where sorted keys
    put it, before ``cluster`` (the reader's fast path in ``evalgate_checksum_ok`` takes it out
    the same way). Only the record schema's fields are spliced; anything else is encoded twice.
    Costs one canonical encoding per record instead of two (~20 us of the pytest process's time
    per record, ``bench/throughput.py``)."""
    body = {key: value for key, value in record.items() if key != "checksum"}
    data = evalgate_canonical_json(body)
    checksum = hashlib.sha256(data).hexdigest()
    body["checksum"] = checksum
    at = data.find(_SPLICE)
    if at < 0 or not body.keys() <= _SPLICE_KEYS:
        return cast(EvalgateRecord, body), evalgate_canonical_json(body) + b"\n"
    member = b',"checksum":"' + checksum.encode("ascii") + b'"'
    return cast(EvalgateRecord, body), data[:at] + member + data[at:] + b"\n"


def evalgate_seal(record: Mapping[str, object]) -> EvalgateRecord:
    """A copy of ``record`` (the fields of ``EvalgateRecord``; a checksum present is replaced)
    with its ``checksum``: the sha256 of the canonical record without it."""
    body = {key: value for key, value in record.items() if key != "checksum"}
    body["checksum"] = evalgate_sha256_hex(body)
    return cast(EvalgateRecord, body)


def evalgate_checksum_ok(line: bytes, record: Mapping[str, object]) -> bool:
    """Whether ``record`` (parsed from the stored ``line``) carries its own checksum."""
    # Fast path: writers store the canonical JSON of the sealed record, so the line without its
    # checksum member is exactly the hashed body (a JSON string cannot contain an unescaped
    # quote, so the first `"checksum":"<hex>",` is the member itself). Any other line falls
    # back to re-canonicalising the parsed record.
    checksum = record["checksum"]
    if isinstance(checksum, str):
        member = b'"checksum":"' + checksum.encode("ascii", "replace") + b'",'
        if hashlib.sha256(line.strip().replace(member, b"", 1)).hexdigest() == checksum:
            return True
    try:
        return bool(evalgate_seal(record)["checksum"] == checksum)
    except (ValueError, TypeError):  # NaN, infinity or a non-JSON value: it cannot be sealed
        return False
