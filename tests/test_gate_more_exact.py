"""gate.py and gate_single.py, continued: single-model rules, the judge's rules, the policy
file's refusals and defaults, verdicts and exit statuses, on hand-built inputs (``gatekit``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from gatekit import WORSE_BETTER, make, on_metric, on_slice, policy
from scipy import stats as sps

from pytest_evalgate.aggregate.paired import EvalgateGateInput as GateInput
from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.gate import rules as gate
from pytest_evalgate.gate.result import EvalgateRuleResult
from pytest_evalgate.judge.pairwise import EvalgatePairwiseCases
from pytest_evalgate.policy import load as gate_policy
from pytest_evalgate.policy import values as policy_values

# --------------------------------------------------------------------------- single-model rules


def test_min_rate_passes_fails_and_asks_for_evidence_by_exact_bounds() -> None:
    data = make(
        {"alpha": ([1.0] * 40, [1.0] * 40), "beta": ([0.0] * 10 + [1.0] * 10, [1.0] * 20)},
        fails={"alpha": [1, 1] + [0] * 38},
    )
    rules = [
        on_slice("min_rate", "alpha", 0.8),
        on_slice("min_rate", "alpha", 0.95, 1),
        on_slice("min_rate", "alpha", 0.999, 2),
        on_slice("min_rate", "beta", 0.3, 3),
    ]
    ok, unsure, below, beta = gate.evalgate_evaluate(policy(*rules, baseline=None), data).rules
    ci = sps.binomtest(38, 40).proportion_ci(0.95)
    assert ok.estimate == 38 / 40 and ok.lo == pytest.approx(ci.low, rel=1e-9)
    assert ok.hi == pytest.approx(ci.high, rel=1e-9) and ok.passed and ok.n_cases == 40
    assert not unsure.passed and unsure.reason.startswith("too little evidence: 38/40 passed")
    assert not below.passed and below.reason.startswith("below min: 38/40 passed, upper bound")
    beta_ci = sps.binomtest(10, 20).proportion_ci(0.95)
    assert beta.estimate == 0.5 and beta.lo == pytest.approx(beta_ci.low, rel=1e-9)
    assert beta.passed is (beta_ci.low >= 0.3)


def test_single_model_rules_with_a_zero_threshold_and_without_errors_counted() -> None:
    data = make(WORSE_BETTER, error_rates={"candidate": (1, 100)})
    rules = policy(
        on_metric("max_rate", "error_rate", 0.0),
        on_slice("min_rate", "alpha", 0.0, 1),
        baseline=None,
    )
    errors, floor = gate.evalgate_evaluate(rules, data).rules
    assert not errors.passed and errors.limit == 0.0  # one error in 100 is above 0
    assert floor.passed and floor.limit == 0.0  # any pass rate is at least 0
    empty = make(WORSE_BETTER)
    (unknown,) = gate.evalgate_evaluate(
        policy(on_metric("max_rate", "error_rate", 0.5), baseline=None), empty
    ).rules
    assert not unknown.evaluated and unknown.reason == "not evaluated: no expected identities"


def test_max_rate_on_errors_is_inclusive_at_the_maximum() -> None:
    data = make(WORSE_BETTER, error_rates={"candidate": (3, 100)})
    at, over = gate.evalgate_evaluate(
        policy(
            on_metric("max_rate", "error_rate", 0.03),
            on_metric("max_rate", "error_rate", 0.02, 1),
            baseline=None,
        ),
        data,
    ).rules
    assert at.passed and at.estimate == 0.03 and at.n_cases == 100
    assert not over.passed and over.reason == "too many errors: 3/100 = 0.0300 > 0.02"


# --------------------------------------------------------------------------- judge rules

JUDGE = {"model": "judge-m", "revision": "j1", "key": "k" * 20}


def judged(agreement: object = None) -> GateInput:
    """alpha: the candidate wins every pair; beta: it loses every pair (4 clusters each)."""
    n = 8
    cases = EvalgatePairwiseCases(
        case_ids=tuple(f"case-{i}" for i in range(n)),
        categories=np.array(["alpha"] * 4 + ["beta"] * 4),
        clusters=np.array([f"c{i}" for i in range(n)]),
        wins=np.array([1.0] * 4 + [0.0] * 4), losses=np.array([0.0] * 4 + [1.0] * 4),
        ties=np.zeros(n), inconsistent=np.zeros(n), repetitions=np.ones(n, dtype=np.int64),
    )  # fmt: skip
    facts = SimpleNamespace(
        judge=JUDGE, pairwise=cases, agreement=agreement, agreement_reason="no golden set"
    )
    return dataclasses.replace(make(WORSE_BETTER), judge=facts)


def test_pairwise_reads_its_slice_and_names_the_judge() -> None:
    alpha, beta = gate.evalgate_evaluate(
        policy(on_slice("pairwise", "alpha", 0.1), on_slice("pairwise", "beta", 0.5, 1)), judged()
    ).rules
    assert (alpha.estimate, alpha.lo, alpha.hi, alpha.limit) == (1.0, 1.0, 1.0, 0.1)
    assert policy_values.evalgate_bound(alpha.rule, alpha.limit) == -0.1  # a margin is slack
    assert alpha.passed and (alpha.n_cases, alpha.n_clusters) == (4, 4)
    assert alpha.reason == (
        "passes: net win rate +1.0000, lower bound +1.0000 > -0.1000 "
        "(judge judge-m (j1, key kkkkkkkkkkkk))"
    )
    assert not beta.passed and beta.estimate == -1.0 and beta.limit == 0.5


def test_judge_agreement_passes_on_the_lower_bound_and_blames_the_judge() -> None:
    rule = policy_values.EvalgateRule("judge_agreement", 0, metric="kappa", limit=0.4)
    good = SimpleNamespace(n=30, kappa=0.7, lo=0.4, hi=0.9)
    bad = SimpleNamespace(n=30, kappa=0.5, lo=0.3, hi=0.7)
    (ok,) = gate.evalgate_evaluate(policy(rule), judged(good)).rules
    (weak,) = gate.evalgate_evaluate(policy(rule), judged(bad)).rules
    (none,) = gate.evalgate_evaluate(policy(rule), judged(None)).rules
    assert ok.passed and (ok.estimate, ok.lo, ok.n_cases) == (0.7, 0.4, 30)  # lo == min passes
    assert not weak.passed and weak.reason.startswith("the judge failed, not the candidate")
    assert not none.evaluated and none.reason.endswith("no golden set")
    (plain,) = gate.evalgate_evaluate(policy(rule), make(WORSE_BETTER)).rules
    assert not plain.evaluated and plain.reason == "not evaluated: the suite has no judged results"


# --------------------------------------------------------------------------- policy file


RULE_LINES = {
    "non_inferior": "{slice: all, rule: non_inferior, margin: 0.1",
    "must_improve": "{slice: all, rule: must_improve, target: 0.0",
    "no_regression": "{slice: all, rule: no_regression",
    "floor": "{slice: all, rule: floor, max_rate: 0.1",
    "perf_ratio": "{metric: ttft_p95, rule: perf_ratio, max_ratio: 1.1",
    "max_delta": "{metric: error_rate, rule: max_delta, max_delta: 0.01",
    "pairwise": "{slice: all, rule: pairwise, margin: 0.1",
    "judge_agreement": "{rule: judge_agreement, min_kappa: 0.4",
}


@pytest.mark.parametrize("kind", sorted(RULE_LINES))
def test_every_rule_kind_refuses_an_unknown_key_and_a_quoted_number(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text(f"version: v\nrules:\n  - {RULE_LINES[kind]}, extra: 1}}\n")
    with pytest.raises(EvalgatePolicyError) as refused:
        gate_policy.evalgate_load_policy(path)
    assert refused.value.key == "rules[0].extra" and refused.value.reason == "unknown key"
    loaded = RULE_LINES[kind] + "}"
    path.write_text(f"version: v\nrules:\n  - {loaded}\n")
    assert gate_policy.evalgate_load_policy(path).rules[0].rule == kind
    number = loaded.rsplit(": ", 1)
    if number[1][0].isdigit():  # a threshold: "0.1" as a string is refused, not coerced
        path.write_text(f"version: v\nrules:\n  - {number[0]}: '{number[1][:-1]}'}}\n")
        with pytest.raises(EvalgatePolicyError):
            gate_policy.evalgate_load_policy(path)


def test_policy_defaults_equal_the_files_defaults(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text("version: v\nrules: [{slice: all, rule: no_regression}]\n")
    loaded = gate_policy.evalgate_load_policy(path)
    built = policy_values.EvalgatePolicy("v", loaded.rules)
    assert built.to_dict() == loaded.to_dict()
    assert (built.resamples, built.seed, built.confidence, built.correction) == (
        10_000,
        0,
        0.95,
        "holm",
    )


# --------------------------------------------------------------------------- verdict


@pytest.mark.parametrize(
    ("status", "passes", "verdict", "exit_status"),
    [
        ("complete", [True, True], "pass", 0),
        ("complete", [True, False], "fail", 1),
        ("complete", [], "pass", 0),
        ("incomplete", [True], "incomplete", 1),
        ("invalid", [True], "invalid", 1),
        ("partial", [True], "partial", 0),
        ("partial", [False], "partial", 1),
    ],
)
def test_verdict_and_exit_status_for_each_status(
    status: str, passes: list[bool], verdict: str, exit_status: int
) -> None:
    results = [EvalgateRuleResult(f"r{i}", "floor", p, "") for i, p in enumerate(passes)]
    assert gate.evalgate_verdict(status, results) == verdict
    assert gate.evalgate_exit_status(verdict, all(passes)) == exit_status


def test_unknown_status_and_verdict_name_their_key() -> None:
    with pytest.raises(EvalgateConfigError) as status:
        gate.evalgate_verdict("done", [])
    assert (status.value.source, status.value.key) == ("evalgate_verdict", "status")
    assert status.value.reason == "unknown status 'done'"
    with pytest.raises(EvalgateConfigError) as verdict:
        gate.evalgate_exit_status("ok", True)
    assert (verdict.value.source, verdict.value.key) == ("evalgate_exit_status", "verdict")
