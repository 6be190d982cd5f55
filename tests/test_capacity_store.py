"""``evalgate plan`` from a stored run agrees with a hand computation over the store's records
(issue 16 part B).

A small suite runs through the plugin (pytester) against the built-in simulator, whose answers
have varied lengths (``output_tokens`` with ``output_jitter``, cut by ``max_tokens``) and take
real time (``latency_ms``). The test then reads every committed segment itself, sums the
answers' ``completion_tokens`` and measures the union of their ``[started_at, finished_at]``
intervals with an event sweep, and compares with what ``evalgate plan --json`` printed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from suitekit import make_cases, write_suite

from pytest_evalgate.cli import main

CANDIDATE = "simulated://?accuracy=0.9&latency_ms=30&output_tokens=10&output_jitter=0.8&seed=3"
BASELINE = "simulated://?accuracy=0.8&latency_ms=10&output_tokens=4&seed=4"
REPETITIONS = 2
SINGLE = {
    "version": "single-v1", "baseline": None, "confidence": 0.95,
    "rules": [{"slice": "all", "rule": "min_rate", "min": 0.01}],
}  # fmt: skip


def _records(store: Path) -> dict[str, list[dict[str, Any]]]:
    """Answered records per candidate, read straight from the segment files."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for segment in sorted(store.rglob("*.jsonl")):
        for line in segment.read_text().splitlines():
            record = json.loads(line)
            if record["error"] is None:
                found[record["identity"]["candidate"]].append(record)
    return found


def _busy_by_events(records: list[dict[str, Any]]) -> float:
    """Seconds with at least one request in flight: +1 at each start, -1 at each end."""
    events = []
    for record in records:
        events.append((datetime.fromisoformat(record["started_at"]).timestamp(), 1))
        events.append((datetime.fromisoformat(record["finished_at"]).timestamp(), -1))
    busy, depth, since = 0.0, 0, 0.0
    for at, step in sorted(events, key=lambda event: (event[0], -event[1])):
        if depth == 0 and step == 1:
            since = at
        depth += step
        if depth == 0:
            busy += at - since
    return busy


def test_plan_agrees_with_a_hand_computation_from_the_stored_run(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = make_cases(["alpha", "beta"], 6)
    suite = write_suite(
        pytester.path / "suite", {"candidate": CANDIDATE, "baseline": BASELINE},
        cases=cases, repetitions=REPETITIONS,
    ).parent  # fmt: skip
    store = pytester.path / "store"
    result = pytester.runpytest(
        "--evalgate", "suite", f"--evalgate-store={store}", "-p", "no:cacheprovider"
    )
    assert result.ret in (0, 1) and "errors" not in result.parseoutcomes(), result.stdout.str()
    capsys.readouterr()  # (the gate's verdict is not the point; every identity answered is)
    assert main(["plan", str(suite), "--store", str(store), "--replicas", "2", "--json"]) == 0
    plan = {row["name"]: row for row in json.loads(capsys.readouterr().out)["candidates"]}
    stored = _records(store)
    assert set(plan) == set(stored) == {"candidate", "baseline"}
    for name, records in stored.items():
        row = plan[name]
        tokens = sum(record["usage"]["completion_tokens"] for record in records)
        busy = _busy_by_events(records)
        assert len(records) == row["requests"] == len(cases) * REPETITIONS
        assert row["measured"]["output_tokens"] == tokens and row["output_tokens"] == tokens
        assert row["measured"]["busy_s"] == pytest.approx(busy, abs=1e-6)
        assert row["tokens_per_request"] == pytest.approx(tokens / len(records))
        assert row["tokens_per_s"] == pytest.approx(tokens / busy)
        # a whole stored run on its one replica: one replica needs what the run took
        assert row["replica_s"] == pytest.approx(busy)
        assert row["wall_s"] == pytest.approx(busy / 2)
        assert row["gpu_hours"] == pytest.approx(busy / 3600)
        e2e = sum(record["timing"]["e2e_s"] for record in records)
        assert row["measured"]["e2e_total_s"] == pytest.approx(e2e)
        assert row["next_run"] == {"requests": 0, "output_tokens": 0.0, "replica_s": 0.0}
    # the two candidates really differ, so the comparison is not vacuous
    assert plan["candidate"]["tokens_per_request"] > plan["baseline"]["tokens_per_request"]
    lengths = {r["usage"]["completion_tokens"] for r in stored["candidate"]}
    assert len(lengths) > 1


def test_plan_text_names_where_each_figure_came_from(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(
        pytester.path / "suite", {"candidate": BASELINE}, cases=make_cases(["alpha"], 4),
        policy=SINGLE,
    ).parent  # fmt: skip
    store = pytester.path / "store"
    result = pytester.runpytest(  # half the suite: the plan counts what is still to run
        "--evalgate", "suite", f"--evalgate-store={store}", "-p", "no:cacheprovider",
        "-k", "alpha-000 or alpha-001",
    )  # fmt: skip
    assert "errors" not in result.parseoutcomes(), result.stdout.str()
    capsys.readouterr()
    argv = ["plan", str(suite), "--store", str(store), "--tokens-per-s", "100"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    # 2 stored answers of exactly 4 tokens each (output_tokens=4, no jitter), of 4 cases
    assert lines[0] == (
        "candidate: 4 requests x 4 output tokens (measured over 2 stored answers)"
        " = 16 output tokens"
    )
    # the 4 prompts of 38 characters: ceil(38 / 4) = 10 tokens each (issue 32's prefill line)
    assert (
        lines[1] == "  prefill: 40 prompt tokens (the suite's prompts, characters / 4, an estimate)"
    )
    assert lines[2] == "  rate: 100 output tokens/s per replica (assumed), 1 GPU(s) per replica"
    assert lines[3].startswith("  per request: 0.0") and lines[3].endswith(
        " s end to end (stored mean)"
    )
    assert lines[4] == (
        "  stored: 2 answered; the next run sends 2 (8 output tokens, 0.08 s on one replica)"
    )
    assert lines[5] == "  one replica: 0.16 s; 4.444e-05 GPU-hours"
    assert lines[6] == "  wall time on 1 replica(s): 0.16 s"
    # each figure on its own: stated tokens per request, the stored rate
    argv = ["plan", str(suite), "--store", str(store), "--assume-output-tokens", "10", "--json"]
    assert main(argv) == 0
    (row,) = json.loads(capsys.readouterr().out)["candidates"]
    assert (row["tokens_source"], row["output_tokens"]) == ("assumed", 40.0)
    assert row["rate_source"].startswith("measured: 8 tokens over ")
    assert row["replica_s"] == pytest.approx(40.0 / row["tokens_per_s"])
    assert row["measured"]["output_tokens"] == 8
    assert row["next_run"]["requests"] == 2 and row["next_run"]["output_tokens"] == 20.0
