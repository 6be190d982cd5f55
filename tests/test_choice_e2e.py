"""Multiple choice end to end (SPEC 18, issue 32): real pytest sessions (pytester) against the
simulator in its own process, answering echoed prompts with log-probabilities."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from suitekit import make_choice_cases, write_suite

LOGLIK = {
    "evaluator": {"revision": "mc-1", "scorer": "choice", "method": "loglikelihood"},
    "api": "completions",
    "stream": False,
    "prompt": {"revision": "p1", "template": "{input}\nAnswer:"},
}
POLICY = {
    "version": "mc-e2e-v1",
    "confidence": 0.95,
    "correction": "holm",
    "bootstrap": {"resamples": 2000, "seed": 0},
    "rules": [{"slice": "all", "rule": "non_inferior", "margin": 0.05}],
}


def _suite(pytester: pytest.Pytester, candidate: str, baseline: str, count: int = 200) -> Path:
    return write_suite(
        pytester.path / "suite",
        {"candidate": f"simulated://?{candidate}", "baseline": f"simulated://?{baseline}"},
        cases=make_choice_cases(count),
        policy=POLICY,
        budget={"max_concurrency": 32, "max_attempts": 2, "timeout_s": 10},
        extra=LOGLIK,
        models={"candidate": "mc-model", "baseline": "mc-model"},
    )


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-store=store", *args
    )


def _records(pytester: pytest.Pytester, candidate: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted((pytester.path / "store").rglob("*.jsonl")):
        if "journal" in path.parts:
            continue
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["identity"]["candidate"] == candidate:
                rows.append(record)
    return rows


def test_acc_is_within_monte_carlo_error_of_the_accuracy_knob(pytester: pytest.Pytester) -> None:
    _suite(pytester, "accuracy=0.7&seed=5", "accuracy=0.7&seed=5")
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["*verdict PASS*"])  # equal candidates: the paired gate passes
    records = _records(pytester, "candidate")
    assert len(records) == 200 and all(r["error"] is None for r in records)
    acc = sum(r["passed"] for r in records) / len(records)
    assert abs(acc - 0.7) <= 4 * math.sqrt(0.7 * 0.3 / 200), acc
    for record in records:
        facts = record["choice"]
        assert facts["method"] == "loglikelihood" and facts["max_tokens"] == 0
        assert facts["count"] == 4 and len(facts["choices"]) == 4
        logliks = [c["loglikelihood"] for c in facts["choices"]]
        assert facts["acc"] == logliks.index(max(logliks))
        assert record["passed"] is (facts["acc"] == facts["target"])
        assert all(c["tokens"] >= 2 for c in facts["choices"])  # "option", "i-k..."
        assert record["usage"]["prompt_tokens"] > 0  # prefill of the four requests


def test_a_much_worse_candidate_fails_the_paired_gate_on_acc(pytester: pytest.Pytester) -> None:
    _suite(pytester, "accuracy=0.4&seed=1", "accuracy=0.9&seed=2")
    result = _run(pytester)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict FAIL*", "*non_inferior[[]all]*FAIL*"])


def test_a_server_without_logprobs_is_exit_4_naming_the_candidate(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester, "accuracy=0.9&no_logprobs=1", "accuracy=0.9", count=8)
    result = _run(pytester)
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*candidates.*candidate*no log probabilities*"])
    assert _records(pytester, "candidate") == []  # no case ran
    assert _records(pytester, "baseline") == []


def test_a_server_refusing_max_tokens_0_gets_1_and_it_is_recorded(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester, "accuracy=1.0&refuse_max_tokens_0=1", "accuracy=1.0", count=12)
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()[-2000:]
    candidate, baseline = _records(pytester, "candidate"), _records(pytester, "baseline")
    assert {r["choice"]["max_tokens"] for r in candidate} == {1}
    assert {r["choice"]["max_tokens"] for r in baseline} == {0}
    # the generated token after the echo is not the choice's: both score every case right
    assert all(r["passed"] for r in candidate + baseline)
    assert [c["tokens"] for c in candidate[0]["choice"]["choices"]] == [
        c["tokens"] for c in baseline[0]["choice"]["choices"]
    ]


def test_method_generate_asks_for_a_letter_over_chat(pytester: pytest.Pytester) -> None:
    write_suite(
        pytester.path / "suite",
        {
            "candidate": "simulated://?accuracy=0.9&seed=4",
            "baseline": "simulated://?accuracy=0.9&seed=4",
        },
        cases=make_choice_cases(120),
        policy=POLICY,
        budget={"max_concurrency": 32, "max_attempts": 2, "timeout_s": 10},
        extra={"evaluator": {"revision": "mc-g", "scorer": "choice", "method": "generate"}},
        models={"candidate": "g-model", "baseline": "g-model"},
    )
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()[-2000:]
    records = _records(pytester, "candidate")
    acc = sum(r["passed"] for r in records) / len(records)
    assert abs(acc - 0.9) <= 4 * math.sqrt(0.9 * 0.1 / 120), acc
    right = [r for r in records if r["passed"]]
    assert right and all(r["output"] == "ABCD"[r["choice"]["target"]] for r in right)
    assert all(r["choice"]["method"] == "generate" for r in records)


def test_a_rerun_resumes_without_a_request(pytester: pytest.Pytester) -> None:
    _suite(pytester, "accuracy=0.8&seed=6", "accuracy=0.8&seed=6", count=20)
    assert _run(pytester).ret == 0
    first = {r["checksum"] for r in _records(pytester, "candidate")}
    log = pytester.path / "requests.jsonl"
    again = _run(pytester, f"--evalgate-request-log={log}")
    assert again.ret == 0
    again.stdout.fnmatch_lines(["*verdict PASS*"])
    assert not log.exists() or log.read_text() == ""  # no probe, no choice request
    assert {r["checksum"] for r in _records(pytester, "candidate")} == first


@pytest.mark.parametrize(("budget", "peak"), [(8, 4), (2, 2)])
def test_the_choices_of_an_identity_go_at_once_within_the_budget(
    pytester: pytest.Pytester, tmp_path: Path, budget: int, peak: int
) -> None:
    from suitekit import write_answer_key

    from pytest_evalgate.simulated import EvalgateSimConfig
    from pytest_evalgate.simulated.server import EvalgateSimServer

    def suite(url: str) -> Path:
        return write_suite(
            pytester.path / "suite",
            {"candidate": url},
            cases=make_choice_cases(1),
            policy={"version": "v", "baseline": None, "rules": [
                {"slice": "all", "rule": "min_rate", "min": 0.0}]},
            budget={"max_concurrency": budget, "max_attempts": 1, "timeout_s": 10},
            extra=LOGLIK,
        )  # fmt: skip

    key = write_answer_key(suite("http://127.0.0.1:9/v1"), tmp_path / "key.jsonl")
    config = EvalgateSimConfig(accuracy=1.0, latency_ms=300)
    with EvalgateSimServer(config, answers=key) as server:
        suite(server.base_url)
        server.reset()
        result = _run(pytester)
        stats = server.stats()
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert stats["requests_total"] == 5  # the probe, then the identity's four choices
    assert stats["peak_in_flight"] == peak  # all four at once, unless the budget is smaller


def test_an_errored_identity_is_no_result_and_the_run_is_incomplete_not_invalid(
    pytester: pytest.Pytester,
) -> None:
    # half the requests fail with a 500 (seeded: the probe, request 0, is answered at seed 0)
    _suite(pytester, "accuracy=0.9&fail_rate=0.5&seed=0", "accuracy=0.9", count=6)
    path = pytester.path / "suite" / "evalgate.yaml"
    path.write_text(path.read_text().replace("max_attempts: 2", "max_attempts: 1"))
    result = _run(pytester)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict INCOMPLETE*"])
    errored = [r for r in _records(pytester, "candidate") if r["error"] is not None]
    assert errored and all(r["score"] is None and r["passed"] is None for r in errored)
    assert all(r["choice"]["acc"] is None and r["choice"]["count"] == 4 for r in errored)
