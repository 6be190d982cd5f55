"""capacity/plan.py: what a resumed run still sends, the replicas a target load needs, the max
rates at the SLO a decision records, and the measured figures' edges (exact numbers)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_evalgate.capacity.plan import (
    EvalgateCapacityInput,
    EvalgateMeasured,
    RateAtSlo,
    evalgate_busy_seconds,
    evalgate_capacity_plan,
    evalgate_measure,
    evalgate_replicas_for,
    evalgate_still_to_run,
    rates_at_slo,
    replicas_for_rate,
)
from pytest_evalgate.errors import EvalgateConfigError


def _given(requests: int = 400, tokens: float = 50.0, rate: float = 100.0) -> EvalgateCapacityInput:
    return EvalgateCapacityInput("cand", requests, tokens, "assumed", rate, "assumed", 2)


@pytest.mark.parametrize(
    ("stored", "expected"),
    [(0, (400, 20000.0, 200.0)), (150, (250, 12500.0, 125.0)), (400, (0, 0.0, 0.0))],
)
def test_still_to_run_is_what_has_no_stored_answer(
    stored: int, expected: tuple[int, float, float]
) -> None:
    plan = evalgate_capacity_plan(_given(), replicas=4)
    assert (plan.output_tokens, plan.replica_s, plan.wall_s) == (20000.0, 200.0, 50.0)
    assert evalgate_still_to_run(plan, stored) == expected


def test_more_stored_than_requested_still_sends_nothing() -> None:
    plan = evalgate_capacity_plan(_given(requests=10), replicas=1)
    assert evalgate_still_to_run(plan, 25) == (0, 0.0, 0.0)


def test_a_plan_of_no_requests_is_zero_everywhere() -> None:
    plan = evalgate_capacity_plan(_given(requests=0, tokens=0.0), replicas=3)
    assert (plan.output_tokens, plan.replica_s, plan.gpu_hours, plan.wall_s) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("target", "per_replica", "replicas"),
    [(10.0, 2.5, 4), (10.0, 3.0, 4), (0.1, 5.0, 1), (30.0, 0.1, 300), (7.0, 7.0, 1)],
)
def test_replicas_for_a_target_load_round_up(
    target: float, per_replica: float, replicas: int
) -> None:
    assert replicas_for_rate(target, per_replica) == replicas


@pytest.mark.parametrize(
    ("target", "per_replica", "key"),
    [
        (0.0, 1.0, "--target-rate"),
        (-1.0, 1.0, "--target-rate"),
        (float("nan"), 1.0, "--target-rate"),
        (1.0, 0.0, "max rate at the SLO per replica"),
        (1.0, float("inf"), "max rate at the SLO per replica"),
    ],
)
def test_a_target_load_or_rate_that_is_not_positive_is_refused(
    target: float, per_replica: float, key: str
) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        replicas_for_rate(target, per_replica)
    assert (caught.value.source, caught.value.key) == ("command line", key)
    assert caught.value.reason.startswith("must be a finite number > 0, got ")


def test_replicas_for_a_target_wall_time_tolerate_rounding() -> None:
    assert evalgate_replicas_for(8000.0, 1000.0) == 8
    assert evalgate_replicas_for(8000.01, 1000.0) == 9
    assert evalgate_replicas_for(0.0, 1000.0) == 1


def _entry(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "rule": "max_rate_at_slo[cand]",
        "candidate": "cand",
        "slo": {"ttft_p95_s": 0.5, "tpot_p95_s": "0.05"},
        "rates": {"candidate": 4, "baseline": None},
    }
    entry.update(overrides)
    return entry


def test_rates_at_slo_are_read_from_the_decision_s_load_phase() -> None:
    decision = {"perf_phase": {"max_rate_at_slo": [_entry(), _entry(candidate="other")]}}
    got = rates_at_slo(decision, "decision.json")
    assert got[0] == RateAtSlo(
        "max_rate_at_slo[cand]", "cand", 0.5, 0.05, {"candidate": 4.0, "baseline": None}
    )
    assert [entry.candidate for entry in got] == ["cand", "other"]
    assert isinstance(got[0].rates["candidate"], float)


@pytest.mark.parametrize(
    "decision",
    [{}, {"perf_phase": None}, {"perf_phase": {}}, {"perf_phase": {"max_rate_at_slo": []}}],
)
def test_a_decision_without_a_sweep_is_refused_saying_what_makes_one(
    decision: dict[str, Any],
) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        rates_at_slo(decision, "decision.json")
    assert (caught.value.source, caught.value.key) == (
        "decision.json",
        "perf_phase.max_rate_at_slo",
    )
    assert caught.value.reason == (
        "no capacity sweep recorded (a max_rate_at_slo rule and perf.sweep make one)"
    )


@pytest.mark.parametrize(
    "entry",
    [
        {"candidate": "c", "slo": {}, "rates": {}},
        _entry(slo={"ttft_p95_s": 0.5}),
        _entry(slo={"ttft_p95_s": "fast", "tpot_p95_s": 1}),
        _entry(rates=[1, 2]),
        _entry(rates={"candidate": "many"}),
        "not an entry",
    ],
)
def test_a_malformed_sweep_entry_is_refused(entry: Any) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        rates_at_slo({"perf_phase": {"max_rate_at_slo": [entry]}}, "d.json")
    assert caught.value.key == "perf_phase.max_rate_at_slo"
    assert caught.value.reason.startswith("malformed entry: ")


@pytest.mark.parametrize(
    ("intervals", "busy"),
    [
        ([], 0.0),
        ([(5.0, 5.0)], 0.0),
        ([(0.0, 10.0), (2.0, 3.0)], 10.0),  # contained
        ([(0.0, 2.0), (2.0, 4.0)], 4.0),  # touching
        ([(6.0, 8.0), (0.0, 1.0), (0.5, 2.0)], 4.0),  # unsorted, overlapping, then a gap
    ],
)
def test_busy_seconds_are_the_length_of_the_union(
    intervals: list[tuple[float, float]], busy: float
) -> None:
    assert evalgate_busy_seconds(intervals) == busy


def test_measured_figures_per_request_and_per_replica() -> None:
    rows = [
        (30, 1.0, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:02+00:00"),
        (10, 3.0, "2026-01-01T00:00:01+00:00", "2026-01-01T00:00:04+00:00"),
        (None, 9.0, "2026-01-01T01:00:00+00:00", "2026-01-01T02:00:00+00:00"),  # left out
    ]
    measured = evalgate_measure(rows, replicas=2)
    assert measured == EvalgateMeasured(2, 40, 4.0, 4.0, 2)
    assert (measured.tokens_per_request, measured.e2e_mean_s) == (20.0, 2.0)
    assert measured.tokens_per_s == 5.0  # 40 tokens over 4 s busy on 2 replicas


def test_a_run_without_busy_time_has_no_rate_and_replicas_are_at_least_one() -> None:
    same = "2026-01-01T00:00:00+00:00"
    measured = evalgate_measure([(5, 0.0, same, same)], replicas=0)
    assert measured.replicas == 1
    assert measured.busy_s == 0.0
    assert measured.tokens_per_s is None
