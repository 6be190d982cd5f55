"""The gate end to end on simulated candidates (issue 5): pass, regression, too little evidence,
and a missing shard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from suitekit import make_cases, write_suite

POLICY = {
    "version": "e2e-v1",
    "confidence": 0.95,
    "correction": "holm",
    "bootstrap": {"resamples": 2000, "seed": 0},
    "rules": [{"slice": "all", "rule": "non_inferior", "margin": 0.06}],
}


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider", "-q", *args)


def _rule(pytester: pytest.Pytester, report: str = "rep") -> dict[str, object]:
    decision = json.loads((pytester.path / report / "decision.json").read_text())
    return decision["rules"][0]  # type: ignore[no-any-return]


def _suite(pytester: pytest.Pytester, cand: float, base: float, per_category: int) -> Path:
    return write_suite(
        pytester.path / "suite",
        {
            "candidate": f"simulated://?accuracy={cand}&seed=11",
            "baseline": f"simulated://?accuracy={base}&seed=12",
        },
        cases=make_cases(["alpha", "beta", "gamma"], per_category),
        policy=POLICY,
        budget={"max_concurrency": 32, "max_attempts": 2, "timeout_s": 10},
        shards=4,
    )


def test_equal_quality_passes(pytester: pytest.Pytester) -> None:
    _suite(pytester, 0.9, 0.9, per_category=300)
    result = _run(pytester, "--evalgate-report=rep")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*verdict PASS*"])
    rule = _rule(pytester)
    assert rule["passed"] is True and float(rule["lo"]) > -0.06  # type: ignore[arg-type]


def test_a_five_point_drop_fails_as_a_regression(pytester: pytest.Pytester) -> None:
    _suite(pytester, 0.85, 0.90, per_category=500)
    result = _run(pytester, "--evalgate-report=rep")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict FAIL*", "*non_inferior[[]all]*FAIL*regression*"])
    rule = _rule(pytester)
    assert float(rule["hi"]) < 0 and "regression" in str(rule["reason"])  # type: ignore[arg-type]


def test_a_tiny_suite_has_too_little_evidence(pytester: pytest.Pytester) -> None:
    _suite(pytester, 0.9, 0.9, per_category=3)
    result = _run(pytester, "--evalgate-report=rep")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*non_inferior[[]all]*FAIL*too little evidence*"])
    assert "more cases would settle it" in str(_rule(pytester)["reason"])


def test_a_missing_shard_is_incomplete(pytester: pytest.Pytester) -> None:
    _suite(pytester, 0.9, 0.9, per_category=20)
    for index in (0, 1, 3):
        shard = _run(pytester, f"--evalgate-shard={index}/4", "--evalgate-store=store")
        assert shard.ret == 0
    result = _run(
        pytester, "--evalgate-aggregate", "--evalgate-store=store", "--evalgate-report=rep"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict INCOMPLETE*"])
    decision = json.loads((pytester.path / "rep" / "decision.json").read_text())
    counts = decision["counts"]
    assert counts["expected"] == 120 and 0 < counts["missing"] < 120
    assert counts["completed"] + counts["missing"] == 120
    assert decision["attestable"] is False
