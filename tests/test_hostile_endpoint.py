"""Hostile endpoints through the plugin (issue 19): a cut-off, oversize, redirecting or erroring
answer is an endpoint error with its category, never a scored answer; bogus usage is flagged in
the record; the terminal summary counts the errors by category.

Every candidate here is the real simulator (``simulated://?fault=...``) on 127.0.0.1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from suitekit import write_suite

GOOD = "simulated://?accuracy=1.0&seed=1"
CASES = 12  # suitekit's default: 2 categories x 6


def _records(store: Path, candidate: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(store.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("identity", {}).get("candidate") == candidate:
                rows.append(record)
    return rows


def _run(pytester: pytest.Pytester, candidate_url: str) -> pytest.RunResult:
    write_suite(pytester.path / "suite", {"candidate": candidate_url, "baseline": GOOD})
    return pytester.runpytest(
        "--evalgate", "suite", "--evalgate-store=store", "-p", "no:cacheprovider", "--tb=line"
    )


@pytest.mark.parametrize(
    ("fault", "category"),
    [
        ("truncate_stream", "truncated"),
        ("content_length_lie", "truncated"),
        ("error_in_200", "server_error"),
        ("huge_answer", "oversize"),
    ],
)
def test_a_broken_answer_is_an_endpoint_error_never_a_wrong_answer(
    pytester: pytest.Pytester, fault: str, category: str
) -> None:
    result = _run(pytester, f"simulated://?accuracy=1.0&seed=1&fault={fault}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == CASES
    assert "failed" not in outcomes  # not one of them scored as a wrong answer
    assert outcomes.get("passed") == CASES  # the baseline's
    assert result.ret == 1
    result.stdout.fnmatch_lines([f"*endpoint error [[]{category}]*", "*verdict INCOMPLETE*"])
    result.stdout.fnmatch_lines([f"*errors {category} {CASES}*"])
    records = _records(pytester.path / "store", "candidate")
    assert len(records) == CASES
    assert {r["error"]["category"] for r in records} == {category}
    assert {(r["score"], r["passed"]) for r in records} == {(None, None)}


def test_a_redirecting_endpoint_is_stopped_after_its_first_request(
    pytester: pytest.Pytester,
) -> None:
    log = pytester.path / "requests.jsonl"
    write_suite(
        pytester.path / "suite",
        {"candidate": "simulated://?accuracy=1.0&fault=redirect", "baseline": GOOD},
    )
    result = pytester.runpytest(
        "--evalgate", "suite", "--evalgate-store=store", f"--evalgate-request-log={log}",
        "-p", "no:cacheprovider", "--tb=line",
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1  # the probe; the others are not requested
    assert outcomes.get("skipped") == CASES - 1
    assert "failed" not in outcomes
    result.stdout.fnmatch_lines(["*endpoint error [[]redirect] (HTTP 307)*not followed*"])
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len([x for x in lines if "/candidate/" in str(x.get("identity"))]) == 1
    records = _records(pytester.path / "store", "candidate")
    assert [r["error"]["category"] for r in records] == ["redirect"]


def test_bogus_usage_is_flagged_in_the_record_and_the_answer_still_scored(
    pytester: pytest.Pytester,
) -> None:
    result = _run(pytester, "simulated://?accuracy=1.0&seed=1&fault=bogus_usage")
    assert result.parseoutcomes().get("passed") == 2 * CASES + 1  # and the gate rule
    assert result.ret == 0
    records = _records(pytester.path / "store", "candidate")
    assert len(records) == CASES
    flags = {r["usage"].get("flagged") for r in records}
    assert flags == {"negative usage (prompt_tokens -3, completion_tokens 1000000000)"}
    assert {(r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]) for r in records} == {
        (None, None)
    }
    baseline = _records(pytester.path / "store", "baseline")
    assert all("flagged" not in r["usage"] for r in baseline)
    assert all(isinstance(r["usage"]["completion_tokens"], int) for r in baseline)
