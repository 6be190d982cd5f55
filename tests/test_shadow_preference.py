"""The shadow gate's ``judge_preference_delta``: each kept pair judged by the suite's pinned
judge. Real processes on loopback: a stable and a candidate simulator behind
``evalgate shadow serve --keep-question``, then ``evalgate shadow gate`` with a simulated judge
(pointwise and pairwise suites judge one store of each candidate; the one-shot gate runs in this
process). An equal candidate (its answers are stable's) passes; one that answers every case
wrong fails. Plus the rule's arithmetic on given outcomes and its bounds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from inprockit import run_cli_inprocess
from judgekit import write_judged_suite
from suitekit import make_cases

from pytest_evalgate.errors import EvalgatePolicyError
from pytest_evalgate.policy.shadow import evalgate_shadow_rules
from pytest_evalgate.simulated import (
    EvalgateSimConfig,
    evalgate_spawn_simulator,
    evalgate_write_answer_key,
)

CASES = make_cases(["alpha", "beta"], 10)
READY = "evalgate shadow proxy listening on http://"
RULE = "shadow:\n  - {metric: judge_preference_delta, max: 0.1, min_pairs: 30}\n"


def messages(case: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": "user", "content": case["input"]}]


def keep_pairs(folder: Path, candidate_accuracy: float, keep_question: bool = True) -> Path:
    """40 requests (every case twice) through the proxy at 100 %; returns the store."""
    key = folder / "answers.jsonl"
    evalgate_write_answer_key(key, [(messages(c), c["target"], c["category"]) for c in CASES])
    sims = [evalgate_spawn_simulator(EvalgateSimConfig(accuracy=a, seed=1), key)
            for a in (1.0, candidate_accuracy)]  # fmt: skip
    store = folder / "store"
    argv = [sys.executable, "-m", "pytest_evalgate.cli", "shadow", "serve",
            "--stable", f"http://127.0.0.1:{sims[0].port}",
            "--candidate", f"http://127.0.0.1:{sims[1].port}", "--percent", "100",
            "--store", str(store), "--suite", "test-suite",
            *(["--keep-question"] if keep_question else [])]  # fmt: skip
    proxy = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proxy.stdout is not None
        line = proxy.stdout.readline()
        assert line.startswith(READY), line
        port = int(line.strip().rsplit(":", 1)[1])
        for _ in range(2):
            for case in CASES:
                body = json.dumps({"model": "tiny-app", "messages": messages(case)}).encode()
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                    headers={"content-type": "application/json"}, method="POST",
                )  # fmt: skip
                with urllib.request.urlopen(request, timeout=30) as response:
                    assert response.status == 200
    finally:
        proxy.terminate()
        proxy.communicate(timeout=60)
        for sim in sims:
            sim.stop()
    return store


@pytest.fixture(scope="module")
def kept_store(tmp_path_factory: pytest.TempPathFactory) -> Callable[[float], Path]:
    """``keep_pairs`` of a candidate of each accuracy, once per module: the gate only reads a
    store, and the pointwise and pairwise suites judge the same pairs."""
    stores: dict[float, Path] = {}

    def get(accuracy: float) -> Path:
        if accuracy not in stores:
            stores[accuracy] = keep_pairs(tmp_path_factory.mktemp("kept"), accuracy)
        return stores[accuracy]

    return get


def gate(folder: Path, mode: str, store: Path) -> tuple[int, dict[str, Any], str]:
    judge_url = "simulated://?judge=1&accuracy=1.0&seed=5"
    suite = write_judged_suite(folder / "suite", mode=mode, cases=CASES, judge_url=judge_url)
    with (suite.parent / "gate.yaml").open("a", encoding="utf-8") as handle:
        handle.write(RULE)
    out = folder / "shadow-decision.json"
    # a one-shot command (its judge simulator still a process): the console script's main here
    done = run_cli_inprocess(
        "shadow", "gate", str(suite.parent), "--store", str(store), "--out", str(out), cwd=folder
    )
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr
    return done.returncode, json.loads(out.read_text()), done.stdout


@pytest.mark.parametrize("mode", ["pointwise", "pairwise"])
@pytest.mark.parametrize(
    "accuracy, status, estimate", [(1.0, 0, 0.0), (0.0, 1, 1.0)], ids=["equal", "lower"]
)
def test_the_pinned_judge_fails_a_worse_candidate_and_passes_an_equal_one(
    tmp_path: Path,
    kept_store: Callable[[float], Path],
    mode: str,
    accuracy: float,
    status: int,
    estimate: float,
) -> None:
    store = kept_store(accuracy)
    code, decision, out = gate(tmp_path, mode, store)
    assert code == status, out
    (rule,) = decision["rules"]
    assert rule["metric"] == "judge_preference_delta" and rule["pairs"] == 40
    assert rule["estimate"] == pytest.approx(estimate)
    assert rule["outcome"] == ("pass" if status == 0 else "fail")
    judge = decision["judge"]
    assert (judge["mode"], judge["judged"], judge["not_judged"]) == (mode, 40, {})
    assert len(judge["key"]) == 64


def test_pairs_without_their_question_leave_the_rule_undecided(tmp_path: Path) -> None:
    store = keep_pairs(tmp_path, 1.0, keep_question=False)
    code, decision, out = gate(tmp_path, "pointwise", store)
    assert code == 2, out
    assert decision["rules"][0]["pairs"] == 0 and decision["rules"][0]["outcome"] == "undecided"
    assert decision["judge"]["not_judged"] == {
        "no question kept (shadow serve --keep-question)": 40
    }
    assert "not judged: 40" in out


def test_the_rule_is_losses_minus_wins_with_a_bound_above_zero() -> None:
    from pytest_evalgate.policy.load import evalgate_load_policy
    from pytest_evalgate.shadow.verdict import evalgate_shadow_rule

    (rule,) = evalgate_shadow_rules([{"metric": "judge_preference_delta", "max": 0.1}], "g.yaml")
    outcomes = ["loss"] * 20 + ["win"] * 10 + ["tie"] * 10
    pairs = [{"preference": result, "stable": {}, "candidate": {}} for result in outcomes]
    pairs.append({"stable": {}, "candidate": {}})  # not judged: not a pair of the rule
    policy = evalgate_load_policy(Path(__file__).parent.parent / "suites" / "tiny" / "gate.yaml")
    result = evalgate_shadow_rule(rule, pairs, policy)
    assert (result.pairs, result.estimate) == (40, 0.25)
    assert result.upper is not None and result.upper > 0.25 and result.outcome == "fail"
    for bad in (0.0, 1.5):
        with pytest.raises(EvalgatePolicyError, match=r"shadow\[0\]\.max"):
            evalgate_shadow_rules([{"metric": "judge_preference_delta", "max": bad}], "g.yaml")
