"""Whose fault is a 400 (issue 37, Weak): one case's 400 that names the request stays that
identity's error; a 400 naming the configuration, or the same 400 on several identities in a
row, stops the candidate. Against a real loopback server and a real ``pytest --evalgate`` run
(its runner child), plus the client's classification on the scripted fault server."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from faultserver import FaultStep
from suitekit import make_cases, write_suite
from test_client import call, endpoint, run

from pytest_evalgate.client.checks import EVALGATE_BAD_REQUEST_REPEATS, EvalgateBadRequests
from pytest_evalgate.client.types import EvalgateCallError

QUESTION = re.compile(r"what is (\d+) \+ (\d+)\?")
LONG = "This model's maximum context length is 2048 tokens. However, you requested 9000 tokens."


class _Server:
    """Answers the suitekit sums right; ``refuse(text) -> message or None`` picks a 400."""

    def __init__(self, refuse: dict[str, str], everything: str | None = None) -> None:
        self.refuse, self.everything, self.asked = refuse, everything, 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.asked += 1
                text = json.dumps(body["messages"])
                message = owner.everything or next(
                    (m for key, m in owner.refuse.items() if key in text), None
                )
                if message is not None:
                    data = json.dumps(
                        {"error": {"message": message, "type": "invalid_request_error"}}
                    )
                    self._send(400, data.encode())
                    return
                found = QUESTION.search(text)
                answer = str(int(found.group(1)) * 2) if found else "?"
                choice = {"index": 0, "message": {"role": "assistant", "content": answer},
                          "finish_reason": "stop"}  # fmt: skip
                usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
                self._send(200, json.dumps({"choices": [choice], "usage": usage}).encode())

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)


@pytest.fixture
def serve() -> Iterator[list[_Server]]:
    started: list[_Server] = []
    yield started
    for server in started:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(5)


def _run(tmp_path: Path, server: _Server, serve: list[_Server]) -> str:
    server.thread.start()
    serve.append(server)
    budget = {"max_concurrency": 1, "max_attempts": 2, "timeout_s": 10}
    suite = write_suite(
        tmp_path / "suite",
        {"candidate": server.base_url, "baseline": "simulated://?accuracy=0.9&seed=2"},
        cases=make_cases(["a", "b"], 5),
        budget=budget,
        extra={"stream": False},
    ).parent
    argv = [sys.executable, "-m", "pytest", "--evalgate", str(suite), "-p", "no:cacheprovider",
            "-q", f"--evalgate-store={tmp_path / 'store'}", "-rs", "-k", "candidate"]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return done.stdout + done.stderr


def test_one_cases_context_400_stays_that_identitys_error(
    tmp_path: Path, serve: list[_Server]
) -> None:
    # It stopped the whole candidate ("not requested" for the 9 others), on every rerun.
    server = _Server({"Question 1 about a:": LONG})
    out = _run(tmp_path, server, serve)
    assert server.asked == 10, out[-3000:]  # every identity asked once
    assert re.search(r"\b9 passed\b", out) and re.search(r"\b1 error\b", out), out[-3000:]
    assert "endpoint error [bad_request] (HTTP 400)" in out and "maximum context length" in out
    assert "not requested" not in out


def test_a_400_repeated_on_identities_in_a_row_stops_the_candidate(
    tmp_path: Path, serve: list[_Server]
) -> None:
    server = _Server({}, everything="Invalid value for 'temperature': must be at most 2.")
    out = _run(tmp_path, server, serve)
    assert server.asked == EVALGATE_BAD_REQUEST_REPEATS, out[-3000:]  # concurrency 1
    assert f"bad_request (on {EVALGATE_BAD_REQUEST_REPEATS} identities in a row)" in out
    assert re.search(r"\b7 skipped\b", out), out[-3000:]


def test_a_400_naming_the_model_stops_the_candidate_after_its_probe(
    tmp_path: Path, serve: list[_Server]
) -> None:
    server = _Server({}, everything="The model `gpt-x` does not exist or you do not have access.")
    out = _run(tmp_path, server, serve)
    assert server.asked == 1, out[-3000:]
    assert re.search(r"\b9 skipped\b", out), out[-3000:]


def test_an_endpoint_that_refuses_connections_stops_its_candidate_after_the_probe(
    tmp_path: Path,
) -> None:
    # it cost every identity all its attempts (20 identities x 3 attempts); now the probe's
    # attempts, then the other identities are not requested
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]  # closed again below: nothing listens there
    budget = {"max_concurrency": 4, "max_attempts": 3, "timeout_s": 10}
    suite = write_suite(
        tmp_path / "suite",
        {"candidate": f"http://127.0.0.1:{port}/v1", "baseline": "simulated://?seed=2"},
        cases=make_cases(["a", "b"], 10),
        budget=budget,
    ).parent
    argv = [sys.executable, "-m", "pytest", "--evalgate", str(suite), "-p", "no:cacheprovider",
            "-q", f"--evalgate-store={tmp_path / 'store'}", "-rs", "-k", "candidate"]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert re.search(r"\b19 skipped\b", out) and re.search(r"\b1 error\b", out), out[-3000:]
    assert "connection (before any answer: nothing listens there): connection refused" in out


@pytest.mark.parametrize(
    ("status", "message", "fatal"),
    [
        (400, LONG, False),
        (400, "prompt is too long: 9000 tokens > 4096 maximum", False),
        (422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096", False),
        (400, "Invalid value for 'top_p'", False),  # fatal only when it repeats
        (400, "The model `x` does not exist", True),
        (404, "not found", True),
    ],
)
def test_the_client_tells_a_requests_400_from_the_configurations(
    status: int, message: str, fatal: bool
) -> None:
    async def scenario(server: object, client: object, _: object) -> None:
        result = await call(client, endpoint(server), "c")  # type: ignore[arg-type]
        assert result.error is not None and result.error.category == "bad_request"
        assert result.error.fatal is fatal, result.error

    body = {"error": {"message": message, "type": "invalid_request_error"}}
    run(scenario, default=FaultStep(status=status, body=body))  # type: ignore[arg-type]


def _error(category: str, message: str = "x") -> EvalgateCallError:
    return EvalgateCallError(category, 400, message, False)


def test_repeats_count_per_channel_and_an_answer_resets_them() -> None:
    seen = EvalgateBadRequests()
    bad = _error("bad_request")
    assert [seen.evalgate_seen(0, bad) for _ in range(2)] == [None, None]
    assert seen.evalgate_seen(1, bad) is None  # another candidate
    assert seen.evalgate_seen(0, None) is None  # an answer between
    again = [seen.evalgate_seen(0, bad) for _ in range(3)]
    assert again == [None, None, f" (on {EVALGATE_BAD_REQUEST_REPEATS} identities in a row)"]
    assert seen.evalgate_seen(2, _error("timeout")) is None
    refused = _error("connection", "connection refused: [Errno 111] Connect call failed")
    assert seen.evalgate_seen(3, refused) == " (before any answer: nothing listens there)"
    assert seen.evalgate_seen(0, refused) is None  # channel 0 answered once: a blip, retried
