"""A key's parts stay secret too (issue 37): an endpoint that echoes the first 12 characters of
the API key (as OpenAI's "Incorrect API key provided: sk-proj-abcd****" does) or its last ones,
in its error bodies and in its answers, is run for real (``pytest --evalgate`` in a subprocess
against a loopback server); the store, the JUnit XML and the terminal hold no part of the key.
A key in a base URL's query string is refused at load without being printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from suitekit import make_cases, write_suite

from pytest_evalgate.client.redact import (
    EVALGATE_REDACTED,
    evalgate_add_secret,
    evalgate_redact,
)

KEY = "sk-proj-5c1e9a7b3d2f4e6a8b0c1d2e"
QUESTION = re.compile(r"what is (\d+) \+ (\d+)\?")


def test_prefixes_and_suffixes_of_eight_characters_or_more_are_redacted() -> None:
    key = "unit-part-key-0123456789abcdef"
    evalgate_add_secret(key)
    assert evalgate_redact(f"bad key {key[:12]}****") == f"bad key {EVALGATE_REDACTED}****"
    assert evalgate_redact(f"mask ****{key[-9:]}.") == f"mask ****{EVALGATE_REDACTED}."
    assert evalgate_redact(f"({key[:8]})") == f"({EVALGATE_REDACTED})"
    assert evalgate_redact(f"{key[:12]}X{key[-8:]}") == f"{EVALGATE_REDACTED}X{EVALGATE_REDACTED}"
    short = f"{key[:7]} and {key[-7:]} and {key[10:20]}"  # too short, or from the middle only
    assert evalgate_redact(short) is short
    plain = "an ordinary answer"
    assert evalgate_redact(plain) is plain


class _Echo:
    """A chat endpoint on loopback that echoes the bearer token's first 12 characters: in a 401
    body for every case whose number is odd, in the answer text (with the token's last 10
    characters) for the others."""

    def __init__(self) -> None:
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests += 1
                token = self.headers.get("Authorization", "").partition(" ")[2]
                found = QUESTION.search(json.dumps(body["messages"]))
                number = int(found.group(1)) if found else 0
                if number % 2:
                    text = f"Incorrect API key provided: {token[:12]}****{token[-4:]}"
                    self._send(500, {"error": {"message": text, "type": "server_error"}})
                    return
                answer = f"{2 * number} (served for {token[:12]}...{token[-10:]})"
                message = {"role": "assistant", "content": answer}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                self._send(200, {"id": "x", "model": body["model"], "choices": [choice]})

            def _send(self, status: int, payload: object) -> None:
                data = json.dumps(payload).encode()
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
def echo() -> Iterator[_Echo]:
    server = _Echo()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(5)


def test_no_part_of_the_key_reaches_the_store_junit_or_terminal(
    echo: _Echo, tmp_path: Path
) -> None:
    urls = {"candidate": echo.base_url, "baseline": "simulated://?accuracy=1&seed=2"}
    budget = {"max_concurrency": 4, "max_attempts": 1, "timeout_s": 10}
    cases = make_cases(["math"], 6)
    path = write_suite(
        tmp_path / "suite", urls, cases=cases, budget=budget, extra={"stream": False}
    )
    raw = yaml.safe_load(path.read_text())
    raw["candidates"]["candidate"]["api_key_env"] = "EVALGATE_TEST_PART_KEY"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    store, junit = tmp_path / "store", tmp_path / "junit.xml"
    command = [sys.executable, "-m", "pytest", "--evalgate", str(path.parent), "-rA", "-p",
               "no:cacheprovider", f"--evalgate-store={store}", f"--junitxml={junit}"]  # fmt: skip
    env = {**os.environ, "EVALGATE_TEST_PART_KEY": KEY}
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    output = done.stdout + done.stderr
    assert echo.requests == 6, output[-3000:]
    assert "Incorrect API key provided: [REDACTED]****" in output  # the errors are shown ...
    texts = {"terminal": output, "junit": junit.read_text()}
    texts |= {str(p): p.read_text(errors="replace") for p in store.rglob("*") if p.is_file()}
    assert any(f"served for {EVALGATE_REDACTED}...{EVALGATE_REDACTED}" in t for t in texts.values())
    for where, text in texts.items():  # ... but no 8 characters of either end of the key
        assert KEY[:8] not in text and KEY[-8:] not in text, where
