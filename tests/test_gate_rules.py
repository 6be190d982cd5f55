"""gate.py: policy refusals, rule outcomes on constructed inputs, verdicts and exit status."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pytest_evalgate.aggregate.paired import EvalgateGateInput as GateInput
from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.gate import rules as gate
from pytest_evalgate.gate.result import EvalgateRuleResult
from pytest_evalgate.policy import load as gate_policy
from pytest_evalgate.policy import values as policy_values


def make_input(
    categories: list[str],
    cand_acc: dict[str, float],
    base_acc: dict[str, float],
    per_category: int = 400,
    seed: int = 0,
    cluster_size: int = 4,
) -> GateInput:
    """Binary scores per case at the given accuracy per category; clusters of ``cluster_size``."""
    rng = np.random.default_rng(seed)
    cats = np.repeat(np.array(categories), per_category)
    n = cats.size
    cand_p = np.array([cand_acc[c] for c in cats])
    base_p = np.array([base_acc[c] for c in cats])
    cand = (rng.random(n) < cand_p).astype(float)
    base = (rng.random(n) < base_p).astype(float)
    ids = tuple(f"case-{i:06d}" for i in range(n))
    clusters = np.array([f"{c}-{i // cluster_size}" for i, c in enumerate(cats)])
    return GateInput(
        case_ids=ids,
        categories=cats,
        clusters=clusters,
        candidate_scores=cand,
        baseline_scores=base,
        candidate_fail_counts=(cand < 0.5).astype(int),
        candidate_trials=np.ones(n, dtype=int),
    )


def policy(
    *rules: policy_values.EvalgateRule, resamples: int = 2_000, **kwargs: object
) -> policy_values.EvalgatePolicy:
    return policy_values.EvalgatePolicy(version="t", rules=rules, resamples=resamples, **kwargs)  # type: ignore[arg-type]


def rule(
    kind: str, target: str, threshold: float | None = None, index: int = 0
) -> policy_values.EvalgateRule:
    if kind in ("perf_ratio", "max_delta"):
        return policy_values.EvalgateRule(kind, index, metric=target, limit=threshold)
    return policy_values.EvalgateRule(kind, index, slice=target, limit=threshold)


# --------------------------------------------------------------------------- policy parsing

SPEC_POLICY = """\
version: gate-v4
confidence: 0.95                    # two-sided interval
correction: holm
bootstrap: {resamples: 10000, seed: 0}
rules:
  - {slice: all,       rule: non_inferior, margin: 0.01}
  - {slice: billing,   rule: non_inferior, margin: 0.02}
  - {slice: reasoning, rule: must_improve, target: 0.0}
  - {slice: "*",       rule: no_regression}
  - {slice: jailbreak, rule: floor, max_rate: 0.01}
  - {metric: ttft_p95,          rule: perf_ratio, max_ratio: 1.05}
  - {metric: tpot_p95,          rule: perf_ratio, max_ratio: 1.05}
  - {metric: output_tokens_p95, rule: perf_ratio, max_ratio: 1.15}
  - {metric: error_rate,        rule: max_delta,  max_delta: 0.002}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gate.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_spec_policy_loads_with_every_key(tmp_path: Path) -> None:
    loaded = gate_policy.evalgate_load_policy(write(tmp_path, SPEC_POLICY))
    assert (loaded.version, loaded.confidence, loaded.correction) == ("gate-v4", 0.95, "holm")
    assert (loaded.resamples, loaded.seed) == (10_000, 0)
    assert (loaded.candidate, loaded.baseline) == ("candidate", "baseline")
    assert [r.rule for r in loaded.rules][:4] == ["non_inferior"] * 2 + [
        "must_improve",
        "no_regression",
    ]
    assert loaded.rules[1] == policy_values.EvalgateRule(
        "non_inferior", 1, slice="billing", limit=0.02
    )
    assert loaded.rules[5] == policy_values.EvalgateRule(
        "perf_ratio", 5, metric="ttft_p95", limit=1.05
    )
    assert loaded.rules[3].limit is None


def test_policy_defaults_and_names(tmp_path: Path) -> None:
    text = (
        "version: v1\ncandidate: r17\nbaseline: r16\nrules: [{slice: all, rule: no_regression}]\n"
    )
    loaded = gate_policy.evalgate_load_policy(write(tmp_path, text))
    assert (loaded.confidence, loaded.correction, loaded.resamples) == (0.95, "holm", 10_000)
    assert (loaded.candidate, loaded.baseline) == ("r17", "r16")


def test_policy_digest_ignores_layout_and_comments_but_not_values(tmp_path: Path) -> None:
    first = policy_values.evalgate_policy_digest(
        gate_policy.evalgate_load_policy(write(tmp_path, SPEC_POLICY))
    )
    relaid = SPEC_POLICY.replace("# two-sided interval", "").replace("all,       ", "all, ")
    second = policy_values.evalgate_policy_digest(
        gate_policy.evalgate_load_policy(write(tmp_path, relaid))
    )
    changed = SPEC_POLICY.replace("margin: 0.02", "margin: 0.03")
    third = policy_values.evalgate_policy_digest(
        gate_policy.evalgate_load_policy(write(tmp_path, changed))
    )
    assert first == second != third
    assert len(first) == 64


REFUSALS = {
    "unknown rule": (
        "rules[0].rule",
        "unknown rule 'non_inferiour'",
        "{slice: all, rule: non_inferiour, margin: 0.01}",
    ),
    "missing rule": ("rules[0].rule", "missing required key", "{slice: all, margin: 0.01}"),
    "unknown metric": (
        "rules[0].metric",
        "ttft_p97",
        "{metric: ttft_p97, rule: perf_ratio, max_ratio: 1.1}",
    ),
    "max_delta metric": (
        "rules[0].metric",
        "'error_rate'",
        "{metric: ttft_p95, rule: max_delta, max_delta: 0.1}",
    ),
    "unknown rule key": (
        "rules[0].slack",
        "unknown key",
        "{slice: all, rule: non_inferior, margin: 0.01, slack: 1}",
    ),
    "string margin": (
        "rules[0].margin",
        "valid number (got '0.01')",
        "{slice: all, rule: non_inferior, margin: '0.01'}",
    ),
    "bool margin": (
        "rules[0].margin",
        "valid number (got True)",
        "{slice: all, rule: non_inferior, margin: true}",
    ),
    "negative margin": (
        "rules[0].margin",
        "greater than or equal to 0",
        "{slice: all, rule: non_inferior, margin: -0.1}",
    ),
    "missing margin": (
        "rules[0].margin",
        "missing required key",
        "{slice: all, rule: non_inferior}",
    ),
    "missing slice": ("rules[0].slice", "missing required key", "{rule: floor, max_rate: 0.1}"),
    "rate above 1": (
        "rules[0].max_rate",
        "less than or equal to 1",
        "{slice: all, rule: floor, max_rate: 2}",
    ),
    "zero ratio": (
        "rules[0].max_ratio",
        "greater than 0",
        "{metric: e2e_p50, rule: perf_ratio, max_ratio: 0}",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_rule_refusal_names_file_key_and_reason(tmp_path: Path, case: str) -> None:
    key, reason, item = REFUSALS[case]
    path = write(
        tmp_path, f"version: v1\nrules:\n  - {{slice: all, rule: no_regression}}\n  - {item}\n"
    )
    with pytest.raises(EvalgatePolicyError) as caught:
        gate_policy.evalgate_load_policy(path)
    expected_key = key.replace("rules[0]", "rules[1]")
    assert caught.value.source == str(path) and caught.value.key == expected_key
    assert reason in caught.value.reason
    assert str(path) in str(caught.value) and expected_key in str(caught.value)


TOP_REFUSALS = {
    "unknown top key": (
        "margin",
        "unknown key",
        "version: v1\nmargin: 0.1\nrules: [{slice: all, rule: no_regression}]",
    ),
    "missing version": (
        "version",
        "missing required key",
        "rules: [{slice: all, rule: no_regression}]",
    ),
    "empty rules": ("rules", "at least 1 item", "version: v1\nrules: []"),
    "rules not list": ("rules", "valid list", "version: v1\nrules: {slice: all}"),
    "bad correction": (
        "correction",
        "'holm'",
        "version: v1\ncorrection: sidak\nrules: [{slice: all, rule: no_regression}]",
    ),
    "confidence 1": (
        "confidence",
        "less than 1",
        "version: v1\nconfidence: 1.0\nrules: [{slice: all, rule: no_regression}]",
    ),
    "string resamples": (
        "bootstrap.resamples",
        "valid integer",
        "version: v1\nbootstrap: {resamples: '10'}\nrules: [{slice: all, rule: no_regression}]",
    ),
    "few resamples": (
        "bootstrap.resamples",
        "greater than or equal to 100",
        "version: v1\nbootstrap: {resamples: 10}\nrules: [{slice: all, rule: no_regression}]",
    ),
    "bootstrap key": (
        "bootstrap.method",
        "unknown key",
        "version: v1\nbootstrap: {method: bca}\nrules: [{slice: all, rule: no_regression}]",
    ),
    "not a mapping": ("<root>", "must be a mapping", "- just\n- a list\n"),
    "not yaml": ("<yaml>", "not valid YAML", "version: [unclosed\n"),
}


@pytest.mark.parametrize("case", sorted(TOP_REFUSALS))
def test_top_level_refusal_names_file_key_and_reason(tmp_path: Path, case: str) -> None:
    key, reason, text = TOP_REFUSALS[case]
    path = write(tmp_path, text)
    with pytest.raises(EvalgatePolicyError) as caught:
        gate_policy.evalgate_load_policy(path)
    assert (caught.value.source, caught.value.key) == (str(path), key)
    assert reason in caught.value.reason


def test_missing_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(EvalgatePolicyError, match="cannot read"):
        gate_policy.evalgate_load_policy(tmp_path / "absent.yaml")


def test_unknown_slice_is_refused_at_evaluation_with_the_categories() -> None:
    data = make_input(
        ["billing", "shipping"],
        {"billing": 0.8, "shipping": 0.8},
        {"billing": 0.8, "shipping": 0.8},
        20,
    )
    bad = dataclasses.replace(
        policy(rule("no_regression", "all"), rule("floor", "refunds", 0.1, 1)),
        source="suite/gate.yaml",
    )
    with pytest.raises(EvalgatePolicyError) as caught:
        gate.evalgate_evaluate(bad, data)
    assert caught.value.source == "suite/gate.yaml" and caught.value.key == "rules[1].slice"
    assert "'refunds'" in caught.value.reason and "billing, shipping" in caught.value.reason


# --------------------------------------------------------------------------- rule outcomes

CATS = ["billing", "reasoning", "shipping"]


def test_equal_quality_passes_non_inferior() -> None:
    acc = dict.fromkeys(CATS, 0.8)
    data = make_input(CATS, acc, acc, per_category=3_000, seed=1)
    result = gate.evalgate_evaluate(policy(rule("non_inferior", "all", 0.02)), data)
    (only,) = result.rules
    assert only.passed and only.name == "non_inferior[all]"
    assert only.lo > -0.02 and only.lo < 0 < only.hi
    assert only.t_lo == pytest.approx(only.lo, abs=0.004) and only.t_hi == pytest.approx(
        only.hi, abs=0.004
    )
    assert (only.n_cases, only.n_clusters, only.limit) == (9_000, 2_250, 0.02)  # the margin
    assert policy_values.evalgate_bound(only.rule, only.limit) == -0.02
    assert only.reason.startswith("passes")


def test_five_point_drop_fails_as_regression() -> None:
    data = make_input(
        CATS, dict.fromkeys(CATS, 0.75), dict.fromkeys(CATS, 0.80), per_category=1_000, seed=2
    )
    result = gate.evalgate_evaluate(policy(rule("non_inferior", "all", 0.01)), data)
    (only,) = result.rules
    assert not only.passed
    assert "regression" in only.reason and only.hi < 0
    assert only.estimate == pytest.approx(-0.05, abs=0.02)


def test_tiny_suite_fails_with_too_little_evidence_and_a_case_count() -> None:
    data = make_input(
        ["billing"], {"billing": 0.8}, {"billing": 0.8}, per_category=12, seed=3, cluster_size=1
    )
    (only,) = gate.evalgate_evaluate(policy(rule("non_inferior", "all", 0.02)), data).rules
    assert not only.passed
    assert only.reason.startswith("too little evidence: about ")
    more = int(only.reason.split("about ")[1].split()[0])
    assert 50 < more < 1_000_000


def test_must_improve_passes_on_a_clear_gain_and_fails_short_of_target() -> None:
    data = make_input(
        ["reasoning"], {"reasoning": 0.9}, {"reasoning": 0.7}, per_category=2_000, seed=4
    )
    gain = gate.evalgate_evaluate(policy(rule("must_improve", "reasoning", 0.0)), data).rules[0]
    short = gate.evalgate_evaluate(policy(rule("must_improve", "reasoning", 0.5)), data).rules[0]
    assert gain.passed and gain.lo > 0
    assert not short.passed and short.reason.startswith("short of target")


def test_star_expands_to_one_rule_per_category_and_flags_only_the_drop() -> None:
    cand = {"billing": 0.6, "reasoning": 0.8, "shipping": 0.8}
    base = dict.fromkeys(CATS, 0.8)
    data = make_input(CATS, cand, base, per_category=1_000, seed=5)
    result = gate.evalgate_evaluate(policy(rule("no_regression", "*")), data)
    names = [r.name for r in result.rules]
    assert names == [
        "no_regression[billing]",
        "no_regression[reasoning]",
        "no_regression[shipping]",
    ]
    outcomes = {r.slice: r.passed for r in result.rules}
    assert outcomes == {"billing": False, "reasoning": True, "shipping": True}
    billing = result.rules[0]
    assert "regression" in billing.reason and billing.p_adjusted < 0.05
    assert all(r.p_adjusted >= r.p_value for r in result.rules)


def test_correction_makes_a_borderline_alarm_disappear() -> None:
    cats = [f"s{i:02d}" for i in range(20)]
    cand = dict.fromkeys(cats, 0.8)
    cand["s00"] = 0.74
    data = make_input(cats, cand, dict.fromkeys(cats, 0.8), per_category=500, seed=6)
    raw = gate.evalgate_evaluate(policy(rule("no_regression", "*"), correction="none"), data)
    holm = gate.evalgate_evaluate(policy(rule("no_regression", "*"), correction="holm"), data)
    assert not raw.rules[0].passed and raw.rules[0].p_value < 0.05
    assert holm.rules[0].p_value == raw.rules[0].p_value
    assert holm.rules[0].p_adjusted > raw.rules[0].p_adjusted
    assert sum(not r.passed for r in holm.rules) <= sum(not r.passed for r in raw.rules)


def test_floor_passes_with_enough_clean_cases_and_explains_failures() -> None:
    clean = make_input(["jailbreak"], {"jailbreak": 1.0}, {"jailbreak": 1.0}, per_category=500)
    few = make_input(["jailbreak"], {"jailbreak": 1.0}, {"jailbreak": 1.0}, per_category=100)
    bad = make_input(["jailbreak"], {"jailbreak": 0.9}, {"jailbreak": 1.0}, per_category=500)
    rules = policy(rule("floor", "jailbreak", 0.01))
    ok, short, over = (gate.evalgate_evaluate(rules, d).rules[0] for d in (clean, few, bad))
    assert ok.passed and ok.estimate == 0 and 0 < ok.hi <= 0.01
    assert (
        not short.passed
        and short.reason == "too little evidence: about 268 more cases would settle it"
    )
    assert not over.passed and over.reason.startswith("regression") and over.lo > 0.01


def perf_input(cand_scale: float, samples: int = 2_000) -> GateInput:
    rng = np.random.default_rng(7)
    base = rng.lognormal(-1.0, 0.4, samples)
    cand = cand_scale * rng.lognormal(-1.0, 0.4, samples)
    data = make_input(["a"], {"a": 0.8}, {"a": 0.8}, per_category=10)
    return dataclasses.replace(data, perf={"ttft": (cand, base)})


def test_perf_ratio_passes_when_equal_and_fails_when_slower() -> None:
    rules = policy(rule("perf_ratio", "ttft_p95", 1.10))
    same = gate.evalgate_evaluate(rules, perf_input(1.0)).rules[0]
    slow = gate.evalgate_evaluate(rules, perf_input(1.5)).rules[0]
    assert same.passed and same.hi <= 1.10 and same.name == "perf_ratio[ttft_p95]"
    assert not slow.passed and slow.reason.startswith("regression") and slow.lo > 1.10
    assert same.metric == "ttft_p95" and same.slice is None


def test_perf_ratio_without_samples_is_not_evaluated_and_fails() -> None:
    (only,) = gate.evalgate_evaluate(
        policy(rule("perf_ratio", "itl_p50", 1.1)), perf_input(1.0)
    ).rules
    assert not only.passed and not only.evaluated
    assert only.reason.startswith("not evaluated: no itl samples")


def test_max_delta_compares_error_rates() -> None:
    data = make_input(["a"], {"a": 0.8}, {"a": 0.8}, per_category=10)
    rules = policy(rule("max_delta", "error_rate", 0.002))
    ok = dataclasses.replace(data, error_rates={"candidate": (2, 1000), "baseline": (1, 1000)})
    worse = dataclasses.replace(data, error_rates={"candidate": (10, 1000), "baseline": (1, 1000)})
    assert gate.evalgate_evaluate(rules, ok).rules[0].passed
    failed = gate.evalgate_evaluate(rules, worse).rules[0]
    assert not failed.passed and failed.estimate == pytest.approx(0.009)
    assert not gate.evalgate_evaluate(rules, data).rules[0].evaluated


def test_selected_rules_keep_the_same_numbers_as_the_full_run() -> None:
    acc = dict.fromkeys(CATS, 0.8)
    data = make_input(CATS, acc, acc, per_category=300, seed=8)
    rules = policy(rule("non_inferior", "all", 0.05), rule("non_inferior", "*", 0.05, 1))
    full = gate.evalgate_evaluate(rules, data)
    part = gate.evalgate_evaluate(rules, data, selected_rules=["non_inferior[billing]"])
    assert [r.name for r in part.rules] == ["non_inferior[billing]"] and part.selected
    assert part.rules[0] == next(r for r in full.rules if r.name == "non_inferior[billing]")
    with pytest.raises(EvalgatePolicyError, match="no rule named non_inferior\\[refunds\\]"):
        gate.evalgate_evaluate(rules, data, selected_rules=["non_inferior[refunds]"])


def test_all_slice_is_stratified_and_falls_back_when_a_cluster_spans_categories() -> None:
    acc = dict.fromkeys(CATS, 0.8)
    data = make_input(CATS, acc, acc, per_category=300, seed=9)
    crossed = dataclasses.replace(data, clusters=np.array([f"k{i // 4}" for i in range(900)]))
    crossed = dataclasses.replace(crossed, clusters=np.roll(crossed.clusters, 2))
    rules = policy(rule("non_inferior", "all", 0.05))
    strat = gate.evalgate_evaluate(rules, data).rules[0]
    plain = gate.evalgate_evaluate(rules, crossed).rules[0]
    assert strat.estimate == pytest.approx(plain.estimate)
    assert strat.n_clusters == 225 and plain.n_clusters == 225
    # Different draws (per-category streams vs one suite stream), same answer within MC error.
    assert strat.p_value != plain.p_value and abs(strat.p_value - plain.p_value) < 0.1
    assert abs(strat.lo - plain.lo) < 0.02 and abs(strat.hi - plain.hi) < 0.02


def test_single_cluster_slice_is_not_evaluated() -> None:
    data = make_input(["a", "b"], {"a": 0.8, "b": 0.8}, {"a": 0.8, "b": 0.8}, per_category=4)
    (only,) = gate.evalgate_evaluate(policy(rule("non_inferior", "a", 0.05)), data).rules
    assert not only.evaluated and not only.passed and "at least 2" in only.reason


def test_results_are_deterministic_and_canonical_json_ready() -> None:
    acc = dict.fromkeys(CATS, 0.8)
    data = dataclasses.replace(
        make_input(CATS, acc, acc, per_category=100, seed=10), error_rates={}
    )
    rules = policy(
        rule("non_inferior", "all", 0.05),
        rule("perf_ratio", "ttft_p95", 1.1, 1),
        rule("no_regression", "*", index=2),
    )
    first = gate.evalgate_evaluate(rules, data).to_dict()
    assert first == gate.evalgate_evaluate(rules, data).to_dict()
    evalgate_canonical_json(first)  # raises on NaN/inf or non-builtins
    assert first["rules"][1]["lo"] is None and first[
        "policy_digest"
    ] == policy_values.evalgate_policy_digest(rules)


# --------------------------------------------------------------------------- verdict


def passed_result(ok: bool) -> EvalgateRuleResult:
    return EvalgateRuleResult(name="r", rule="non_inferior", passed=ok, reason="")


@pytest.mark.parametrize(
    ("status", "rules_pass", "verdict", "exit_status"),
    [
        ("complete", True, "pass", 0),
        ("complete", False, "fail", 1),
        ("partial", True, "partial", 0),
        ("partial", False, "partial", 1),
        ("incomplete", True, "incomplete", 1),
        ("invalid", True, "invalid", 1),
    ],
)
def test_verdict_and_exit_status(
    status: str, rules_pass: bool, verdict: str, exit_status: int
) -> None:
    results = [passed_result(True), passed_result(rules_pass)]
    assert gate.evalgate_verdict(status, results) == verdict
    assert gate.evalgate_exit_status(verdict, rules_pass) == exit_status


def test_unknown_status_and_verdict_are_refused() -> None:
    with pytest.raises(EvalgateConfigError, match="done"):
        gate.evalgate_verdict("done", [])
    with pytest.raises(EvalgateConfigError, match="ok"):
        gate.evalgate_exit_status("ok", True)
