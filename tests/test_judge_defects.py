"""A judge that never answers one case in format at temperature 0 (issue 37, First use): the
second run in a row with the same ``judge_unparseable`` for it names the case a suite defect,
with what to change; one occurrence does not. A real loopback judge and real pytest runs."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from judgekit import run_pytest, write_judged_suite
from suitekit import make_cases

pytestmark = pytest.mark.slow

BAD = "Question 1 about alpha"  # the case alpha-001's input


class _Judge:
    """Scores 5 in format, except for the case whose prompt holds ``BAD``: prose, no JSON."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                request = self.rfile.read(int(self.headers["Content-Length"])).decode()
                content = "I would rather not say." if BAD in request else '{"score": 5}'
                choice = {"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": content}}  # fmt: skip
                body = json.dumps({"choices": [choice]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()


@pytest.fixture
def judge() -> Iterator[_Judge]:
    started = _Judge()
    yield started
    started.server.shutdown()
    started.server.server_close()


def _defects(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("suite defect")]


def test_a_case_the_judge_never_answers_in_format_is_a_suite_defect_on_the_second_run(
    tmp_path: Path, judge: _Judge
) -> None:
    path = write_judged_suite(
        tmp_path / "suite",
        judge_url=judge.base_url,
        cases=make_cases(["alpha", "beta"], 3),
        golden=False,
    )
    store, log = tmp_path / "store", tmp_path / "requests.jsonl"
    first = run_pytest(path.parent, store, log)
    assert first.returncode == 1 and "judge_unparseable 2" in first.stdout, first.stdout[-3000:]
    assert _defects(first.stdout) == []  # once is not yet a pattern
    second = run_pytest(path.parent, store, log)
    assert second.returncode == 1, second.stdout[-3000:]
    assert _defects(second.stdout) == [
        "suite defect: case alpha-001 (baseline, candidate): the judge answered it out of"
        " format on two runs in a row at temperature 0 (judge_unparseable); change the rubric"
        " or the judge's max_tokens, or leave it out with dataset.exclude: [{case: alpha-001,"
        " reason: ...}]"
    ], second.stdout[-3000:]
