"""No silent pass on aborted streams (issue 37): ``pytest --evalgate`` against a real loopback
server that ends its streams the way llama-cpp-python's server ends a stream it interrupts:
``data: [DONE]`` with no ``finish_reason`` and an empty answer.

Before, each such answer was stored as ``output: ''``, scored wrong, the terminal said "errors
none", the verdict was PASS (exit 0) and a rerun reused the stored garbage. Now every one is a
``truncated`` endpoint error (retried, never scored, never committed as a result): the run does
not pass, says how many answers were cut, and a rerun asks again. The same server, busy,
answers 503 with ``Retry-After: 100000``: the run ends with that endpoint error at once.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from inprockit import run_pytest_inprocess
from suitekit import write_suite

pytestmark = pytest.mark.slow

QUESTION = re.compile(r"what is (\d+) \+ (\d+)\?")


class _Llamaish:
    """A chat endpoint on loopback. ``interrupt``: every stream ends ``[DONE]`` without a
    finish_reason or content; ``busy``: every request is a 503 with ``Retry-After: 100000``;
    else it answers the suitekit sum right, with ``stop``."""

    def __init__(self, interrupt: bool, busy: bool = False) -> None:
        self.interrupt = interrupt
        self.busy = busy
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests += 1
                if owner.busy:
                    error = b'{"error": {"message": "server busy"}}'
                    self.send_response(503)
                    self.send_header("Retry-After", "100000")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in owner.events(body):
                    self.wfile.write(b"data: " + event + b"\n\n")
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def events(self, body: dict[str, object]) -> list[bytes]:
        role = {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
        if self.interrupt:
            return [json.dumps(role).encode(), b"[DONE]"]
        text = json.dumps(body["messages"])
        found = QUESTION.search(text)
        answer = str(int(found.group(1)) * 2) if found else "?"
        content = {"choices": [{"index": 0, "delta": {"content": answer}, "finish_reason": None}]}
        stop = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        return [json.dumps(e).encode() for e in (role, content, stop)] + [b"[DONE]"]


@pytest.fixture
def endpoints() -> Iterator[tuple[_Llamaish, _Llamaish]]:
    servers = (_Llamaish(interrupt=True), _Llamaish(interrupt=False))
    for server in servers:
        server.thread.start()
    try:
        yield servers
    finally:
        for server in servers:
            server.server.shutdown()
            server.server.server_close()
            server.thread.join(5)


def _suite(tmp_path: Path, candidate: str, baseline: str) -> Path:
    extra = {"stream": True}
    budget = {"max_concurrency": 4, "max_attempts": 2, "timeout_s": 10}
    urls = {"candidate": candidate, "baseline": baseline}
    return write_suite(tmp_path / "suite", urls, extra=extra, budget=budget).parent


def _run(
    pytester: pytest.Pytester, suite: Path, store: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    # in this process (tests/inprockit.py): the endpoints and the runner's child are what is
    # tested, and they are processes or threads of their own either way
    args = ["--evalgate", str(suite), "-p", "no:cacheprovider", "-q", f"--evalgate-store={store}"]
    return run_pytest_inprocess(pytester, *args, *extra, cwd=suite.parent)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_streams_ended_by_done_without_finish_reason_never_pass(
    endpoints: tuple[_Llamaish, _Llamaish],
    tmp_path: Path,
    workers: list[str],
    pytester: pytest.Pytester,
) -> None:
    interrupted, healthy = endpoints
    suite = _suite(tmp_path, interrupted.base_url, healthy.base_url)
    store = tmp_path / "store"
    done = _run(pytester, suite, store, *workers)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "verdict INCOMPLETE" in output and "verdict PASS" not in output
    assert "errors truncated 12" in output
    assert "the stream ended with [DONE] but no finish_reason" in output
    assert "12 passed, 12 errors" in output  # candidate: endpoint errors; baseline: answers
    assert interrupted.requests == 12 * 2  # each identity retried once (max_attempts 2)
    records = [
        json.loads(line) for f in store.rglob("*.jsonl") for line in f.read_text().splitlines()
    ]
    candidate = [r for r in records if r.get("identity", {}).get("candidate") == "candidate"]
    assert candidate and all(r["score"] is None and r["error"]["category"] == "truncated"
                             for r in candidate)  # fmt: skip
    again = _run(pytester, suite, store, *workers)
    assert again.returncode != 0
    assert interrupted.requests == 12 * 2 * 2  # the rerun asks again: nothing was kept as an answer
    assert healthy.requests == 12  # the baseline's whole answers were kept


def test_the_same_endpoint_with_finish_reasons_passes(
    endpoints: tuple[_Llamaish, _Llamaish], tmp_path: Path, pytester: pytest.Pytester
) -> None:
    # The control: both sides answer whole streams; the gate passes, exit 0.
    _, healthy = endpoints
    suite = _suite(tmp_path, healthy.base_url, healthy.base_url)
    done = _run(pytester, suite, tmp_path / "store")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict PASS" in done.stdout and " failed" not in done.stdout


def test_a_hostile_retry_after_ends_the_run_with_the_endpoint_error(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    # A 503 with Retry-After: 100000 held a run silently for over 400 s. Now each identity ends
    # after its first attempt (the wait is longer than budget.timeout_s) as a server_error.
    busy, healthy = _Llamaish(interrupt=False, busy=True), _Llamaish(interrupt=False)
    for server in (busy, healthy):
        server.thread.start()
    try:
        suite = _suite(tmp_path, busy.base_url, healthy.base_url)
        done = _run(pytester, suite, tmp_path / "store")
    finally:
        for server in (busy, healthy):
            server.server.shutdown()
            server.server.server_close()
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "verdict PASS" not in output, output
    assert "longer than an attempt's budget.timeout_s (10 s): not retried" in output
    assert busy.requests <= 12  # one attempt per identity, or fewer once the candidate stops
