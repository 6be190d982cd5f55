"""The shadow proxy end to end, real processes on loopback: two simulators (stable, candidate),
``evalgate shadow serve`` in front, plain HTTP clients, then ``evalgate shadow gate``.

What each test shows: the client gets stable's bytes (a fixed upstream compared byte for byte,
whole and chunked-streamed; the simulator too, its per-request id and time aside); about P % of
requests reach the candidate; a hanging, failing or absent candidate costs the client nothing;
later turns of a tool loop never reach the candidate; keys are not kept; and the shadow gate
fails a candidate whose answers are 40 % longer and passes an equal one (the proxy is a
subprocess, served and stopped by signal; the one-shot gate runs in this process).
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inprockit import run_cli_inprocess

from pytest_evalgate.simulated import (
    EvalgateSimConfig,
    EvalgateSimProcess,
    evalgate_spawn_simulator,
)

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "suites" / "tiny"
READY = "evalgate shadow proxy listening on http://"
KEY = "sk-shadow-test-key-0123456789"


class Proxy:
    """``evalgate shadow serve`` as a subprocess; stopped by its pid."""

    def __init__(self, stable: str, candidate: str, percent: float, store: Path, *extra: str):
        argv = [sys.executable, "-m", "pytest_evalgate.cli", "shadow", "serve",
                "--stable", stable, "--candidate", candidate, "--percent", str(percent),
                "--store", str(store), "--suite", "tiny-eval", *extra]  # fmt: skip
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith(READY), line
        self.port = int(line.strip().rsplit(":", 1)[1])

    def stats(self) -> dict[str, Any]:
        status, _, body = request(self.port, "GET", "/evalgate/shadow/stats", b"")
        assert status == 200
        result: dict[str, Any] = json.loads(body)
        return result

    def stop(self) -> dict[str, Any]:
        self.process.terminate()
        out, _ = self.process.communicate(timeout=30)
        final: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return final


def request(
    port: int, method: str, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def chat(text: str, stream: bool = False, **extra: Any) -> bytes:
    messages = [{"role": "user", "content": text}]
    body = {"model": "tiny-app", "messages": messages, "stream": stream, **extra}
    return json.dumps(body).encode()


def post(port: int, body: bytes) -> tuple[int, dict[str, str], bytes]:
    headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
    return request(port, "POST", "/v1/chat/completions", body, headers)


def origin(sim: EvalgateSimProcess) -> str:
    return f"http://127.0.0.1:{sim.port}"


@pytest.fixture
def sims() -> Iterator[list[EvalgateSimProcess]]:
    started: list[EvalgateSimProcess] = []
    yield started
    for sim in started:
        sim.stop()


def spawn(started: list[EvalgateSimProcess], **knobs: Any) -> EvalgateSimProcess:
    sim = evalgate_spawn_simulator(EvalgateSimConfig(**knobs), None)
    started.append(sim)
    return sim


class FixedUpstream:
    """A loopback server answering every request with one fixed response, in given pieces."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            with client:
                client.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    data += client.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1]) for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )  # fmt: skip
                while len(rest) < length:
                    rest += client.recv(65536)
                for piece in self.pieces:
                    client.sendall(piece)

    def close(self) -> None:
        self.server.close()


SSE_BODY = (
    b'data: {"choices":[{"index":0,"delta":{"content":"caf\xc3\xa9 \\u00e9"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":" two"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def chunked(body: bytes, cut: int) -> list[bytes]:
    parts = [body[:cut], body[cut:]]
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    head += b"connection: close\r\nx-upstream: kept\r\n\r\n"
    return [head] + [b"%x\r\n%b\r\n" % (len(part), part) for part in parts] + [b"0\r\n\r\n"]


def whole(body: bytes) -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-upstream: kept\r\n"
    return [head + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body), body]


@pytest.mark.parametrize(
    "pieces, body",
    [
        (chunked(SSE_BODY, 17), SSE_BODY),
        (whole(b'{"choices":[{"message":{"content":"x\\ny"}}]}  '), None),
    ],
    ids=["sse-chunked", "json-length"],
)
def test_client_gets_stable_bytes_exactly(
    tmp_path: Path, sims: list[EvalgateSimProcess], pieces: list[bytes], body: bytes | None
) -> None:
    expected = body if body is not None else pieces[1]
    upstream = FixedUpstream(pieces)
    candidate = spawn(sims, output_tokens=50)
    proxy = Proxy(f"http://127.0.0.1:{upstream.port}", origin(candidate), 100, tmp_path / "s")
    try:
        for _ in range(3):
            status, headers, got = post(proxy.port, chat("hello"))
            assert (status, got) == (200, expected)
            assert headers["x-upstream"] == "kept"
    finally:
        final = proxy.stop()
        upstream.close()
    assert final["pairs"] == 3  # the candidate was called each time, and never returned


def _without_volatile(raw: bytes) -> bytes:
    lines = []
    for line in raw.split(b"\n"):
        text = line.decode()
        if text.startswith("data: {"):
            obj = json.loads(text[6:])
            obj.pop("id"), obj.pop("created")
            text = "data: " + json.dumps(obj)
        elif text.startswith("{"):
            obj = json.loads(text)
            obj.pop("id"), obj.pop("created")
            text = json.dumps(obj)
        lines.append(text.encode())
    return b"\n".join(lines)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_simulated_stable_answers_come_through(
    tmp_path: Path, sims: list[EvalgateSimProcess], stream: bool
) -> None:
    stable, candidate = spawn(sims, output_tokens=12), spawn(sims, output_tokens=40)
    proxy = Proxy(origin(stable), origin(candidate), 100, tmp_path / "s")
    try:
        for index in range(4):
            body = chat(f"question {index}", stream=stream)
            direct = post(stable.port, body)
            proxied = post(proxy.port, body)
            assert proxied[0] == direct[0] == 200
            assert proxied[1]["content-type"] == direct[1]["content-type"]
            assert _without_volatile(proxied[2]) == _without_volatile(direct[2])
    finally:
        proxy.stop()


def test_candidate_sees_about_p_percent(tmp_path: Path, sims: list[EvalgateSimProcess]) -> None:
    stable, candidate = spawn(sims), spawn(sims)
    proxy = Proxy(origin(stable), origin(candidate), 20, tmp_path / "s", "--seed", "7")
    try:
        for index in range(300):
            assert post(proxy.port, chat(f"q{index}"))[0] == 200
        stats = proxy.stats()
    finally:
        final = proxy.stop()
    seen = candidate.stats()["requests_total"]
    # Binomial(300, 0.2): mean 60, sd 6.9; 4 sd either side
    assert 32 <= seen <= 88, seen
    assert seen == stats["sampled"] == final["pairs"] == final["pairs_written"]
    assert stable.stats()["requests_total"] == 300 - 0  # every request reached stable once


def test_hanging_candidate_costs_the_client_nothing(
    tmp_path: Path, sims: list[EvalgateSimProcess]
) -> None:
    stable, candidate = spawn(sims), spawn(sims, hang_first=10_000, hang_s=60)
    proxy = Proxy(
        origin(stable), origin(candidate), 100, tmp_path / "s", "--candidate-timeout", "1",
        "--max-in-flight", "8",
    )  # fmt: skip
    try:
        for index in range(20):
            status, _, body = post(proxy.port, chat(f"q{index}"))
            assert status == 200 and json.loads(body)["choices"]
        stats = proxy.stats()
    finally:
        final = proxy.stop()
    assert stats["forwarded"] == 20
    # at most 8 hang at once; the rest were dropped rather than queued behind them
    assert stats["sampled"] + stats.get("dropped_busy", 0) == 20
    assert final["candidate_timeouts"] + final.get("candidate_failed", 0) >= 1
    assert final.get("candidate_answered", 0) == 0


@pytest.mark.parametrize("knobs", [{"fail_rate": 1.0}, None], ids=["500s", "no-server"])
def test_failing_candidate_costs_the_client_nothing(
    tmp_path: Path, sims: list[EvalgateSimProcess], knobs: dict[str, Any] | None
) -> None:
    stable = spawn(sims)
    if knobs is None:
        closed = socket.create_server(("127.0.0.1", 0))
        target = f"http://127.0.0.1:{closed.getsockname()[1]}"
        closed.close()  # nothing listens there now
    else:
        target = origin(spawn(sims, **knobs))
    proxy = Proxy(origin(stable), target, 100, tmp_path / "s")
    try:
        for index in range(10):
            status, _, body = post(proxy.port, chat(f"q{index}"))
            assert status == 200 and json.loads(body)["choices"][0]["message"]["content"]
    finally:
        final = proxy.stop()
    pairs = read_pairs(tmp_path / "s")
    assert len(pairs) == 10 == final["pairs"]
    assert all(pair["candidate"]["error"] for pair in pairs)
    assert not any(pair["stable"]["error"] for pair in pairs)


def read_pairs(store: Path) -> list[dict[str, Any]]:
    pairs = []
    for path in sorted((store / "shadow" / "tiny-eval" / "pairs").glob("*.jsonl")):
        pairs += [json.loads(line) for line in path.read_text().splitlines()]
    return pairs


def test_later_turns_never_reach_the_candidate(
    tmp_path: Path, sims: list[EvalgateSimProcess]
) -> None:
    stable, candidate = spawn(sims), spawn(sims)
    proxy = Proxy(origin(stable), origin(candidate), 100, tmp_path / "s")
    call = {"id": "c1", "type": "function", "function": {"name": "refund", "arguments": "{}"}}
    later = [
        {"role": "user", "content": "refund order 7"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "refunded"},
    ]
    try:
        for index in range(5):
            turn = [*later, {"role": "user", "content": str(index)}]
            body = json.dumps({"model": "m", "messages": turn})
            assert post(proxy.port, body.encode())[0] == 200
        assert post(proxy.port, chat("first turn"))[0] == 200
    finally:
        final = proxy.stop()
    assert final["skipped_later_turn"] == 5
    assert candidate.stats()["requests_total"] == 1  # only the first turn was shadowed
    assert stable.stats()["requests_total"] == 6


def test_pairs_keep_no_key(tmp_path: Path, sims: list[EvalgateSimProcess]) -> None:
    stable, candidate = spawn(sims), spawn(sims, fault="echo_key")
    proxy = Proxy(origin(stable), origin(candidate), 100, tmp_path / "s")
    try:
        for index in range(5):
            assert post(proxy.port, chat(f"q{index}"))[0] == 200
    finally:
        proxy.stop()
    texts = [path.read_text() for path in (tmp_path / "s").rglob("*.jsonl")]
    assert texts and all(KEY not in text for text in texts)
    assert any("[REDACTED]" in text for text in texts)  # the echoed key was there, and cut


SHADOW_RULES = """
shadow:
  - {metric: output_length_ratio, max: 1.15, min_pairs: 30}
  - {metric: error_rate_delta, max: 0.05, min_pairs: 30}
  - {metric: refusal_rate_delta, max: 0.05, min_pairs: 30}
"""


def shadow_suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    shutil.copytree(TINY, suite)
    with (suite / "gate.yaml").open("a", encoding="utf-8") as handle:
        handle.write(SHADOW_RULES)
    return suite


@pytest.mark.parametrize("tokens, status", [(28, 1), (20, 0)], ids=["40pct-longer", "equal"])
def test_shadow_gate_fails_longer_and_passes_equal(
    tmp_path: Path, sims: list[EvalgateSimProcess], tokens: int, status: int
) -> None:
    stable, candidate = spawn(sims, output_tokens=20), spawn(sims, output_tokens=tokens)
    store = tmp_path / "s"
    proxy = Proxy(origin(stable), origin(candidate), 50, store)
    try:
        usage = {"stream_options": {"include_usage": True}}  # as streaming clients ask
        for index in range(120):
            body = chat(f"q{index}", stream=index % 2 == 0, **usage)
            assert post(proxy.port, body)[0] == 200
    finally:
        proxy.stop()
    out = tmp_path / "shadow-decision.json"
    suite = str(shadow_suite(tmp_path))
    # a one-shot command: through the console script's main in this process
    done = run_cli_inprocess(
        "shadow", "gate", suite, "--store", str(store), "--out", str(out), cwd=tmp_path
    )
    assert done.returncode == status, done.stdout + done.stderr
    decision = json.loads(out.read_text())
    length = next(rule for rule in decision["rules"] if rule["metric"] == "output_length_ratio")
    assert decision["verdict"] == ("fail" if status else "pass")
    assert length["estimate"] == pytest.approx(tokens / 20, abs=0.02)
    assert length["outcome"] == ("fail" if status else "pass")
    assert decision["counts"]["pairs"] >= 30
