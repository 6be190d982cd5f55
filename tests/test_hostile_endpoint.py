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
# one retry, not suitekit's two: a broken answer is retried (and stays an error) with half the
# backoff waited; the logged wait is the shortest the client logs (client/call.py _HINT_LOG_S)
BUDGET = {"max_concurrency": 8, "max_attempts": 2, "timeout_s": 10}


def _records(store: Path, candidate: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(store.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("identity", {}).get("candidate") == candidate:
                rows.append(record)
    return rows


def _run(pytester: pytest.Pytester, candidate_url: str, *extra: str) -> pytest.RunResult:
    write_suite(
        pytester.path / "suite", {"candidate": candidate_url, "baseline": GOOD}, budget=BUDGET
    )
    return pytester.runpytest(
        "--evalgate", "suite", "--evalgate-store=store", "-p", "no:cacheprovider", "--tb=line",
        *extra,
    )  # fmt: skip


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
    url = "simulated://?accuracy=1.0&seed=1&fault=bogus_usage"
    result = _run(pytester, url, "--log-cli-level=INFO")
    assert result.parseoutcomes().get("passed") == 2 * CASES + 1  # and the gate rule
    assert result.ret == 0
    flagged = [line for line in result.stdout.lines if "implausible usage" in line]
    assert len(flagged) == 1  # once per candidate, not once per answer
    assert "completion_tokens 1000000000" in flagged[0]
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


def test_a_long_retry_after_is_logged_when_the_wait_starts(pytester: pytest.Pytester) -> None:
    url = "simulated://?accuracy=1.0&seed=1&fail_429_first=1&retry_after=5"
    result = _run(pytester, url, "--log-cli-level=INFO")
    assert result.ret == 0  # the one 429 was retried after its wait
    result.stdout.fnmatch_lines(
        ["*evalgate: *candidate*: the endpoint asked to wait 5 s; waiting 5 s before attempt 2*"]
    )
