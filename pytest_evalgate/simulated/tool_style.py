"""The tool-using style (SPEC 17): a simulated model that calls the fixture's tools.

It answers a chat request that carries ``tools`` from the answer key's tool plans (rows with
``calls``: the case's expected calls, in order). The plan is found by the digest of the
conversation up to its last user message (the case's prompt); the tool results after it say
how many planned calls were made. While calls remain, the answer is the next planned call
(``finish_reason: tool_calls``); then the final answer is the keyed one (right with
probability ``accuracy``). Three knobs, each drawn once per case (same seed, same choices):

- ``tool_accuracy`` (default 1): the share of cases whose calls name the right tools; the
  others call the first declared tool the plan does not use (a forbidden action, say);
- ``tool_invalid``: the share of cases whose first call's arguments are not valid JSON;
- ``tool_loop``: the share of cases that never stop calling (the loop's ``max_steps`` or
  ``max_tool_calls`` ends them).

A conversation without tools (``turns``) is answered by the key's row for its system messages
and last user message when the whole history has no row (``evalgate_sim_turn_digest``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.simulated.answers import (
    EvalgateSimKey,
    evalgate_prompt_digest,
    evalgate_sim_keyed_answer,
)
from pytest_evalgate.simulated.draws import evalgate_sim_uniform
from pytest_evalgate.simulated.knobs import EvalgateSimConfig

EvalgateSimPlans = Mapping[str, tuple[Mapping[str, Any], ...]]
"""Tool plans: prompt digest -> the case's expected calls ``{"name", "arguments"}``."""


@dataclass(frozen=True)
class EvalgateSimToolCalls:
    """An answer that calls tools: ``{"id", "name", "arguments"}`` each."""

    calls: tuple[Mapping[str, str], ...]

    def evalgate_text(self) -> str:
        """The calls' arguments as text (what the plan times as tokens)."""
        return " ".join(call["arguments"] for call in self.calls)


def evalgate_sim_turn_digest(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The digest of the system messages and the last user message of a conversation that
    has answers in it; None when it has none (its own digest is the key's)."""
    if not any(m.get("role") == "assistant" for m in messages if isinstance(m, Mapping)):
        return None
    users = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
    system = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "system"]
    return evalgate_prompt_digest([*system, users[-1]]) if users else None


def evalgate_sim_tool_reply(
    config: EvalgateSimConfig,
    key: EvalgateSimKey,
    plans: EvalgateSimPlans,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[str],
) -> tuple[str, EvalgateSimToolCalls | None]:
    """(prefix digest, the calls to make) for a tool request; no calls: the final answer is
    due (the caller answers the prefix digest from the key)."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    prefix = list(messages[: last_user + 1])
    digest = evalgate_prompt_digest(prefix)
    plan = plans.get(digest, ())
    done = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "tool")
    draws = (config.seed, digest)
    looping = evalgate_sim_uniform("tool_loop", *draws) < config.tool_loop
    if not plan or (done >= len(plan) and not looping):
        return digest, None
    call = dict(plan[min(done, len(plan) - 1)])
    if evalgate_sim_uniform("tool_choice", *draws) >= config.tool_accuracy:
        unused = [name for name in tools if name not in {c["name"] for c in plan}]
        call["name"] = unused[0] if unused else call["name"]
    arguments = json.dumps(call.get("arguments", {}), sort_keys=True)
    if done == 0 and evalgate_sim_uniform("tool_invalid", *draws) < config.tool_invalid:
        arguments = arguments[: max(len(arguments) // 2, 1)]  # cut: not JSON
    made = {"id": f"call_{done}", "name": str(call["name"]), "arguments": arguments}
    return digest, EvalgateSimToolCalls((made,))


EvalgateSimToolAnswerer = Callable[[Any, Sequence[str]], "str | EvalgateSimToolCalls"]
"""The tool style's answer logic: ``(ask, declared tool names) -> text or tool calls``."""


def evalgate_sim_tool_answerer(
    config: EvalgateSimConfig, key: EvalgateSimKey, plans: EvalgateSimPlans
) -> EvalgateSimToolAnswerer:
    """The tool style over ``key`` and its ``plans``: the next planned call, or the keyed
    final answer to the case's prompt once the plan is done."""

    def answer(ask: Any, tools: Sequence[str]) -> str | EvalgateSimToolCalls:
        digest, calls = evalgate_sim_tool_reply(config, key, plans, ask.prompt, tools)
        if calls is not None:
            return calls
        return evalgate_sim_keyed_answer(config, key, digest, ask.salt).text

    return answer
