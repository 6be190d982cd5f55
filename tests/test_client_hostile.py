"""The client against endpoints that misbehave on purpose (issue 19): the simulator's ``fault=``
knob and the scripted fault server, both real loopback servers.

A cut-off answer is an endpoint error, never an answer; a redirect is never followed; an answer
past its ``max_tokens`` is cut; implausible usage is flagged; key values never leave the client.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faultserver import FaultServer, FaultStep

from pytest_evalgate.client import EvalgateCallResult, EvalgateClient, EvalgateEndpoint
from pytest_evalgate.client.budget import EvalgateLimiter
from pytest_evalgate.client.checks import (
    EVALGATE_HINT_CAP_S,
    evalgate_caps,
    evalgate_classify_status,
    evalgate_retry_wait,
    evalgate_usage_flag,
)
from pytest_evalgate.client.redact import EVALGATE_REDACTED, evalgate_add_secret, evalgate_redact
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.server import EvalgateSimServer

CHAT = {"messages": [{"role": "user", "content": "say hello"}], "max_tokens": 16}
KEY = "sk-hostile-test-0123456789abcdef"
# The backoff jitter's seed: with 8038 the first two jitter draws (of up to 0.5 s and 1 s) are
# under 1 ms, so a call retried to its third attempt does not sit out ~0.9 s of backoff (seed 1
# drew 0.07 s and 0.85 s). The retries and their counts are the same; only the waits shrink.
JITTER_SEED = 8038


def _endpoint(base_url: str, stream: bool, **changes: Any) -> EvalgateEndpoint:
    fields: dict[str, Any] = {
        "base_url": base_url,
        "model": "m",
        "api": "chat",
        "api_key": KEY,
        "timeout_s": 10.0,
        "max_attempts": 3,
        "stream": stream,
    }
    fields.update(changes)
    return EvalgateEndpoint(**fields)


def _call(
    base_url: str, stream: bool, body: dict[str, Any] | None = None, **changes: Any
) -> tuple[EvalgateCallResult, list[str]]:
    """One call through a fresh client; returns its result and the client's log lines."""
    lines: list[str] = []

    async def main() -> EvalgateCallResult:
        limiter = EvalgateLimiter(4, None, None)
        client = EvalgateClient(limiter, rng_seed=JITTER_SEED, log=lines.append)
        try:
            ep = _endpoint(base_url, stream, **changes)
            return await client.call(ep, body or CHAT, "id-1", 40)
        finally:
            await client.aclose()

    return asyncio.run(main()), lines


def _simulated(fault: str, stream: bool, **changes: Any) -> tuple[EvalgateCallResult, int]:
    """One call to a simulator with ``fault``; returns the result and the completion requests
    the simulator saw."""
    with EvalgateSimServer(EvalgateSimConfig(fault=fault)) as server:
        result, _ = _call(server.base_url, stream, **changes)
        return result, int(server.stats()["completion_arrivals"])


def _fault_call(
    default: FaultStep, stream: bool, script: FaultStep | None = None, **changes: Any
) -> tuple[EvalgateCallResult, int]:
    """One call to a scripted fault server answering ``default`` (``script`` first, once);
    returns the result and how many requests the server saw."""

    async def main() -> tuple[EvalgateCallResult, int]:
        async with FaultServer(default) as server:
            if script is not None:
                server.script("id-1", script)
            client = EvalgateClient(EvalgateLimiter(2, None, None), rng_seed=JITTER_SEED)
            try:
                ep = _endpoint(server.base_url, stream, **changes)
                return await client.call(ep, CHAT, "id-1", 40), len(server.arrivals)
            finally:
                await client.aclose()

    return asyncio.run(main())


# --- cut-off answers ---------------------------------------------------------------------------


def test_a_stream_cut_after_half_the_answer_is_truncated_and_retried() -> None:
    result, arrivals = _simulated("truncate_stream", stream=True)
    assert result.error is not None
    assert result.error.category == "truncated"
    assert result.error.status == 200
    assert "without [DONE] but no finish_reason" in result.error.message
    assert (result.attempts, arrivals) == (3, 3)


@pytest.mark.parametrize("stream", [False, True])
def test_a_body_shorter_than_its_content_length_is_truncated(stream: bool) -> None:
    result, arrivals = _simulated("content_length_lie", stream=stream)
    assert result.error is not None
    assert result.error.category == "truncated"
    assert (result.attempts, arrivals) == (3, 3)


def test_a_stream_that_ends_with_done_but_no_finish_reason_is_truncated_and_retried() -> None:
    # llama-cpp-python's server ends a stream it interrupts with [DONE] and no finish_reason
    # (issue 37): stored as an answer, 37 of 40 empty answers were scored wrong and the run
    # passed. Without a finish_reason the answer is not known to be whole, whatever ended it.
    result, requests = _fault_call(FaultStep(finish_reason=""), True, max_attempts=3)
    assert result.error is not None
    assert result.error.category == "truncated"
    assert "the stream ended with [DONE] but no finish_reason" in result.error.message
    assert (result.attempts, requests) == (3, 3)


def test_a_stream_with_done_and_a_finish_reason_is_an_answer() -> None:
    # the control of the test above: the same server with its finish_reason
    result, _ = _fault_call(FaultStep(), True)
    assert result.error is None
    assert result.output == "Hello, world" and result.finish_reason == "stop"


def test_a_connection_dropped_mid_stream_is_truncated() -> None:
    async def main() -> EvalgateCallResult:
        async with FaultServer(FaultStep(drop_after_chunks=2)) as server:
            client = EvalgateClient(EvalgateLimiter(2, None, None), rng_seed=JITTER_SEED)
            try:
                ep = _endpoint(server.base_url, True, max_attempts=2)
                return await client.call(ep, CHAT, "id-1", 40)
            finally:
                await client.aclose()

    result = asyncio.run(main())
    assert result.error is not None
    assert result.error.category == "truncated"
    assert "cut off" in result.error.message
    assert result.attempts == 2


# --- strings no text can hold ---------------------------------------------------------------

_LONE = b'{"choices":[{"message":{"content":"a\\ud800b"},"finish_reason":"stop"}]}'
_IN_MODEL = b'{"model":"m\\udfff","choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}'
_PAIR = b'{"choices":[{"message":{"content":"a\\ud83d\\ude00b"},"finish_reason":"stop"}]}'


@pytest.mark.parametrize(
    ("step", "stream"),
    [
        (FaultStep(body=_LONE), False),
        (FaultStep(chunks=("a", "\ud800", "b")), True),  # sent as the escape \ud800
        (FaultStep(body=_IN_MODEL), False),  # any string of the body, not only the text
    ],
)
def test_a_lone_surrogate_in_an_answer_is_malformed_not_a_crash(
    step: FaultStep, stream: bool
) -> None:
    # json.loads turns the escape \ud800 into a str UTF-8 cannot encode: journaling or
    # sealing the answer raised UnicodeEncodeError in the runner's child and ended the run.
    result, requests = _fault_call(step, stream, max_attempts=2)
    assert result.error is not None
    assert result.error.category == "malformed_response"
    assert "lone UTF-16 surrogate" in result.error.message
    assert (result.attempts, requests) == (2, 2)


def test_a_surrogate_pair_escape_is_one_character_and_an_answer() -> None:
    result, _ = _fault_call(FaultStep(body=_PAIR), False)
    assert result.error is None
    assert result.output == "a\U0001f600b"
    assert (result.output or "").encode("utf-8") == b"a\xf0\x9f\x98\x80b"


# --- an error inside a 200 ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_an_error_inside_a_200_keeps_the_servers_message(stream: bool) -> None:
    result, arrivals = _simulated("error_in_200", stream=stream)
    assert result.error is not None
    assert result.error.category == "server_error"
    assert result.error.status == 200
    assert "the engine failed while generating" in result.error.message
    assert (result.attempts, arrivals) == (3, 3)


@pytest.mark.parametrize(
    ("body", "category", "words"),
    [
        ({"error": {"message": "model is loading"}}, "server_error", "model is loading"),
        ({"error": "quota exhausted"}, "server_error", "quota exhausted"),
        ({"id": "x"}, "malformed_response", "the stream held no chunk with choices"),
        (b"<html>busy</html>", "malformed_response", "the stream held no chunk with choices"),
    ],
)
def test_a_json_error_body_sent_to_a_stream_keeps_the_servers_message(
    body: object, category: str, words: str
) -> None:
    # A 200 with a plain JSON error body and no SSE at all was malformed_response "no chunk
    # with choices", and the server's message was lost (issue 37, Weak).
    result, _ = _fault_call(FaultStep(body=body), True, max_attempts=1)
    assert result.error is not None and result.error.category == category
    assert words in result.error.message


# --- redirects ---------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_never_followed_and_stops_the_endpoint(status: int) -> None:
    async def main() -> tuple[EvalgateCallResult, int]:
        async with FaultServer() as target, FaultServer() as server:
            location = target.base_url + "/chat/completions"
            server.script("id-1", FaultStep(status=status, headers={"Location": location}))
            client = EvalgateClient(EvalgateLimiter(2, None, None))
            try:
                result = await client.call(_endpoint(server.base_url, False), CHAT, "id-1", 40)
            finally:
                await client.aclose()
            return result, len(target.arrivals)

    result, followed = asyncio.run(main())
    assert followed == 0
    assert result.error is not None
    assert (result.error.category, result.error.status, result.error.fatal) == (
        "redirect",
        status,
        True,
    )
    assert result.attempts == 1
    assert "not followed" in result.error.message


def test_the_simulators_redirect_fault_is_a_redirect_error() -> None:
    result, arrivals = _simulated("redirect", stream=True)
    assert result.error is not None
    assert (result.error.category, result.error.status) == ("redirect", 307)
    assert "http://127.0.0.1:9/v1/elsewhere" in result.error.message
    assert (result.attempts, arrivals) == (1, 1)


# --- oversize ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_far_past_max_tokens_is_cut_and_flagged(stream: bool) -> None:
    result, arrivals = _simulated("huge_answer", stream=stream)
    cap = evalgate_caps(CHAT, 0).text_chars
    assert cap == 4096  # max_tokens 16: the floor
    assert result.error is not None
    assert result.error.category == "oversize"
    assert "max_tokens 16 allows at most 4096 characters" in result.error.message
    assert result.output is not None and len(result.output) == cap
    assert (result.attempts, arrivals) == (1, 1)


def test_a_body_larger_than_the_byte_cap_is_not_read() -> None:
    body = {**CHAT, "max_tokens": 1}
    caps = evalgate_caps(body, 0)
    big = b"x" * (caps.body_bytes + 10)

    async def main() -> EvalgateCallResult:
        async with FaultServer(FaultStep(body=big)) as server:
            client = EvalgateClient(EvalgateLimiter(2, None, None))
            try:
                return await client.call(_endpoint(server.base_url, False), body, "id-1", 40)
            finally:
                await client.aclose()

    result = asyncio.run(main())
    assert result.error is not None
    assert result.error.category == "oversize"
    assert f"Content-Length {len(big)}" in result.error.message


# --- usage -------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_impossible_usage_is_flagged_not_stored(stream: bool) -> None:
    result, _ = _simulated("bogus_usage", stream=stream)
    assert result.error is None
    assert result.output  # the answer itself is fine and kept
    assert (result.prompt_tokens, result.completion_tokens) == (None, None)
    assert result.usage_flag == "negative usage (prompt_tokens -3, completion_tokens 1000000000)"


def test_more_completion_tokens_than_max_tokens_is_flagged() -> None:
    async def main() -> EvalgateCallResult:
        async with FaultServer(FaultStep(usage_tokens=500)) as server:
            client = EvalgateClient(EvalgateLimiter(2, None, None))
            try:
                return await client.call(_endpoint(server.base_url, True), CHAT, "id-1", 40)
            finally:
                await client.aclose()

    result = asyncio.run(main())
    assert result.error is None
    assert result.usage_flag == "completion_tokens 500 exceeds max_tokens 16"
    assert result.completion_tokens is None


def test_usage_flag_rules() -> None:
    caps = evalgate_caps(CHAT, 200)
    assert evalgate_usage_flag(12, 3, "Hello there", caps) is None
    assert evalgate_usage_flag(None, None, "x", caps) is None
    assert evalgate_usage_flag(-1, 3, "x", caps) == "negative usage (prompt_tokens -1, " + (
        "completion_tokens 3)"
    )
    assert evalgate_usage_flag(10_000, 3, "x", caps) == (
        "prompt_tokens 10000 for a request of 200 bytes"
    )
    assert evalgate_usage_flag(5, 0, "y" * 1000, caps) == (
        "completion_tokens 0 for 1000 characters of answer"
    )


# --- Retry-After -------------------------------------------------------------------------------


def test_a_long_retry_after_is_capped() -> None:
    assert evalgate_retry_wait(0.3, 3600.0) == EVALGATE_HINT_CAP_S == 600.0
    assert evalgate_retry_wait(0.3, 12.0) == 12.0
    assert evalgate_retry_wait(0.3, 0.0) == 0.3


def test_a_long_server_asked_wait_is_logged_when_it_starts() -> None:
    async def main() -> tuple[EvalgateCallResult, list[str], list[float]]:
        lines: list[str] = []
        async with FaultServer() as server:
            server.script("id-1", FaultStep(status=429, headers={"Retry-After": "5"}))
            client = EvalgateClient(EvalgateLimiter(2, None, None), log=lines.append)
            try:
                result = await client.call(_endpoint(server.base_url, False), CHAT, "id-1", 40)
            finally:
                await client.aclose()
            return result, lines, [a.at for a in server.arrivals]

    result, lines, arrivals = asyncio.run(main())
    assert result.error is None
    assert lines == ["evalgate: id-1: the endpoint asked to wait 5 s; waiting 5 s before attempt 2"]
    assert arrivals[1] - arrivals[0] >= 5.0


@pytest.mark.parametrize(("status", "category"), [(503, "server_error"), (429, "rate_limited")])
def test_a_wait_longer_than_an_attempt_may_take_ends_the_call_at_once(
    status: int, category: str
) -> None:
    # Retry-After: 100000 used to hold the run (capped at 600 s, 400 s seen): a hint longer
    # than the endpoint's timeout_s is not waited out; the attempt's error stands.
    busy = FaultStep(status=status, headers={"Retry-After": "100000"})
    result, arrivals = _fault_call(busy, False, max_attempts=4, timeout_s=10.0)
    assert result.error is not None and result.error.category == category
    assert result.error.message.endswith(
        "the endpoint asked to wait 100000 s before a retry, longer than an attempt's"
        " budget.timeout_s (10 s): not retried"
    )
    assert (result.attempts, arrivals) == (1, 1)


def test_a_wait_within_the_attempt_timeout_is_still_waited_out() -> None:
    # the control: Retry-After 1 with timeout_s 10 retries and succeeds on the second attempt
    once = FaultStep(status=503, headers={"Retry-After": "1"})
    result, arrivals = _fault_call(FaultStep(), False, once, max_attempts=3, timeout_s=10.0)
    assert result.error is None and (result.attempts, arrivals) == (2, 2)


# --- classification and redaction units ------------------------------------------------------


def test_status_classes() -> None:
    assert evalgate_classify_status(307, False) == ("redirect", False, True)
    assert evalgate_classify_status(304, False) == ("redirect", False, True)
    assert evalgate_classify_status(503, False) == ("server_error", True, False)
    assert evalgate_classify_status(401, False) == ("auth", False, True)


def test_an_echoed_key_never_leaves_the_client() -> None:
    result, _ = _simulated("echo_key", stream=False)
    assert result.error is not None
    assert result.error.category == "server_error"
    assert KEY not in result.error.message
    assert f"Authorization: Bearer {EVALGATE_REDACTED}" in result.error.message
    assert f"key {EVALGATE_REDACTED} is unknown" in result.error.message


def test_redact_replaces_bearer_tokens_of_any_case() -> None:
    text = "got authorization: bearer abc.DEF-123_x; and BEARER zzz"
    assert evalgate_redact(text) == (
        f"got authorization: bearer {EVALGATE_REDACTED}; and BEARER {EVALGATE_REDACTED}"
    )
    plain = "nothing to hide here"
    assert evalgate_redact(plain) is plain


def test_registered_values_are_redacted_longest_first_and_short_ones_never() -> None:
    evalgate_add_secret("unit-secret-aaaa")
    evalgate_add_secret("unit-secret-aaaa-bbbb")  # contains the first: must go whole
    evalgate_add_secret("xyz")  # too short to register
    evalgate_add_secret(None)
    text = "k1=unit-secret-aaaa-bbbb k2=unit-secret-aaaa xyz"
    assert evalgate_redact(text) == f"k1={EVALGATE_REDACTED} k2={EVALGATE_REDACTED} xyz"


def test_an_identity_with_line_breaks_cannot_forge_a_header() -> None:
    async def main() -> tuple[EvalgateCallResult, list[Any]]:
        async with FaultServer() as server:
            client = EvalgateClient(EvalgateLimiter(2, None, None), rng_seed=JITTER_SEED)
            try:
                ep = _endpoint(server.base_url, False)
                result = await client.call(ep, CHAT, "v1/c/case\r\nX-Injected: 1/r0", 40)
            finally:
                await client.aclose()
            return result, list(server.arrivals)

    result, arrivals = asyncio.run(main())
    assert result.error is None and result.output == "Hello, world"
    assert [a.identity for a in arrivals] == ["v1/c/case\\r\\nX-Injected: 1/r0"]
    assert not any(name.lower() == "x-injected" for name in arrivals[0].headers)


@pytest.mark.parametrize(
    ("status", "category"),
    [(400, "bad_request"), (401, "auth"), (429, "rate_limited"), (500, "server_error")],
)
def test_a_non_200_json_error_to_a_stream_keeps_the_message_and_the_status_category(
    status: int, category: str
) -> None:
    words = "This model's maximum context length is 2048 tokens"
    step = FaultStep(status=status, body={"error": {"message": words, "type": "invalid"}})
    result, _ = _fault_call(step, True, max_attempts=1)
    assert result.error is not None
    assert (result.error.category, result.error.status) == (category, status)
    assert words in result.error.message


def test_a_long_json_error_in_a_200_stream_keeps_the_servers_message() -> None:
    # a traceback in the message: past the 8 KiB kept of a stream's first bytes
    words = "engine crashed: " + "Traceback line\n" * 1200
    result, _ = _fault_call(FaultStep(body={"error": {"message": words}}), True, max_attempts=1)
    assert result.error is not None and result.error.category == "server_error"
    assert "engine crashed: Traceback line" in result.error.message
