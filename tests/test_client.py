"""EvalgateClient against a real loopback server (tests/faultserver.py): no mocks.

Waits are asserted as lower bounds from the server's arrival times, never as upper bounds on
wall time, except where a generous bound is the point (a timeout must cut a hang).
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from faultserver import FaultServer, FaultStep

from pytest_evalgate.client import (
    EvalgateCallResult,
    EvalgateClient,
    EvalgateEndpoint,
    evalgate_parse_duration,
    evalgate_retry_hint,
)
from pytest_evalgate.client.budget import EvalgateLimiter
from pytest_evalgate.errors import EvalgateConfigError

CHAT = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.0, "max_tokens": 16}
Scenario = Callable[[FaultServer, EvalgateClient, EvalgateLimiter], Awaitable[None]]


def endpoint(server: FaultServer, **changes: Any) -> EvalgateEndpoint:
    fields: dict[str, Any] = {
        "base_url": server.base_url,
        "model": "m-under-test",
        "api": "chat",
        "api_key": "sk-test",
        "timeout_s": 5.0,
        "max_attempts": 3,
    }
    fields.update(changes)
    return EvalgateEndpoint(**fields)


def run(scenario: Scenario, *, concurrency: int = 8, default: FaultStep | None = None) -> None:
    """Run ``scenario`` with a fresh server, limiter and client inside one event loop."""

    async def main() -> None:
        async with FaultServer(default) as server:
            limiter = EvalgateLimiter(concurrency, None, None, decrease_interval_s=0.0)
            client = EvalgateClient(limiter, rng_seed=7)
            try:
                await scenario(server, client, limiter)
            finally:
                await client.aclose()

    asyncio.run(main())


async def call(
    client: EvalgateClient, ep: EvalgateEndpoint, identity: str, **kw: Any
) -> EvalgateCallResult:
    return await client.call(ep, kw.pop("body", CHAT), identity, kw.pop("est_tokens", 50), **kw)


def gaps(server: FaultServer, identity: str) -> list[float]:
    times = [a.at for a in server.arrivals_of(identity)]
    return [b - a for a, b in itertools.pairwise(times)]


# --- the request on the wire -------------------------------------------------------------------


def test_streaming_request_carries_model_stream_options_and_headers() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server), "ds-v1/c1/candidate/0")
        assert result.error is None and result.output == "Hello, world"
        (arrival,) = server.arrivals
        assert arrival.path == "/v1/chat/completions"
        assert arrival.body["model"] == "m-under-test"
        assert arrival.body["messages"] == CHAT["messages"]
        assert arrival.body["max_tokens"] == 16
        assert arrival.body["stream"] is True
        assert arrival.body["stream_options"] == {"include_usage": True}
        assert arrival.headers["Authorization"] == "Bearer sk-test"
        assert arrival.headers["x-evalgate-identity"] == "ds-v1/c1/candidate/0"
        assert arrival.headers["x-evalgate-attempt"] == "1"

    run(scenario)


def test_non_streaming_completions_without_key() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        ep = endpoint(server, api="completions", api_key=None, stream=False)
        result = await call(client, ep, "c", body={"prompt": "2+2="})
        (arrival,) = server.arrivals
        assert arrival.path == "/v1/completions"
        assert arrival.body["stream"] is False and "stream_options" not in arrival.body
        assert "Authorization" not in arrival.headers
        assert result.output == "Hello, world" and result.finish_reason == "stop"
        assert (result.prompt_tokens, result.completion_tokens) == (7, 3)
        assert result.ttft_s is None and result.tpot_s is None and result.itl_s == ()
        assert result.e2e_s > 0 and result.attempts == 1

    run(scenario)


def test_non_streaming_chat_output_from_message() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", FaultStep(chunks=("forty", "-two")))
        result = await call(client, endpoint(server, stream=False), "c")
        assert result.output == "forty-two" and result.error is None

    run(scenario)


def test_unknown_api_is_a_config_error() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        with pytest.raises(EvalgateConfigError, match="api"):
            await call(client, endpoint(server, api="responses"), "c")
        assert server.arrivals == []

    run(scenario)


# --- streaming timings ---------------------------------------------------------------------------


def test_streaming_timings_follow_the_server_delays() -> None:
    step = FaultStep(chunks=("a", "b", "c", "d", "e"), first_delay_s=0.2, chunk_delay_s=0.05)

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", step)
        result = await call(client, endpoint(server), "c")
        assert result.error is None and result.output == "abcde"
        assert result.ttft_s is not None and 0.2 <= result.ttft_s < 1.0
        assert len(result.itl_s) == 4 and all(gap >= 0.045 for gap in result.itl_s)
        assert result.tpot_s is not None
        assert result.tpot_s == pytest.approx(sum(result.itl_s) / 4)
        assert 0.045 <= result.tpot_s < 0.25
        assert result.e2e_s >= result.ttft_s + sum(result.itl_s)
        assert result.completion_tokens == 5 and result.prompt_tokens == 7

    run(scenario)


def test_tpot_divides_by_usage_tokens_not_chunks() -> None:
    # A server may pack several tokens into one chunk; usage is the authority.
    step = FaultStep(chunks=("ab", "cd", "ef"), chunk_delay_s=0.05, usage_tokens=9)

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", step)
        result = await call(client, endpoint(server), "c")
        assert result.completion_tokens == 9 and result.tpot_s is not None
        assert result.tpot_s == pytest.approx(sum(result.itl_s) / 8)

    run(scenario)


def test_missing_usage_falls_back_to_content_chunk_count() -> None:
    step = FaultStep(chunks=("w", "x", "y", "z"), usage=False)

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", step)
        result = await call(client, endpoint(server), "c")
        assert result.completion_tokens == 4 and result.prompt_tokens is None
        assert result.output == "wxyz"

    run(scenario)


def test_single_token_answer_has_ttft_but_no_tpot() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", FaultStep(chunks=("yes",)))
        result = await call(client, endpoint(server), "c")
        assert result.ttft_s is not None and result.tpot_s is None and result.itl_s == ()

    run(scenario)


def test_streaming_completions_api() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server, api="completions"), "c", body={"prompt": "x"})
        assert result.output == "Hello, world" and result.ttft_s is not None

    run(scenario)


def test_queued_counts_from_the_schedule_when_given() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server), "c", scheduled_at=time.time() - 1.0)
        assert result.queued_s >= 1.0
        plain = await call(client, endpoint(server), "d")
        assert 0.0 <= plain.queued_s < 0.5

    run(scenario)


# --- retries and their waits --------------------------------------------------------------------


def test_retry_after_seconds_is_a_lower_bound_on_the_next_attempt() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, lim: EvalgateLimiter) -> None:
        server.script("c", FaultStep(status=429, headers={"Retry-After": "2"}))
        result = await call(client, endpoint(server), "c")
        assert result.error is None and result.attempts == 2
        assert gaps(server, "c")[0] >= 2.0
        assert [a.attempt for a in server.arrivals_of("c")] == [1, 2]
        assert lim.limit == 4  # the 429 halved 8

    run(scenario)


def test_retry_after_http_date() -> None:
    target = math.ceil(time.time()) + 2.0
    date = email.utils.formatdate(target, usegmt=True)

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", FaultStep(status=503, headers={"Retry-After": date}))
        result = await call(client, endpoint(server), "c")
        assert result.error is None and result.attempts == 2
        assert server.arrivals_of("c")[1].wall >= target - 0.02

    run(scenario)


def test_ratelimit_reset_tokens_delays_the_retry() -> None:
    headers = {
        "x-ratelimit-remaining-requests": "99",
        "x-ratelimit-reset-requests": "6m0s",  # not exhausted: must be ignored
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "1s200ms",
    }

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", FaultStep(status=429, headers=headers))
        result = await call(client, endpoint(server), "c")
        assert result.error is None and result.attempts == 2
        assert 1.2 <= gaps(server, "c")[0] < 60.0

    run(scenario)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("250us", 0.00025),
        ("2", 2.0),
        ("0.5", 0.5),
        ("", 0.0),
        (None, 0.0),
        ("soon", 0.0),
        ("5s later", 0.0),
    ],
)
def test_parse_duration(text: str | None, seconds: float) -> None:
    assert evalgate_parse_duration(text) == pytest.approx(seconds)


def test_retry_hint_picks_the_largest_applicable_hint() -> None:
    resets = {"x-ratelimit-reset-requests": "3s", "x-ratelimit-reset-tokens": "7s"}
    assert evalgate_retry_hint(resets, rate_limited=True) == pytest.approx(7.0)
    assert evalgate_retry_hint(resets, rate_limited=False) == 0.0
    spent = {**resets, "x-ratelimit-remaining-tokens": "120", "x-ratelimit-remaining-requests": "0"}
    assert evalgate_retry_hint(spent, rate_limited=True) == pytest.approx(3.0)
    assert evalgate_retry_hint({"retry-after-ms": "1500"}, rate_limited=False) == 1.5
    assert evalgate_retry_hint({"Retry-After": "4", **resets}, rate_limited=True) == 7.0
    assert evalgate_retry_hint({"Retry-After": "garbage"}, rate_limited=True) == 0.0
    past = email.utils.formatdate(time.time() - 100, usegmt=True)
    assert evalgate_retry_hint({"Retry-After": past}, rate_limited=False) == 0.0


def test_server_error_burst_is_recovered() -> None:
    burst = [FaultStep(status=500), FaultStep(status=502), FaultStep(status=503)]

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", *burst)
        result = await call(client, endpoint(server, max_attempts=4), "c")
        assert result.error is None and result.attempts == 4 and result.output == "Hello, world"
        assert [a.attempt for a in server.arrivals_of("c")] == [1, 2, 3, 4]
        # sent_at is the send of the final attempt, not of the first one.
        walls = [a.wall for a in server.arrivals_of("c")]
        assert walls[2] < result.sent_at <= walls[3]

    run(scenario)


def test_server_errors_stop_at_max_attempts() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server, max_attempts=2), "c")
        assert result.attempts == 2 and len(server.arrivals) == 2
        assert result.error is not None
        assert (result.error.category, result.error.status) == ("server_error", 504)
        assert not result.error.fatal and "scripted 504" in result.error.message
        assert result.output is None

    run(scenario, default=FaultStep(status=504))


def test_other_5xx_is_not_retried() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server), "c")
        assert result.error is not None and result.error.category == "server_error"
        assert len(server.arrivals) == 1 and not result.error.fatal

    run(scenario, default=FaultStep(status=501))


def test_hang_is_cut_by_timeout_and_retried_up_to_max_attempts() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, lim: EvalgateLimiter) -> None:
        started = time.monotonic()
        result = await call(client, endpoint(server, timeout_s=0.3, max_attempts=3), "c")
        assert time.monotonic() - started < 10.0  # a 60 s hang, cut three times
        assert result.error is not None and result.error.category == "timeout"
        assert result.error.status is None and not result.error.fatal
        assert result.attempts == 3 and len(server.arrivals) == 3
        assert 0.3 <= result.e2e_s < 2.0
        assert lim.in_flight == 0

    run(scenario, default=FaultStep(hang_s=60.0))


def test_slow_stream_body_is_cut_by_timeout() -> None:
    step = FaultStep(chunks=("a", "b", "c"), chunk_delay_s=2.0)

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", step, step)
        result = await call(client, endpoint(server, timeout_s=0.5, max_attempts=2), "c")
        assert result.error is not None and result.error.category == "timeout"
        assert result.attempts == 2

    run(scenario)


def test_http_408_is_a_retried_timeout() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", FaultStep(status=408))
        result = await call(client, endpoint(server), "c")
        assert result.error is None and result.attempts == 2
        server.script("d", FaultStep(status=408), FaultStep(status=408))
        failed = await call(client, endpoint(server, max_attempts=2), "d")
        assert failed.error is not None and failed.error.category == "timeout"
        assert failed.error.status == 408

    run(scenario)


def test_dropped_connections_are_retried_then_reported() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("ok", FaultStep(drop=True), FaultStep(drop_after_chunks=1))
        result = await call(client, endpoint(server), "ok")
        assert result.error is None and result.attempts == 3
        server.script("bad", FaultStep(drop=True), FaultStep(drop=True))
        failed = await call(client, endpoint(server, max_attempts=2), "bad")
        assert failed.error is not None and failed.error.category == "connection"
        assert failed.attempts == 2 and not failed.error.fatal

    run(scenario)


def test_refused_connection_is_a_connection_error() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        port = server.port
        await server.__aexit__(None, None, None)  # nothing listens on the port any more
        ep = EvalgateEndpoint(f"http://127.0.0.1:{port}/v1", "m", "chat", None, 2.0, 2)
        result = await call(client, ep, "c")
        assert result.error is not None and result.error.category == "connection"
        assert result.attempts == 2

    async def main() -> None:
        server = await FaultServer().__aenter__()
        limiter = EvalgateLimiter(2, None, None)
        client = EvalgateClient(limiter, rng_seed=1)
        try:
            await scenario(server, client, limiter)
        finally:
            await client.aclose()

    asyncio.run(main())


# --- permanent errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors_are_fatal_and_sent_once(status: int) -> None:
    body = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server, max_attempts=4), "c")
        assert len(server.arrivals) == 1 and result.attempts == 1
        assert result.error is not None and result.error.fatal
        assert (result.error.category, result.error.status) == ("auth", status)
        assert "Incorrect API key provided" in result.error.message

    run(scenario, default=FaultStep(status=status, body=body))


@pytest.mark.parametrize("status", [400, 404, 422])
def test_bad_requests_are_never_retried_and_a_404_is_fatal(status: int) -> None:
    # a 400/422 is fatal only when it names the configuration or repeats across identities
    # (tests/test_bad_request_scope.py)
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server, max_attempts=4), "c")
        assert len(server.arrivals) == 1
        assert result.error is not None and result.error.fatal is (status == 404)
        assert (result.error.category, result.error.status) == ("bad_request", status)

    run(scenario, default=FaultStep(status=status))


def test_plain_text_error_body_is_quoted_in_the_message() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server), "c")
        assert result.error is not None and "model not found here" in result.error.message

    run(scenario, default=FaultStep(status=404, body=b"model not found here"))


def test_insufficient_quota_is_permanent() -> None:
    body = {"error": {"message": "You exceeded your quota", "code": "insufficient_quota"}}

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", FaultStep(status=429, body=body, headers={"Retry-After": "1"}))
        result = await call(client, endpoint(server, max_attempts=4), "c")
        assert len(server.arrivals) == 1
        assert result.error is not None and result.error.fatal
        assert (result.error.category, result.error.status) == ("rate_limited", 429)
        assert "exceeded your quota" in result.error.message

    run(scenario)


def test_rate_limited_until_attempts_run_out() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server, max_attempts=2), "c")
        assert result.error is not None and result.error.category == "rate_limited"
        assert not result.error.fatal and result.attempts == 2

    run(scenario, default=FaultStep(status=429))


def test_content_filter_is_an_error_and_not_retried() -> None:
    step = FaultStep(chunks=("I can", "not"), finish_reason="content_filter")

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server), "c")
        assert len(server.arrivals) == 1 and result.finish_reason == "content_filter"
        assert result.error is not None and result.error.category == "content_filter"
        assert not result.error.fatal
        whole = await call(client, endpoint(server, stream=False), "d")
        assert whole.error is not None and whole.error.category == "content_filter"

    run(scenario, default=step)


# --- malformed answers ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("body", [b"<html>oops</html>", {"id": "x", "object": "nothing"}])
def test_malformed_answer_is_retried_once_only(stream: bool, body: object) -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server, max_attempts=4, stream=stream), "c")
        assert len(server.arrivals) == 2 and result.attempts == 2
        assert result.error is not None and result.error.category == "malformed_response"
        assert result.error.status == 200 and not result.error.fatal

    run(scenario, default=FaultStep(body=body))


def test_malformed_once_then_good_succeeds() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        server.script("c", FaultStep(body=b"data: {not json\n\n"))
        result = await call(client, endpoint(server), "c")
        assert result.error is None and result.attempts == 2

    run(scenario)


def test_error_inside_a_stream_is_a_retried_server_error() -> None:
    broken = FaultStep(body=b'data: {"error": {"message": "engine died"}}\n\n')

    async def scenario(server: FaultServer, client: EvalgateClient, _: EvalgateLimiter) -> None:
        result = await call(client, endpoint(server, max_attempts=2), "c")
        assert result.error is not None and result.error.category == "server_error"
        assert "engine died" in result.error.message and result.attempts == 2

    run(scenario, default=broken)


# --- the budget while retrying --------------------------------------------------------------------


def test_waiting_to_retry_holds_no_slot() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, lim: EvalgateLimiter) -> None:
        server.script("slow", FaultStep(status=503, headers={"Retry-After": "1"}))
        first = asyncio.create_task(call(client, endpoint(server), "slow"))
        await asyncio.sleep(0.3)  # "slow" now sleeps before its retry
        other = await call(client, endpoint(server), "other")
        assert other.error is None and lim.in_flight == 0
        assert (await first).error is None
        order = [a.identity for a in server.arrivals]
        assert order == ["slow", "other", "slow"]

    run(scenario, concurrency=1)


def test_cancelled_call_frees_its_slot() -> None:
    async def scenario(server: FaultServer, client: EvalgateClient, lim: EvalgateLimiter) -> None:
        server.script("hang", FaultStep(hang_s=30.0))
        task = asyncio.create_task(call(client, endpoint(server), "hang"))
        await asyncio.sleep(0.2)
        assert lim.in_flight == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lim.in_flight == 0
        assert (await call(client, endpoint(server), "next")).error is None

    run(scenario, concurrency=1)
