"""OpenAI-shaped response bodies: errors, whole completions and streamed (SSE) completions.

Contracts
---------
- ``kind`` is ``"chat"`` (``/v1/chat/completions``) or ``"text"`` (``/v1/completions``).
- Error bodies are ``{"error": {"message", "type", "param", "code"}}``; the message ends with
  ``(evalgate simulator)``. Whole bodies and every stream event carry ``model`` (the
  requested one, or the ``served_model`` knob's) and ``system_fingerprint:
  "evalgate-simulator"``, as OpenAI's do.
- A stream is ``data: {...}`` events: one per token (the first chat delta carries the role),
  a finish event with ``finish_reason``, a usage event (``choices: []``) when asked for with
  ``stream_options.include_usage``, then ``data: [DONE]``. The first token is written after
  ``ttft_s``, each next one ``tpot_s`` later.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any, Protocol

from pytest_evalgate.simulated.plan import EvalgateSimPlan

EVALGATE_SIM_OWNER = "evalgate-simulator"


def evalgate_sim_error_body(message: str, kind: str, code: str | None) -> bytes:
    """An OpenAI error body; the message says it comes from the simulator."""
    error = {"message": message + " (evalgate simulator)", "type": kind, "param": None}
    error["code"] = code
    return json.dumps({"error": error}).encode()


def evalgate_sim_full_body(kind: str, rid: str, model: str, plan: EvalgateSimPlan) -> bytes:
    """The whole (non-streamed) completion of ``plan``."""
    text = "".join(plan.tokens)
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": plan.finish}
    if kind == "chat" and plan.tool_calls:
        calls = [_sim_call(call) for call in plan.tool_calls]
        choice["message"] = {"role": "assistant", "content": None, "tool_calls": calls}
    elif kind == "chat":
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    obj = "chat.completion" if kind == "chat" else "text_completion"
    body = {"id": rid, "object": obj, "created": int(time.time()), "model": model}
    body |= {"system_fingerprint": EVALGATE_SIM_OWNER, "choices": [choice], "usage": plan.usage()}
    return json.dumps(body).encode()


def _sim_call(call: Mapping[str, str]) -> dict[str, Any]:
    function = {"name": call["name"], "arguments": call["arguments"]}
    return {"id": call["id"], "type": "function", "function": function}


class EvalgateSimEventSink(Protocol):
    """Where a stream writes its events (the HTTP connection, one chunk per call)."""

    def write_events(self, data: bytes) -> None:
        """Write already SSE-framed bytes."""


class EvalgateSimStream:
    """The SSE events of one streamed answer, written on the plan's schedule."""

    def __init__(self, kind: str, rid: str, model: str, plan: EvalgateSimPlan, usage: bool) -> None:
        self.kind, self.plan, self.usage = kind, plan, usage
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        self.base = {"id": rid, "object": obj, "created": int(time.time()), "model": model}
        self.base["system_fingerprint"] = EVALGATE_SIM_OWNER

    def event(self, choices: list[Mapping[str, object]], **extra: object) -> bytes:
        """One ``data: {...}`` event."""
        return b"data: " + json.dumps({**self.base, "choices": choices, **extra}).encode() + b"\n\n"

    def token(self, index: int, text: str | None, finish: str | None) -> bytes:
        """The event carrying token ``index`` (the first one also carries the role)."""
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if self.kind == "text":
            choice["text"] = text or ""
        else:
            delta = {} if text is None else {"content": text}
            choice["delta"] = {"role": "assistant", **delta} if index == 0 else delta
        return self.event([choice])

    def tail(self) -> bytes:
        """Finish event, optional usage event, ``[DONE]``."""
        out = self.token(max(len(self.plan.tokens), 1), None, self.plan.finish)
        if self.usage:
            out += self.event([], usage=self.plan.usage())
        return out + b"data: [DONE]\n\n"

    def calls(self) -> bytes:
        """A tool-calling answer's deltas, as OpenAI streams them: per call, one event with
        its id, name and the first half of its arguments, one with the rest."""
        out = b""
        for index, call in enumerate(self.plan.tool_calls):
            text = call["arguments"]
            half = len(text) // 2
            head = {"index": index, "id": call["id"], "type": "function"}
            head["function"] = {"name": call["name"], "arguments": text[:half]}
            rest = {"index": index, "function": {"arguments": text[half:]}}
            for number, piece in enumerate((head, rest)):
                delta: dict[str, Any] = {"tool_calls": [piece]}
                if index == 0 and number == 0:
                    delta = {"role": "assistant", "content": None, **delta}
                out += self.event(
                    [{"index": 0, "logprobs": None, "finish_reason": None, "delta": delta}]
                )
        return out

    async def run(self, sink: EvalgateSimEventSink) -> None:
        """Write every event: first token after ``ttft_s``, each next after ``tpot_s``."""
        await asyncio.sleep(self.plan.ttft_s)
        if self.plan.tool_calls and self.kind == "chat":
            sink.write_events(self.calls() + self.tail())
            return
        tokens = self.plan.tokens or ("",)
        if self.plan.tpot_s <= 0:  # no pacing: one write is far cheaper than one per token
            sink.write_events(b"".join(self.token(i, t, None) for i, t in enumerate(tokens)))
        else:
            for i, text in enumerate(tokens):
                if i:
                    await asyncio.sleep(self.plan.tpot_s)
                sink.write_events(self.token(i, text, None))
        sink.write_events(self.tail())
