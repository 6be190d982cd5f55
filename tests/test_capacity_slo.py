"""Capacity at the SLO (SPEC section 22, issue 35): the perf block's stepped open-loop sweep and
the ``{metric: max_rate_at_slo, rule: perf_ratio_min}`` rule.

The acceptance tests run two real simulator processes on 127.0.0.1, one with half the service
slots of the other. Service is deterministic (no jitter; a slot is held for TTFT + TPOT x
(tokens - 1) = 100 + 20 x 3 = 160 ms), so a server with S slots serves S / 0.16 requests/s:
4 slots 25/s, 2 slots 12.5/s. The swept rates 10 and 20/s lie clearly below or above those
capacities (at 20/s the 2-slot server's queue grows by 7.5 requests each second, so its TTFT p95
is about 0.76 s over the measured second after a 0.25 s warm-up, well past 0.5 s), so the
expected max rates are 10/s and 20/s; no wall time is asserted, only which steps meet the SLO.
The runs are short on purpose: each window (the ``perf.rate`` one at 5/s, then one per swept
rate) is waited out, and the 2-slot server's queue at 20/s takes 1.6 windows to drain. A longer
window would only grow that queue, and its TTFT's margin over the SLO, further; a step below
10/s would only repeat what 10/s shows (both sides meet the SLO there), while the baseline's
walk over both steps to 20/s, and the candidate's stop at the second, still show that the rate
is the last step before the first miss (the unit tests above walk longer sweeps).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_evalgate.aggregate.paired import EvalgateGateInput
from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.gate import slo
from pytest_evalgate.gate.rules import evalgate_evaluate
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.manifest.schema import EvalgatePerfSchema
from pytest_evalgate.perf.metrics import SWEEP_KEYS
from pytest_evalgate.perf.phase import evalgate_run_perf
from pytest_evalgate.perf.result import (
    EvalgatePerfResult,
    evalgate_merge_perf,
    evalgate_perf_from_dict,
)
from pytest_evalgate.policy.load import evalgate_check_policy, evalgate_load_policy
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.process import evalgate_spawn_simulator

SUPPORT = Path(__file__).resolve().parents[1] / "suites" / "support" / "evalgate.yaml"
PAIR = ("candidate", "baseline")
SLO = (0.5, 0.05)
GATE_YAML = """\
version: capacity-1
rules:
  - {metric: max_rate_at_slo, rule: perf_ratio_min, min_ratio: 0.95,
     slo: {ttft_p95_s: 0.5, tpot_p95_s: 0.05}}
"""


def _arrays(
    rates: list[float], ttft: list[list[float]], tpot: list[list[float]], counts: list[list[bool]]
) -> dict[str, Any]:
    rate = np.array(rates)
    return {
        SWEEP_KEYS[0]: (rate, rate),
        SWEEP_KEYS[1]: tuple(np.array(side) for side in ttft),
        SWEEP_KEYS[2]: tuple(np.array(side) for side in tpot),
        SWEEP_KEYS[3]: tuple(np.array(side, dtype=np.float64) for side in counts),
    }


# --------------------------------------------------------------------------- the rule, unit


def test_the_max_rate_is_the_last_step_before_the_first_miss() -> None:
    perf = _arrays(
        [2, 4, 8, 16],
        [[0.1, 0.2, 0.9, 0.1], [0.1, 0.1, 0.2, 0.3]],  # candidate misses TTFT at 8, "recovers"
        [[0.01] * 4, [0.01, 0.01, 0.01, 0.06]],  # baseline misses TPOT at 16
        [[True] * 4, [True] * 4],
    )
    cand, base = slo.max_rate_at_slo(perf, 0, SLO), slo.max_rate_at_slo(perf, 1, SLO)
    assert (cand.rate, base.rate) == (4.0, 8.0)
    assert cand.stopped == "stopped at 8/s: ttft p95 0.900 s > 0.5 s"
    assert base.stopped == "stopped at 16/s: tpot p95 0.060 s > 0.05 s"
    verdict = slo.evaluate(perf, SLO, 0.95)
    assert verdict.evaluated and not verdict.passed and verdict.ratio == 0.5
    assert "candidate 4/s" in verdict.reason and "baseline 8/s" in verdict.reason
    assert verdict.reason.startswith("capacity regression: ")
    assert slo.evaluate(perf, SLO, 0.5).passed  # exactly at the ratio passes


def test_a_window_that_does_not_count_ends_the_sweep_for_that_side() -> None:
    perf = _arrays(
        [2, 4], [[0.1, 0.1], [0.1, 0.1]], [[0.01] * 2, [0.01] * 2], [[True, False], [True, True]]
    )
    cand = slo.max_rate_at_slo(perf, 0, SLO)
    assert cand.rate == 2.0 and "does not count" in cand.stopped
    top = slo.max_rate_at_slo(perf, 1, SLO)
    assert top.rate == 4.0 and "sweep higher" in top.stopped


def test_no_baseline_rate_or_no_sweep_is_not_evaluated() -> None:
    perf = _arrays([2], [[0.1], [0.9]], [[0.01], [0.01]], [[True], [True]])
    verdict = slo.evaluate(perf, SLO, 0.95)
    assert not verdict.evaluated and not verdict.passed and math.isnan(verdict.ratio)
    assert "the baseline meets the SLO" in verdict.reason
    assert slo.evaluate({}, SLO, 0.95).reason == "not evaluated: no capacity sweep steps"


# --------------------------------------------------------------------------- configuration


def test_the_spec_rule_loads_and_keeps_its_slo(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text(GATE_YAML, encoding="utf-8")
    (rule,) = evalgate_load_policy(path).rules
    assert (rule.rule, rule.metric, rule.limit, rule.slo) == (
        "perf_ratio_min",
        "max_rate_at_slo",
        0.95,
        SLO,
    )
    written: object = rule.to_dict()["slo"]
    assert written == {"ttft_p95_s": 0.5, "tpot_p95_s": 0.05}


@pytest.mark.parametrize(
    "rule, key",
    [
        ("{metric: max_rate_at_slo, rule: perf_ratio_min, min_ratio: 0.9}", "rules[0].slo"),
        (
            "{metric: max_rate_at_slo, rule: perf_ratio_min, min_ratio: 0.9, "
            "slo: {ttft_p95_s: 0, tpot_p95_s: 1}}",
            "rules[0].slo.ttft_p95_s",
        ),
        (
            "{metric: max_rate_at_slo, rule: perf_ratio_min, min_ratio: 0.9, "
            "slo: {ttft_p95_s: 1, tpot_p95_s: 1, itl: 2}}",
            "rules[0].slo.itl",
        ),
        (
            "{metric: ttft_p95, rule: perf_ratio_min, min_ratio: 0.9, "
            "slo: {ttft_p95_s: 1, tpot_p95_s: 1}}",
            "rules[0].metric",
        ),
    ],
)
def test_a_bad_rule_names_the_file_and_key(tmp_path: Path, rule: str, key: str) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text(f"version: v\nrules:\n  - {rule}\n", encoding="utf-8")
    with pytest.raises(EvalgatePolicyError) as caught:
        evalgate_load_policy(path)
    assert str(path) in str(caught.value) and key in str(caught.value)


def test_the_rule_needs_the_manifest_s_sweep(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text(GATE_YAML, encoding="utf-8")
    manifest = evalgate_load_manifest(str(SUPPORT))
    with pytest.raises(EvalgatePolicyError, match=r"rules\[0\]\.metric: .*needs perf\.sweep"):
        evalgate_check_policy(with_sweep(manifest, None), evalgate_load_policy(path))


def test_a_sweep_that_does_not_increase_is_refused(tmp_path: Path) -> None:
    lines = SUPPORT.read_text(encoding="utf-8").splitlines(keepends=True)
    text = "".join(line for line in lines if not line.startswith("perf:"))
    suite = tmp_path / "support"
    suite.mkdir()
    for source in SUPPORT.parent.iterdir():
        if source.is_file():
            (suite / source.name).write_bytes(source.read_bytes())
    block = "perf: {prompts: prod-shaped.jsonl, rate: 5, duration_s: 1, sweep: [5, 10, 10]}\n"
    (suite / "evalgate.yaml").write_text(text + block, encoding="utf-8")
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_manifest(str(suite / "evalgate.yaml"))
    message = str(caught.value)
    assert "evalgate.yaml" in message and "perf.sweep" in message and "must increase" in message


# --------------------------------------------------------------------------- real simulators


def with_sweep(manifest: EvalgateManifest, sweep: list[float] | None) -> EvalgateManifest:
    block = {
        "prompts": "prod-shaped.jsonl",
        "rate": 5.0,
        "duration_s": 1.0,
        "warmup_s": 0.25,
        "max_tokens": 16,
        "sweep": sweep,
    }
    return dataclasses.replace(manifest, perf=EvalgatePerfSchema.model_validate(block))


@contextmanager
def two_simulators(slots: tuple[int, int]) -> Iterator[dict[str, EvalgateEndpoint]]:
    """Two simulator processes on 127.0.0.1 (stopped by their own handles, by PID)."""
    configs = [
        EvalgateSimConfig(ttft_ms=100.0, tpot_ms=20.0, output_tokens=4, service_slots=n)
        for n in slots
    ]
    with (
        evalgate_spawn_simulator(configs[0], None) as cand,
        evalgate_spawn_simulator(configs[1], None) as base,
    ):
        yield {
            name: EvalgateEndpoint(sim.base_url, name, "chat", None, 30.0, 1)
            for name, sim in zip(PAIR, (cand, base), strict=True)
        }


def sweep_run(slots: tuple[int, int]) -> EvalgatePerfResult:
    manifest = with_sweep(evalgate_load_manifest(str(SUPPORT)), [10.0, 20.0])
    with two_simulators(slots) as endpoints:
        return evalgate_run_perf(manifest, endpoints, PAIR, max_delay_p95_s=0.05)


def gate_input() -> EvalgateGateInput:
    none = np.zeros(0)
    return EvalgateGateInput(
        case_ids=(),
        categories=np.array([], dtype=str),
        clusters=np.array([], dtype=str),
        candidate_scores=none,
        baseline_scores=none,
        candidate_fail_counts=np.zeros(0, dtype=np.int64),
        candidate_trials=np.zeros(0, dtype=np.int64),
        repetitions=(1, 1),
        perf={},
        error_rates={"candidate": (0, 10), "baseline": (0, 10)},
    )


def decide(result: EvalgatePerfResult, tmp_path: Path) -> Any:
    path = tmp_path / "gate.yaml"
    path.write_text(GATE_YAML, encoding="utf-8")
    (rule,) = evalgate_evaluate(
        evalgate_load_policy(path), evalgate_merge_perf(gate_input(), result)
    ).rules
    return rule


@pytest.fixture(scope="module")
def half_slots() -> EvalgatePerfResult:
    return sweep_run((2, 4))


def test_half_the_service_slots_fails_with_both_rates(
    half_slots: EvalgatePerfResult, tmp_path: Path
) -> None:
    steps = half_slots.sweep
    assert [step.requested_rate for step in steps] == [10.0, 20.0]
    for step in steps:  # open loop: both sides were sent what was scheduled, at every step
        for name in PAIR:
            assert step.achieved_rate[name] >= 0.95 * step.scheduled_rate, step
    top = steps[-1]
    assert top.counts == {"candidate": True, "baseline": True}
    cand_ttft, base_ttft = top.ttft_p95_s["candidate"], top.ttft_p95_s["baseline"]
    assert cand_ttft is not None and base_ttft is not None, top
    assert cand_ttft > 0.5 > base_ttft  # a queue, not a cap
    rule = decide(half_slots, tmp_path)
    assert rule.evaluated and not rule.passed
    assert rule.estimate == pytest.approx(0.5)
    assert "candidate 10/s" in rule.reason and "baseline 20/s" in rule.reason
    assert "stopped at 20/s: ttft p95" in rule.reason


def test_the_sweep_is_in_the_record_and_reads_back(half_slots: EvalgatePerfResult) -> None:
    record = json.loads(json.dumps(half_slots.to_dict(include_samples=True)))
    assert [s["requested_rate"] for s in record["sweep"]] == [10.0, 20.0]
    assert set(record["sweep"][0]["achieved_rate"]) == set(PAIR)
    assert evalgate_perf_from_dict(record).sweep == half_slots.sweep


def test_equal_servers_pass(tmp_path: Path) -> None:
    result = sweep_run((4, 4))
    rule = decide(result, tmp_path)
    assert rule.passed, rule.reason
    assert rule.estimate == 1.0
    assert "candidate 20/s" in rule.reason and "baseline 20/s" in rule.reason


# --------------------------------------------------------------------------- end to end


def test_a_gate_run_records_both_rates_and_plan_sizes_replicas(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pytest --evalgate`` with two ``simulated://`` models (their own processes), one with
    half the service slots: the gate fails on capacity, decision.json holds the sweep and both
    rates, and ``evalgate plan --decision`` sizes replicas from the candidate's rate."""
    from suitekit import make_cases, write_suite

    from pytest_evalgate.cli import main

    knobs = "ttft_ms=100&tpot_ms=20&output_tokens=4"
    policy = {
        "version": "capacity-1",
        "rules": [
            {
                "metric": "max_rate_at_slo",
                "rule": "perf_ratio_min",
                "min_ratio": 0.95,
                "slo": {"ttft_p95_s": 0.5, "tpot_p95_s": 0.05},
            }
        ],
    }
    perf = {
        "prompts": "prompts.jsonl",
        "rate": 5.0,
        "duration_s": 1.0,
        "warmup_s": 0.25,
        "sweep": [10.0, 20.0],
    }
    candidates = {
        "candidate": f"simulated://?{knobs}&service_slots=2",
        "baseline": f"simulated://?{knobs}&service_slots=4",
    }
    path = write_suite(
        pytester.path / "suite",
        candidates,
        cases=make_cases(["alpha"], 4),
        policy=policy,
        extra={"perf": perf},
    )
    rows = "".join(json.dumps({"input": f"question {i}"}) + "\n" for i in range(8))
    (path.parent / "prompts.jsonl").write_text(rows, encoding="utf-8")
    report = pytester.path / "report"
    result = pytester.runpytest(
        "--evalgate", str(path.parent), f"--evalgate-report={report}", "-p", "no:cacheprovider"
    )
    assert result.ret == 1, result.stdout.str()
    decision = json.loads((report / "decision.json").read_text(encoding="utf-8"))
    assert decision["verdict"] == "fail"
    (rule,) = decision["rules"]
    assert "candidate 10/s" in rule["reason"] and "baseline 20/s" in rule["reason"]
    (entry,) = decision["perf_phase"]["max_rate_at_slo"]
    assert entry["rates"] == {"candidate": 10.0, "baseline": 20.0}
    assert entry["slo"] == {"ttft_p95_s": 0.5, "tpot_p95_s": 0.05}
    steps = decision["perf_phase"]["sweep"]
    assert [s["requested_rate"] for s in steps] == [10.0, 20.0]
    assert all(s["achieved_rate"]["candidate"] > 0 for s in steps)
    markdown = (report / "report.md").read_text(encoding="utf-8")
    assert "### Capacity sweep (open loop, both models over the same windows)" in markdown
    assert "tpot p95 <= 0.05 s): baseline 20/s, candidate 10/s." in markdown
    assert "| 20/s | candidate | 20.00/s |" in markdown  # sent as requested: open loop
    capsys.readouterr()
    argv = ["plan", "--decision", str(report / "decision.json"), "--target-rate", "45"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "one replica sustains 10 requests/s (candidate; measured: " in out
    assert "baseline 20/s, candidate 10/s)" in out
    assert "  replicas for 45 requests/s: 5" in out


def test_plan_refuses_a_decision_without_a_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_evalgate.cli import main

    path = tmp_path / "decision.json"
    path.write_text(json.dumps({"perf_phase": None}), encoding="utf-8")
    assert main(["plan", "--decision", str(path), "--target-rate", "10"]) == 4
    err = capsys.readouterr().err
    assert f"{path}: perf_phase.max_rate_at_slo: no capacity sweep recorded" in err
    assert main(["plan", "--decision", str(path)]) == 4
    assert "--decision and --target-rate go together" in capsys.readouterr().err
