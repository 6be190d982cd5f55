"""The knee rule of ``evalgate probe`` on made-up sweeps (pure; the loopback sweep against the
simulator is ``test_probe_sweep.py``'s)."""

from __future__ import annotations

import math

import pytest

from pytest_evalgate.capacity.probe import (
    EvalgateKneeRule,
    EvalgateProbeLevel,
    evalgate_find_knee,
    evalgate_nearest_rank,
    evalgate_next_level,
    evalgate_plateau,
    evalgate_probe_levels,
)


def _level(
    concurrency: int, tokens_per_s: float, p95_s: float, errors: int = 0, requests: int = 100
) -> EvalgateProbeLevel:
    return EvalgateProbeLevel(
        concurrency=concurrency, requests=requests, errors=errors, window_s=1.0,
        window_answers=requests - errors, window_tokens=round(tokens_per_s),
        p50_s=p95_s / 2, p95_s=p95_s,
    )  # fmt: skip


def _slots(slots: int, service_s: float, levels: list[int]) -> list[EvalgateProbeLevel]:
    """An ideal server of ``slots`` slots: throughput grows to slots/service_s, then latency."""
    made = []
    for c in levels:
        rate = min(c, slots) / service_s * 10  # 10 tokens an answer
        made.append(_level(c, rate, service_s * max(1.0, c / slots)))
    return made


def test_default_levels_double_up_to_the_maximum() -> None:
    assert evalgate_probe_levels(64) == (1, 2, 4, 8, 16, 32, 64)
    assert evalgate_probe_levels(48) == (1, 2, 4, 8, 16, 32, 48)
    assert evalgate_probe_levels(1) == (1,)
    with pytest.raises(ValueError, match="max concurrency"):
        evalgate_probe_levels(0)


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert evalgate_nearest_rank(values, 50) == 10.0
    assert evalgate_nearest_rank(values, 95) == 19.0
    assert evalgate_nearest_rank(values, 100) == 20.0
    assert evalgate_nearest_rank([3.0], 95) == 3.0
    assert math.isnan(evalgate_nearest_rank([], 50))


def test_an_ideal_server_of_16_slots_has_its_knee_at_16() -> None:
    levels = _slots(16, 0.1, [1, 2, 4, 8, 16, 32, 64])
    assert evalgate_plateau(levels, EvalgateKneeRule()) == (levels[4], levels[5])
    knee = evalgate_find_knee(levels)
    assert (knee.knee, knee.recommended) == (16, 16)
    assert "16 -> 32 in flight added +0.0 % throughput and +100.0 % latency" in knee.reason
    # 8 is below 90 % and 16 reaches it: the midpoints check that the knee lies no lower
    assert evalgate_next_level(levels) == 12
    levels += _slots(16, 0.1, [12])
    assert evalgate_next_level(levels) == 14
    levels += _slots(16, 0.1, [14])
    assert evalgate_next_level(levels) is None  # 14..16 is within a quarter of 14
    assert evalgate_find_knee(levels).knee == 16


def test_a_soft_knee_is_refined_between_the_doublings() -> None:
    # 16 reaches only 80 % of the plateau (client turnaround idles the slots), 32 saturates.
    levels = [_level(8, 700, 0.11), _level(16, 1250, 0.12), _level(32, 1550, 0.2)]
    levels.append(_level(64, 1560, 0.4))
    assert evalgate_find_knee(levels).knee == 32
    assert evalgate_next_level(levels) == 24
    levels.append(_level(24, 1500, 0.15))
    assert evalgate_find_knee(levels).knee == 24
    assert evalgate_next_level(levels) == 20
    levels.append(_level(20, 1380, 0.13))  # below 90 % of 1560
    assert evalgate_find_knee(levels).knee == 24
    assert evalgate_next_level(levels) is None  # 20..24 is within a quarter of 20
    levels.append(_level(22, 1450, 0.14))  # measured anyway (an explicit level): it counts
    assert evalgate_find_knee(levels).recommended == 22


def test_throughput_that_keeps_growing_has_no_knee_and_recommends_the_top() -> None:
    levels = _slots(1000, 0.1, [1, 2, 4, 8, 16, 32])
    knee = evalgate_find_knee(levels)
    assert (knee.knee, knee.recommended) == (None, 32)
    assert knee.reason == (
        "no knee up to 32 in flight: throughput still grew; probe higher to find it"
    )
    assert evalgate_next_level(levels) is None


def test_flat_throughput_without_a_latency_rise_is_no_plateau() -> None:
    # a client-bound sweep: nothing gains, nothing waits longer; not the server's knee
    levels = [_level(c, 1000.0, 0.1) for c in (1, 2, 4)]
    assert evalgate_plateau(levels, EvalgateKneeRule()) is None
    assert evalgate_find_knee(levels).knee is None


def test_a_level_with_errors_ends_what_may_be_recommended() -> None:
    levels = _slots(1000, 0.1, [1, 2, 4, 8])
    levels[3] = _level(8, 800, 0.1, errors=5)  # 5 % errors
    knee = evalgate_find_knee(levels)
    assert (knee.knee, knee.recommended) == (None, 4)
    assert knee.reason == "no knee before errors: 8 in flight had 5.0 % errors"
    assert evalgate_find_knee(levels, EvalgateKneeRule(max_error_fraction=0.05)).recommended == 8


def test_a_first_level_that_fails_recommends_nothing() -> None:
    knee = evalgate_find_knee([_level(1, 0.0, math.nan, errors=1, requests=1)])
    assert (knee.knee, knee.recommended) == (None, None)
    assert "no level answered cleanly" in knee.reason


def test_requests_per_second_decide_when_no_tokens_came_back() -> None:
    levels = [
        EvalgateProbeLevel(c, 100, 0, 1.0, answers, 0, 0.05, p95)
        for c, answers, p95 in ((4, 40, 0.1), (8, 80, 0.1), (16, 82, 0.2))
    ]
    assert evalgate_find_knee(levels).knee == 8


def test_the_thresholds_are_the_rules() -> None:
    # +8 % throughput for a doubling: a plateau at 10 %, none at 5 %
    levels = [_level(8, 1000, 0.1), _level(16, 1080, 0.2)]
    assert evalgate_find_knee(levels).knee == 8
    assert evalgate_find_knee(levels, EvalgateKneeRule(min_gain=0.05)).knee is None
    # p95 +6 %: no plateau at a 10 % latency rise, one at 5 %
    flat = [_level(8, 1000, 0.100), _level(16, 1000, 0.106)]
    assert evalgate_find_knee(flat).knee is None
    assert evalgate_find_knee(flat, EvalgateKneeRule(min_latency_rise=0.05)).knee == 8


def test_a_slow_outlier_in_the_lower_p95_does_not_hide_the_queue() -> None:
    # 32 -> 48 queues (median 0.2 -> 0.3 s) but one slow answer at 32 lifted its p95 to 0.33 s
    low = EvalgateProbeLevel(32, 256, 0, 1.0, 148, 2372, 0.200, 0.328)
    high = EvalgateProbeLevel(48, 384, 0, 1.0, 155, 2483, 0.300, 0.328)
    assert evalgate_plateau([low, high], EvalgateKneeRule()) == (low, high)
    assert evalgate_find_knee([low, high]).knee == 32
