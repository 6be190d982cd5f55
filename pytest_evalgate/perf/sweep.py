"""The capacity sweep's steps (SPEC section 22): one open-loop window per arrival rate.

``perf.sweep: [r1, r2, ...]`` runs the load phase once per rate, both models on the same
arrivals over the same window (``phase.evalgate_run_perf`` at that rate). A ``Step`` keeps what
the gate's ``max_rate_at_slo`` rule needs of each window, per side: the requested rate and the
rate actually sent in the window (open loop: an overloaded load generator shows as a shortfall),
TTFT and TPOT p95, answers and errors, and whether the side's window counts at all.

A side's window **counts** when the load generator kept up (p95 scheduling delay within its
limit; the same criterion as the load phase's), it sent at least ``min_rate_fraction`` of the
scheduled arrivals, at most ``max_error_fraction`` of them errored and at least one answered.

``gate_arrays`` hands the steps to the gate as arrays in the gate input's ``perf`` mapping
under the ``SWEEP_KEYS`` (one value per step and side), so the gate reads them as it reads
samples. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytest_evalgate.perf.metrics import SWEEP_KEYS

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Step:
    """One rate of the sweep; per-side mappings are keyed by candidate name, None = no figure."""

    requested_rate: float
    scheduled_rate: float
    achieved_rate: Mapping[str, float]
    ttft_p95_s: Mapping[str, float | None]
    tpot_p95_s: Mapping[str, float | None]
    completed: Mapping[str, int]
    errored: Mapping[str, int]
    counts: Mapping[str, bool]
    delay_p95_s: float | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """Builtins only (JSON-ready)."""
        return {
            "requested_rate": self.requested_rate,
            "scheduled_rate": self.scheduled_rate,
            "achieved_rate": dict(self.achieved_rate),
            "ttft_p95_s": dict(self.ttft_p95_s),
            "tpot_p95_s": dict(self.tpot_p95_s),
            "completed": dict(self.completed),
            "errored": dict(self.errored),
            "counts": dict(self.counts),
            "delay_p95_s": self.delay_p95_s,
            "reason": self.reason,
        }


def step_from_dict(data: Mapping[str, Any]) -> Step:
    """The inverse of ``Step.to_dict``."""
    return Step(
        requested_rate=float(data["requested_rate"]),
        scheduled_rate=float(data["scheduled_rate"]),
        achieved_rate=dict(data["achieved_rate"]),
        ttft_p95_s=dict(data["ttft_p95_s"]),
        tpot_p95_s=dict(data["tpot_p95_s"]),
        completed=dict(data["completed"]),
        errored=dict(data["errored"]),
        counts=dict(data["counts"]),
        delay_p95_s=data["delay_p95_s"],
        reason=str(data["reason"]),
    )


def side_counts(
    achieved: float,
    scheduled: float,
    errored: int,
    completed: int,
    arrivals: int,
    limits: tuple[bool, float, float],
) -> bool:
    """Whether one side's window counts: ``limits`` is (the generator kept its schedule,
    minimum sent fraction, maximum error fraction)."""
    kept, min_fraction, max_errors = limits
    sent = scheduled <= 0 or achieved >= min_fraction * scheduled
    return kept and sent and errored <= max_errors * arrivals and completed > 0


def gate_arrays(
    steps: Sequence[Step], pair: tuple[str, str]
) -> dict[str, tuple[FloatArray, FloatArray]]:
    """The steps as the gate reads them: ``SWEEP_KEYS`` -> (candidate, baseline) arrays of one
    value per step (rate requested, TTFT p95, TPOT p95 in seconds, 1.0 when the window counts);
    a missing figure is NaN."""
    out: dict[str, tuple[FloatArray, FloatArray]] = {}
    for key in SWEEP_KEYS:
        columns = [[_value(key, step, name) for step in steps] for name in pair]
        out[key] = (np.array(columns[0], np.float64), np.array(columns[1], np.float64))
    return out


def _value(key: str, step: Step, name: str) -> float:
    rate, ttft, tpot, _ = SWEEP_KEYS
    if key == rate:
        return step.requested_rate
    if key == ttft:
        return _nan(step.ttft_p95_s.get(name))
    if key == tpot:
        return _nan(step.tpot_p95_s.get(name))
    return 1.0 if step.counts.get(name) else 0.0


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)
