"""Single-model gates (issue 16, SPEC section 12): ``baseline: null`` with one candidate.

``min_rate`` is the exact Clopper-Pearson lower bound of the pass rate (checked against
``scipy.stats.binomtest``), ``floor`` and ``max_rate`` on the error rate work alone, and a
paired rule in such a policy is refused with exit 4, naming the rule, before any request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy.stats import binomtest
from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate.paired import EvalgateGateInput
from pytest_evalgate.errors import EvalgatePolicyError
from pytest_evalgate.gate.rules import evalgate_evaluate
from pytest_evalgate.gate.single import evalgate_max_rate, evalgate_min_rate
from pytest_evalgate.policy.load import evalgate_load_policy

SINGLE: dict[str, Any] = {
    "version": "single-v1",
    "baseline": None,
    "rules": [
        {"slice": "all", "rule": "min_rate", "min": 0.5},
        {"slice": "beta", "rule": "floor", "max_rate": 0.6},
        {"metric": "error_rate", "rule": "max_rate", "max": 0.0},
    ],
}


def _suite(pytester: pytest.Pytester, accuracy: float, policy: dict[str, Any]) -> Path:
    return write_suite(
        pytester.path / "suite",
        {"candidate": f"simulated://?accuracy={accuracy}&seed=5"},
        cases=make_cases(["alpha", "beta"], 60),
        policy=policy,
    )


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider", "-q", *args)


def _decision(pytester: pytest.Pytester) -> dict[str, Any]:
    return json.loads((pytester.path / "rep" / "decision.json").read_text())  # type: ignore[no-any-return]


def _policy_file(pytester: pytest.Pytester, name: str, policy: dict[str, Any]) -> str:
    path = pytester.path / name
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return str(path)


def _with_min(minimum: float) -> dict[str, Any]:
    rules = [{"slice": "all", "rule": "min_rate", "min": minimum}]
    return {**SINGLE, "rules": rules}


def test_one_candidate_suite_gates_alone(pytester: pytest.Pytester) -> None:
    _suite(pytester, 0.8, SINGLE)
    result = _run(pytester, "--evalgate-report=rep")
    result.stdout.fnmatch_lines(["*verdict PASS*", "*min_rate[[]all]*"])
    assert result.ret == 0
    decision = _decision(pytester)
    assert decision["baseline"] is None and decision["verdict"] == "pass"
    names = [rule["name"] for rule in decision["rules"]]
    assert names == ["min_rate[all]", "floor[beta]", "max_rate[error_rate]"]
    assert all(rule["passed"] for rule in decision["rules"])
    assert decision["perf"]["e2e"]["baseline"]["n"] == 0  # no mirrored baseline samples


def test_min_rate_is_the_exact_lower_bound(pytester: pytest.Pytester) -> None:
    _suite(pytester, 0.8, SINGLE)
    assert _run(pytester, "--evalgate-report=rep").ret == 0
    rule = _decision(pytester)["rules"][0]
    n = rule["n_cases"]
    k = round(rule["estimate"] * n)
    interval = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert n == 120 and 0 < k < n
    assert rule["lo"] == pytest.approx(interval.low, abs=1e-12)
    assert rule["hi"] == pytest.approx(interval.high, abs=1e-12)
    for minimum, status in ((interval.low - 1e-4, 0), (interval.low + 1e-4, 1)):
        policy = _policy_file(pytester, f"min-{status}.yaml", _with_min(round(minimum, 6)))
        again = _run(pytester, "--evalgate-aggregate", f"--evalgate-policy={policy}")
        assert again.ret == status, again.stdout.str()


def test_min_rate_fails_a_weak_candidate(pytester: pytest.Pytester) -> None:
    _suite(pytester, 0.3, _with_min(0.5))
    result = _run(pytester, "--evalgate-report=rep")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict FAIL*", "*min_rate[[]all]*below min*"])
    assert _decision(pytester)["rules"][0]["hi"] < 0.5


def test_a_paired_rule_without_baseline_is_refused_before_any_request(
    pytester: pytest.Pytester,
) -> None:
    paired = {**SINGLE, "rules": [*SINGLE["rules"], {"slice": "all", "rule": "no_regression"}]}
    _suite(pytester, 0.8, paired)
    log = pytester.path / "requests.jsonl"
    result = _run(pytester, f"--evalgate-request-log={log}")
    assert result.ret == 4
    err = result.stderr.str()
    assert "rules[3].rule" in err and "'no_regression'" in err and "baseline: null" in err
    assert not log.exists() or log.read_text() == ""


def test_a_paired_policy_still_needs_its_baseline(pytester: pytest.Pytester) -> None:
    _suite(
        pytester,
        0.8,
        {"version": "v", "rules": [{"slice": "all", "rule": "non_inferior", "margin": 0.1}]},
    )
    result = _run(pytester)
    assert result.ret == 4
    assert "baseline 'baseline' is not a candidate" in result.stderr.str()


# ----------------------------------------------------------------------------- unit level


def test_min_rate_numbers_match_scipy_across_counts() -> None:
    for k, n in ((0, 10), (3, 10), (10, 10), (87, 100), (950, 1000)):
        got = evalgate_min_rate(k, n, 0.5, 0.95)
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert got["lo"] == pytest.approx(ci.low, abs=1e-12)
        assert got["hi"] == pytest.approx(ci.high, abs=1e-12)
        assert got["passed"] is (ci.low >= 0.5)


def test_min_rate_reasons_tell_evidence_from_shortfall() -> None:
    assert "too little evidence" in evalgate_min_rate(6, 10, 0.5, 0.95)["reason"]
    assert "below min" in evalgate_min_rate(1, 100, 0.5, 0.95)["reason"]
    assert evalgate_min_rate(0, 0, 0.5, 0.95)["evaluated"] is False


def test_max_rate_compares_the_observed_error_rate() -> None:
    assert evalgate_max_rate(1, 100, 0.01)["passed"] is True
    failed = evalgate_max_rate(2, 100, 0.01)
    assert failed["passed"] is False and "2/100" in failed["reason"]
    assert evalgate_max_rate(0, 0, 0.01)["evaluated"] is False


def test_policy_loader_refuses_every_paired_rule(tmp_path: Path) -> None:
    for index, rule in enumerate(
        [
            {"slice": "all", "rule": "non_inferior", "margin": 0.1},
            {"slice": "all", "rule": "must_improve", "target": 0.0},
            {"metric": "ttft_p95", "rule": "perf_ratio", "max_ratio": 1.1},
            {"metric": "error_rate", "rule": "max_delta", "max_delta": 0.1},
        ]
    ):
        path = tmp_path / f"p{index}.yaml"
        policy = {**SINGLE, "rules": [SINGLE["rules"][0], rule]}
        path.write_text(yaml.safe_dump(policy))
        with pytest.raises(EvalgatePolicyError) as info:
            evalgate_load_policy(path)
        assert "rules[1].rule" in str(info.value) and repr(rule["rule"]) in str(info.value)


def test_policy_loader_refuses_a_bad_min(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text(
        yaml.safe_dump({**SINGLE, "rules": [{"slice": "all", "rule": "min_rate", "min": 1.5}]})
    )
    with pytest.raises(EvalgatePolicyError, match=r"rules\[0\]\.min"):
        evalgate_load_policy(path)


def _input() -> EvalgateGateInput:
    """A hand-made gate input: 10 cases, 2 categories, 3 failures in b, 1 error of 11."""
    return EvalgateGateInput(
        case_ids=tuple(f"c{i}" for i in range(10)),
        categories=np.array(["a"] * 5 + ["b"] * 5),
        clusters=np.array([f"k{i}" for i in range(10)]),
        candidate_scores=np.array([1.0] * 7 + [0.0] * 3),
        baseline_scores=np.full(10, np.nan),
        candidate_fail_counts=np.array([0] * 7 + [1] * 3),
        candidate_trials=np.ones(10, dtype=np.int64),
        error_rates={"candidate": (1, 11)},
    )


def test_evaluate_counts_per_slice(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    rules = [
        {"slice": "b", "rule": "min_rate", "min": 0.0},
        {"slice": "a", "rule": "min_rate", "min": 0.4},
        {"metric": "error_rate", "rule": "max_rate", "max": 0.05},
    ]
    path.write_text(yaml.safe_dump({**SINGLE, "rules": rules}))
    result = evalgate_evaluate(evalgate_load_policy(path), _input())
    b, a, errors = result.rules
    assert (b.estimate, b.n_cases, b.passed) == (pytest.approx(0.4), 5, True)
    assert a.estimate == 1.0 and a.lo == pytest.approx(binomtest(5, 5).proportion_ci().low)
    assert a.passed is True
    assert errors.estimate == pytest.approx(1 / 11) and errors.passed is False
