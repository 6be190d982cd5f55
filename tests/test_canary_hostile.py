"""``evalgate canary check`` against a hostile Prometheus (issue 37, Weak): a real HTTP server
on loopback that answers the Prometheus query API with samples no real Prometheus sends.

Each one fails closed with a reason naming the query (exit 1, one line on stderr), never with a
traceback; an infinite request count is never taken as enough traffic to judge.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from suitekit import write_suite

from pytest_evalgate.canary.check import EvalgatePrometheus
from pytest_evalgate.cli import main
from pytest_evalgate.errors import EvalgatePrometheusError

POLICY = {
    "version": "canary-hostile-v1",
    "rules": [{"slice": "all", "rule": "non_inferior", "margin": 0.05}],
    "online": [{"metric": "ttft_p95_ratio", "max": 1.10, "interval": "5s", "window": "15s"}],
}


class _Hostile:
    """A loopback server whose every ``/api/v1/query`` answer is built by ``answer(query)``."""

    def __init__(self) -> None:
        self.answer: Any = lambda query: _vector("1")
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = self.path.partition("query=")[2]
                body = json.dumps(owner.answer(query)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # shutdown() waits for serve_forever to look at its flag, every poll_interval (0.5 s
        # by default, paid by every test's teardown)
        serve = {"poll_interval": 0.01}
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs=serve, daemon=True)


def _vector(value: object) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {}, "value": [1700000000.0, value]}]}}  # fmt: skip


@pytest.fixture
def hostile() -> Iterator[_Hostile]:
    server = _Hostile()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(5)


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        ([{"metric": {}, "value": [1.0, "abc"]}], "returned the sample value 'abc', not a number"),
        ([{"metric": {}}], "returned a sample that is not [time, value]"),
        ([{"metric": {}, "value": [1.0, 3]}], "returned a sample that is not [time, value]"),
        ([{"metric": {}, "value": [1.0]}], "returned a sample that is not [time, value]"),
        (["not a series"], "returned a sample that is not [time, value]"),
    ],
)
def test_a_sample_that_is_not_a_number_is_refused_naming_the_query(
    hostile: _Hostile, result: list[object], reason: str
) -> None:
    hostile.answer = lambda query: {
        "status": "success",
        "data": {"resultType": "vector", "result": result},
    }
    refused = pytest.raises(EvalgatePrometheusError)
    with EvalgatePrometheus(hostile.url) as prometheus, refused as info:
        prometheus.query("up", 0)
    assert str(info.value) == f"'up' {reason}"


def test_a_scalar_that_is_not_a_number_is_refused(hostile: _Hostile) -> None:
    hostile.answer = lambda query: {
        "status": "success",
        "data": {"resultType": "scalar", "result": [1.0, "x"]},
    }
    refused = pytest.raises(EvalgatePrometheusError, match="'up' returned the sample value 'x'")
    with EvalgatePrometheus(hostile.url) as prometheus, refused:
        prometheus.query("up", 0)


def test_prometheus_number_spellings_still_read(hostile: _Hostile) -> None:
    # Prometheus formats samples from floats: "NaN", "+Inf", "-Inf" and exponents are numbers
    values = iter(["NaN", "+Inf", "-Inf", "1.5e-3"])
    hostile.answer = lambda query: _vector(next(values))
    with EvalgatePrometheus(hostile.url) as prometheus:
        read = [prometheus.query("up", 0) for _ in range(4)]
    assert math.isnan(read[0]) and read[1:] == [math.inf, -math.inf, 0.0015]


def _suite(tmp_path: Path) -> Path:
    urls = {"candidate": "simulated://", "baseline": "simulated://"}
    return write_suite(tmp_path / "suite", urls, policy=POLICY).parent


def test_garbage_from_prometheus_makes_the_check_exit_1_with_one_line(
    hostile: _Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile.answer = lambda query: _vector("abc")
    status = main(["canary", "check", str(_suite(tmp_path)), "--prometheus", hostile.url])
    out, err = capsys.readouterr()
    assert (status, out) == (1, "")
    assert err.startswith("evalgate canary: ") and "not a number" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("count", "status", "words"),
    [
        # +Inf counts used to count as more than enough traffic: the check passed (exit 0)
        ("+Inf", 1, "which is not a count"),
        ("1e9", 0, "ttft_p95_ratio"),  # the control: the same server with numbers passes
    ],
)
def test_an_infinite_request_count_is_not_enough_traffic(
    hostile: _Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str], count: str,
    status: int, words: str,
) -> None:  # fmt: skip
    # the rule's value passes (ratio 1.0); only the two traffic counts change
    hostile.answer = lambda query: _vector(count if "count" in query else "1.0")
    code = main(["canary", "check", str(_suite(tmp_path)), "--prometheus", hostile.url])
    out, err = capsys.readouterr()
    assert code == status, out + err
    assert words in out + err


@pytest.mark.parametrize("count", ["NaN", "-Inf", "-5"])
def test_a_nan_or_negative_request_count_fails_closed_naming_the_query(
    hostile: _Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str], count: str
) -> None:
    # NaN counts used to read as "no traffic" (exit 2, "is the canary pool serving?"): a counter
    # holding NaN or going below 0 is a broken exporter, not a quiet pool
    hostile.answer = lambda query: _vector(count if "count" in query else "1.0")
    code = main(["canary", "check", str(_suite(tmp_path)), "--prometheus", hostile.url])
    out, err = capsys.readouterr()
    assert (code, out) == (1, ""), out + err
    assert "which is not a count" in err and "_count" in err and "Traceback" not in err


def test_an_empty_count_is_no_traffic(
    hostile: _Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = {"status": "success", "data": {"resultType": "vector", "result": []}}
    hostile.answer = lambda query: empty if "count" in query else _vector("1.0")
    code = main(["canary", "check", str(_suite(tmp_path)), "--prometheus", hostile.url])
    out, err = capsys.readouterr()
    assert code == 2 and "too little traffic" in out and "no canary traffic" in out, out + err
