"""A dataset row's conversation and tool expectations (SPEC 17): ``turns`` and ``expect``.

``evalgate_parse_turns(source, where, value)`` reads ``turns: [{"user", "target", "check"}]``
(``user`` text; ``target`` text or number, absent for an unscored turn; ``check`` an optional
``{"scorer", "options"}`` of a built-in scorer that scores this turn instead of the suite's).
``evalgate_parse_expect(source, where, value)`` reads ``expect: {"calls": [{"name",
"arguments"}], "forbidden": [...], "max_calls": N, "min_calls": N, "state": {...}}`` (every key
optional; ``arguments`` is a subset the call's arguments must contain). Both raise
``EvalgateConfigError(source, where + key, reason)`` for a wrong shape, before any request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError

_TURN_KEYS = frozenset({"user", "target", "check"})
_EXPECT_KEYS = frozenset({"calls", "forbidden", "max_calls", "min_calls", "state"})


@dataclass(frozen=True)
class EvalgateTurn:
    """One scripted user turn; ``target`` None: the turn is not scored."""

    user: str
    target: str | None
    check: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class EvalgateExpectedCall:
    """A call the trajectory must contain: the tool's name and a subset of its arguments."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class EvalgateExpect:
    """A tool case's trajectory checks."""

    calls: tuple[EvalgateExpectedCall, ...] = ()
    forbidden: tuple[str, ...] = ()
    max_calls: int | None = None
    min_calls: int | None = None
    state: Mapping[str, Any] | None = None


def evalgate_parse_turns(source: str, where: str, value: object) -> tuple[EvalgateTurn, ...]:
    """The row's ``turns`` (see the module docstring)."""
    if not isinstance(value, list) or not value:
        raise EvalgateConfigError(source, f"{where}: turns", "must be a non-empty list of turns")
    turns = []
    for number, turn in enumerate(value):
        key = f"{where}: turns[{number}]"
        if not isinstance(turn, dict) or set(turn) - _TURN_KEYS:
            raise EvalgateConfigError(source, key, "a turn is {user, target?, check?}")
        user = turn.get("user")
        if not isinstance(user, str) or not user:
            raise EvalgateConfigError(source, f"{key}.user", "missing or not a non-empty string")
        turns.append(EvalgateTurn(user, _target(source, key, turn), _check(source, key, turn)))
    if all(turn.target is None for turn in turns):
        raise EvalgateConfigError(source, f"{where}: turns", "no turn has a target to score")
    return tuple(turns)


def _target(source: str, key: str, turn: Mapping[str, object]) -> str | None:
    target = turn.get("target")
    if target is None:
        return None
    if isinstance(target, bool) or not isinstance(target, str | int | float):
        raise EvalgateConfigError(source, f"{key}.target", "must be a string or a number")
    return str(target)


def _check(source: str, key: str, turn: Mapping[str, object]) -> Mapping[str, Any] | None:
    check = turn.get("check")
    if check is None:
        return None
    if not isinstance(check, dict) or not isinstance(check.get("scorer"), str):
        raise EvalgateConfigError(source, f"{key}.check", "must be {scorer: NAME, options: {}}")
    if set(check) - {"scorer", "options"} or not isinstance(check.get("options", {}), dict):
        raise EvalgateConfigError(source, f"{key}.check", "only scorer and options (a mapping)")
    return check


def evalgate_parse_expect(source: str, where: str, value: object) -> EvalgateExpect:
    """The row's ``expect`` (see the module docstring)."""
    key = f"{where}: expect"
    if not isinstance(value, dict):
        raise EvalgateConfigError(source, key, "must be a mapping")
    unknown = sorted(set(value) - _EXPECT_KEYS)
    if unknown:
        raise EvalgateConfigError(source, f"{key}.{unknown[0]}", "unknown key")
    forbidden = value.get("forbidden", [])
    if not isinstance(forbidden, list) or not all(isinstance(n, str) for n in forbidden):
        raise EvalgateConfigError(source, f"{key}.forbidden", "must be a list of tool names")
    state = value.get("state")
    if state is not None and not isinstance(state, dict):
        raise EvalgateConfigError(source, f"{key}.state", "must be a mapping")
    return EvalgateExpect(
        calls=_calls(source, key, value.get("calls", [])),
        forbidden=tuple(forbidden),
        max_calls=_count(source, f"{key}.max_calls", value.get("max_calls")),
        min_calls=_count(source, f"{key}.min_calls", value.get("min_calls")),
        state=state,
    )


def _calls(source: str, key: str, value: object) -> tuple[EvalgateExpectedCall, ...]:
    if not isinstance(value, list):
        raise EvalgateConfigError(source, f"{key}.calls", "must be a list of {name, arguments}")
    calls = []
    for number, call in enumerate(value):
        where = f"{key}.calls[{number}]"
        if not isinstance(call, dict) or set(call) - {"name", "arguments"}:
            raise EvalgateConfigError(source, where, "a call is {name, arguments?}")
        name, arguments = call.get("name"), call.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise EvalgateConfigError(source, where, "name is text and arguments a mapping")
        calls.append(EvalgateExpectedCall(name, arguments))
    return tuple(calls)


def _count(source: str, key: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EvalgateConfigError(source, key, "must be a whole number >= 0")
    return value


def evalgate_tool_names(expect: EvalgateExpect) -> set[str]:
    """Every tool name ``expect`` mentions (checked against the fixture at load)."""
    return {call.name for call in expect.calls} | set(expect.forbidden)
