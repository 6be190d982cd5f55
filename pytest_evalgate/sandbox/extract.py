"""Take the code out of a model's answer (``extract: fenced``).

``fenced``: the first fenced code block (CommonMark-style: a line of three or more backticks
or tildes, indented at most three spaces, optionally followed by an info string such as
``python``; closed by a line of the same character at least as long), else the whole answer.
A block that is never closed (an answer cut off at ``max_tokens``) runs to the end of the answer.
The info string is not consulted: the first block is the answer's code, whatever it is labelled.
"""

from __future__ import annotations

import re

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_EXTRACT_MODES = ("fenced",)
"""Accepted ``extract`` values."""

_OPENING = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def evalgate_extract_code(answer: str, mode: str = "fenced") -> str:
    """The code to run for ``answer`` under ``mode`` (``EvalgateConfigError`` on a bad mode)."""
    if mode not in EVALGATE_EXTRACT_MODES:
        reason = f"must be one of {', '.join(EVALGATE_EXTRACT_MODES)}"
        raise EvalgateConfigError("evaluator", "extract", reason)
    lines = answer.splitlines()
    for index, line in enumerate(lines):
        opening = _opening(line)
        if opening is not None:
            indent, fence = opening
            return _block(lines[index + 1 :], indent, fence)
    return answer


def _opening(line: str) -> tuple[int, str] | None:
    """(indent, fence) when ``line`` opens a block (a backtick fence's info has no backtick)."""
    match = _OPENING.match(line)
    if match is None or (match["fence"][0] == "`" and "`" in match["info"]):
        return None
    return len(match["indent"]), match["fence"]


def _block(lines: list[str], indent: int, fence: str) -> str:
    """The block's lines up to its closing fence, with the opening fence's indent removed."""
    body: list[str] = []
    for line in lines:
        if _closes(line, fence):
            break
        body.append(_dedent(line, indent))
    return "\n".join(body) + "\n" if body else ""


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return (
        len(line) - len(line.lstrip(" ")) <= 3
        and len(stripped) >= len(fence)
        and set(stripped) == {fence[0]}
    )


def _dedent(line: str, indent: int) -> str:
    removable = len(line) - len(line.lstrip(" "))
    return line[min(indent, removable) :]
