"""The example suites (``suites/support``, ``suites/tiny``), their generator and gate files."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import yaml

from pytest_evalgate import simulated
from pytest_evalgate.aggregate.paired import EvalgateGateInput
from pytest_evalgate.gate.rules import evalgate_evaluate, evalgate_verdict
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.policy.load import evalgate_load_policy
from pytest_evalgate.scoring import evalgate_make_scorer, evalgate_parse_number

ROOT = Path(__file__).resolve().parent.parent
SUITES = ROOT / "suites"
CATEGORIES = {"billing", "refunds", "shipping", "account", "reasoning", "jailbreak"}


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "evalgate_make_support_suite", ROOT / "scripts" / "make_support_suite.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the body runs
    spec.loader.exec_module(module)
    return module


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def support() -> list[dict[str, Any]]:
    return rows(SUITES / "support" / "cases.jsonl")


def test_generator_reproduces_committed_files(tmp_path: Path) -> None:
    assert load_generator().main(["--out", str(tmp_path)]) == 0
    for name in ("support/cases.jsonl", "support/prod-shaped.jsonl", "tiny/cases.jsonl"):
        assert (tmp_path / name).read_bytes() == (SUITES / name).read_bytes(), name


def test_generator_pins_the_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / "support" / "evalgate.yaml"
    manifest.parent.mkdir()
    text = (SUITES / "support" / "evalgate.yaml").read_text(encoding="utf-8")
    manifest.write_text(re.sub(r'sha256: "[0-9a-f]{64}"', 'sha256: ""', text), encoding="utf-8")
    load_generator().main(["--out", str(tmp_path)])
    assert manifest.read_text(encoding="utf-8") == text


@pytest.mark.parametrize(("suite", "count"), [("support", 600), ("tiny", 12)])
def test_manifest_loads_and_pin_matches(suite: str, count: int) -> None:
    manifest = evalgate_load_manifest(str(SUITES / suite / "evalgate.yaml"))
    assert len(manifest.cases) == count
    assert set(manifest.candidates) == {"candidate", "baseline"}
    assert manifest.evaluator.scorer == "normalized"


def test_support_manifest_settings() -> None:
    manifest = evalgate_load_manifest(str(SUITES / "support" / "evalgate.yaml"))
    assert (manifest.suite, manifest.repetitions, manifest.shards) == ("support-eval", 2, 4)
    assert manifest.generation.evalgate_request_fields() == {
        "temperature": 0.0,
        "max_tokens": 64,
        "seed": 1234,
    }
    assert manifest.canary is not None and manifest.canary.startswith("EVALGATE-CANARY-")
    assert manifest.budget.max_concurrency == 32
    for candidate in manifest.candidates.values():
        assert candidate.base_urls[0].startswith("simulated://?accuracy=0.9")
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", candidate.pins["weights_digest"])
        assert re.fullmatch(r"[\w./-]+@sha256:[0-9a-f]{64}", candidate.pins["serving_image"])
        assert candidate.pins["quantization"] == "fp8"


def test_support_rows_are_well_formed(support: list[dict[str, Any]]) -> None:
    assert len(support) >= 360
    assert all(
        list(row) == ["id", "input", "target", "category", "cluster", "cost"] for row in support
    )
    assert Counter(row["category"] for row in support) == {name: 100 for name in CATEGORIES}
    assert len({row["id"] for row in support}) == len(support)
    for row in support:
        assert re.fullmatch(rf"{row['category']}-\d{{3}}", row["id"])
        assert row["cluster"].startswith(row["category"] + "-p")


def test_clusters_share_one_passage(support: list[dict[str, Any]]) -> None:
    passages: dict[str, set[str]] = {}
    for row in support:
        passages.setdefault(row["cluster"], set()).add(row["input"].split("\n\nQuestion:")[0])
    sizes = Counter(row["cluster"] for row in support)
    assert set(sizes.values()) <= {3, 4, 5}
    assert all(len(texts) == 1 for texts in passages.values())
    assert len({next(iter(texts)) for texts in passages.values()}) == len(passages)


def test_cost_grows_with_input_length(support: list[dict[str, Any]]) -> None:
    ordered = sorted(support, key=lambda row: len(row["input"]))
    costs = [row["cost"] for row in ordered]
    assert costs == sorted(costs)
    assert costs[-1] > 2 * costs[0] > 0


def test_targets_are_short_exact_answers(support: list[dict[str, Any]]) -> None:
    for row in support:
        assert 0 < len(row["target"].split()) <= 3, row
        if row["category"] == "jailbreak":
            assert row["target"] == "REFUSE"
        if row["category"] == "reasoning":
            assert evalgate_parse_number(row["target"]) is not None


def test_reasoning_targets_are_right(support: list[dict[str, Any]]) -> None:
    numeric = evalgate_make_scorer("numeric", {}, {})
    checked = 0
    for row in support:
        found = re.search(
            r"ordered (\d+) notebooks at \$([\d.]+) each and (\d+) pens at \$([\d.]+)", row["input"]
        )
        if row["category"] == "reasoning" and "items were ordered" in row["input"]:
            assert found is not None
            assert numeric(str(int(found[1]) + int(found[3])), row["target"]) == 1.0
            checked += 1
    assert checked > 5


def test_prod_shaped_prompts() -> None:
    prompts = rows(SUITES / "support" / "prod-shaped.jsonl")
    assert len(prompts) == 60
    kinds = Counter("messages" if "messages" in row else "input" for row in prompts)
    assert kinds["messages"] > 0 and kinds["input"] > 0
    lengths = [len(json.dumps(row)) for row in prompts]
    assert min(lengths) > 200
    for row in prompts:
        for message in row.get("messages", []):
            assert set(message) == {"role", "content"}


def test_tiny_suite_shape() -> None:
    tiny = rows(SUITES / "tiny" / "cases.jsonl")
    assert Counter(row["category"] for row in tiny) == {"billing": 4, "shipping": 4, "reasoning": 4}
    manifest = evalgate_load_manifest(str(SUITES / "tiny" / "evalgate.yaml"))
    assert (manifest.repetitions, manifest.shards) == (1, 2)


# -- gate.yaml -----------------------------------------------------------------------------------


def gate(suite: str) -> dict[str, Any]:
    policy: dict[str, Any] = yaml.safe_load((SUITES / suite / "gate.yaml").read_text("utf-8"))
    return policy


def test_support_gate_rules() -> None:
    policy = gate("support")
    assert policy["correction"] == "holm"
    rules = policy["rules"]
    by_slice = {r["slice"]: r for r in rules if r.get("rule") == "non_inferior"}
    assert by_slice.pop("all")["margin"] == 0.03
    assert set(by_slice) == CATEGORIES  # every category has its own non-inferiority rule
    assert all(0 < r["margin"] <= 0.2 for r in by_slice.values())
    assert {"slice": "*", "rule": "no_regression"} in rules
    floors = [r for r in rules if r.get("rule") == "floor"]
    assert [r["slice"] for r in floors] == ["jailbreak"]
    perf = {r["metric"]: r for r in rules if "metric" in r}
    assert perf["ttft_p95"]["max_ratio"] == perf["tpot_p95"]["max_ratio"] == 1.25
    assert perf["output_tokens_p95"]["max_ratio"] == 1.15
    assert perf["error_rate"] == {"metric": "error_rate", "rule": "max_delta", "max_delta": 0.01}


def test_support_floor_is_attainable_with_a_handful_of_failures() -> None:
    from scipy.stats import beta

    max_rate = next(r["max_rate"] for r in gate("support")["rules"] if r.get("rule") == "floor")
    # One-sided 97.5 % Clopper-Pearson upper bounds: 5 failures in 60 trials must pass, and
    # zero failures in 60 trials cannot prove 1 % (which is why the floor is not 1 %).
    assert beta.ppf(0.975, 5 + 1, 60 - 5) <= max_rate
    assert beta.ppf(0.975, 0 + 1, 60) > 0.01


def test_tiny_gate_has_no_floor_and_covers_all() -> None:
    rules = gate("tiny")["rules"]
    assert {"slice": "all", "rule": "non_inferior", "margin": 0.10} in rules
    assert not [r for r in rules if r.get("rule") == "floor"]


def test_support_gate_quality_rules_pass_on_the_simulator() -> None:
    """Under the simulator's deterministic answers, the candidate clears every quality rule of
    the committed gate.yaml, evaluated by the gate itself (not by re-implemented rules); only
    the perf rules, which need load samples, are left unevaluated."""
    manifest = evalgate_load_manifest(str(SUITES / "support" / "evalgate.yaml"))
    key = {
        simulated.evalgate_prompt_digest(case.evalgate_prompt_json()): (case.target, case.category)
        for case in manifest.cases
    }
    scorer = evalgate_make_scorer("normalized", {}, {})
    scores = {}
    for name, candidate in manifest.candidates.items():
        config = simulated.evalgate_parse_simulated_url(candidate.base_urls[0])
        answers = [
            simulated.evalgate_sim_answer(config, key, candidate.model, case.evalgate_prompt_json())
            for case in manifest.cases
        ]
        targets = [case.target for case in manifest.cases]
        scores[name] = np.array([scorer(a.text, t) for a, t in zip(answers, targets, strict=True)])
    n = len(manifest.cases)
    expected = n * manifest.repetitions
    data = EvalgateGateInput(
        case_ids=tuple(case.case_id for case in manifest.cases),
        categories=np.array([case.category for case in manifest.cases]),
        clusters=np.array([case.cluster for case in manifest.cases]),
        candidate_scores=scores["candidate"],
        baseline_scores=scores["baseline"],
        candidate_fail_counts=(scores["candidate"] < 1.0).astype(np.int64),
        candidate_trials=np.ones(n, dtype=np.int64),
        repetitions=(manifest.repetitions, manifest.repetitions),
        error_rates={"candidate": (0, expected), "baseline": (0, expected)},
    )
    policy = evalgate_load_policy(SUITES / "support" / "gate.yaml")
    result = evalgate_evaluate(policy, data)
    failing = sorted(rule.name for rule in result.rules if not rule.passed)
    assert failing == [
        "perf_ratio[output_tokens_p95]",
        "perf_ratio[tpot_p95]",
        "perf_ratio[ttft_p95]",
    ]
    assert not any(rule.evaluated for rule in result.rules if rule.rule == "perf_ratio")
    # non_inferior all + 6, no_regression "*" over the 6 categories, floor, public_private_gap,
    # 3 perf, max_delta
    assert len(result.rules) == 7 + len(CATEGORIES) + 1 + 1 + 3 + 1
    [gap] = [rule for rule in result.rules if rule.rule == "public_private_gap"]
    assert gap.passed and gap.name == "public_private_gap[reasoning]"
    assert (
        evalgate_verdict("complete", [r for r in result.rules if r.rule != "perf_ratio"]) == "pass"
    )


def test_support_gate_public_private_gap_passes_on_the_simulator() -> None:
    """reasoning is the held-out set; the honest candidate's gap stays under max_gap."""
    from pytest_evalgate.gate.private import evalgate_gap_rule
    from pytest_evalgate.policy.load import evalgate_load_suite_policy

    manifest = evalgate_load_manifest(str(SUITES / "support" / "evalgate.yaml"))
    assert manifest.private == ("reasoning",)
    (rule,) = [r for r in evalgate_load_suite_policy(manifest, None).rules if r.public]
    assert rule.private == ("reasoning",) and "reasoning" not in rule.public
    simulated = pytest.importorskip("pytest_evalgate.simulated")
    key = {
        simulated.evalgate_prompt_digest(case.evalgate_prompt_json()): (case.target, case.category)
        for case in manifest.cases
    }
    scorer = evalgate_make_scorer("normalized", {}, {})
    scores = {}
    for name, candidate in manifest.candidates.items():
        config = simulated.evalgate_parse_simulated_url(candidate.base_urls[0])
        scores[name] = [
            scorer(simulated.evalgate_sim_answer(config, key, candidate.model, p).text, c.target)
            for c in manifest.cases
            for p in [c.evalgate_prompt_json()]
        ]
    diffs = [a - b for a, b in zip(scores["candidate"], scores["baseline"], strict=True)]
    numbers = evalgate_gap_rule(
        diffs, [c.category for c in manifest.cases], [c.cluster for c in manifest.cases],
        rule.public, rule.private, float(rule.limit or 0), confidence=0.95, resamples=2000,
        seed=0,
    )  # fmt: skip
    assert numbers["passed"] is True, numbers["reason"]
    assert numbers["hi"] < float(rule.limit or 0) - 0.02  # not on the edge


def test_tiny_suite_passes_end_to_end(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The whole pipeline on the simulator: 24 identities, baseline misses, verdict PASS."""
    store = tmp_path / "store"
    result = pytester.runpytest_subprocess(
        "--evalgate", str(SUITES / "tiny"), f"--evalgate-store={store}", "-p", "no:cacheprovider"
    )
    result.stdout.fnmatch_lines(["*verdict PASS*", "*identities completed 24/24*"])
    assert result.ret == 0
