"""The runner's wire protocol: named, typed messages, one compact JSON object a line.

The pytest process (``runner.parent``) and the child (``runner.child``) both import this module
and nothing else of each other. Every message is a frozen dataclass of builtins (plus the
``EvalgateEndpoint`` and ``EvalgateLimits`` values it names); ``evalgate_encode`` writes it as
``{"kind": <kind>, <field>: <value>, ...}\\n`` with compact separators, and
``evalgate_decode_for_child`` / ``evalgate_decode_for_parent`` read one line back into the equal
message, or raise ``EvalgateWireError`` naming what is wrong (not JSON, not an object, a kind that
does not travel in that direction, missing or unknown fields). Values are not type-checked one by
one: both ends are this package at one version, started together.

Parent to child, in this order: ``setup`` (once, first), ``endpoint`` (once per endpoint, before
the first work that uses it), ``tools`` (once per tool fixture, likewise), then ``work``,
``urge`` (move a sent work to the front) and, last, ``close`` (finish what was sent, then
exit). Child to parent: ``result`` (a call's outcome), ``halted`` (a work not requested because
its candidate's stop channel was closed by a fatal error), ``log`` (an AIMD change) and
``fail`` (the child's last words before exit status 1).

A *stop channel* (``halt``) is a small integer the parent gives each (suite, candidate): the
first request on a channel goes alone, and a fatal error on it closes the channel, so nothing
else is sent to that candidate.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.errors import EvalgateConfigError, EvalgateWireError
from pytest_evalgate.store.records import (
    EVALGATE_OUTCOME_FIELDS,
    EvalgateOutcome,
    evalgate_has_fields,
)

_EXCERPT = 200
EVALGATE_LOOP_ENV = "PYTEST_EVALGATE_ASYNCIO_LOOP"


def evalgate_asyncio_loop_wanted(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks the child for asyncio's own event loop instead of uvloop
    (``PYTEST_EVALGATE_ASYNCIO_LOOP=1``; unset, empty or ``0``: uvloop where installed). Both
    sides read it: the pytest process refuses a bad value before any request, the child picks
    its loop. Any other value raises ``EvalgateConfigError`` naming the variable and value."""
    value = environ.get(EVALGATE_LOOP_ENV, "")
    if value not in ("", "0", "1"):
        reason = f"must be 0 or 1 (1: the runner's child runs on asyncio's loop), got {value!r}"
        raise EvalgateConfigError("environment", EVALGATE_LOOP_ENV, reason)
    return value == "1"


@dataclass(frozen=True)
class EvalgateLimits:
    """This process's share of the budget, as the child's ``EvalgateLimiter`` enforces it."""

    max_concurrency: int
    requests_per_second: float | None
    tokens_per_minute: float | None


class _EvalgateWireMessage:
    """What every message shares: its ``kind`` on the wire and how it is rebuilt from fields."""

    kind: ClassVar[str]

    @classmethod
    def evalgate_from_fields(cls, fields: dict[str, Any]) -> Self:
        """The message of the decoded ``fields`` (``TypeError`` for missing or unknown ones)."""
        return cls(**fields)


@dataclass(frozen=True)
class EvalgateWireSetup(_EvalgateWireMessage):
    """The first line to the child: how many workers it runs, and its budget share."""

    kind: ClassVar[str] = "setup"
    concurrency: int
    limits: EvalgateLimits
    # The resume journal (store.journal): the store location the child journals answers to,
    # and the writer id that names its journal objects; None: no journal.
    journal_store: str | None = None
    journal_writer: str = ""

    @classmethod
    def evalgate_from_fields(cls, fields: dict[str, Any]) -> Self:
        """Rebuilds the nested ``limits``."""
        return cls(fields.pop("concurrency"), EvalgateLimits(**fields.pop("limits")), **fields)


@dataclass(frozen=True)
class EvalgateWireEndpoint(_EvalgateWireMessage):
    """Names endpoint ``index`` for the works that follow (sent once per endpoint)."""

    kind: ClassVar[str] = "endpoint"
    index: int
    endpoint: EvalgateEndpoint

    @classmethod
    def evalgate_from_fields(cls, fields: dict[str, Any]) -> Self:
        """Rebuilds the nested ``endpoint``."""
        return cls(fields.pop("index"), EvalgateEndpoint(**fields.pop("endpoint")), **fields)


@dataclass(frozen=True)
class EvalgateWireRequest(_EvalgateWireMessage):
    """One work to request: ``index`` (the parent's wire index), endpoint and stop channel
    (``halt``) by number, the request body, the identity header, the token estimate; an
    ``urgent`` work goes before every queued one."""

    kind: ClassVar[str] = "work"
    index: int
    endpoint: int
    halt: int
    body: dict[str, Any]
    identity: str
    est_tokens: int
    urgent: bool
    journal: str | None = None  # the journal folder of an answer to this work (or none)
    execution: dict[str, Any] | None = None  # scorer: code only (runner/execution.py)
    dialogue: dict[str, Any] | None = None  # turns or a tool loop (dialogue/loop.py)


@dataclass(frozen=True)
class EvalgateWireTools(_EvalgateWireMessage):
    """Names tool fixture ``index`` (``dialogue.fixture.evalgate_fixture_wire`` builtins) for
    the tool-loop works that follow (sent once per fixture, before the first of them)."""

    kind: ClassVar[str] = "tools"
    index: int
    fixture: dict[str, Any]


@dataclass(frozen=True)
class EvalgateWireUrge(_EvalgateWireMessage):
    """Move the already sent work ``index`` to the front (an item is waiting for it)."""

    kind: ClassVar[str] = "urge"
    index: int


@dataclass(frozen=True)
class EvalgateWireClose(_EvalgateWireMessage):
    """No more works: finish every one sent, then exit with status 0."""

    kind: ClassVar[str] = "close"


@dataclass(frozen=True)
class EvalgateWireResult(_EvalgateWireMessage):
    """Work ``index`` was requested; ``outcome`` is what the call produced. ``fatal``: its error
    closed the stop channel. ``in_flight``: requests the child had in flight when it finished."""

    kind: ClassVar[str] = "result"
    index: int
    in_flight: int
    fatal: bool
    outcome: EvalgateOutcome

    @classmethod
    def evalgate_from_fields(cls, fields: dict[str, Any]) -> Self:
        """Checks the outcome's fields as well (the record builder reads every one)."""
        outcome = fields.get("outcome")
        if not isinstance(outcome, dict) or not evalgate_has_fields(
            outcome, EVALGATE_OUTCOME_FIELDS
        ):
            raise TypeError("outcome fields differ from EvalgateOutcome")
        return cls(**fields)


@dataclass(frozen=True)
class EvalgateWireHalted(_EvalgateWireMessage):
    """Work ``index`` was not requested: its stop channel was closed after ``reason``."""

    kind: ClassVar[str] = "halted"
    index: int
    in_flight: int
    reason: str


@dataclass(frozen=True)
class EvalgateWireLog(_EvalgateWireMessage):
    """One log line of the child (AIMD concurrency changes)."""

    kind: ClassVar[str] = "log"
    line: str


@dataclass(frozen=True)
class EvalgateWireFailure(_EvalgateWireMessage):
    """The child failed (a bug, never endpoint trouble) and exits with status 1 after this."""

    kind: ClassVar[str] = "fail"
    reason: str


EvalgateToChild = (
    EvalgateWireSetup | EvalgateWireEndpoint | EvalgateWireRequest | EvalgateWireUrge
    | EvalgateWireClose | EvalgateWireTools
)  # fmt: skip
EvalgateToParent = EvalgateWireResult | EvalgateWireHalted | EvalgateWireLog | EvalgateWireFailure

_TO_CHILD: dict[str, type[EvalgateToChild]] = {
    m.kind: m
    for m in (
        EvalgateWireSetup, EvalgateWireEndpoint, EvalgateWireRequest, EvalgateWireUrge,
        EvalgateWireClose, EvalgateWireTools,
    )
}  # fmt: skip
_TO_PARENT: dict[str, type[EvalgateToParent]] = {
    m.kind: m
    for m in (EvalgateWireResult, EvalgateWireHalted, EvalgateWireLog, EvalgateWireFailure)
}


def _nested(value: object) -> dict[str, Any]:
    # Called by the encoder only for what JSON cannot hold: the nested frozen dataclasses.
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"not a wire value: {type(value).__name__}")


_OPTIONAL = frozenset({"execution", "dialogue"})
_M = TypeVar("_M", bound=_EvalgateWireMessage)
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_nested)
_DECODER = json.JSONDecoder()


def evalgate_encode(message: EvalgateToChild | EvalgateToParent) -> bytes:
    """``message`` as one line of the wire (UTF-8 JSON, ending in a newline); an optional
    field left at its ``None`` default is not written (the decoder gives it back)."""
    fields = {k: v for k, v in vars(message).items() if v is not None or k not in _OPTIONAL}
    return _ENCODER.encode({"kind": message.kind, **fields}).encode() + b"\n"


def evalgate_encode_result(message: EvalgateWireResult, outcome_json: bytes) -> bytes:
    """``evalgate_encode(message)`` with the outcome already encoded as ``outcome_json`` (any
    JSON of ``message.outcome``: the child passes the canonical JSON its journal line holds, so
    each answer's outcome is encoded once). The decoder reads both lines as the same message."""
    fatal = b"true" if message.fatal else b"false"
    head = b'{"kind":"result","index":%d,"in_flight":%d,"fatal":%s,"outcome":' % (
        message.index,
        message.in_flight,
        fatal,
    )
    return head + outcome_json + b"}\n"


def evalgate_decode_for_child(line: bytes) -> EvalgateToChild:
    """The parent's message on ``line``; ``EvalgateWireError`` if it is none."""
    return _decode(line, _TO_CHILD)


def evalgate_decode_for_parent(line: bytes) -> EvalgateToParent:
    """The child's message on ``line``; ``EvalgateWireError`` if it is none."""
    return _decode(line, _TO_PARENT)


def _decode(line: bytes, kinds: Mapping[str, type[_M]]) -> _M:
    try:
        fields = _DECODER.decode(line.decode())
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes not UTF-8
        raise EvalgateWireError(f"not a JSON line ({exc}): {_excerpt(line)}") from None
    if not isinstance(fields, dict):
        raise EvalgateWireError(f"not a JSON object: {_excerpt(line)}")
    kind = fields.pop("kind", None)
    message = kinds.get(kind) if isinstance(kind, str) else None
    if message is None:
        raise EvalgateWireError(f"unexpected message kind {kind!r}: {_excerpt(line)}")
    try:
        return message.evalgate_from_fields(fields)
    except (TypeError, KeyError, AttributeError) as exc:
        raise EvalgateWireError(f"malformed {kind!r} message ({exc}): {_excerpt(line)}") from None


def _excerpt(line: bytes) -> str:
    text = line.decode(errors="replace").rstrip("\n")
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 3] + "..."
