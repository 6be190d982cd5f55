"""One answer as the shadow stage keeps it: text, finish reason, length, tool calls, error.

``evalgate_read_answer(status, content_type, body)`` reads an OpenAI-compatible chat or
completions answer from its raw bytes, whole (JSON) or streamed (SSE ``data:`` lines), without
raising: a body that is not an answer is an answer with ``error`` set. Output length is the
answer's ``usage.completion_tokens`` when reported, else its whitespace-separated words (a
stream without usage): the same measure on both sides of a pair, since the request is one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EvalgateShadowAnswer:
    """What one side of a pair answered (``error`` None: it answered)."""

    status: int
    text: str
    finish_reason: str | None
    output_tokens: int
    tool_calls: int
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Builtins for the pair record."""
        return {
            "status": self.status,
            "text": self.text,
            "finish_reason": self.finish_reason,
            "output_tokens": self.output_tokens,
            "tool_calls": self.tool_calls,
            "error": self.error,
        }


def evalgate_failed_answer(status: int, reason: str) -> EvalgateShadowAnswer:
    """An answer that did not come (a timeout, a refused connection, an HTTP error)."""
    return EvalgateShadowAnswer(status, "", None, 0, 0, reason)


def evalgate_read_answer(status: int, content_type: str, body: bytes) -> EvalgateShadowAnswer:
    """The answer in ``body`` (see the module); a non-2xx status is an error answer."""
    if not 200 <= status < 300:
        return evalgate_failed_answer(status, _error_text(status, body))
    objects = _sse_objects(body) if "text/event-stream" in content_type.lower() else [_json(body)]
    if not objects or any(obj is None for obj in objects):
        return evalgate_failed_answer(status, "not an OpenAI-compatible answer")
    return _fold(status, [obj for obj in objects if obj is not None])


def _error_text(status: int, body: bytes) -> str:
    """``HTTP 500: <the error body's message>`` (its first 300 characters; redacted later)."""
    obj = _json(body)
    error = obj.get("error") if obj is not None else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str):
        message = body[:300].decode("utf-8", errors="replace")
    return f"HTTP {status}: {message[:300]}" if message else f"HTTP {status}"


def _json(data: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _sse_objects(body: bytes) -> list[dict[str, Any] | None]:
    objects: list[dict[str, Any] | None] = []
    for line in body.split(b"\n"):
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data != b"[DONE]":
            objects.append(_json(data))
    return objects


def _fold(status: int, objects: list[dict[str, Any]]) -> EvalgateShadowAnswer:
    texts: list[str] = []
    finish: str | None = None
    calls: set[int] = set()
    tokens: int | None = None
    for obj in objects:
        if isinstance(obj.get("error"), dict):
            return evalgate_failed_answer(status, "an error object in the answer")
        choice = _first_choice(obj)
        texts.append(_choice_text(choice))
        finish = choice.get("finish_reason") or finish
        calls |= _tool_call_indices(choice)
        usage = obj.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            tokens = usage["completion_tokens"]
    text = "".join(texts)
    length = len(text.split()) if tokens is None else tokens
    return EvalgateShadowAnswer(status, text, finish, length, len(calls))


def _first_choice(obj: dict[str, Any]) -> dict[str, Any]:
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def _choice_text(choice: dict[str, Any]) -> str:
    for holder in (choice.get("message"), choice.get("delta")):
        content = holder.get("content") if isinstance(holder, dict) else None
        if isinstance(content, str):
            return content
    text = choice.get("text")
    return text if isinstance(text, str) else ""


def _tool_call_indices(choice: dict[str, Any]) -> set[int]:
    found: set[int] = set()
    for holder in (choice.get("message"), choice.get("delta")):
        calls = holder.get("tool_calls") if isinstance(holder, dict) else None
        for position, call in enumerate(calls if isinstance(calls, list) else []):
            index = call.get("index", position) if isinstance(call, dict) else position
            found.add(index if isinstance(index, int) else position)
    return found
