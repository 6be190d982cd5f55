"""A judge's raw answer -> a typed verdict, or a ``judge_unparseable`` value with a short reason.

Contracts
---------
- The verdict is a top-level JSON object: the whole answer, or one found inside it (in a
  fenced block, after prose), never one nested in another object (issue 37: a ``score`` inside
  unrelated JSON is ``judge_unparseable``). The first ``_SCAN_LIMIT`` characters are searched.
  Several objects that carry the verdict key are fine when they agree, and unparseable when
  they differ (a judge that changes its mind in one answer has not decided).
- **pointwise**: ``score`` is a finite number (or a string holding one), within
  ``[scale.min, scale.max]``; the verdict carries the score, its 0..1 value
  ``(score - min) / (max - min)`` and ``passed = score >= scale.pass``.
- **pairwise**: ``winner`` is ``A``, ``B`` or ``tie`` in any letter case, surrounding spaces
  ignored; anything else is unparseable.
- ``reason`` is optional; a non-string reason is kept as its canonical JSON. Reasons are cut
  to ``EVALGATE_REASON_MAX`` characters.
- Nothing raises for a bad answer: the result is an ``EvalgateJudgeUnparseable`` whose short
  reason never quotes the judge's text (it may quote the case). It is an error of category
  ``judge_unparseable``, stored and retried, never a wrong answer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.judge.spec import EvalgateJudgeScale

EVALGATE_JUDGE_UNPARSEABLE = "judge_unparseable"
EVALGATE_REASON_MAX = 2000
EvalgateWinner = Literal["A", "B", "tie"]

_SCAN_LIMIT = 65536
_DECODE_LIMIT = 256
_WINNERS: dict[str, EvalgateWinner] = {"a": "A", "b": "B", "tie": "tie"}


@dataclass(frozen=True)
class EvalgatePointwiseVerdict:
    """A pointwise verdict: the score on the scale, its 0..1 value, pass or not, the reason."""

    score: float
    value: float
    passed: bool
    reason: str


@dataclass(frozen=True)
class EvalgatePairwiseVerdict:
    """A pairwise verdict: ``A``, ``B`` or ``tie`` (positions as the judge saw them)."""

    winner: EvalgateWinner
    reason: str


@dataclass(frozen=True)
class EvalgateJudgeUnparseable:
    """The judge answered, but not with a usable verdict; ``reason`` says why, briefly."""

    reason: str
    category: str = EVALGATE_JUDGE_UNPARSEABLE


EvalgatePointwiseResult = EvalgatePointwiseVerdict | EvalgateJudgeUnparseable
EvalgatePairwiseResult = EvalgatePairwiseVerdict | EvalgateJudgeUnparseable


def evalgate_parse_pointwise(
    text: str | None, scale: EvalgateJudgeScale
) -> EvalgatePointwiseResult:
    """Parse a pointwise answer against ``scale`` (see the module contract)."""
    found = _verdict_object(text, "score")
    if isinstance(found, EvalgateJudgeUnparseable):
        return found
    score = _number(found["score"])
    if score is None:
        return EvalgateJudgeUnparseable("the score is not a finite number")
    if not scale.min <= score <= scale.max:
        return EvalgateJudgeUnparseable(
            f"the score {score:g} is outside the scale [{scale.min}, {scale.max}]"
        )
    value = scale.evalgate_normalise(score)
    return EvalgatePointwiseVerdict(score, value, scale.evalgate_passes(score), _reason(found))


def evalgate_parse_pairwise(text: str | None) -> EvalgatePairwiseResult:
    """Parse a pairwise answer: ``winner`` must be A, B or tie (see the module contract)."""
    found = _verdict_object(text, "winner")
    if isinstance(found, EvalgateJudgeUnparseable):
        return found
    winner = _winner(found["winner"])
    if winner is None:
        return EvalgateJudgeUnparseable("the winner is not A, B or tie")
    return EvalgatePairwiseVerdict(winner, _reason(found))


def evalgate_verdict_json(
    verdict: EvalgatePointwiseResult | EvalgatePairwiseResult,
) -> dict[str, Any]:
    """The verdict as builtins for a judgment record: ``{"verdict": ..., "error": ...}``.

    A verdict gives ``error: None``; an unparseable answer gives ``verdict: None`` and
    ``error: {"category": "judge_unparseable", "status": None, "message": reason}``, the shape
    of a record's ``error``.
    """
    if isinstance(verdict, EvalgateJudgeUnparseable):
        error = {"category": verdict.category, "status": None, "message": verdict.reason}
        return {"verdict": None, "error": error}
    if isinstance(verdict, EvalgatePairwiseVerdict):
        return {"verdict": {"winner": verdict.winner, "reason": verdict.reason}, "error": None}
    body = {"score": verdict.score, "value": verdict.value, "passed": verdict.passed}
    return {"verdict": {**body, "reason": verdict.reason}, "error": None}


# --------------------------------------------------------------------------- finding the JSON


def _verdict_object(text: str | None, key: str) -> dict[str, Any] | EvalgateJudgeUnparseable:
    if text is None or not text.strip():
        return EvalgateJudgeUnparseable("the judge's answer is empty")
    objects = _json_objects(text[:_SCAN_LIMIT])
    if not objects:
        return EvalgateJudgeUnparseable("no JSON object in the judge's answer")
    carrying = [obj for obj in objects if key in obj]
    if not carrying:
        return EvalgateJudgeUnparseable(f"no {key!r} in the judge's JSON")
    if len({_identity(obj[key]) for obj in carrying}) > 1:
        return EvalgateJudgeUnparseable(f"the judge's answer holds conflicting {key!r} values")
    return carrying[0]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every distinct top-level JSON object in ``text`` (prose and fences around it allowed).

    Objects nested in others are not (a ``score`` inside unrelated JSON is no verdict). At most
    ``_DECODE_LIMIT`` starts are tried, so a hostile answer costs bounded time.
    """
    found: dict[bytes, dict[str, Any]] = {}
    start, tries = _next_start(text, 0), 0
    while start >= 0 and tries < _DECODE_LIMIT:
        decoded = _decode_at(text, start)
        # a decoded value's inside (an object's or an array's) is never searched: a verdict
        # nested in other JSON is not the judge's verdict (issue 37)
        after = start + 1 if decoded is None else decoded[1]
        if decoded is not None and isinstance(decoded[0], dict):
            found.setdefault(_identity(decoded[0]), decoded[0])
        start, tries = _next_start(text, after), tries + 1
    return list(found.values())


def _next_start(text: str, at: int) -> int:
    """Where the next JSON object or array may start at or after ``at`` (-1: none)."""
    starts = [i for i in (text.find("{", at), text.find("[", at)) if i >= 0]
    return min(starts, default=-1)


def _decode_at(text: str, start: int) -> tuple[object, int] | None:
    try:
        value, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):  # bad JSON, NaN/Infinity, absurd nesting
        return None
    return (value, end) if isinstance(value, dict | list) else None


def _identity(value: object) -> bytes:
    # The same object quoted twice (say, in prose and in a fence) is one verdict. A number
    # beyond float range decodes to inf, which canonical JSON refuses: repr still tells apart.
    try:
        return evalgate_canonical_json(value)
    except ValueError:
        return repr(value).encode()


# --------------------------------------------------------------------------- values


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _winner(value: object) -> EvalgateWinner | None:
    if not isinstance(value, str):
        return None
    return _WINNERS.get(value.strip().casefold())


def _reason(found: Mapping[str, object]) -> str:
    reason = found.get("reason", "")
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        reason = _identity(reason).decode("utf-8")
    return reason[:EVALGATE_REASON_MAX]
