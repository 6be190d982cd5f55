"""The model-call loops of one identity (SPEC 17), run by the runner's child.

``evalgate_run_dialogue(call, body, spec, boxes, identity)`` drives one identity through
its conversation and returns ``(result, facts)``: one ``EvalgateCallResult`` standing for the
whole loop (tokens and attempts summed, the first step's TTFT and queue time, the loop's wall
time as ``e2e_s``, the final answer as ``output``) and the record's ``dialogue`` member. Every
model call goes through ``call`` and so through the run-wide budget.

- ``{"kind": "turns", "users": [...]}``: the body's last message is the first user turn; each
  next user turn is sent after the model's previous answer. ``facts["outputs"]`` holds every
  answer, scored per turn by the pytest side (``dialogue.grade``).
- ``{"kind": "tools", "box": N, "max_steps", "max_tool_calls", "timeout_s"}``: request with the
  fixture's ``tools``, run each ``tool_calls`` entry (``toolrun``), append the ``role: tool``
  messages, until the model answers without a tool call (``end: answer``) or a limit ends the
  loop (``end: max_steps | max_tool_calls | timeout``): outcomes of the answer, never errors.

An endpoint error on any step ends the loop with that error (the identity has no result; a
rerun restarts its conversation from the first turn). A tool's mock service that fails is the
error ``tool_service`` (not the model's fault, retried by a rerun).

``facts``: ``kind``, ``transcript`` (the messages after the case's prompt: answers, tool calls,
tool results, later user turns), ``steps`` (tokens, times, finish reason and tool calls per
model call), ``tool_calls``, ``invalid`` (``{"step", "name", "reason"}`` per invalid call),
``end``, ``state`` (the identity's mock state) and, for turns, ``outputs``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from pytest_evalgate.client.types import EvalgateCallError, EvalgateCallResult
from pytest_evalgate.dialogue.toolrun import EvalgateToolBox, EvalgateToolState
from pytest_evalgate.errors import EvalgateToolServiceError

EvalgateModelCall = Callable[[Mapping[str, Any]], Awaitable[EvalgateCallResult]]
EVALGATE_TOOL_SERVICE_CATEGORY = "tool_service"


async def evalgate_run_dialogue(
    call: EvalgateModelCall,
    body: Mapping[str, Any],
    spec: Mapping[str, Any],
    boxes: Mapping[int, EvalgateToolBox],
    identity: str,
) -> tuple[EvalgateCallResult, dict[str, Any]]:
    """Run the loop ``spec`` names (see the module docstring)."""
    if spec["kind"] == "turns":
        return await _turns(call, body, list(spec["users"]))
    return await _tools(call, body, spec, boxes[int(spec["box"])], identity)


async def _turns(
    call: EvalgateModelCall, body: Mapping[str, Any], users: list[str]
) -> tuple[EvalgateCallResult, dict[str, Any]]:
    messages = list(body["messages"])
    facts = _facts("turns")
    facts["outputs"] = []
    results: list[EvalgateCallResult] = []
    started = time.perf_counter()
    for number, user in enumerate(users):
        if number:
            messages.append({"role": "user", "content": user})
            facts["transcript"].append(messages[-1])
        result = await call({**body, "messages": messages})
        results.append(result)
        _step(facts, result)
        if result.error is not None:
            break
        messages.append({"role": "assistant", "content": result.output or ""})
        facts["transcript"].append(messages[-1])
        facts["outputs"].append(result.output or "")
    facts["end"] = "answer"
    return _combined(results, time.perf_counter() - started), facts


async def _tools(
    call: EvalgateModelCall,
    body: Mapping[str, Any],
    spec: Mapping[str, Any],
    box: EvalgateToolBox,
    identity: str,
) -> tuple[EvalgateCallResult, dict[str, Any]]:
    facts = _facts("tools")
    results: list[EvalgateCallResult] = []
    started = time.perf_counter()
    loop = _ToolLoop(call, body, spec, box, identity, facts, results)
    try:
        async with asyncio.timeout(float(spec["timeout_s"])):
            facts["end"] = await loop.run()
    except TimeoutError:
        facts["end"] = "timeout"
    except EvalgateToolServiceError as exc:
        facts["end"] = "error"
        error = EvalgateCallError(EVALGATE_TOOL_SERVICE_CATEGORY, None, str(exc), False)
        last = _combined(results, time.perf_counter() - started)
        return replace(last, error=error), facts
    facts["state"] = loop.mock.state
    return _combined(results, time.perf_counter() - started), facts


class _ToolLoop:
    """One identity's tool loop; its steps append to ``facts`` and ``results`` as they go, so a
    timeout keeps what was done before it."""

    def __init__(
        self,
        call: EvalgateModelCall,
        body: Mapping[str, Any],
        spec: Mapping[str, Any],
        box: EvalgateToolBox,
        identity: str,
        facts: dict[str, Any],
        results: list[EvalgateCallResult],
    ) -> None:
        self.call, self.body, self.box, self.identity = call, body, box, identity
        self.max_steps, self.max_calls = int(spec["max_steps"]), int(spec["max_tool_calls"])
        self.facts, self.results = facts, results
        self.messages = list(body["messages"])
        self.mock = EvalgateToolState()

    async def run(self) -> str:
        """Steps until an answer without tool calls, or a limit: the loop's ``end``."""
        for step in range(self.max_steps):
            result = await self.call({**self.body, "messages": self.messages})
            self.results.append(result)
            _step(self.facts, result)
            if result.error is not None:
                return "error"
            if not result.tool_calls:
                self._say({"role": "assistant", "content": result.output or ""})
                return "answer"
            if not await self._run_calls(step, result):
                return "max_tool_calls"
        return "max_steps"

    async def _run_calls(self, step: int, result: EvalgateCallResult) -> bool:
        calls = [
            {"id": c["id"] or f"call_{step}_{n}", "name": c["name"], "arguments": c["arguments"]}
            for n, c in enumerate(result.tool_calls)
        ]
        self._say(
            {
                "role": "assistant",
                "content": result.output or None,
                "tool_calls": [
                    {"id": c["id"], "type": "function", "function": _function(c)} for c in calls
                ],
            }
        )
        for index, tool_call in enumerate(calls):
            if self.facts["tool_calls"] >= self.max_calls:
                return False
            self.facts["tool_calls"] += 1
            answer = await self.box.evalgate_run(tool_call, self.identity, step, index, self.mock)
            if answer.invalid is not None:
                invalid = {"step": step, "name": tool_call["name"], "reason": answer.invalid}
                self.facts["invalid"].append(invalid)
            self._say({"role": "tool", "tool_call_id": tool_call["id"], "content": answer.content})
            self.facts["calls"].append(
                {"step": step, "name": tool_call["name"], "arguments": tool_call["arguments"]}
            )
        return True

    def _say(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.facts["transcript"].append(message)


def _function(call: Mapping[str, str]) -> dict[str, str]:
    return {"name": call["name"], "arguments": call["arguments"]}


def _facts(kind: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "transcript": [],
        "steps": [],
        "calls": [],
        "tool_calls": 0,
        "invalid": [],
        "end": "answer",
        "state": {},
    }


def _step(facts: dict[str, Any], result: EvalgateCallResult) -> None:
    facts["steps"].append(
        {
            "e2e_s": result.e2e_s,
            "ttft_s": result.ttft_s,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "finish_reason": result.finish_reason,
            "tool_calls": len(result.tool_calls),
        }
    )


def _sum(values: list[int | None]) -> int | None:
    return None if any(value is None for value in values) else sum(v for v in values if v)


def _combined(results: list[EvalgateCallResult], wall_s: float) -> EvalgateCallResult:
    """One result standing for the loop's calls (the last call's error, if any); a loop cut
    by its timeout before any answer stands as an empty answer, never as an endpoint error."""
    if not results:
        return EvalgateCallResult(
            None, None, 0, 0, None, None, (), wall_s, 0.0, 1, None, time.time()
        )
    first, last = results[0], results[-1]
    return EvalgateCallResult(
        output=last.output,
        finish_reason=last.finish_reason,
        prompt_tokens=_sum([r.prompt_tokens for r in results]),
        completion_tokens=_sum([r.completion_tokens for r in results]),
        ttft_s=first.ttft_s,
        tpot_s=first.tpot_s,
        itl_s=first.itl_s,
        e2e_s=wall_s,
        queued_s=first.queued_s,
        attempts=sum(r.attempts for r in results),
        error=last.error,
        sent_at=first.sent_at,
        usage_flag=next((r.usage_flag for r in results if r.usage_flag), None),
        model=next((r.model for r in results if r.model), None),
        system_fingerprint=next(
            (r.system_fingerprint for r in results if r.system_fingerprint), None
        ),
        tool_calls=last.tool_calls,
    )
