"""What aggregation and the decision add for conversations and tool loops (SPEC 17).

``evalgate_dialogue_summary(records)`` counts, per candidate and per slice (category, and
``all``): identities, model calls (``steps``), tool calls, and each dialogue outcome
(``tool_call_invalid``, ``max_steps``, ``max_tool_calls``, ``timeout``; ``dialogue.grade``).
The decision carries it as ``dialogue``; the reports show it with the other facts. A suite
without conversations or tools gets no ``dialogue`` key.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_evalgate.dialogue.grade import EVALGATE_DIALOGUE_OUTCOMES, evalgate_dialogue_outcome
from pytest_evalgate.store import EvalgateRecord

EvalgateDialogueSummary = dict[str, dict[str, dict[str, int]]]
"""candidate -> slice -> count name -> count."""


def evalgate_dialogue_summary(records: Iterable[EvalgateRecord]) -> EvalgateDialogueSummary:
    """The counts over ``records`` (see the module docstring)."""
    summary: EvalgateDialogueSummary = {}
    for record in records:
        facts = record.get("dialogue")
        if facts is None:
            continue
        slices = summary.setdefault(record["identity"]["candidate"], {})
        outcome = evalgate_dialogue_outcome(facts)
        for name in ("all", record["category"]):
            counts = slices.setdefault(name, _zero())
            counts["identities"] += 1
            counts["steps"] += len(facts["steps"])
            counts["tool_calls"] += int(facts["tool_calls"])
            if outcome is not None:
                counts[outcome] += 1
    return summary


def _zero() -> dict[str, int]:
    return {"identities": 0, "steps": 0, "tool_calls": 0} | dict.fromkeys(
        EVALGATE_DIALOGUE_OUTCOMES, 0
    )
