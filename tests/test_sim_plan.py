"""Unit tests of what the simulator sends for an answer: the plan (tokens, usage, timings), the
injected faults, the OpenAI bodies and SSE events, and the request-body checks of the app."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from pytest_evalgate.simulated import EvalgateSimConfig, evalgate_parse_simulated_url
from pytest_evalgate.simulated.app import evalgate_sim_json, evalgate_sim_validate
from pytest_evalgate.simulated.draws import evalgate_sim_uniform
from pytest_evalgate.simulated.faults import (
    EVALGATE_FAULT_400,
    EVALGATE_FAULT_401,
    EVALGATE_FAULT_429,
    EVALGATE_FAULT_500,
    EVALGATE_FAULT_503,
    EVALGATE_FAULT_HANG,
    EVALGATE_FAULT_QUOTA,
    EvalgateSimFault,
    evalgate_sim_fault,
    evalgate_sim_fault_headers,
)
from pytest_evalgate.simulated.plan import EvalgateSimPlan, evalgate_sim_plan, evalgate_sim_tokens
from pytest_evalgate.simulated.responses import (
    EvalgateSimStream,
    evalgate_sim_error_body,
    evalgate_sim_full_body,
)

SALT = (0, "m", "digest")
BODY: dict[str, Any] = {"messages": [{"role": "user", "content": "one two three"}]}


def plan(url: str, text: str = "a b c", body: dict[str, Any] | None = None) -> EvalgateSimPlan:
    return evalgate_sim_plan(evalgate_parse_simulated_url(url), text, SALT, body or BODY)


# --------------------------------------------------------------------------- tokens and lengths


def test_tokens_keep_leading_whitespace_and_trailing_rest() -> None:
    assert evalgate_sim_tokens(" a\tb \n") == [" a", "\tb \n"]
    assert evalgate_sim_tokens("   ") == ["   "]
    assert evalgate_sim_tokens("") == []


def test_the_answer_alone_sets_the_length_without_output_tokens() -> None:
    result = plan("simulated://")
    assert (result.tokens, result.finish) == (("a", " b", " c"), "stop")


def test_output_tokens_pad_with_spaces_but_never_cut_the_answer() -> None:
    assert plan("simulated://?output_tokens=5").tokens == ("a", " b", " c", " ", " ")
    assert plan("simulated://?output_tokens=2").tokens == ("a", " b", " c")


def test_output_jitter_stays_within_its_fraction_and_is_seeded() -> None:
    config = evalgate_parse_simulated_url("simulated://?output_tokens=100&output_jitter=0.2")
    lengths = [
        len(evalgate_sim_plan(config, "x", (0, "m", str(i)), BODY).tokens) for i in range(300)
    ]
    assert 80 <= min(lengths) < 85 and 115 < max(lengths) <= 120
    again = [len(evalgate_sim_plan(config, "x", (0, "m", str(i)), BODY).tokens) for i in range(300)]
    assert lengths == again


@pytest.mark.parametrize(
    ("limits", "count", "finish"),
    [
        ({"max_tokens": 2}, 2, "length"),
        ({"max_tokens": 0}, 0, "length"),
        ({"max_tokens": 3}, 3, "stop"),
        ({"max_tokens": 9}, 3, "stop"),
        ({"max_completion_tokens": 1, "max_tokens": 9}, 1, "length"),
        ({"max_completion_tokens": 9, "max_tokens": 1}, 3, "stop"),
        ({"max_tokens": -1}, 3, "stop"),
        ({"max_tokens": 1.5}, 3, "stop"),
        ({"max_tokens": "1"}, 3, "stop"),
    ],
)
def test_max_tokens_truncates_with_length(limits: dict[str, Any], count: int, finish: str) -> None:
    result = plan("simulated://", body={**BODY, **limits})
    assert (len(result.tokens), result.finish) == (count, finish)


@pytest.mark.parametrize(
    ("prompt", "words"),
    [
        ({"prompt": "four words in here"}, 4),
        ({"prompt": ["two words", "and three more"]}, 5),
        ({"messages": [{"role": "system", "content": "a b"}, {"role": "user", "content": "c"}]}, 3),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x y z"}]}]}, 3),
        ({"messages": [{"role": "user", "content": None}]}, 0),
        ({"prompt": [1, 2, 3]}, 0),
    ],
)
def test_prompt_tokens_count_the_prompt_words(prompt: dict[str, Any], words: int) -> None:
    result = plan("simulated://", body=prompt)
    assert result.prompt_tokens == words
    assert result.usage() == {
        "prompt_tokens": words,
        "completion_tokens": 3,
        "total_tokens": words + 3,
    }


# --------------------------------------------------------------------------- timings


def test_latency_alone_times_the_whole_answer() -> None:
    result = plan("simulated://?latency_ms=40")
    assert (result.ttft_s, result.tpot_s, result.total_s) == (0.04, 0.0, 0.04)


def test_ttft_and_tpot_time_each_token() -> None:
    result = plan("simulated://?ttft_ms=30&tpot_ms=5&output_tokens=20&latency_ms=999")
    assert result.ttft_s == pytest.approx(0.03) and result.tpot_s == pytest.approx(0.005)
    assert result.total_s == pytest.approx(0.03 + 19 * 0.005)


def test_tpot_alone_starts_after_latency() -> None:
    result = plan("simulated://?tpot_ms=10&latency_ms=50")
    assert result.ttft_s == pytest.approx(0.05) and result.total_s == pytest.approx(0.07)


def test_jitter_scales_every_time_by_one_seeded_factor() -> None:
    config = evalgate_parse_simulated_url("simulated://?ttft_ms=100&tpot_ms=10&jitter=0.5")
    for i in range(100):
        salt = (0, "m", str(i))
        result = evalgate_sim_plan(config, "a b", salt, BODY)
        scale = 1.0 + 0.5 * (2.0 * evalgate_sim_uniform("jitter", *salt) - 1.0)
        assert 0.5 <= scale <= 1.5
        assert result.ttft_s == pytest.approx(0.1 * scale)
        assert result.tpot_s == pytest.approx(0.01 * scale)
        assert result.total_s == pytest.approx(0.11 * scale)


# --------------------------------------------------------------------------- faults


def faults(url: str, count: int = 5) -> list[EvalgateSimFault | None]:
    config = evalgate_parse_simulated_url(url)
    return [evalgate_sim_fault(config, index) for index in range(count)]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("simulated://", [None] * 5),
        ("simulated://?fail_401=1&fail_400=1&quota=1", [EVALGATE_FAULT_401] * 5),
        ("simulated://?fail_400=1&quota=1&hang_first=2", [EVALGATE_FAULT_400] * 5),
        ("simulated://?quota=1&fail_429_first=9", [EVALGATE_FAULT_QUOTA] * 5),
        (
            "simulated://?hang_first=1&fail_429_first=2&fail_500_first=4",
            [EVALGATE_FAULT_HANG, EVALGATE_FAULT_429, EVALGATE_FAULT_500, EVALGATE_FAULT_500, None],
        ),
        (
            "simulated://?fail_500_first=1&fail_rate=1",
            [EVALGATE_FAULT_500] + [EVALGATE_FAULT_503] * 4,
        ),
    ],
)
def test_faults_are_checked_in_their_documented_order(
    url: str, expected: list[EvalgateSimFault | None]
) -> None:
    assert faults(url) == expected


def test_fail_rate_is_the_seeded_draw_of_the_arrival_index() -> None:
    config = EvalgateSimConfig(fail_rate=0.3, seed=8)
    for index in range(300):
        hit = evalgate_sim_uniform("fail", 8, index) < 0.3
        assert (evalgate_sim_fault(config, index) == EVALGATE_FAULT_503) is hit


def test_only_the_hang_fault_hangs_and_statuses_are_openais() -> None:
    statuses = {f.status for f in (EVALGATE_FAULT_401, EVALGATE_FAULT_400, EVALGATE_FAULT_QUOTA)}
    assert statuses == {401, 400, 429}
    assert EVALGATE_FAULT_HANG.hangs and not EVALGATE_FAULT_503.hangs
    assert (EVALGATE_FAULT_QUOTA.code, EVALGATE_FAULT_429.code) == (
        "insufficient_quota",
        "rate_limit_exceeded",
    )


def test_retry_after_goes_only_on_rate_limits() -> None:
    config = EvalgateSimConfig(retry_after=2.5)
    assert evalgate_sim_fault_headers(config, EVALGATE_FAULT_429) == "Retry-After: 2.5\r\n"
    assert evalgate_sim_fault_headers(config, EVALGATE_FAULT_QUOTA) == ""
    assert evalgate_sim_fault_headers(EvalgateSimConfig(), EVALGATE_FAULT_429) == ""
    whole = EvalgateSimConfig(retry_after=3.0)
    assert evalgate_sim_fault_headers(whole, EVALGATE_FAULT_429) == "Retry-After: 3\r\n"


# --------------------------------------------------------------------------- bodies and events


def test_error_bodies_are_openai_shaped_and_say_simulator() -> None:
    assert json.loads(evalgate_sim_error_body("Nope", "server_error", None)) == {
        "error": {
            "message": "Nope (evalgate simulator)",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }


@pytest.mark.parametrize(
    ("kind", "obj"), [("chat", "chat.completion"), ("text", "text_completion")]
)
def test_whole_bodies_have_openai_shapes(kind: str, obj: str) -> None:
    result = plan("simulated://?output_tokens=4", "hi there")
    body = json.loads(evalgate_sim_full_body(kind, "rid-1", "m", result))
    assert (body["id"], body["object"], body["model"]) == ("rid-1", obj, "m")
    assert body["system_fingerprint"] == "evalgate-simulator" and isinstance(body["created"], int)
    choice = body["choices"][0]
    text = choice["message"]["content"] if kind == "chat" else choice["text"]
    assert text == "hi there  " and choice["finish_reason"] == "stop"
    assert kind != "chat" or choice["message"]["role"] == "assistant"
    assert body["usage"] == result.usage()


class Sink:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write_events(self, data: bytes) -> None:
        self.writes.append(data)

    def events(self) -> list[Any]:
        raw = b"".join(self.writes).split(b"\n\n")
        assert raw[-1] == b""
        return [json.loads(e[6:]) if e != b"data: [DONE]" else "[DONE]" for e in raw[:-1]]


def stream(url: str, text: str, kind: str = "chat", usage: bool = True) -> Sink:
    sink = Sink()
    asyncio.run(EvalgateSimStream(kind, "rid", "m", plan(url, text), usage).run(sink))
    return sink


def test_an_unpaced_stream_writes_tokens_in_one_go_then_the_tail() -> None:
    sink = stream("simulated://", "a b c")
    assert len(sink.writes) == 2
    events = sink.events()
    deltas = [e["choices"][0]["delta"] for e in events[:3]]
    assert deltas == [{"role": "assistant", "content": "a"}, {"content": " b"}, {"content": " c"}]
    assert events[3]["choices"][0] == {
        "index": 0,
        "logprobs": None,
        "finish_reason": "stop",
        "delta": {},
    }
    assert events[4]["choices"] == [] and events[4]["usage"]["completion_tokens"] == 3
    assert events[5] == "[DONE]" and {e["id"] for e in events[:5]} == {"rid"}


def test_a_paced_stream_writes_one_event_per_token() -> None:
    sink = stream("simulated://?tpot_ms=1", "a b c", usage=False)
    assert len(sink.writes) == 4
    events = sink.events()
    assert len(events) == 5 and all("usage" not in e for e in events[:-1])
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_an_empty_answer_still_streams_one_empty_token() -> None:
    events = stream("simulated://", "", usage=False).events()
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[1]["choices"][0]["finish_reason"] == "stop" and events[2] == "[DONE]"


def test_text_streams_carry_text_chunks() -> None:
    events = stream("simulated://", "done 7", kind="text").events()
    assert all(e["object"] == "text_completion" for e in events[:-1])
    assert [e["choices"][0]["text"] for e in events[:3]] == ["done", " 7", ""]


def test_a_truncated_stream_finishes_with_length() -> None:
    sink = Sink()
    result = plan("simulated://", "a b c", {**BODY, "max_tokens": 1})
    asyncio.run(EvalgateSimStream("chat", "r", "m", result, False).run(sink))
    assert sink.events()[-2]["choices"][0]["finish_reason"] == "length"


# --------------------------------------------------------------------------- request bodies


@pytest.mark.parametrize(
    "raw",
    [b"[1, 2]", b'"text"', b"null", b"{bad", b"\xff\xfe", b'{"a": NaN}', b'{"a": -Infinity}', b""],
)
def test_bodies_that_are_not_a_json_object_decode_to_none(raw: bytes) -> None:
    assert evalgate_sim_json(raw) is None


def test_a_json_object_decodes() -> None:
    assert evalgate_sim_json('{"model": "ü", "n": 1.5}'.encode()) == {"model": "ü", "n": 1.5}


@pytest.mark.parametrize(
    ("body", "kind", "problem"),
    [
        (None, "chat", "the body must be a JSON object"),
        ({"messages": "hi"}, "chat", "'messages' must be a list"),
        ({"prompt": "hi"}, "chat", "'messages' must be a list"),
        ({"prompt": 5}, "text", "'prompt' must be a string or a list"),
        ({"messages": [], "temperature": "hot"}, "chat", "'temperature' must be a number"),
        ({"messages": []}, "chat", None),
        ({"messages": [], "temperature": 0}, "chat", None),
        ({"prompt": ["a"], "temperature": 0.5}, "text", None),
    ],
)
def test_completion_bodies_are_checked(
    body: dict[str, Any] | None, kind: str, problem: str | None
) -> None:
    assert evalgate_sim_validate(body, kind) == problem
