"""Grading a conversation or a tool loop (SPEC 17), on the pytest side, from a record's
``dialogue`` facts (``dialogue.loop``).

- ``evalgate_grade_turns``: every turn with a target is scored by its own ``check`` (a built-in
  scorer) or the suite's scorer; the case's score is the share of scored turns that pass, or 1/0
  when ``mode == "all"``; it passes when the score reaches ``threshold``.
- ``evalgate_grade_tools``: the final answer by ``answer_scorer`` against the target (when the
  case has one) plus the trajectory: every expected call (name and argument subset) made with
  valid arguments, no forbidden tool called, the call count within bounds, the final mock
  state containing ``expect.state``, no invalid call (``tool_call_invalid``) and a loop that
  ended with an answer (not ``max_steps``/``max_tool_calls``/``timeout``). Score 1.0 when every
  check holds, else 0.0.

Both return ``(score, passed, failures)``; ``failures`` names each failed check in words that
hold no dataset or answer text (tool names, counts and turn numbers only: they reach the
terminal and JUnit, where eval text never goes unasked; the transcript in the record has the
rest). ``evalgate_dialogue_outcome`` is the one label per record that reports count per slice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_evalgate.dialogue.case import EvalgateExpect, EvalgateExpectedCall, EvalgateTurn

EvalgateTextScorer = Callable[[str, str], float]
EVALGATE_DIALOGUE_OUTCOMES = ("tool_call_invalid", "max_steps", "max_tool_calls", "timeout")


def evalgate_grade_turns(
    turns: Sequence[EvalgateTurn],
    facts: Mapping[str, Any],
    scorer_of: Callable[[EvalgateTurn], EvalgateTextScorer],
    threshold: float,
    mode: str,
) -> tuple[float, bool, list[str]]:
    """The conversation's (score, passed, failures): see the module docstring."""
    outputs = list(facts.get("outputs", []))
    scored = passed = 0
    failures = []
    for number, turn in enumerate(turns):
        if turn.target is None:
            continue
        scored += 1
        answer = outputs[number] if number < len(outputs) else ""
        if float(scorer_of(turn)(answer, turn.target)) >= threshold:
            passed += 1
        else:
            failures.append(f"turn {number + 1} wrong")
    share = passed / scored
    score = float(share == 1.0) if mode == "all" else share
    return score, score >= threshold, failures


def evalgate_grade_tools(
    expect: EvalgateExpect | None,
    facts: Mapping[str, Any],
    output: str,
    target: str,
    answer_scorer: EvalgateTextScorer,
    threshold: float,
) -> tuple[float, bool, list[str]]:
    """The tool loop's (score, passed, failures): see the module docstring."""
    failures = _loop_failures(facts)
    if target and float(answer_scorer(output, target)) < threshold:
        failures.append("final answer wrong")
    if expect is not None:
        failures += _trajectory_failures(expect, facts)
    score = 0.0 if failures else 1.0
    return score, not failures, failures


def _loop_failures(facts: Mapping[str, Any]) -> list[str]:
    failures = [
        f"tool_call_invalid ({bad['name']}, step {bad['step']})" for bad in facts["invalid"]
    ]
    if facts["end"] != "answer":
        failures.append(f"ended by {facts['end']} before a final answer")
    return failures


def _trajectory_failures(expect: EvalgateExpect, facts: Mapping[str, Any]) -> list[str]:
    calls = [(call["name"], _arguments(call["arguments"])) for call in facts["calls"]]
    failures = [
        f"missing call {wanted.name}"
        for wanted in expect.calls
        if not any(_matches(wanted, name, arguments) for name, arguments in calls)
    ]
    failures += [f"forbidden call {name}" for name in expect.forbidden if name in dict(calls)]
    count = int(facts["tool_calls"])
    if expect.max_calls is not None and count > expect.max_calls:
        failures.append(f"{count} tool calls, more than max_calls {expect.max_calls}")
    if expect.min_calls is not None and count < expect.min_calls:
        failures.append(f"{count} tool calls, fewer than min_calls {expect.min_calls}")
    state = facts.get("state", {})
    for key, value in (expect.state or {}).items():
        if state.get(key, 0 if isinstance(value, int) else None) != value:
            failures.append(f"final state {key} differs")
    return failures


def _arguments(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _matches(wanted: EvalgateExpectedCall, name: str, arguments: dict[str, Any] | None) -> bool:
    if name != wanted.name or arguments is None:
        return False
    return all(arguments.get(key) == value for key, value in wanted.arguments.items())


def evalgate_dialogue_outcome(facts: Mapping[str, Any] | None) -> str | None:
    """The record's one dialogue outcome for counting per slice: ``tool_call_invalid`` when a
    call was invalid, else the limit that ended the loop, else None (an answer)."""
    if not facts:
        return None
    if facts.get("invalid"):
        return "tool_call_invalid"
    end = facts.get("end")
    return end if end in EVALGATE_DIALOGUE_OUTCOMES else None
