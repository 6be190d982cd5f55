"""Item views of a judged suite: what an item sees, its generation record with the judged grade.

The judging stage (``runner/judging.py``) returns an identity's judgments; the session folds
them into the item's record with ``evalgate_judged_view`` (SPEC section 10).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_evalgate.judge.pairwise import evalgate_pair_outcome


def evalgate_judged_view(
    record: Mapping[str, Any], judgments: list[Mapping[str, Any]] | Mapping[str, Any]
) -> dict[str, Any]:
    """What an item of a judged suite sees: its generation record with the judged grade.

    An answer's own error stays; a judgment's error (``judge_<category>``,
    ``judge_unparseable``) becomes the item's error, never a wrong answer. Pointwise: score is
    the verdict's 0..1 value, passed at ``scale.pass``. Pairwise (the candidate's items): win 1,
    tie 0.5, loss 0, passed unless lost. A baseline item of a pairwise suite passes when it
    answered (its answer is what the candidate is compared with).
    """
    view = dict(record)
    if record.get("error") is not None:
        return view
    if isinstance(judgments, Mapping):
        return _with_error(view, judgments) if judgments else {**view, "passed": True}
    errors = [j["error"] for j in judgments if j["error"] is not None]
    if errors:
        return _with_error(view, {"error": errors[0]})
    if len(judgments) == 1:
        verdict = judgments[0]["verdict"]
        return {**view, "score": verdict["value"], "passed": bool(verdict["passed"])}
    outcome = evalgate_pair_outcome(*(j["verdict"]["winner"] for j in judgments))
    view["judge_outcome"] = outcome.result + (" (inconsistent)" if outcome.inconsistent else "")
    return {**view, "score": outcome.score, "passed": outcome.result != "loss"}


def _with_error(view: Mapping[str, object], judgment: Mapping[str, Any]) -> dict[str, Any]:
    error = dict(judgment["error"])
    error["message"] = f"judge: {error['message']}"
    return {**view, "error": error, "score": None, "passed": None}
