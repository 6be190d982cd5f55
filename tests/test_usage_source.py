"""Usage counted from stream chunks is marked as such (issue 37): a streaming server that sends
no ``usage`` (llama-cpp-python's, like the loopback one here) gets its token counts from the
stream's content chunks; each such record says ``usage.source: "chunks"`` and the report's
latency section says how many answers were counted that way. Answers whose server sent usage
(the simulator's) carry no ``source`` and the report says nothing of chunks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from suitekit import write_suite
from test_aborted_streams import _Llamaish, _run

from pytest_evalgate.store.recordcheck import evalgate_record_problem

pytestmark = pytest.mark.slow


def _records(store: Path) -> list[dict[str, object]]:
    return [
        json.loads(line) for f in store.rglob("seg-*.jsonl") for line in f.read_text().splitlines()
    ]


def test_a_count_from_stream_chunks_is_marked_in_the_record_and_the_report(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    server = _Llamaish(interrupt=False)  # whole streams, no usage chunk
    server.thread.start()
    try:
        urls = {"candidate": server.base_url, "baseline": "simulated://?accuracy=1&seed=2"}
        budget = {"max_concurrency": 4, "max_attempts": 2, "timeout_s": 10}
        suite = write_suite(tmp_path / "suite", urls, extra={"stream": True}, budget=budget)
        store, report = tmp_path / "store", tmp_path / "report"
        done = _run(pytester, suite.parent, store, f"--evalgate-report={report}")
    finally:
        server.server.shutdown()
        server.server.server_close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = _records(store)
    by_side: dict[str, list[dict[str, object]]] = {}
    for record in records:
        by_side.setdefault(record["identity"]["candidate"], []).append(record)  # type: ignore[index]
    assert len(by_side["candidate"]) == len(by_side["baseline"]) == 12
    for record in by_side["candidate"]:
        assert record["usage"] == {
            "prompt_tokens": None,
            "completion_tokens": 1,
            "source": "chunks",
        }
        assert evalgate_record_problem(record) is None  # type: ignore[arg-type]
    assert all("source" not in r["usage"] for r in by_side["baseline"])  # type: ignore[operator]
    for bad in ("server", 1):  # the record checker knows the one source a record may name
        changed = {**by_side["candidate"][0], "usage": {**base_usage(), "source": bad}}
        assert "usage.source must be 'chunks'" in str(evalgate_record_problem(changed))
    markdown = (report / "report.md").read_text()
    assert (
        "Output tokens and TPOT of 12 candidate answers were counted from stream chunks" in markdown
    )
    assert "counted from stream chunks" in (report / "report.html").read_text()


def base_usage() -> dict[str, object]:
    return {"prompt_tokens": None, "completion_tokens": 1}
