"""A hostile judge (issue 37, Weak): an 8 MB answer or a flood of braces is an error of its
category whose stored judgment keeps a bounded excerpt (its first characters, the answer's
length and sha256 in the message), so the store stays small across reruns that ask again.
Against a real loopback judge server and real ``pytest --evalgate`` runs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from judgekit import judgment_lines, run_pytest, write_judged_suite
from suitekit import make_cases

from pytest_evalgate.store.judgments import EVALGATE_JUDGE_EXCERPT_CHARS

pytestmark = pytest.mark.slow

CASES = 3
HUGE = 8 * 1024 * 1024
BRACES = 30_000


class _Judge:
    """A judge that answers every request with ``content``, a well-formed chat completion."""

    def __init__(self, content: str) -> None:
        message = {"role": "assistant", "content": content}
        choice = {"index": 0, "finish_reason": "stop", "message": message}
        usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        body = json.dumps({"choices": [choice], "usage": usage}).encode()
        self.asked = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                owner.asked += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client stopped reading at its cap
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()


@pytest.fixture
def judges() -> Iterator[list[_Judge]]:
    started: list[_Judge] = []
    yield started
    for judge in started:
        judge.server.shutdown()
        judge.server.server_close()


def _store_bytes(store: Path) -> int:
    return sum(path.stat().st_size for path in store.rglob("*") if path.is_file())


@pytest.mark.parametrize(
    ("content", "category"),
    [("x" * HUGE, "judge_oversize"), ("{" * BRACES, "judge_unparseable")],
    ids=["8MB", "braces"],
)
def test_a_hostile_judge_answer_is_stored_as_a_bounded_excerpt(
    tmp_path: Path, judges: list[_Judge], content: str, category: str
) -> None:
    judge = _Judge(content)
    judges.append(judge)
    # judge.max_tokens as a user may write it: the client's caps then allow 8 MB of body.
    path = write_judged_suite(
        tmp_path / "suite",
        judge_url=judge.base_url,
        judge={"max_tokens": 8192},
        cases=make_cases(["alpha"], CASES),
        golden=False,
    )
    store, log = tmp_path / "store", tmp_path / "requests.jsonl"
    first = run_pytest(path.parent, store, log)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "INTERNALERROR" not in first.stdout + first.stderr
    lines = judgment_lines(store)
    assert len(lines) == 2 * CASES and judge.asked == 2 * CASES
    for line in lines:
        assert line["verdict"] is None and line["error"]["category"] == category, line["error"]
        if line["output"] is not None:
            assert len(line["output"]) <= EVALGATE_JUDGE_EXCERPT_CHARS
            kept = content[: len(line["output"])]
            assert line["output"] == kept
    if category == "judge_unparseable":  # the whole answer was read: its length and digest
        digest = hashlib.sha256(content.encode()).hexdigest()
        assert all(f"{len(content)} characters" in line["error"]["message"] for line in lines)
        assert all(digest in line["error"]["message"] for line in lines)
    once = _store_bytes(store)
    # Errored judgments are asked again by the next run, and stored again: bounded both times.
    second = run_pytest(path.parent, store, log)
    assert second.returncode == 1, second.stdout + second.stderr
    assert judge.asked == 4 * CASES and len(judgment_lines(store)) == 4 * CASES
    twice = _store_bytes(store)
    assert twice - once <= 2 * CASES * 3 * EVALGATE_JUDGE_EXCERPT_CHARS, (once, twice)
    assert twice <= 64 * 1024 + 2 * (twice - once), (once, twice)
