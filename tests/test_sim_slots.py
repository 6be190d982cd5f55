"""The simulator's ``service_slots`` knob: N requests served at once, the rest queue."""

from __future__ import annotations

import pytest

from pytest_evalgate.simulated.knobs import evalgate_parse_simulated_url
from pytest_evalgate.simulated.slots import EvalgateSimSlots


def test_no_slots_never_wait() -> None:
    slots = EvalgateSimSlots(0)
    assert [slots.evalgate_wait(0.0, 1.0) for _ in range(100)] == [0.0] * 100


def test_beyond_the_slots_requests_queue_in_service_order() -> None:
    slots = EvalgateSimSlots(2)
    waits = [slots.evalgate_wait(0.0, 1.0) for _ in range(6)]
    assert waits == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    assert slots.evalgate_wait(10.0, 1.0) == 0.0  # free again later


def test_throughput_is_capped_at_slots_per_service_time() -> None:
    slots = EvalgateSimSlots(16)
    finish = [0.0 + slots.evalgate_wait(0.0, 0.05) + 0.05 for _ in range(320)]
    assert max(finish) == pytest.approx(320 / 16 * 0.05)


def test_the_knobs_parse_from_a_url() -> None:
    config = evalgate_parse_simulated_url(
        "simulated://?service_slots=16&canary=EVALGATE-CANARY-x&canary_rate=0.01"
    )
    assert (config.service_slots, config.canary, config.canary_rate) == (
        16,
        "EVALGATE-CANARY-x",
        0.01,
    )
