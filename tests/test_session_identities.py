"""Suites run together must not share an identity.

An identity is (dataset revision, case id, candidate, repetition): it names no suite. One
session serves its items from one runner and one map of stored records keyed by identity, so
two suites with the same revision and case ids (one dataset under two prompts, say) used to
hang: the second suite's items waited for answers nobody requested. Such a session is now
refused before any request (usage error, exit 4) naming both manifests and the identity.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from suitekit import make_cases, write_suite

GOOD = "simulated://?accuracy=1.0&seed=1"


def _two_suites(root: Path, second_revision: str) -> None:
    cases = make_cases(["alpha"], 3)
    urls = {"candidate": GOOD, "baseline": GOOD}
    write_suite(root / "one", urls, cases=cases, suite="suite-one", revision="r1")
    write_suite(root / "two", urls, cases=cases, suite="suite-two", revision=second_revision)


ARGS = ("--evalgate", "one", "two", "--evalgate-store=store",
        "--evalgate-request-log=requests.jsonl", "-p", "no:cacheprovider")  # fmt: skip


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # a subprocess with a timeout: the regression this refusal guards against is a session that
    # hangs, which must fail the test, not hang it
    return pytester.runpytest_subprocess(*ARGS, *args, timeout=120)


def _run_inprocess(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # the runs that are meant to go through: what is asserted is the session's outcomes and
    # verdicts, not the process's (the runner's child and xdist's workers are still processes)
    return pytester.runpytest_inprocess(*ARGS, *args)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_two_suites_sharing_identities_are_refused_before_any_request(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    _two_suites(pytester.path, second_revision="r1")
    result = _run(pytester, *workers)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*two*evalgate.yaml: dataset.revision: identity (revision 'r1', case *"
            "is also an identity of *one*evalgate.yaml*distinct identities*"
        ]
    )
    assert not (pytester.path / "requests.jsonl").exists()  # nothing was requested
    assert not list(pytester.path.glob("store/**/seg-*.jsonl"))


def test_a_selection_that_keeps_one_of_them_runs(pytester: pytest.Pytester) -> None:
    _two_suites(pytester.path, second_revision="r1")
    result = _run_inprocess(pytester, "--deselect", "two/evalgate.yaml")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=6 + 1)  # 2 candidates x 3 cases, one rule


def test_distinct_revisions_run_and_gate_together(pytester: pytest.Pytester) -> None:
    _two_suites(pytester.path, second_revision="r2")
    result = _run_inprocess(pytester)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=12 + 2)
    result.stdout.fnmatch_lines(["*suite-one*PASS*", "*suite-two*PASS*"], consecutive=False)
