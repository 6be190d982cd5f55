"""The record of SPEC section 5 and the identity it is keyed by: the types and their fields.

A record is builtins only (it is JSON on disk and crosses processes); ``EvalgateRecord`` and its
nested ``TypedDict``s name its fields for the type checker without costing a conversion. The
store owns this contract: the runner builds records with ``evalgate_record`` (``store.seal``,
which also seals them and checks their checksums), the reader verifies them, aggregation and
items consume them. The stand-ins an item gets in place of a record that does not exist are
made here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, NotRequired, TypedDict

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
        that is not a finite number (JSON's ``Infinity`` included: ``int()`` of it would raise
        ``OverflowError``, which no reader of a damaged line expects).
        """
        repetition = identity["repetition"]
        try:
            number = int(repetition)
        except OverflowError as exc:
            raise ValueError(f"repetition {repetition!r} is not a finite number") from exc
        return cls(
            str(identity["dataset_revision"]),
            str(identity["case_id"]),
            str(identity["candidate"]),
            number,
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
