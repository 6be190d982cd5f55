"""A memoriser fails ``public_private_gap`` through the plugin; an honest improvement passes.

Both candidates are the simulator with the baseline's seed and model id, so they share its
draws: ``lift=0.1`` is right wherever the baseline is and on a further tenth of the cases
(an honest improvement); ``lift_except=held`` keeps that gain off the private category (a
memoriser). Outcomes, the summary line naming the rule, decision.json and exit status are read
from outside.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from suitekit import make_cases, write_suite

BASE = "simulated://?accuracy=0.7&seed=3"
POLICY: dict[str, Any] = {
    "version": "gap-v1",
    "bootstrap": {"resamples": 4000, "seed": 0},
    "rules": [
        {"slice": "all", "rule": "non_inferior", "margin": 0.05},
        {"rule": "public_private_gap", "public": ["alpha", "beta"], "private": ["held"],
         "max_gap": 0.06},
    ],
}  # fmt: skip


def _run(pytester: pytest.Pytester, candidate: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    write_suite(
        pytester.path / "suite",
        {"candidate": candidate, "baseline": BASE},
        cases=make_cases(["alpha", "beta", "held"], 300),
        models={"candidate": "sim-model", "baseline": "sim-model"},
        extra={"private": ["held"]},
        policy=POLICY,
    )
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-report=rep"
    )
    decision = json.loads((pytester.path / "rep" / "decision.json").read_text())
    return result, decision


def _gap(decision: dict[str, Any]) -> dict[str, Any]:
    (rule,) = [r for r in decision["rules"] if r["rule"] == "public_private_gap"]
    return rule  # type: ignore[no-any-return]


def test_a_memoriser_fails_the_public_private_gap(pytester: pytest.Pytester) -> None:
    result, decision = _run(pytester, f"{BASE}&lift=0.1&lift_except=held")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*verdict FAIL*", "*public_private_gap[[]held]*FAIL: memorising*"])
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] >= 1  # the gate's rule testcase, besides the wrong answers
    rule = _gap(decision)
    assert decision["verdict"] == "fail"
    assert rule["name"] == "public_private_gap[held]" and rule["passed"] is False
    assert rule["lo"] > 0.06 and rule["n_cases"] == 900
    assert "public alpha+beta vs private held" in rule["reason"]
    # the rest of the gate passes: the memoriser is better overall, and only this rule fails
    assert [r["name"] for r in decision["rules"] if not r["passed"]] == [rule["name"]]


def test_an_honest_improvement_passes_the_public_private_gap(pytester: pytest.Pytester) -> None:
    result, decision = _run(pytester, f"{BASE}&lift=0.1")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*verdict PASS*", "*public_private_gap[[]held]*pass: passes*"])
    rule = _gap(decision)
    assert decision["verdict"] == "pass" and rule["passed"] is True
    assert rule["hi"] <= 0.06 and abs(rule["estimate"]) < 0.05


def test_a_rule_naming_an_undeclared_private_category_exits_4(pytester: pytest.Pytester) -> None:
    write_suite(
        pytester.path / "suite",
        {"candidate": BASE, "baseline": BASE},
        cases=make_cases(["alpha", "beta", "held"], 4),
        policy=POLICY,  # names held as private, and the manifest declares no private: key
    )
    log = pytester.path / "requests.jsonl"
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", f"--evalgate-request-log={log}"
    )
    assert result.ret == 4
    err = result.stderr.str()
    assert "gate.yaml: rules[1].private[0]: 'held' is not declared private in " in err
    assert not log.exists() or log.read_text() == ""  # refused before any request


def test_a_partial_selection_leaves_the_gap_rule_out(pytester: pytest.Pytester) -> None:
    write_suite(
        pytester.path / "suite",
        {"candidate": f"{BASE}&lift=0.1&lift_except=held", "baseline": BASE},
        cases=make_cases(["alpha", "beta", "held"], 20),
        models={"candidate": "sim-model", "baseline": "sim-model"},
        extra={"private": ["held"]},
        policy=POLICY,
    )
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "-k", "alpha",
        "--evalgate-report=rep",
    )  # fmt: skip
    decision = json.loads((pytester.path / "rep" / "decision.json").read_text())
    assert decision["verdict"] == "partial"
    assert [r["rule"] for r in decision["rules"]] == []  # "all" and the gap need the whole suite
    assert "public_private_gap" not in result.stdout.str()
