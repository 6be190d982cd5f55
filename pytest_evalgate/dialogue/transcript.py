"""A record's conversation as text for people (``--evalgate-report-text`` only): one line per
message, ``role: content``, a tool call as ``assistant -> name(arguments)`` and a tool result
as ``tool name: content``. Never called without that option: transcripts are eval text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_LINE_CUT = 300


def evalgate_transcript_text(facts: Mapping[str, Any]) -> str:
    """The transcript of a record's ``dialogue`` facts (the messages after the case's prompt)."""
    names: dict[str, str] = {}
    return "\n".join(_line(message, names) for message in facts.get("transcript", []))


def _line(message: Mapping[str, Any], names: dict[str, str]) -> str:
    role = str(message.get("role"))
    calls: Sequence[Mapping[str, Any]] = message.get("tool_calls") or []
    if calls:
        parts = []
        for call in calls:
            function = call.get("function") or {}
            names[str(call.get("id"))] = str(function.get("name"))
            parts.append(f"{function.get('name')}({_cut(str(function.get('arguments')))})")
        return f"{role} -> " + ", ".join(parts)
    if role == "tool":
        name = names.get(str(message.get("tool_call_id")), "?")
        return f"tool {name}: {_cut(str(message.get('content')))}"
    return f"{role}: {_cut(str(message.get('content') or ''))}"


def _cut(text: str) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= _LINE_CUT else text[: _LINE_CUT - 3] + "..."
