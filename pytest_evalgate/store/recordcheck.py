"""Every stored record's fields checked by type on read (SPEC section 5).

A checksum proves that a record was not changed after sealing, not that whoever sealed it wrote
sensible values: a hand-edited record can be resealed, and JSON from another writer may carry
``NaN`` (Python's ``json`` reads it), a string where a number belongs, or ``true`` as a
repetition. ``evalgate_record_problem`` says what is wrong with such a record, so the reader
reports it as a problem (the run is ``invalid``, naming file and identity) instead of letting it
reach aggregation, where it would become a traceback or a wrong statistic.

``evalgate_judgment_problem`` does the same for judgment records (``store/judgments.py``).
The check is by type and range only; whether the record belongs to the suite (its category,
cluster, case id, repetition) is aggregation's check (``suitecheck``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from pytest_evalgate.store.records import EVALGATE_SOURCE_FIELDS

_STRINGS = (
    "definition_digest", "candidate_key", "category", "cluster", "writer", "started_at",
    "finished_at", "checksum",
)  # fmt: skip
_IDENTITY_KEYS = frozenset({"dataset_revision", "case_id", "candidate", "repetition"})
_ERROR_KEYS = frozenset({"category", "status", "message"})
_TIMING_KEYS = frozenset({"queued_s", "ttft_s", "tpot_s", "e2e_s", "itl_p95_s"})
_USAGE_KEYS = frozenset({"prompt_tokens", "completion_tokens"})
_SANDBOX_KEYS = frozenset(
    {"outcome", "message", "exit_status", "start_s", "run_s", "isolation", "sandboxed"}
)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_count(value: object) -> bool:
    return _is_int(value) and value >= 0


def _is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float, never a bool."""
    if type(value) is float:
        return math.isfinite(value)
    return _is_int(value)


def evalgate_record_problem(record: Mapping[str, object]) -> str | None:
    """What is wrong with ``record``'s values (its field names already match the schema), or
    None. Checked: identity (three strings and a repetition >= 0), the string fields, ``output``
    and ``finish_reason`` (string or null), ``model`` and ``system_fingerprint`` (string or
    null, or absent), ``score`` (finite, 0..1, or null), ``passed`` (bool
    or null), ``attempts`` and ``shard`` (integers >= 0), ``error`` (null or category, status,
    message; an error record has no score), ``timing`` (finite seconds >= 0 or null),
    ``usage`` (token counts >= 0 or null), a code suite's ``sandbox`` facts and an imported
    record's ``source`` (its fields, each a string), a conversation's ``dialogue`` (its kind,
    lists and end)."""
    problem = (
        _identity(record)
        or _scalars(record)
        or _result(record)
        or _error(record)
        or _timing(record)
        or _usage(record)
        or _sandbox(record)
        or _source(record)
        or _dialogue(record)
        or _choice(record)
    )
    return None if problem is None else f"malformed record: {problem}"


def _identity(record: Mapping[str, object]) -> str | None:
    identity = record["identity"]
    if not isinstance(identity, dict) or identity.keys() != _IDENTITY_KEYS:
        return "identity must hold dataset_revision, case_id, candidate and repetition"
    for key in ("dataset_revision", "case_id", "candidate"):
        if not isinstance(identity[key], str) or not identity[key]:
            return f"identity.{key} must be a non-empty string"
    if not _is_count(identity["repetition"]):
        return f"identity.repetition must be an integer >= 0, not {identity['repetition']!r}"
    return None


def _scalars(record: Mapping[str, object]) -> str | None:
    for key in _STRINGS:
        if not isinstance(record[key], str):
            return f"{key} must be a string, not {type(record[key]).__name__}"
    for key in ("output", "finish_reason"):
        if record[key] is not None and not isinstance(record[key], str):
            return f"{key} must be a string or null, not {type(record[key]).__name__}"
    for key in ("model", "system_fingerprint"):  # absent from records before issue 30
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key} must be a string or null, not {type(value).__name__}"
    for key in ("attempts", "shard"):
        if not _is_count(record[key]):
            return f"{key} must be an integer >= 0, not {record[key]!r}"
    return None


def _result(record: Mapping[str, object]) -> str | None:
    score, passed = record["score"], record["passed"]
    if score is not None and not (_is_number(score) and 0.0 <= score <= 1.0):
        return f"score must be a finite number in 0..1 or null, not {score!r}"
    if passed is not None and not isinstance(passed, bool):
        return f"passed must be true, false or null, not {passed!r}"
    if record["error"] is not None and (score is not None or passed is not None):
        return "an error record has no score and no passed"
    return None


def _error(record: Mapping[str, object]) -> str | None:
    error = record["error"]
    if error is None:
        return None
    ok = (
        isinstance(error, dict)
        and error.keys() == _ERROR_KEYS
        and isinstance(error["category"], str)
        and isinstance(error["message"], str)
        and (error["status"] is None or _is_int(error["status"]))
    )
    return None if ok else "error must be null or {category, status, message}"


def _members(
    record: Mapping[str, object], key: str, keys: frozenset[str], check: Callable[[object], bool]
) -> str | None:
    # Tolerant of a member left out (hand-made stores); never of a foreign one or a bad value.
    value = record[key]
    if not isinstance(value, dict) or not value.keys() <= keys:
        return f"{key} must be an object with members {', '.join(sorted(keys))}"
    for name, member in value.items():
        if member is not None and not check(member):
            return f"{key}.{name} must be a finite number >= 0 or null, not {member!r}"
    return None


def _is_seconds(value: object) -> bool:
    return _is_number(value) and value >= 0


def _timing(record: Mapping[str, object]) -> str | None:
    return _members(record, "timing", _TIMING_KEYS, _is_seconds)


def _usage(record: Mapping[str, object]) -> str | None:
    usage = record["usage"]
    if isinstance(usage, dict) and "source" in usage:
        # counted from stream chunks (client.read): the only source a record names
        if usage["source"] != "chunks" or usage.get("flagged") is not None:
            return "usage.source must be 'chunks' (and the usage not flagged)"
        usage = {name: value for name, value in usage.items() if name != "source"}
        return _members({"usage": usage}, "usage", _USAGE_KEYS, _is_count)
    if not isinstance(usage, dict) or "flagged" not in usage:
        return _members(record, "usage", _USAGE_KEYS, _is_count)
    # implausible numbers the client refused to keep (client.checks): a reason, no counts
    counts = {name: value for name, value in usage.items() if name != "flagged"}
    if not isinstance(usage["flagged"], str) or any(v is not None for v in counts.values()):
        return "usage.flagged must be a reason with both token counts null"
    return _members({"usage": counts}, "usage", _USAGE_KEYS, _is_count)


def _sandbox(record: Mapping[str, object]) -> str | None:
    facts = record.get("sandbox")
    if facts is None and "sandbox" not in record:
        return None
    ok = (
        isinstance(facts, dict)
        and facts.keys() == _SANDBOX_KEYS
        and all(isinstance(facts[k], str) for k in ("outcome", "message", "isolation"))
        and (facts["exit_status"] is None or _is_int(facts["exit_status"]))
        and _is_seconds(facts["start_s"])
        and _is_seconds(facts["run_s"])
        and isinstance(facts["sandboxed"], bool)
    )
    return None if ok else "sandbox must hold outcome, message, exit_status, times, isolation"


def _source(record: Mapping[str, object]) -> str | None:
    if "source" not in record:
        return None
    source = record["source"]
    ok = (
        isinstance(source, dict)
        and source.keys() == EVALGATE_SOURCE_FIELDS
        and all(isinstance(value, str) for value in source.values())
    )
    return (
        None if ok else f"source must hold {', '.join(sorted(EVALGATE_SOURCE_FIELDS))} as strings"
    )


_DIALOGUE_LISTS = ("transcript", "steps", "calls", "invalid")
_DIALOGUE_ENDS = frozenset({"answer", "max_steps", "max_tool_calls", "timeout", "error"})


def _dialogue(record: Mapping[str, object]) -> str | None:
    if "dialogue" not in record:
        return None
    facts = record["dialogue"]
    ok = (
        isinstance(facts, dict)
        and facts.get("kind") in ("turns", "tools")
        and all(isinstance(facts.get(key), list) for key in _DIALOGUE_LISTS)
        and _is_int(facts.get("tool_calls"))
        and facts.get("end") in _DIALOGUE_ENDS
        and isinstance(facts.get("state"), dict)
    )
    return None if ok else "dialogue must hold kind, transcript, steps, calls, invalid, end, state"


def _choice(record: Mapping[str, object]) -> str | None:
    if "choice" not in record:
        return None
    facts = record["choice"]
    if not isinstance(facts, dict) or facts.get("method") not in ("loglikelihood", "generate"):
        return "choice must hold its method (loglikelihood or generate)"
    choices = facts.get("choices")
    if not isinstance(choices, list) or not all(_is_choice(c) for c in choices):
        return "choice.choices must be a list of {loglikelihood, tokens, greedy}"
    count = facts.get("count")
    if not _is_int(count) or count < 0:
        return "choice.count must be the number of choices"
    for key in ("target", "acc", "acc_norm"):
        pick = facts.get(key)
        if pick is not None and not (_is_int(pick) and 0 <= pick < count):
            return f"choice.{key} must be an index of the {count} choices, or null"
    return None


def _is_choice(choice: object) -> bool:
    return (
        isinstance(choice, dict)
        and _is_number(choice.get("loglikelihood"))
        and _is_count(choice.get("tokens"))
        and (choice.get("greedy") is None or isinstance(choice.get("greedy"), bool))
    )


_JUDGMENT_KEYS = frozenset({"dataset_revision", "case_id", "candidate", "repetition", "order"})
_WINNERS = frozenset({"A", "B", "tie"})


def evalgate_judgment_problem(record: Mapping[str, object]) -> str | None:
    """What is wrong with a judgment record's values (its field names already match), or None:
    the judged identity (strings, repetition >= 0, order string or null), ``answers`` (a list
    of checksums), ``verdict`` (null, a pairwise ``winner`` A/B/tie, or a pointwise finite
    ``score``, ``value`` in 0..1 and boolean ``passed``), ``error``, ``attempts``, ``e2e_s``."""
    problem = _judged_identity(record) or _verdict(record) or _error(record)
    if problem is None and not _is_count(record["attempts"]):
        problem = f"attempts must be an integer >= 0, not {record['attempts']!r}"
    if problem is None and not _is_seconds(record["e2e_s"]):
        problem = f"e2e_s must be a finite number >= 0, not {record['e2e_s']!r}"
    if problem is None and not (
        isinstance(record["answers"], list) and all(isinstance(a, str) for a in record["answers"])
    ):
        problem = "answers must be a list of checksums"
    return None if problem is None else f"malformed judgment: {problem}"


def _judged_identity(record: Mapping[str, object]) -> str | None:
    part = record["judgment"]
    if not isinstance(part, dict) or part.keys() != _JUDGMENT_KEYS:
        return "judgment must hold dataset_revision, case_id, candidate, repetition and order"
    if not all(isinstance(part[k], str) for k in ("dataset_revision", "case_id", "candidate")):
        return "judgment's dataset_revision, case_id and candidate must be strings"
    if not _is_count(part["repetition"]):
        return f"judgment.repetition must be an integer >= 0, not {part['repetition']!r}"
    if part["order"] is not None and not isinstance(part["order"], str):
        return "judgment.order must be a string or null"
    return None


def _verdict(record: Mapping[str, object]) -> str | None:
    verdict = record["verdict"]
    if verdict is None:
        return None
    if not isinstance(verdict, dict):
        return "verdict must be an object or null"
    if "winner" in verdict:
        return None if verdict["winner"] in _WINNERS else "verdict.winner must be A, B or tie"
    score: Any = verdict.get("score")
    value: Any = verdict.get("value")
    passed: Any = verdict.get("passed")
    if not (_is_number(score) and _is_number(value) and 0.0 <= value <= 1.0):
        return f"verdict needs a finite score and a value in 0..1, not {score!r}, {value!r}"
    return None if isinstance(passed, bool) else "verdict.passed must be true or false"
