"""The pytest side of conversations and tool loops (SPEC 17): what a work carries to the
child, and how its record is graded when the outcome comes back.

- ``evalgate_dialogue_spec(work)``: ``{"kind": "turns", "users": [...]}`` for a case with
  ``turns``; ``{"kind": "tools", max_steps, max_tool_calls, timeout_s}`` for a tool suite's case
  (the runner adds the fixture's wire number, ``box``); None for a one-answer case.
- ``evalgate_tools_body(manifest, body)``: the request body with the fixture's ``tools``.
- ``evalgate_dialogue_graded(work, outcome)``: the outcome with ``dialogue.failures`` added
  and the grade to seal it with (``dialogue.grade``): per turn by the turn's ``check`` or the
  suite's scorer, or the tool loop's answer and trajectory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_evalgate.dialogue.case import EvalgateTurn
from pytest_evalgate.dialogue.grade import (
    EvalgateTextScorer,
    evalgate_grade_tools,
    evalgate_grade_turns,
)
from pytest_evalgate.scoring import evalgate_make_scorer
from pytest_evalgate.store.records import EvalgateGrade, EvalgateOutcome

if TYPE_CHECKING:  # types only
    from pytest_evalgate.manifest.dataset import EvalgateCase
    from pytest_evalgate.manifest.load import EvalgateManifest
    from pytest_evalgate.scoring import EvalgateScorer


def evalgate_dialogue_spec(case: EvalgateCase, manifest: EvalgateManifest) -> dict[str, Any] | None:
    """What the child needs to drive a case's loop (see the module docstring)."""
    if case.turns:
        return {"kind": "turns", "users": [turn.user for turn in case.turns]}
    tools = manifest.tools
    if tools is None:
        return None
    limits = tools.model_dump(exclude={"fixture", "revision"})
    return {"kind": "tools", **limits}


def evalgate_tools_body(manifest: EvalgateManifest, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the fixture's tools (a suite without tools: ``body`` itself)."""
    if manifest.fixture is not None:
        body["tools"] = [tool.evalgate_openai() for tool in manifest.fixture.tools]
    return body


def evalgate_dialogue_graded(
    case: EvalgateCase,
    manifest: EvalgateManifest,
    scorer: EvalgateScorer,
    threshold: float,
    outcome: EvalgateOutcome,
) -> tuple[EvalgateOutcome, EvalgateGrade]:
    """The outcome with its failures and the grade that seals it (see the docstring)."""
    facts = outcome["dialogue"]
    if facts["kind"] == "turns":
        mode = manifest.evaluator.turns or "share"
        score, passed, failures = evalgate_grade_turns(
            case.turns, facts, lambda turn: _turn_scorer(case, scorer, turn), threshold, mode
        )
    else:
        output = outcome["output"] or ""
        score, passed, failures = evalgate_grade_tools(
            case.expect, facts, output, case.target, scorer, threshold
        )
    graded: EvalgateOutcome = {**outcome, "dialogue": {**facts, "failures": failures}}

    def grade(_output: str) -> tuple[float | None, bool | None]:
        return score, passed

    return graded, grade


def _turn_scorer(
    case: EvalgateCase, scorer: EvalgateScorer, turn: EvalgateTurn
) -> EvalgateTextScorer:
    if turn.check is None:
        return scorer
    options = turn.check.get("options", {})
    return evalgate_make_scorer(str(turn.check["scorer"]), options, {}, case.case_id)
