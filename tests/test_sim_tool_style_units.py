"""simulated/tool_style.py: the simulated model that calls the fixture's tools (SPEC 17).

The plan is found by the digest of the conversation up to its last user message; the tool
results after it count the calls made. While calls remain the answer is the next planned call
(ids ``call_<n>``, arguments as sorted JSON), then the keyed final answer. The knobs
``tool_accuracy``, ``tool_invalid`` and ``tool_loop`` are drawn once per case: at 0 and 1 they
are exact, and in between the share of cases they hit follows the rate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_evalgate.simulated.answers import evalgate_prompt_digest
from pytest_evalgate.simulated.knobs import EvalgateSimConfig
from pytest_evalgate.simulated.tool_style import (
    EvalgateSimToolCalls,
    evalgate_sim_tool_answerer,
    evalgate_sim_tool_reply,
    evalgate_sim_turn_digest,
)

SYSTEM = {"role": "system", "content": "You book flights."}
USER = {"role": "user", "content": "Book me a flight to Oslo."}
PROMPT = [SYSTEM, USER]
DIGEST = evalgate_prompt_digest(PROMPT)
PLAN = (
    {"name": "search", "arguments": {"to": "Oslo", "from": "Bergen"}},
    {"name": "book", "arguments": {"flight": "SK1"}},
)
PLANS = {DIGEST: PLAN}
KEY = {DIGEST: ("Booked SK1.", "travel")}
TOOLS = ("search", "book", "cancel", "refund")


def _after(calls: int) -> list[dict[str, Any]]:
    """The prompt, then ``calls`` assistant tool calls each followed by its tool result."""
    messages: list[dict[str, Any]] = list(PROMPT)
    for n in range(calls):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}"}]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "ok"})
    return messages


def _reply(messages: list[dict[str, Any]], **knobs: Any) -> tuple[str, EvalgateSimToolCalls | None]:
    return evalgate_sim_tool_reply(EvalgateSimConfig(**knobs), KEY, PLANS, messages, TOOLS)


def test_the_planned_calls_come_in_order_then_the_final_answer_is_due() -> None:
    first = _reply(_after(0))
    assert first == (
        DIGEST,
        EvalgateSimToolCalls(
            ({"id": "call_0", "name": "search", "arguments": '{"from": "Bergen", "to": "Oslo"}'},)
        ),
    )
    second = _reply(_after(1))
    assert second[1] is not None
    assert second[1].calls == ({"id": "call_1", "name": "book", "arguments": '{"flight": "SK1"}'},)
    assert _reply(_after(2)) == (DIGEST, None)
    assert _reply(_after(5)) == (DIGEST, None)  # more results than planned calls: done


def test_the_calls_text_is_their_arguments_joined() -> None:
    calls = EvalgateSimToolCalls(
        ({"id": "a", "name": "x", "arguments": "{}"}, {"id": "b", "name": "y", "arguments": "[1]"})
    )
    assert calls.evalgate_text() == "{} [1]"


def test_a_conversation_without_a_plan_answers_at_once() -> None:
    other = [SYSTEM, {"role": "user", "content": "Something else"}]
    assert _reply(other) == (evalgate_prompt_digest(other), None)
    assert _reply([]) == (evalgate_prompt_digest([]), None)


def test_a_plan_call_without_arguments_sends_an_empty_object() -> None:
    plans = {DIGEST: ({"name": "search"},)}
    _, calls = evalgate_sim_tool_reply(EvalgateSimConfig(), KEY, plans, _after(0), TOOLS)
    assert calls is not None and calls.calls[0]["arguments"] == "{}"


def test_at_tool_accuracy_0_the_first_unused_declared_tool_is_called() -> None:
    _, calls = _reply(_after(0), tool_accuracy=0.0)
    assert calls is not None and calls.calls[0]["name"] == "cancel"
    # when every declared tool is in the plan, the planned name stays
    _, same = evalgate_sim_tool_reply(
        EvalgateSimConfig(tool_accuracy=0.0), KEY, PLANS, _after(0), ("search", "book")
    )
    assert same is not None and same.calls[0]["name"] == "search"


def test_at_tool_invalid_1_the_first_call_s_arguments_are_cut_and_no_later_one() -> None:
    _, first = _reply(_after(0), tool_invalid=1.0)
    assert first is not None
    whole = '{"from": "Bergen", "to": "Oslo"}'
    assert first.calls[0]["arguments"] == whole[: len(whole) // 2]
    with pytest.raises(json.JSONDecodeError):
        json.loads(first.calls[0]["arguments"])
    _, second = _reply(_after(1), tool_invalid=1.0)
    assert second is not None and json.loads(second.calls[0]["arguments"]) == {"flight": "SK1"}


def test_at_tool_loop_1_the_last_planned_call_repeats_forever() -> None:
    for made in (2, 3, 10):
        _, calls = _reply(_after(made), tool_loop=1.0)
        assert calls is not None
        assert calls.calls[0] == {
            "id": f"call_{made}",
            "name": "book",
            "arguments": '{"flight": "SK1"}',
        }


def _share(knob: str, rate: float, cases: int = 400) -> float:
    """The share of ``cases`` distinct conversations whose first call the knob changes."""
    hit = 0
    for n in range(cases):
        prompt = [SYSTEM, {"role": "user", "content": f"Book flight {n}."}]
        plans = {evalgate_prompt_digest(prompt): PLAN}
        knobs: dict[str, Any] = {knob: rate}
        config = EvalgateSimConfig(**knobs)
        messages = prompt if knob != "tool_loop" else [*prompt, *_after(2)[2:]]
        _, calls = evalgate_sim_tool_reply(config, {}, plans, messages, TOOLS)
        if knob == "tool_accuracy":
            hit += calls is not None and calls.calls[0]["name"] == "cancel"
        elif knob == "tool_invalid":
            hit += calls is not None and calls.calls[0]["arguments"] != json.dumps(
                PLAN[0]["arguments"], sort_keys=True
            )
        else:
            hit += calls is not None
    return hit / cases


@pytest.mark.parametrize(
    ("knob", "rate", "expected"),
    [("tool_accuracy", 0.75, 0.25), ("tool_invalid", 0.3, 0.3), ("tool_loop", 0.2, 0.2)],
)
def test_a_knob_between_0_and_1_hits_its_share_of_cases(
    knob: str, rate: float, expected: float
) -> None:
    # 400 cases: the binomial standard error is at most 0.025, so 0.08 is over three of them
    assert abs(_share(knob, rate) - expected) < 0.08


def test_the_draws_are_fixed_by_seed_and_case() -> None:
    config = EvalgateSimConfig(tool_accuracy=0.5, seed=3)
    runs = [
        [
            evalgate_sim_tool_reply(config, {}, {evalgate_prompt_digest(p): PLAN}, p, TOOLS)[1]
            for p in ([SYSTEM, {"role": "user", "content": f"q{n}"}] for n in range(40))
        ]
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    other = EvalgateSimConfig(tool_accuracy=0.5, seed=4)
    names = [
        evalgate_sim_tool_reply(other, {}, {evalgate_prompt_digest(p): PLAN}, p, TOOLS)[1]
        for p in ([SYSTEM, {"role": "user", "content": f"q{n}"}] for n in range(40))
    ]
    assert names != runs[0]  # another seed draws other cases


# --- the turn digest --------------------------------------------------------------------------


def test_a_conversation_without_answers_has_no_turn_digest() -> None:
    assert evalgate_sim_turn_digest(PROMPT) is None
    assert evalgate_sim_turn_digest([]) is None


def test_the_turn_digest_is_the_system_messages_and_the_last_user_message() -> None:
    history = [
        SYSTEM,
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "second"},
    ]
    expected = evalgate_prompt_digest([SYSTEM, {"role": "user", "content": "second"}])
    assert evalgate_sim_turn_digest(history) == expected
    only_answers = [{"role": "assistant", "content": "x"}]
    assert evalgate_sim_turn_digest(only_answers) is None  # no user message to key


# --- the answerer -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ask:
    prompt: list[dict[str, Any]]
    salt: tuple[object, ...] = field(default=("salt",))


def test_the_answerer_calls_then_gives_the_keyed_answer() -> None:
    answer = evalgate_sim_tool_answerer(EvalgateSimConfig(accuracy=1.0), KEY, PLANS)
    first = answer(_Ask(_after(0)), TOOLS)
    assert isinstance(first, EvalgateSimToolCalls)
    assert first.calls[0]["name"] == "search"
    assert answer(_Ask(_after(2)), TOOLS) == "Booked SK1."


def test_the_answerer_is_wrong_at_accuracy_0_and_unknown_prompts_are_wrong() -> None:
    answer = evalgate_sim_tool_answerer(EvalgateSimConfig(accuracy=0.0), KEY, PLANS)
    wrong = answer(_Ask(_after(2)), TOOLS)
    assert isinstance(wrong, str) and wrong != "Booked SK1."
    unknown = answer(_Ask([{"role": "user", "content": "not in the key"}]), TOOLS)
    assert isinstance(unknown, str) and unknown != "Booked SK1."
