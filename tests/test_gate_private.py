"""``private:`` categories and the ``public_private_gap`` rule (issue 16, SPEC section 12).

The statistic is checked on small inputs by hand (the point estimate), its bootstrap for
reproducibility and against the exact bootstrap distribution enumerated over every resample;
the policy and manifest refusals name file, key and reason.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate.paired import EvalgateGateInput
from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.gate import rules as gate
from pytest_evalgate.gate.private import evalgate_gap_bootstrap, evalgate_gap_rule
from pytest_evalgate.gate.result import EvalgateRuleResult, rule_seed
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.policy import load as gate_policy
from pytest_evalgate.policy import values as policy_values
from pytest_evalgate.policy.load import evalgate_load_suite_policy

GAP = {"rule": "public_private_gap", "public": ["alpha", "beta"], "private": ["held"]}


def _rule(**numbers: Any) -> dict[str, Any]:
    return {**GAP, "max_gap": 0.05, **numbers}


def _numbers(diffs: list[float], cats: list[str], clusters: list[str], **kw: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"confidence": 0.95, "resamples": 2000, "seed": [0, 1]}
    options.update(kw)
    return evalgate_gap_rule(diffs, cats, clusters, ["a", "b"], ["p"], 0.05, **options)


# --------------------------------------------------------------------------- the statistic

DIFFS = [1.0, 0.0, 1.0, 0.5, 0.0, -1.0, 0.0, 1.0, 0.0]
CATS = ["a", "a", "b", "b", "p", "p", "p", "p", "x"]
CLUSTERS = ["c1", "c1", "c2", "c3", "c4", "c5", "c5", "c6", "c7"]


def test_the_point_estimate_is_the_difference_of_the_group_means() -> None:
    numbers = _numbers(DIFFS, CATS, CLUSTERS)
    # public cases: 1, 0, 1, 0.5 -> 2.5 / 4 = 0.625; private: 0, -1, 0, 1 -> 0; "x" is neither
    assert numbers["estimate"] == 0.625
    assert (numbers["n_cases"], numbers["n_clusters"], numbers["limit"]) == (8, 6, 0.05)
    assert numbers["lo"] <= 0.625 <= numbers["hi"]


def test_the_clustered_se_is_that_of_two_independent_means() -> None:
    numbers = _numbers(DIFFS, CATS, CLUSTERS)
    # public: residuals 0.375 -0.625 | 0.375 | -0.125 -> cluster sums -0.25, 0.375, -0.125
    pub = 3 / 2 * (0.25**2 + 0.375**2 + 0.125**2) / 4**2
    # private: mean 0, cluster sums 0 | -1 + 0 | 1
    priv = 3 / 2 * (0.0 + 1.0 + 1.0) / 4**2
    assert numbers["se"] == pytest.approx(np.sqrt(pub + priv), rel=1e-12)
    half = numbers["hi"] - numbers["lo"]
    assert half > 0 and numbers["t_hi"] - numbers["estimate"] == pytest.approx(
        numbers["estimate"] - numbers["t_lo"]
    )


def test_the_bootstrap_is_reproducible_with_its_seed_and_moves_with_another() -> None:
    first = _numbers(DIFFS, CATS, CLUSTERS, seed=[3, 4])
    again = _numbers(DIFFS, CATS, CLUSTERS, seed=[3, 4])
    assert (first["lo"], first["hi"]) == (again["lo"], again["hi"])
    public = (DIFFS[:4], CLUSTERS[:4])
    private = (DIFFS[4:8], CLUSTERS[4:8])
    boot = evalgate_gap_bootstrap(public, private, 2000, [3, 4])
    assert np.array_equal(boot, evalgate_gap_bootstrap(public, private, 2000, [3, 4]))
    assert not np.array_equal(boot, evalgate_gap_bootstrap(public, private, 2000, [3, 5]))
    assert (first["lo"], first["hi"]) == tuple(np.quantile(boot, [0.025, 0.975]))


def _exact_group(values: list[float], clusters: list[str]) -> list[float]:
    """Every equally likely resample mean of a group: C cluster draws with replacement."""
    names = sorted(set(clusters))
    sums = {n: sum(v for v, c in zip(values, clusters, strict=True) if c == n) for n in names}
    sizes = {n: clusters.count(n) for n in names}
    out = []
    for draw in itertools.product(names, repeat=len(names)):
        out.append(sum(sums[n] for n in draw) / sum(sizes[n] for n in draw))
    return out


def test_the_bootstrap_matches_the_exact_distribution_over_every_resample() -> None:
    public = ([1.0, 0.0, 1.0, 0.5, 1.0], ["c1", "c1", "c2", "c3", "c3"])
    private = ([0.0, -1.0, 0.0, 1.0], ["c4", "c5", "c5", "c6"])
    exact = np.array(
        [p - q for p in _exact_group(*public) for q in _exact_group(*private)]
    )  # 27 x 27 equally likely gaps
    boot = evalgate_gap_bootstrap(public, private, 200_000, [0, 9])
    for x in np.quantile(exact, [0.05, 0.25, 0.5, 0.75, 0.95]):
        assert np.mean(boot <= x) == pytest.approx(np.mean(exact <= x), abs=0.005)
    assert boot.mean() == pytest.approx(exact.mean(), abs=0.003)
    hi = np.quantile(boot, 0.975)
    assert np.quantile(exact, 0.97) <= hi <= np.quantile(exact, 0.98)


def test_a_group_with_one_cluster_is_not_evaluated() -> None:
    numbers = _numbers([1.0, 0.0, 0.0, 1.0], ["a", "a", "p", "p"], ["c1", "c1", "c2", "c3"])
    assert numbers["evaluated"] is False and numbers["passed"] is False
    assert numbers["reason"] == "not evaluated: 1 public cluster(s); an interval needs at least 2"


# --------------------------------------------------------------------------- through the gate


def _input(cand_public: float, cand_private: float, n: int = 600) -> EvalgateGateInput:
    """Baseline 0.7 everywhere; the candidate right wherever the baseline is (one shared draw)."""
    draws = np.random.default_rng(11).random(3 * n)
    cats = np.repeat(np.array(["alpha", "beta", "held"]), n)
    base = (draws < 0.7).astype(float)
    cand = (draws < np.where(cats == "held", cand_private, cand_public)).astype(float)
    clusters = np.array([f"{c}-{i // 3}" for i, c in enumerate(cats)])
    return EvalgateGateInput(
        case_ids=tuple(f"case-{i:05d}" for i in range(3 * n)),
        categories=cats,
        clusters=clusters,
        candidate_scores=cand,
        baseline_scores=base,
        candidate_fail_counts=(cand < 0.5).astype(np.int64),
        candidate_trials=np.ones(3 * n, dtype=np.int64),
    )


def _gap_rule(max_gap: float = 0.05) -> policy_values.EvalgateRule:
    return policy_values.EvalgateRule(
        "public_private_gap", 0, limit=max_gap, public=("alpha", "beta"), private=("held",)
    )


def _evaluate(data: EvalgateGateInput) -> EvalgateRuleResult:
    policy = policy_values.EvalgatePolicy(version="t", rules=(_gap_rule(),), resamples=4000)
    (result,) = gate.evalgate_evaluate(policy, data).rules
    return result


def test_a_memoriser_fails_and_an_honest_improvement_passes() -> None:
    memoriser = _evaluate(_input(0.8, 0.7))
    honest = _evaluate(_input(0.8, 0.8))
    assert memoriser.name == "public_private_gap[held]"
    assert memoriser.slice is None and memoriser.metric is None
    assert memoriser.passed is False and memoriser.lo > 0.05
    assert memoriser.reason.startswith("memorising: the candidate gained +0.")
    assert "public alpha+beta vs private held" in memoriser.reason
    assert honest.passed is True and honest.hi <= 0.05
    assert honest.reason.startswith("passes: gap ")
    assert honest.n_cases == 1800 and honest.n_clusters == 600


def test_the_gate_result_equals_the_rule_module_with_the_rule_seed() -> None:
    data = _input(0.8, 0.7)
    result = _evaluate(data)
    direct = evalgate_gap_rule(
        data.candidate_scores - data.baseline_scores, data.categories, data.clusters,
        ["alpha", "beta"], ["held"], 0.05, confidence=0.95, resamples=4000,
        seed=rule_seed(0, "public_private_gap[held]"),
    )  # fmt: skip
    assert (result.estimate, result.lo, result.hi) == (
        direct["estimate"], direct["lo"], direct["hi"],
    )  # fmt: skip


def test_too_little_evidence_says_how_many_more_cases() -> None:
    result = _evaluate(_input(0.75, 0.7, n=60))
    assert result.passed is False
    assert (
        "too little evidence: gap" in result.reason
        and "more cases would settle it" in result.reason
    )


# --------------------------------------------------------------------------- policy


def _policy(tmp_path: Path, *rules: dict[str, Any], **top: Any) -> Path:
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump({"version": "g1", **top, "rules": list(rules)}))
    return path


def test_the_rule_loads_and_keeps_its_groups_in_the_digest(tmp_path: Path) -> None:
    policy = gate_policy.evalgate_load_policy(_policy(tmp_path, _rule()))
    (rule,) = policy.rules
    assert (rule.public, rule.private, rule.limit) == (("alpha", "beta"), ("held",), 0.05)
    assert rule.to_dict() == {**GAP, "max_gap": 0.05}
    other = gate_policy.evalgate_load_policy(_policy(tmp_path, _rule(private=["beta2"])))
    assert policy_values.evalgate_policy_digest(policy) != policy_values.evalgate_policy_digest(
        other
    )


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        ({"public": ["alpha", "held"]}, "rules[0].private[0]", "'held' is both public and"),
        ({"public": ["alpha", "alpha"]}, "rules[0].public[1]", "'alpha' is listed twice"),
        ({"private": []}, "rules[0].private", "at least 1 item"),
        ({"max_gap": 1.5}, "rules[0].max_gap", "less than or equal to 1"),
        ({"slice": "all"}, "rules[0].slice", "unknown key"),
    ],
)
def test_a_bad_rule_is_refused_naming_file_and_key(
    tmp_path: Path, change: dict[str, Any], key: str, reason: str
) -> None:
    path = _policy(tmp_path, _rule(**change))
    with pytest.raises(EvalgatePolicyError) as info:
        gate_policy.evalgate_load_policy(path)
    assert (info.value.source, info.value.key) == (str(path), key)
    assert reason in info.value.reason


def test_a_single_model_policy_refuses_the_rule(tmp_path: Path) -> None:
    path = _policy(tmp_path, _rule(), baseline=None)
    with pytest.raises(EvalgatePolicyError) as info:
        gate_policy.evalgate_load_policy(path)
    assert info.value.key == "rules[0].rule"
    assert "'public_private_gap' compares the candidate with a baseline" in info.value.reason


# --------------------------------------------------------------------------- manifest


def _suite(tmp_path: Path, private: Any, rules: list[dict[str, Any]] | None = None) -> Path:
    return write_suite(
        tmp_path / "suite",
        {"candidate": "simulated://", "baseline": "simulated://"},
        cases=make_cases(["alpha", "beta", "held"], 4),
        extra={"private": private},
        policy={"version": "g1", "rules": rules or [_rule()]},
    )


def test_the_manifest_keeps_its_private_categories_outside_the_digest(tmp_path: Path) -> None:
    marked = evalgate_load_manifest(str(_suite(tmp_path / "a", ["held"])))
    plain = evalgate_load_manifest(str(_suite(tmp_path / "b", [])))
    assert marked.private == ("held",) and plain.private == ()
    assert marked.definition_digest == plain.definition_digest
    policy = evalgate_load_suite_policy(marked, None)
    assert policy.rules[0].private == ("held",)


@pytest.mark.parametrize(
    ("private", "key", "reason"),
    [
        (["gamma"], "private[0]", "no category 'gamma' in the dataset; categories: alpha, beta"),
        (["held", "held"], "private[1]", "'held' is listed twice"),
        ("held", "private", "Input should be a valid list"),
    ],
)
def test_a_bad_private_key_is_refused(tmp_path: Path, private: Any, key: str, reason: str) -> None:
    path = _suite(tmp_path, private)
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_load_manifest(str(path))
    assert (info.value.source, info.value.key) == (str(path), key)
    assert reason in info.value.reason


def test_a_private_case_sharing_a_public_cluster_is_refused(tmp_path: Path) -> None:
    cases = make_cases(["alpha", "held"], 2)
    cases[-1]["cluster"] = "alpha-p0"
    path = write_suite(
        tmp_path / "suite", {"candidate": "simulated://"}, cases=cases, extra={"private": ["held"]}
    )
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_load_manifest(str(path))
    assert info.value.key == "private"
    assert info.value.reason.startswith(
        "private case 'held-001' shares cluster 'alpha-p0' with public case 'alpha-000'"
    )


@pytest.mark.parametrize(
    ("private", "change", "key", "reason"),
    [
        (["held"], {"public": ["alpha", "gamma"]}, "rules[0].public[1]", "no category 'gamma'"),
        ([], {}, "rules[0].private[0]", "'held' is not declared private in "),
        (["held", "beta"], {}, "rules[0].public[1]", "'beta' is declared private in "),
    ],
)
def test_the_rule_is_checked_against_the_manifest(
    tmp_path: Path, private: list[str], change: dict[str, Any], key: str, reason: str
) -> None:
    manifest = evalgate_load_manifest(str(_suite(tmp_path, private, [_rule(**change)])))
    with pytest.raises(EvalgatePolicyError) as info:
        evalgate_load_suite_policy(manifest, None)
    assert info.value.key == key and reason in info.value.reason
    assert info.value.source.endswith("gate.yaml")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "0.1", True, 1.5])
def test_a_gap_spec_takes_only_a_finite_number_in_0_1(bad: object) -> None:
    from pydantic import ValidationError

    from pytest_evalgate.policy.load import EvalgateGapSpec

    spec = {"rule": "public_private_gap", "public": ["a"], "private": ["b"], "max_gap": bad}
    with pytest.raises(ValidationError):
        EvalgateGapSpec.model_validate(spec)
    assert EvalgateGapSpec.model_validate({**spec, "max_gap": 0}).max_gap == 0.0
