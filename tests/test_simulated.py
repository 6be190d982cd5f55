"""The simulated model, tested over real loopback HTTP (aiohttp client, no mocks)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.simulated import (
    EVALGATE_SIM_READY,
    EvalgateSimConfig,
    evalgate_load_answer_key,
    evalgate_parse_simulated_url,
    evalgate_prompt_digest,
    evalgate_sim_answer,
    evalgate_sim_config_url,
    evalgate_sim_normalise,
    evalgate_sim_tokens,
    evalgate_sim_wrong_answer,
    evalgate_spawn_simulator,
    evalgate_write_answer_key,
)
from pytest_evalgate.simulated.server import EvalgateSimServer

Response = tuple[int, dict[str, str], Any]


def chat(i: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are a support assistant."},
        {"role": "user", "content": f"question {i}: how do I fix case {i}?"},
    ]


def target(i: int) -> str:
    return f"Answer {i}: reset  the router" if i % 3 else str(i)


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "answers.jsonl"
    rows: list[tuple[Any, str, str]] = [
        (chat(i), target(i), "hard" if i % 2 else "easy") for i in range(2000)
    ]
    rows += [(f"complete {i}:", f"done {i}", "text") for i in range(50)]
    assert evalgate_write_answer_key(path, rows) == 2050
    return path


def sim(url: str, key: Path | None = None, log: Path | None = None) -> EvalgateSimServer:
    return EvalgateSimServer(evalgate_parse_simulated_url(url), key, log)


def body(i: int, **extra: Any) -> dict[str, Any]:
    return {"model": "cand", "messages": chat(i), "temperature": 0, **extra}


async def _send(
    session: aiohttp.ClientSession, url: str, payload: Any, headers: dict[str, str]
) -> Response:
    async with session.post(url, json=payload, headers=headers) as response:
        raw = await response.read()
        data = json.loads(raw) if response.content_type == "application/json" else raw
        return response.status, dict(response.headers), data


async def _many(
    url: str, payloads: list[Any], concurrency: int, headers: dict[str, str], timeout: float
) -> list[Response]:
    limit = asyncio.Semaphore(concurrency)
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(timeout=client_timeout) as session:

        async def one(payload: Any) -> Response:
            async with limit:
                return await _send(session, url, payload, headers)

        return list(await asyncio.gather(*(one(p) for p in payloads)))


def post_many(
    base: str, payloads: list[Any], path: str = "/chat/completions", concurrency: int = 64
) -> list[Response]:
    return asyncio.run(_many(base + path, payloads, concurrency, {}, 30.0))


def post(
    base: str,
    payload: Any,
    path: str = "/chat/completions",
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> Response:
    return asyncio.run(_many(base + path, [payload], 1, headers or {}, timeout))[0]


def get(base: str, path: str) -> Response:
    async def run() -> Response:
        async with aiohttp.ClientSession() as session, session.get(base + path) as response:
            return response.status, dict(response.headers), await response.json()

    return asyncio.run(run())


def content(response: Response) -> str:
    status, _, data = response
    assert status == 200, data
    return str(data["choices"][0]["message"]["content"])


# --------------------------------------------------------------------------- knobs and URLs


def test_url_knobs_parse_into_the_config() -> None:
    url = "simulated://?accuracy=0.75&latency_ms=40&seed=3&fail_401=1&accuracy.billing=0.5"
    config = evalgate_parse_simulated_url(url + "&output_tokens=12&retry_after=2.5")
    assert (config.accuracy, config.latency_ms, config.seed, config.fail_401) == (0.75, 40, 3, True)
    assert (config.output_tokens, config.retry_after) == (12, 2.5)
    assert config.accuracy_for("billing") == 0.5 and config.accuracy_for("other") == 0.75
    assert evalgate_parse_simulated_url("simulated://") == EvalgateSimConfig()


def test_config_url_round_trips() -> None:
    config = EvalgateSimConfig(accuracy=0.3, ttft_ms=12.5, hang_first=2, quota=True, jitter=0.1)
    config = EvalgateSimConfig(**{**config.__dict__, "accuracy_by_category": (("a b", 0.25),)})
    assert evalgate_parse_simulated_url(evalgate_sim_config_url(config)) == config


@pytest.mark.parametrize(
    ("url", "knob", "reason"),
    [
        ("simulated://?acuracy=0.9", "acuracy", "unknown knob"),
        ("simulated://?accuracy=1.5", "accuracy", "[0, 1]"),
        ("simulated://?latency_ms=-1", "latency_ms", ">= 0"),
        ("simulated://?latency_ms=fast", "latency_ms", "fast"),
        ("simulated://?fail_401=maybe", "fail_401", "0 or 1"),
        ("simulated://?seed=1&seed=2", "seed", "twice"),
        ("simulated://?accuracy.x=2", "accuracy.x", "[0, 1]"),
        ("simulated://?hang_first=1.5", "hang_first", "1.5"),
        ("simulated://?hang_s=301", "hang_s", "300"),
        ("http://?accuracy=1", "scheme", "simulated://"),
        ("simulated://host/x?accuracy=1", "path", "query"),
    ],
)
def test_bad_urls_name_the_knob(url: str, knob: str, reason: str) -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_parse_simulated_url(url)
    assert (info.value.source, info.value.key) == (url, knob)
    assert reason in info.value.reason


# --------------------------------------------------------------------------- answers


def test_answer_key_rows_and_errors(tmp_path: Path, key: Path) -> None:
    loaded = evalgate_load_answer_key(key)
    assert loaded[evalgate_prompt_digest(chat(4))] == (target(4), "easy")
    assert loaded[evalgate_prompt_digest("complete 1:")] == ("done 1", "text")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_sha256": "ab", "target": "x"}\n{"prompt_sha256": "ab"}\n')
    with pytest.raises(EvalgateConfigError, match="line 2"):
        evalgate_load_answer_key(bad)
    bad.write_text(
        '{"prompt_sha256": "ab", "target": "x"}\n{"prompt_sha256": "ab", "target": "y"}\n'
    )
    with pytest.raises(EvalgateConfigError, match="conflicting"):
        evalgate_load_answer_key(bad)


def _random_target(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return str(rng.randrange(-50, 200))
    if kind == 1:
        return f"{rng.uniform(-10, 10):.{rng.randrange(1, 4)}f}"
    if kind == 2:
        return rng.choice(["a", "e", "The", "no", "yes", "1", "0", "?", "refund", "blue"])
    words = ["refund", "the", "Paris", "blue", "seven", "a", "order", "x", "42", "maybe"]
    return " ".join(rng.choice(words) for _ in range(rng.randrange(1, 5))) + rng.choice(["", "."])


def test_wrong_answers_never_match_the_target_under_normalisation() -> None:
    rng = random.Random(7)
    for i in range(3000):
        goal = _random_target(rng)
        wrong = evalgate_sim_wrong_answer(goal, f"salt {i}")
        assert wrong == evalgate_sim_wrong_answer(goal, f"salt {i}")
        for norm in (evalgate_sim_normalise, lambda s: " ".join(s.lower().split())):
            assert norm(wrong) and norm(wrong) != norm(goal), (goal, wrong)
            assert not norm(goal) or norm(goal) not in norm(wrong), (goal, wrong)
        assert goal.strip() not in wrong


def test_tokens_join_back_to_the_exact_text() -> None:
    for text in ["a  b\nc ", "  lead", "one", "", "x\t\ty  z\n"]:
        tokens = evalgate_sim_tokens(text)
        assert "".join(tokens) == text
        assert len(tokens) == (len(text.split()) or (1 if text else 0))
    assert evalgate_sim_tokens("reset  the router") == ["reset", "  the", " router"]


def test_accuracy_within_binomial_tolerance_and_matches_prediction(key: Path) -> None:
    url = "simulated://?accuracy=0.7&accuracy.hard=0.2&seed=5"
    config = evalgate_parse_simulated_url(url)
    table = evalgate_load_answer_key(key)
    with sim(url, key) as server:
        outputs = [content(r) for r in post_many(server.base_url, [body(i) for i in range(2000)])]
    for name, rate, ids in [("easy", 0.7, range(0, 2000, 2)), ("hard", 0.2, range(1, 2000, 2))]:
        hits = sum(outputs[i] == target(i) for i in ids)
        assert abs(hits / len(ids) - rate) < 4 * math.sqrt(rate * (1 - rate) / len(ids)), name
    predicted = [evalgate_sim_answer(config, table, "cand", chat(i)).text for i in range(2000)]
    assert outputs == predicted


def test_answers_are_deterministic_across_restarts_and_depend_on_seed(key: Path) -> None:
    runs = []
    for url in ["simulated://?accuracy=0.5&seed=1"] * 2 + ["simulated://?accuracy=0.5&seed=2"]:
        with sim(url, key) as server:
            runs.append(
                [content(r) for r in post_many(server.base_url, [body(i) for i in range(300)])]
            )
    assert runs[0] == runs[1]
    assert sum(a != b for a, b in zip(runs[0], runs[2], strict=True)) > 50


def test_request_seed_counts_only_when_temperature_is_positive(key: Path) -> None:
    with sim("simulated://?accuracy=0.5", key) as server:
        cold = [body(i, seed=s) for s in (1, 2) for i in range(200)]
        hot = [body(i, seed=s, temperature=0.7) for s in (1, 2) for i in range(200)]
        cold_out = [content(r) for r in post_many(server.base_url, cold)]
        hot_out = [content(r) for r in post_many(server.base_url, hot)]
        unset = [content(r) for r in post_many(server.base_url, [{**body(0)} | {"seed": 9}])]
    assert cold_out[:200] == cold_out[200:]
    assert sum(a != b for a, b in zip(hot_out[:200], hot_out[200:], strict=True)) > 30
    assert unset[0] == cold_out[0]


def test_unknown_prompt_gets_a_deterministic_wrong_answer(key: Path) -> None:
    with sim("simulated://?accuracy=1", key) as server:
        first = content(post(server.base_url, body(99999)))
        assert first == content(post(server.base_url, body(99999)))
        assert content(post(server.base_url, body(5))) == target(5)


def test_completions_endpoint_answers_the_prompt_key(key: Path) -> None:
    with sim("simulated://?accuracy=1", key) as server:
        status, headers, data = post(
            server.base_url, {"model": "m", "prompt": "complete 3:"}, "/completions"
        )
    assert (status, headers["x-evalgate-simulator"]) == (200, "1")
    assert data["object"] == "text_completion" and data["choices"][0]["text"] == "done 3"
    assert data["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}


def test_output_tokens_pad_with_spaces_and_max_tokens_truncates(key: Path) -> None:
    with sim("simulated://?accuracy=1&output_tokens=12", key) as server:
        _, _, padded = post(server.base_url, body(1))
        _, _, cut = post(server.base_url, body(1, max_tokens=2))
    text = padded["choices"][0]["message"]["content"]
    assert text.strip() == target(1) and text != target(1)
    assert padded["usage"]["completion_tokens"] == 12
    assert padded["usage"]["prompt_tokens"] == len(" ".join(m["content"] for m in chat(1)).split())
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["choices"][0]["message"]["content"] == "Answer 1:"
    assert cut["usage"]["completion_tokens"] == 2


def test_output_jitter_spreads_lengths_around_the_mean(key: Path) -> None:
    with sim("simulated://?accuracy=1&output_tokens=40&output_jitter=0.5", key) as server:
        results = post_many(server.base_url, [body(i) for i in range(200)])
    lengths = [r[2]["usage"]["completion_tokens"] for r in results]
    assert 20 <= min(lengths) < 30 and 50 < max(lengths) <= 60
    assert 36 < sum(lengths) / len(lengths) < 44


# --------------------------------------------------------------------------- streaming


async def _stream(url: str, payload: dict[str, Any]) -> list[tuple[float, Any]]:
    events: list[tuple[float, Any]] = []
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        async with session.post(url, json=payload) as response:
            assert response.status == 200
            assert response.headers["content-type"] == "text/event-stream"
            async for line in response.content:
                if line.startswith(b"data: "):
                    data = line[6:].strip()
                    item = data if data == b"[DONE]" else json.loads(data)
                    events.append((time.perf_counter() - start, item))
    return events


def stream(base: str, payload: dict[str, Any], path: str = "/chat/completions") -> list[Any]:
    return asyncio.run(_stream(base + path, {**payload, "stream": True}))


def test_streamed_chat_chunks_have_openai_shapes_and_usage(key: Path) -> None:
    with sim("simulated://?accuracy=1&output_tokens=7", key) as server:
        plain = content(post(server.base_url, body(2)))
        usage = {"stream_options": {"include_usage": True}}
        events = [e for _, e in stream(server.base_url, body(2, **usage))]
        bare = [e for _, e in stream(server.base_url, body(2))]
    assert events[-1] == b"[DONE]" and bare[-1] == b"[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]]
    assert "".join(deltas) == plain and len([d for d in deltas if d]) == 7
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 7
    assert all("usage" not in c for c in bare[:-1]) and len(bare) == len(events) - 1


def test_streamed_completions_use_text_chunks(key: Path) -> None:
    with sim("simulated://?accuracy=1", key) as server:
        payload = {"model": "m", "prompt": "complete 7:", "stream_options": {"include_usage": True}}
        events = [e for _, e in stream(server.base_url, payload, "/completions")]
    chunks = events[:-1]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "done 7"
    assert chunks[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}


def test_ttft_and_tpot_are_roughly_honoured(key: Path) -> None:
    with sim("simulated://?accuracy=1&ttft_ms=150&tpot_ms=40&output_tokens=6", key) as server:
        events = stream(server.base_url, body(1))
        start = time.perf_counter()
        post(server.base_url, body(1))
        whole = time.perf_counter() - start
    times = [t for t, e in events if e != b"[DONE]" and e["choices"][0]["delta"].get("content")]
    assert len(times) == 6
    assert 0.14 <= times[0] < 2.0
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert 0.035 <= sum(gaps) / len(gaps) < 0.5
    assert 0.14 + 5 * 0.035 <= whole < 3.0  # non-streaming waits ttft + tpot * (n - 1)


def test_latency_and_jitter_spread_non_streaming_times(key: Path) -> None:
    with sim("simulated://?accuracy=1&latency_ms=100", key) as server:
        start = time.perf_counter()
        post(server.base_url, body(3))
        assert 0.095 <= time.perf_counter() - start < 2.0


# --------------------------------------------------------------------------- faults


def test_fail_401_returns_an_openai_error_body(key: Path) -> None:
    with sim("simulated://?fail_401=1", key) as server:
        status, headers, data = post(server.base_url, body(1))
        assert server.stats()["by_status"] == {"401": 1}
    assert (status, headers["x-evalgate-simulator"]) == (401, "1")
    assert data["error"]["code"] == "invalid_api_key" and "simulator" in data["error"]["message"]


def test_fail_400_and_quota_hit_every_request(key: Path) -> None:
    with sim("simulated://?fail_400=1", key) as server:
        assert {r[0] for r in post_many(server.base_url, [body(i) for i in range(5)])} == {400}
    with sim("simulated://?quota=1", key) as server:
        results = post_many(server.base_url, [body(i) for i in range(5)])
    assert {r[0] for r in results} == {429}
    assert {r[2]["error"]["code"] for r in results} == {"insufficient_quota"}


def test_fail_429_first_n_with_retry_after_then_answers(key: Path) -> None:
    with sim("simulated://?accuracy=1&fail_429_first=3&retry_after=2", key) as server:
        results = [post(server.base_url, body(1)) for _ in range(5)]
    assert [r[0] for r in results] == [429, 429, 429, 200, 200]
    assert results[0][1]["Retry-After"] == "2"
    assert results[0][2]["error"]["code"] == "rate_limit_exceeded"
    assert "Retry-After" not in results[3][1]


def test_fail_500_first_n(key: Path) -> None:
    with sim("simulated://?fail_500_first=2", key) as server:
        statuses = [post(server.base_url, body(1))[0] for _ in range(4)]
    assert statuses == [500, 500, 200, 200]


def test_fail_rate_is_seeded_and_near_its_probability(key: Path) -> None:
    runs = []
    for _ in range(2):
        with sim("simulated://?fail_rate=0.3&seed=4", key) as server:
            statuses = [
                r[0]
                for r in post_many(server.base_url, [body(i) for i in range(400)], concurrency=1)
            ]
            runs.append(statuses)
    assert runs[0] == runs[1] and set(runs[0]) == {200, 503}
    assert abs(runs[0].count(503) / 400 - 0.3) < 4 * math.sqrt(0.3 * 0.7 / 400)


def test_hang_first_never_answers_until_the_client_gives_up(key: Path) -> None:
    with sim("simulated://?accuracy=1&hang_first=1", key) as server:
        with pytest.raises(asyncio.TimeoutError):
            post(server.base_url, body(1), timeout=0.3)
        assert content(post(server.base_url, body(1))) == target(1)
        deadline = time.monotonic() + 5
        while server.stats()["client_disconnects"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        stats = server.stats()
    assert stats["client_disconnects"] == 1 and stats["in_flight"] == 0
    assert stats["by_status"] == {"200": 1}


def test_hung_requests_are_dropped_after_hang_s(key: Path) -> None:
    with sim("simulated://?hang_first=1&hang_s=0.2", key) as server:
        start = time.perf_counter()
        with pytest.raises(aiohttp.ServerDisconnectedError):
            post(server.base_url, body(1), timeout=10)
        assert 0.15 < time.perf_counter() - start < 5
        stats = server.stats()
    assert (stats["hangs_dropped"], stats["client_disconnects"], stats["in_flight"]) == (1, 0, 0)


# --------------------------------------------------------------------------- log, stats, HTTP


def test_request_log_has_one_flushed_line_per_request(tmp_path: Path, key: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with sim("simulated://?fail_429_first=1", key, log) as server:
        headers = {"x-evalgate-identity": "rev/case-1/cand/0", "x-evalgate-attempt": "1"}
        post(server.base_url, body(1), headers=headers)
        lines = [json.loads(x) for x in log.read_text().splitlines()]  # read while it runs
        assert len(lines) == 1
        post(server.base_url, body(1), headers={**headers, "x-evalgate-attempt": "2"})
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["attempt"] for x in lines] == ["1", "2"]
    assert {x["identity"] for x in lines} == {"rev/case-1/cand/0"}
    assert lines[0]["model"] == "cand" and lines[0]["path"] == "/v1/chat/completions"
    assert lines[0]["t"] <= lines[1]["t"] and [x["n"] for x in lines] == [0, 1]


def test_peak_in_flight_counts_concurrent_requests_and_reset_zeroes(key: Path) -> None:
    with sim("simulated://?accuracy=1&latency_ms=300", key) as server:
        post_many(server.base_url, [body(i) for i in range(20)], concurrency=20)
        post_many(server.base_url, [body(i) for i in range(6)], concurrency=3)
        stats = get(server.base_url.removesuffix("/v1"), "/evalgate/stats")[2]
        assert stats["peak_in_flight"] == 20 and stats["in_flight"] == 0
        assert stats["requests_total"] == 26 and stats["by_status"] == {"200": 26}
        reset = post(server.base_url.removesuffix("/v1"), None, "/evalgate/reset")[2]
        assert reset["requests_total"] == 0 and reset["peak_in_flight"] == 0
        post_many(server.base_url, [body(i) for i in range(4)], concurrency=2)
        assert server.stats()["peak_in_flight"] == 2


def test_models_and_unknown_paths(key: Path) -> None:
    with sim("simulated://", key) as server:
        status, headers, data = get(server.base_url, "/models")
        missing = post(server.base_url, body(1), "/embeddings")
        wrong_method = get(server.base_url, "/chat/completions")
        not_json = post(server.base_url, [1, 2])
    assert status == 200 and headers["x-evalgate-simulator"] == "1"
    assert {m["owned_by"] for m in data["data"]} == {"evalgate-simulator"}
    assert (missing[0], wrong_method[0], not_json[0]) == (404, 405, 400)
    assert all(r[1]["x-evalgate-simulator"] == "1" for r in (missing, wrong_method, not_json))


def _raw_exchange(port: int, data: bytes, expect: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while received.count(b"HTTP/1.1 ") < expect or not received.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received


def test_pipelined_requests_are_answered_in_order(key: Path) -> None:
    payloads = [json.dumps(body(i)).encode() for i in (1, 2)]
    heads = [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b"
        % (len(p), p)
        for p in payloads
    ]
    with sim("simulated://?accuracy=1&latency_ms=20", key) as server:
        received = _raw_exchange(server.port, b"".join(heads), 2)
    first, second = received.split(b"HTTP/1.1 200 OK")[1:]
    assert target(1).encode() in first and target(2).encode() in second


def test_connection_close_and_malformed_requests(key: Path) -> None:
    with sim("simulated://", key) as server:
        closing = _raw_exchange(
            server.port, b"GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n", 1
        )
        broken = _raw_exchange(server.port, b"NONSENSE\r\n\r\n", 1)
        chunked = b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        refused = _raw_exchange(server.port, chunked, 1)
    assert closing.startswith(b"HTTP/1.1 200") and b"Connection: close" in closing
    assert broken.startswith(b"HTTP/1.1 400") and refused.startswith(b"HTTP/1.1 411")


# --------------------------------------------------------------------------- subprocess and CLI


@pytest.fixture
def spawned(key: Path, tmp_path: Path) -> Iterator[Any]:
    config = evalgate_parse_simulated_url("simulated://?accuracy=1&latency_ms=10&seed=3")
    process = evalgate_spawn_simulator(config, key, tmp_path / "log.jsonl")
    try:
        yield process
    finally:
        process.stop()


def test_spawned_subprocess_serves_and_stops(spawned: Any, tmp_path: Path) -> None:
    assert spawned.base_url == f"http://127.0.0.1:{spawned.port}/v1"
    assert content(post(spawned.base_url, body(8))) == target(8)
    stats = spawned.stats()
    assert stats["by_status"] == {"200": 1}
    assert stats["connections_accepted"] == 2  # the request's and this stats request's own
    spawned.reset()
    stats = spawned.stats()
    assert stats["requests_total"] == 0
    assert stats["connections_accepted"] == 1  # counted from the reset: this one
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 1
    assert spawned.stop() == 0  # SIGTERM is a clean stop
    assert spawned.process.poll() == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", spawned.port), timeout=2).close()


def test_spawn_failure_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(EvalgateConfigError, match="startup"):
        evalgate_spawn_simulator(EvalgateSimConfig(), missing, startup_timeout_s=20)


def _serve(args: list[str]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "pytest_evalgate.cli", "serve", *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cli_serve_prints_its_ready_line_and_stops_on_sigint(key: Path) -> None:
    process = _serve(["--port", "0", "--answers", str(key), "--url", "simulated://?accuracy=0"])
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(EVALGATE_SIM_READY + " http://127.0.0.1:")
        base = line.split()[-1]
        assert content(post(base, body(2))) != target(2)  # accuracy=0 from the URL
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 0
        process.communicate()


def test_cli_options_override_url_knobs(key: Path) -> None:
    args = ["--port", "0", "--answers", str(key), "--url", "simulated://?accuracy=0"]
    process = _serve([*args, "--accuracy", "1", "--knob", "fail_500_first=1"])
    try:
        assert process.stdout is not None
        base = process.stdout.readline().split()[-1]
        assert post(base, body(2))[0] == 500
        assert content(post(base, body(2))) == target(2)
    finally:
        process.terminate()
        assert process.wait(20) == 0
        process.communicate()


def test_cli_serve_rejects_bad_knobs_with_exit_4(key: Path) -> None:
    process = _serve(["--port", "0", "--url", "simulated://?speed=9"])
    out, err = process.communicate(timeout=30)
    assert process.returncode == 4 and "speed" in err and "unknown knob" in err
    assert out == "" and os.path.exists(key)


def _raw_post(port: int, payload: bytes) -> bytes:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
    return _raw_exchange(port, head % len(payload) + payload, 1)


@pytest.mark.parametrize(
    "payload",
    [
        b'{"model": "m", "messages": [{"role": "user", "content": NaN}]}',
        b'{"model": "m", "messages": "hello"}',
        b'{"model": "m", "messages": [], "temperature": "hot"}',
        b'{"model": "m", "messages": [], "stream": true, "stream_options": [1]}',
        b"not json at all",
    ],
)
def test_odd_bodies_get_400_and_the_connection_stays_usable(key: Path, payload: bytes) -> None:
    with sim("simulated://?accuracy=1", key) as server:
        assert _raw_post(server.port, payload).startswith(b"HTTP/1.1 400")
        assert content(post(server.base_url, body(4))) == target(4)
        assert server.stats()["by_status"] == {"400": 1, "200": 1}


def test_stop_ends_hung_requests_and_stats_show_them_in_flight(key: Path) -> None:
    server = sim("simulated://?hang_first=2", key).start()

    async def hung_pair() -> list[Any]:
        url = server.base_url + "/chat/completions"
        calls = [_many(url, [body(i)], 1, {}, 30.0) for i in (1, 2)]
        waiting = asyncio.gather(*calls, return_exceptions=True)
        deadline = time.monotonic() + 5
        while server.stats()["in_flight"] < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert server.stats()["in_flight"] == 2 == server.stats()["peak_in_flight"]
        server.reset()
        assert server.stats()["peak_in_flight"] == 2  # still in flight after a reset
        start = time.perf_counter()
        server.stop()
        assert time.perf_counter() - start < 5
        return list(await waiting)

    outcomes = asyncio.run(hung_pair())
    assert all(isinstance(o, aiohttp.ClientError) for o in outcomes), outcomes


def test_a_spawned_simulator_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    """The harness spawns simulators; a SIGKILLed harness must not leave them running."""
    code = (
        "import sys, time\n"
        "from pytest_evalgate.simulated import EvalgateSimConfig, evalgate_spawn_simulator\n"
        "sim = evalgate_spawn_simulator(EvalgateSimConfig(), None)\n"
        "print(sim.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    with parent.stdout:
        child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_models_retrieve_answers_one_model(key: Path) -> None:
    # issue 37: GET /v1/models/{id} (the SDK's models.retrieve) was 404 "no such path"
    with sim("simulated://", key) as server:
        status, _headers, data = get(server.base_url, "/models/model-candidate")
        encoded = get(server.base_url, "/models/org%2Fmodel")
    assert status == 200
    assert data == {"id": "model-candidate", "object": "model", "created": 0,
                    "owned_by": "evalgate-simulator"}  # fmt: skip
    assert encoded[0] == 200 and encoded[2]["id"] == "org/model"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"n": 2}, "'n': 2 is not supported by the simulator"),
        ({"n": 0}, "'n' must be a positive integer"),
        ({"n": True}, "'n' must be a positive integer"),
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, "'response_format'"),
    ],
)
def test_what_the_simulator_cannot_do_is_refused_not_ignored(
    key: Path, extra: dict[str, object], reason: str
) -> None:
    with sim("simulated://", key) as server:
        status, _headers, data = post(server.base_url, {**body(1), **extra})
        kept = [post(server.base_url, {**body(1), **ok})[0] for ok in
                ({"n": 1}, {"response_format": {"type": "json_object"}})]  # fmt: skip
    assert status == 400 and reason in data["error"]["message"], data
    assert kept == [200, 200]  # one choice and JSON mode (the judge styles) stay served
