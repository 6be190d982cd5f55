"""The record of SPEC section 5 and the identity it is keyed by: types, builder, seal.

A record is builtins only (it is JSON on disk and crosses processes); ``EvalgateRecord`` and its
nested ``TypedDict``s name its fields for the type checker without costing a conversion. The
store owns this contract: the runner builds records with ``evalgate_record``, the reader verifies
them, aggregation and items consume them.

The bytes on disk are the canonical JSON (``canonical.evalgate_canonical_json``) of the sealed
record; ``checksum`` is the sha256 of the canonical JSON of the record without it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, NotRequired, TypedDict, Unpack, cast

from pytest_evalgate.formats.canonical import evalgate_canonical_json, evalgate_sha256_hex

EVALGATE_RECORD_FIELDS = frozenset(
    {
        "identity", "definition_digest", "candidate_key", "category", "cluster", "output",
        "score", "passed", "attempts", "error", "timing", "usage", "finish_reason", "shard",
        "writer", "started_at", "finished_at", "checksum",
    }
)  # fmt: skip

EVALGATE_OUTCOME_FIELDS = frozenset(
    {"output", "finish_reason", "attempts", "error", "timing", "usage", "started_at", "finished_at"}
)

EVALGATE_SERVED_FIELDS = frozenset({"model", "system_fingerprint"})
"""Which weights answered (SPEC 20): the ``model`` and ``system_fingerprint`` the endpoint's
response reported, string or null. Every record written since issue 30 holds both (null when
the endpoint sent none); records written before lack them and stay valid."""

EVALGATE_OPTIONAL_FIELDS = (
    frozenset({"sandbox", "source", "dialogue", "choice"}) | EVALGATE_SERVED_FIELDS
)
"""Members only some records (and outcomes) have: ``sandbox`` for ``scorer: code`` suites
(``EvalgateSandboxFacts``), ``dialogue`` for conversations and tool loops (SPEC 17: the
transcript, steps, tool calls, the loop's end and mock state; ``dialogue.loop``), ``choice``
for multiple choice by log-likelihood (SPEC 18: each choice's log-likelihood and token count,
the ``acc`` and ``acc_norm`` picks, the target index; ``runner.choice``), ``source``
for records imported from another harness
(``EvalgateSource``, ``evalgate import``), and ``EVALGATE_SERVED_FIELDS``, which older records
lack. Every other record holds exactly ``EVALGATE_RECORD_FIELDS``."""


def evalgate_has_fields(members: Iterable[str], required: frozenset[str]) -> bool:
    """Whether ``members`` are ``required`` plus, at most, optional ones."""
    extra = set(members) - required
    return len(required) + len(extra) == len(set(members)) and extra <= EVALGATE_OPTIONAL_FIELDS


class EvalgateIdentity(NamedTuple):
    """One identity (SPEC section 2): what a record is stored, resumed and counted by.

    A tuple, so it is hashable, equal to the plain tuple of its fields and ordered field by
    field: dataset revision, case id, candidate, then repetition as a number (r2 before r10).
    """

    dataset_revision: str
    case_id: str
    candidate: str
    repetition: int

    @classmethod
    def evalgate_from(cls, identity: Mapping[str, Any]) -> EvalgateIdentity:
        """The identity of a record's ``identity`` member, coerced to (str, str, str, int).

        Raises ``KeyError`` for a missing field, ``TypeError``/``ValueError`` for a repetition
        that is not a number.
        """
        return cls(
            str(identity["dataset_revision"]),
            str(identity["case_id"]),
            str(identity["candidate"]),
            int(identity["repetition"]),
        )

    def evalgate_fields(self) -> EvalgateIdentityFields:
        """The record's ``identity`` member for this identity."""
        return {
            "dataset_revision": self.dataset_revision,
            "case_id": self.case_id,
            "candidate": self.candidate,
            "repetition": self.repetition,
        }

    def evalgate_label(self) -> str:
        """How problems and messages name it: ``revision/candidate/case[rN]``."""
        return f"{self.dataset_revision}/{self.candidate}/{self.case_id}[r{self.repetition}]"


class EvalgateIdentityFields(TypedDict):
    """A record's ``identity`` member."""

    dataset_revision: str
    case_id: str
    candidate: str
    repetition: int


class EvalgateRecordError(TypedDict):
    """A record's ``error`` member: why the identity has no result (category of SPEC 5)."""

    category: str
    status: int | None
    message: str


class EvalgateTiming(TypedDict):
    """A record's ``timing`` member, in seconds (docs/timings.md)."""

    queued_s: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float
    itl_p95_s: float | None


class EvalgateUsage(TypedDict):
    """A record's ``usage`` member, as the endpoint reported it (None when it did not).

    ``flagged`` (only when the endpoint's numbers were implausible, issue 19): why they were not
    kept; both counts are then None. ``source`` (only ``"chunks"``, issue 37): the server sent
    no usage and ``completion_tokens`` was counted from the stream's content chunks; absent,
    the counts are the server's.
    """

    prompt_tokens: int | None
    completion_tokens: int | None
    flagged: NotRequired[str]
    source: NotRequired[str]


class EvalgateSandboxFacts(TypedDict):
    """A code suite's ``sandbox`` member: how the answer's execution ended (docs/sandbox.md).

    ``outcome`` is ``passed`` | ``tests_failed`` | ``timeout`` | ``memory`` | ``crashed``;
    ``exit_status`` None when killed at the timeout; ``start_s`` the sandbox's start time,
    ``run_s`` the run after it; ``sandboxed`` False only for ``isolation: none``.
    """

    outcome: str
    message: str
    exit_status: int | None
    start_s: float
    run_s: float
    isolation: str
    sandboxed: bool


class EvalgateSource(TypedDict):
    """An imported record's ``source`` member: which harness file it came from (docs/imports.md).

    ``file`` is the file's base name, ``sha256`` its bytes' digest, ``at`` the line (lm-eval) or
    archive member (Inspect) of the sample; ``config_digest`` the sha256 of the task's
    configuration as the harness recorded it (volatile parts left out).
    """

    harness: str
    version: str
    file: str
    sha256: str
    at: str
    task: str
    task_version: str
    config_digest: str


EVALGATE_SOURCE_FIELDS = frozenset(EvalgateSource.__annotations__)


class EvalgateRecord(TypedDict):
    """One committed result for one identity (SPEC section 5; docs/architecture.md).

    With ``error`` set the identity has no result: ``score`` and ``passed`` are None.
    ``model`` and ``system_fingerprint`` (``EVALGATE_SERVED_FIELDS``) are absent from records
    written before issue 30: read them with ``.get``.
    """

    identity: EvalgateIdentityFields
    definition_digest: str
    candidate_key: str
    category: str
    cluster: str
    output: str | None
    score: float | None
    passed: bool | None
    attempts: int
    error: EvalgateRecordError | None
    timing: EvalgateTiming
    usage: EvalgateUsage
    finish_reason: str | None
    shard: int
    writer: str
    started_at: str
    finished_at: str
    checksum: str
    sandbox: NotRequired[EvalgateSandboxFacts]
    model: NotRequired[str | None]
    system_fingerprint: NotRequired[str | None]
    source: NotRequired[EvalgateSource]
    dialogue: NotRequired[dict[str, Any]]
    choice: NotRequired[dict[str, Any]]


class EvalgateOutcome(TypedDict):
    """What one request produced, as the runner's child reports it: the record's fields that
    come from the call (``started_at``/``finished_at`` are ISO 8601 UTC)."""

    output: str | None
    finish_reason: str | None
    attempts: int
    error: EvalgateRecordError | None
    timing: EvalgateTiming
    usage: EvalgateUsage
    started_at: str
    finished_at: str
    sandbox: NotRequired[EvalgateSandboxFacts]
    model: NotRequired[str | None]
    system_fingerprint: NotRequired[str | None]
    dialogue: NotRequired[dict[str, Any]]
    choice: NotRequired[dict[str, Any]]


class EvalgateStandIn(TypedDict):
    """What an item gets in place of a record that does not exist; never stored.

    ``error`` says why (category ``not_requested``: its candidate was stopped; ``missing``:
    nothing committed and nothing requested).
    """

    error: EvalgateRecordError
    attempts: NotRequired[int]


EvalgateGrade = Callable[[str], tuple[float | None, bool | None]]
"""Scores one output: ``grade(output) -> (score, passed)``; (None, None) when another stage
grades it (a judged suite's answer is graded by its judgment record)."""


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


def evalgate_not_requested(candidate: str, reason: str) -> EvalgateStandIn:
    """The stand-in of an identity not requested because ``candidate`` was stopped after
    ``reason`` (a fatal endpoint error). Never stored: the next run requests the identity."""
    message = f"not requested: candidate {candidate!r} was stopped after {reason}"
    return {"error": {"category": "not_requested", "status": None, "message": message}}


def evalgate_store_failed(candidate: str, reason: str) -> EvalgateStandIn:
    """The stand-in of an identity whose answer was never committed (or never requested)
    because the store failed mid-run after ``reason``. Never stored: the next run requests it."""
    message = f"not committed: the store failed mid-run ({reason}); candidate {candidate!r}"
    return {"error": {"category": "store_failed", "status": None, "message": message}}


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
