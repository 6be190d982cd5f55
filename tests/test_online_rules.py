"""``online:`` rules in gate.yaml: loading, refusals, digest, and the offline verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pytest_evalgate.aggregate.paired import EvalgateGateInput
from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.gate import rules as gate
from pytest_evalgate.policy import load as gate_policy
from pytest_evalgate.policy import values as policy_values
from pytest_evalgate.policy.online import (
    EVALGATE_ONLINE_METRICS,
    EvalgateOnlineRule,
    evalgate_duration,
    evalgate_duration_seconds,
    evalgate_online_rules,
)

REPO = Path(__file__).resolve().parents[1]
OFFLINE = "version: t\nrules:\n  - {slice: all, rule: non_inferior, margin: 0.05}\n"
ONLINE = """online:
  - {metric: error_rate_delta,    max: 0.002, interval: 1m, window: 5m, failure_limit: 1}
  - {metric: ttft_p95_ratio,      max: 1.10}
  - {metric: tpot_p95_ratio,      max: 1.10, window: 30s}
  - {metric: output_length_ratio, max: 1.15, interval: 2m}
  - {metric: judge_score_delta,   min: -0.01, window: 2h, failure_limit: 0}
  - {metric: refusal_rate_delta,  max: 0.01}
  - {metric: length_stop_share_delta, max: 0.02}
  - {metric: tool_call_failure_delta, max: 0.01}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gate.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_every_metric_loads_with_its_bound_and_defaults(tmp_path: Path) -> None:
    policy = gate_policy.evalgate_load_policy(write(tmp_path, OFFLINE + ONLINE))
    assert [rule.metric for rule in policy.online] == list(EVALGATE_ONLINE_METRICS)
    first, ttft, tpot, length, judge, refusal, stops, tools = policy.online
    assert (refusal.bound, stops.threshold, tools.metric) == (
        "max",
        0.02,
        "tool_call_failure_delta",
    )
    assert first == EvalgateOnlineRule("error_rate_delta", "max", 0.002, "1m", "5m", 1, 0)
    assert (ttft.interval, ttft.window, ttft.failure_limit) == ("5m", "10m", 2)  # SPEC's example
    assert tpot.window == "30s" and length.interval == "2m"
    assert (judge.bound, judge.threshold) == ("min", -0.01)
    assert (judge.window, judge.failure_limit) == ("2h", 0)
    assert [rule.index for rule in policy.online] == list(range(8))


def test_to_dict_round_trips_through_the_loader(tmp_path: Path) -> None:
    import yaml

    policy = gate_policy.evalgate_load_policy(write(tmp_path, OFFLINE + ONLINE))
    again = gate_policy.evalgate_load_policy(write(tmp_path, yaml.safe_dump(policy.to_dict())))
    assert again.online == policy.online
    assert again.to_dict()["online"][4] == {
        "metric": "judge_score_delta", "min": -0.01, "interval": "5m", "window": "2h",
        "failure_limit": 0,
    }  # fmt: skip


def test_a_policy_without_online_rules_keeps_its_digest(tmp_path: Path) -> None:
    plain = gate_policy.evalgate_load_policy(write(tmp_path, OFFLINE))
    assert plain.online == () and "online" not in plain.to_dict()
    hand_made = policy_values.EvalgatePolicy(version="t", rules=plain.rules)
    assert policy_values.evalgate_policy_digest(plain) == policy_values.evalgate_policy_digest(
        hand_made
    )
    empty = gate_policy.evalgate_load_policy(write(tmp_path, OFFLINE + "online: []\n"))
    assert policy_values.evalgate_policy_digest(empty) == policy_values.evalgate_policy_digest(
        plain
    )


def test_online_rules_are_part_of_the_policy_digest(tmp_path: Path) -> None:
    with_online = gate_policy.evalgate_load_policy(write(tmp_path, OFFLINE + ONLINE))
    looser = gate_policy.evalgate_load_policy(
        write(tmp_path, OFFLINE + ONLINE.replace("1.15", "1.2"))
    )
    plain = gate_policy.evalgate_load_policy(write(tmp_path, OFFLINE))
    digests = {policy_values.evalgate_policy_digest(p) for p in (with_online, looser, plain)}
    assert len(digests) == 3


def _gate_input(seed: int = 0) -> EvalgateGateInput:
    rng = np.random.default_rng(seed)
    n = 400
    return EvalgateGateInput(
        case_ids=tuple(f"c{i:04d}" for i in range(n)),
        categories=np.array(["a"] * n),
        clusters=np.array([f"k{i}" for i in range(n)]),
        candidate_scores=(rng.random(n) < 0.9).astype(float),
        baseline_scores=(rng.random(n) < 0.9).astype(float),
        candidate_fail_counts=np.zeros(n, dtype=int),
        candidate_trials=np.ones(n, dtype=int),
    )


def test_online_rules_take_no_part_in_the_offline_verdict(tmp_path: Path) -> None:
    with_online = gate_policy.evalgate_load_policy(write(tmp_path, OFFLINE + ONLINE))
    plain = dataclasses.replace(with_online, online=())
    data = _gate_input()
    results = gate.evalgate_evaluate(with_online, data)
    assert [r.to_dict() for r in results.rules] == [
        r.to_dict() for r in gate.evalgate_evaluate(plain, data).rules
    ]
    assert {r.rule for r in results.rules} == {"non_inferior"}


def test_the_support_suite_carries_online_rules() -> None:
    policy = gate_policy.evalgate_load_policy(REPO / "suites" / "support" / "gate.yaml")
    spec15 = {"error_rate_delta", "ttft_p95_ratio", "tpot_p95_ratio", "output_length_ratio"}
    assert {rule.metric for rule in policy.online} == spec15 | {"judge_score_delta"}


REFUSALS = {
    "not a list": ("online: {metric: ttft_p95_ratio}\n", "online", "must be a list"),
    "not a mapping": ("online: [ttft_p95_ratio]\n", "online[0]", "must be a mapping"),
    "unknown metric": (
        "online:\n  - {metric: ttft_p50_ratio, max: 1.1}\n",
        "online[0].metric",
        "unknown metric 'ttft_p50_ratio'; expected error_rate_delta",
    ),
    "missing metric": ("online:\n  - {max: 1.1}\n", "online[0].metric", "missing required key"),
    "unknown key": (
        "online:\n  - {metric: ttft_p95_ratio, max: 1.1, windw: 5m}\n",
        "online[0].windw",
        "unknown key",
    ),
    "min on a max metric": (
        "online:\n  - {metric: ttft_p95_ratio, min: 1.1}\n",
        "online[0].min",
        "ttft_p95_ratio takes max, not min",
    ),
    "max on the judge": (
        "online:\n  - {metric: judge_score_delta, max: 0.01}\n",
        "online[0].max",
        "judge_score_delta takes min, not max",
    ),
    "both bounds": (
        "online:\n  - {metric: error_rate_delta, max: 0.01, min: -0.01}\n",
        "online[0].min",
        "takes max, not min",
    ),
    "no bound": ("online:\n  - {metric: error_rate_delta}\n", "online[0].max", "needs a max"),
    "string number": (
        "online:\n  - {metric: ttft_p95_ratio, max: '1.1'}\n",
        "online[0].max",
        "valid number",
    ),
    "ratio at 1": (
        "online:\n  - {metric: tpot_p95_ratio, max: 1.0}\n",
        "online[0].max",
        "a ratio's max must be above 1",
    ),
    "ratio below 1": (
        "online:\n  - {metric: output_length_ratio, max: 0.9}\n",
        "online[0].max",
        "above 1",
    ),
    "zero delta": (
        "online:\n  - {metric: error_rate_delta, max: 0}\n",
        "online[0].max",
        "a rate delta's max must be in (0, 1]",
    ),
    "positive judge min": (
        "online:\n  - {metric: judge_score_delta, min: 0.01}\n",
        "online[0].min",
        "a score delta's min must be in [-1, 0)",
    ),
    "bad window": (
        "online:\n  - {metric: ttft_p95_ratio, max: 1.1, window: 10min}\n",
        "online[0].window",
        "a duration like 30s, 10m or 2h",
    ),
    "window as a number": (
        "online:\n  - {metric: ttft_p95_ratio, max: 1.1, window: 600}\n",
        "online[0].window",
        "valid string",
    ),
    "zero interval": (
        "online:\n  - {metric: ttft_p95_ratio, max: 1.1, interval: 0s}\n",
        "online[0].interval",
        "a duration",
    ),
    "negative failure limit": (
        "online:\n  - {metric: ttft_p95_ratio, max: 1.1, failure_limit: -1}\n",
        "online[0].failure_limit",
        "greater than or equal to 0",
    ),
    "boolean failure limit": (
        "online:\n  - {metric: ttft_p95_ratio, max: 1.1, failure_limit: true}\n",
        "online[0].failure_limit",
        "valid integer",
    ),
    "two rules on one metric": (
        "online:\n  - {metric: ttft_p95_ratio, max: 1.1}\n"
        "  - {metric: error_rate_delta, max: 0.01}\n  - {metric: ttft_p95_ratio, max: 1.2}\n",
        "online[2].metric",
        "a second rule on ttft_p95_ratio",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusal_names_file_key_and_reason(tmp_path: Path, case: str) -> None:
    text, key, reason = REFUSALS[case]
    path = write(tmp_path, OFFLINE + text)
    with pytest.raises(EvalgatePolicyError) as caught:
        gate_policy.evalgate_load_policy(path)
    error = caught.value
    assert isinstance(error, EvalgateConfigError)  # so the console script exits 4
    assert (error.source, error.key) == (str(path), key)
    assert reason in error.reason
    assert str(error).startswith(f"{path}: {key}: ")


def test_the_direct_parser_accepts_none_and_names_its_source() -> None:
    assert evalgate_online_rules(None, "x.yaml") == ()
    with pytest.raises(EvalgatePolicyError, match=r"^x\.yaml: online\[0\]\.max: "):
        evalgate_online_rules([{"metric": "ttft_p95_ratio", "max": 0.5}], "x.yaml")


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("1s", 1), ("10m", 600), ("2h", 7200), ("90m", 5400)]
)
def test_durations_in_seconds(text: str, seconds: int) -> None:
    assert evalgate_duration_seconds(text) == seconds


@pytest.mark.parametrize(
    ("rule", "value", "holds"),
    [
        (EvalgateOnlineRule("ttft_p95_ratio", "max", 1.1), 1.1, True),
        (EvalgateOnlineRule("ttft_p95_ratio", "max", 1.1), 1.1000001, False),
        (EvalgateOnlineRule("judge_score_delta", "min", -0.01), -0.01, True),
        (EvalgateOnlineRule("judge_score_delta", "min", -0.01), -0.0100001, False),
        (EvalgateOnlineRule("error_rate_delta", "max", 0.01), float("nan"), False),
        (EvalgateOnlineRule("judge_score_delta", "min", -0.01), float("nan"), False),
    ],
)
def test_holds_compares_on_the_bound_side_and_never_holds_for_nan(
    rule: EvalgateOnlineRule, value: float, holds: bool
) -> None:
    assert rule.holds(value) is holds


@pytest.mark.parametrize("text", ["10", "10min", "0s", "1h30m", "-5m", "5 m", "1d", ""])
def test_a_bad_duration_is_a_config_error_naming_source_and_key(text: str) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_duration(text, "--window", "window")
    assert (caught.value.source, caught.value.key) == ("--window", "window")
    assert f"a duration like 30s, 10m or 2h (got {text!r})" == caught.value.reason
    assert evalgate_duration("45s", "x", "y") == "45s"
