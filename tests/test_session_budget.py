"""One run, one request budget: suites that request together must name the same run-wide budget.

A session runs every suite it collects through one runner, which holds one concurrency, rate
and token budget. It used to take the first suite's budget for all of them without a word; a
run whose selected suites name different budgets is now refused before any request (usage
error, exit 4) with both manifests named. Suites that agree, or a selection that keeps one
suite, run as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from suitekit import make_cases, write_suite

from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.session.launch import evalgate_check_one_budget

GOOD = "simulated://?accuracy=1.0&seed=1"
NARROW = {"max_concurrency": 2, "max_attempts": 3, "timeout_s": 10}
WIDE = {"max_concurrency": 8, "max_attempts": 3, "timeout_s": 10}


def _two_suites(root: Path, first: dict[str, float], second: dict[str, float]) -> None:
    cases = make_cases(["alpha"], 4)
    urls = {"candidate": GOOD, "baseline": GOOD}
    # revisions apart: an identity names the dataset revision, not the suite
    write_suite(root / "one", urls, cases=cases, budget=first, suite="suite-one", revision="r1")
    write_suite(root / "two", urls, cases=cases, budget=second, suite="suite-two", revision="r2")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # in this process: the refusal and the verdicts are the session's, not the process's (the
    # runner's child and xdist's workers are still processes of their own)
    return pytester.runpytest_inprocess(
        "--evalgate", "one", "two", "--evalgate-store=store",
        "--evalgate-request-log=requests.jsonl", "-p", "no:cacheprovider", *args,
    )  # fmt: skip


def test_suites_with_different_budgets_are_refused_before_any_request(
    pytester: pytest.Pytester,
) -> None:
    _two_suites(pytester.path, NARROW, WIDE)
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*two*evalgate.yaml: budget: max_concurrency 8 differs from max_concurrency 2"
            " in *one*evalgate.yaml*one run-wide budget*"
        ]
    )
    assert not (pytester.path / "requests.jsonl").exists()  # nothing was requested
    assert not list(pytester.path.glob("store/**/seg-*.jsonl"))


def test_under_xdist_the_controller_reports_the_workers_refusal(pytester: pytest.Pytester) -> None:
    _two_suites(pytester.path, NARROW, WIDE)
    result = _run(pytester, "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*budget: max_concurrency 8 differs from max_concurrency 2*"])
    assert not (pytester.path / "requests.jsonl").exists()


def test_suites_with_the_same_budget_run_and_gate_together(pytester: pytest.Pytester) -> None:
    _two_suites(pytester.path, WIDE, WIDE)
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=16 + 2)  # 2 suites x 2 candidates x 4 cases, 1 rule each
    result.stdout.fnmatch_lines(["*suite-one*PASS*", "*suite-two*PASS*"], consecutive=False)


def test_a_selection_that_keeps_one_suite_runs_with_its_budget(pytester: pytest.Pytester) -> None:
    _two_suites(pytester.path, NARROW, WIDE)
    result = _run(pytester, "--deselect", "two/evalgate.yaml")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=8 + 1)


def test_only_the_shared_keys_must_agree(tmp_path: Path) -> None:
    urls = {"candidate": GOOD, "baseline": GOOD}
    cases = make_cases(["alpha"], 2)
    one = write_suite(tmp_path / "one", urls, cases=cases, budget=WIDE, suite="suite-one")
    slower = {**WIDE, "max_attempts": 5, "timeout_s": 30}  # each work carries its suite's own
    two = write_suite(tmp_path / "two", urls, cases=cases, budget=slower, suite="suite-two")
    evalgate_check_one_budget([evalgate_load_manifest(str(one)), evalgate_load_manifest(str(two))])
    rated = {**WIDE, "requests_per_second": 5}
    three = write_suite(tmp_path / "three", urls, cases=cases, budget=rated, suite="suite-three")
    manifests = [evalgate_load_manifest(str(p)) for p in (one, three)]
    with pytest.raises(pytest.UsageError, match=r"requests_per_second 5\.0 differs from"):
        evalgate_check_one_budget(manifests)
