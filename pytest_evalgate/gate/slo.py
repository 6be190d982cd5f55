"""Capacity at the SLO (SPEC section 22): ``{metric: max_rate_at_slo, rule: perf_ratio_min,
min_ratio: r, slo: {ttft_p95_s, tpot_p95_s}}``.

A model's **max rate at the SLO** is the highest swept arrival rate ``r_k`` such that at every
step up to and including ``k`` its window counts (``perf/sweep.py``: the load generator kept up,
the rate was sent, errors within bounds) and its TTFT p95 and TPOT p95 are at most the SLO's.
The sweep stops counting at a model's first miss: a step above it that passes again is noise or
a queue that drained, not capacity. A model that misses at the lowest step sustains 0.

The rule passes when candidate rate / baseline rate >= ``min_ratio``. It is not evaluated (and
fails) without sweep steps, or when the baseline meets the SLO at no swept rate (no ratio to
take). The reason names both rates and, for each model, the step where it stopped and why.
Pure: the steps arrive as arrays in the gate input's ``perf`` mapping (``perf.metrics.SWEEP_KEYS``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytest_evalgate.perf.metrics import SWEEP_KEYS

_Arrays = Mapping[str, tuple[npt.NDArray[Any], npt.NDArray[Any]]]


@dataclass(frozen=True)
class RateAtSlo:
    """One model's max rate at the SLO (0.0: none) and why the sweep stopped above it."""

    rate: float
    stopped: str


def max_rate_at_slo(perf: _Arrays, side: int, slo: tuple[float, float]) -> RateAtSlo:
    """The max rate at the SLO of ``side`` (0 candidate, 1 baseline) over the sweep's steps."""
    rates, ttft, tpot, counts = (np.asarray(perf[key][side], np.float64) for key in SWEEP_KEYS)
    best = 0.0
    for k in range(rates.size):
        why = _miss(float(ttft[k]), float(tpot[k]), bool(counts[k]), slo)
        if why:
            return RateAtSlo(best, f"stopped at {rates[k]:g}/s: {why}")
        best = float(rates[k])
    return RateAtSlo(best, "met the SLO at every swept rate (sweep higher to see its limit)")


def _miss(ttft: float, tpot: float, counts: bool, slo: tuple[float, float]) -> str:
    if not counts:
        return "the window does not count (load generator, sent rate or errors; see the sweep)"
    problems = [
        f"{name} p95 {value:.3f} s > {limit:g} s"
        for name, value, limit in (("ttft", ttft, slo[0]), ("tpot", tpot, slo[1]))
        if not (math.isfinite(value) and value <= limit)
    ]
    return ", ".join(problems)


def has_sweep(perf: _Arrays) -> bool:
    """Whether the gate input carries sweep steps for both sides."""
    return all(key in perf and perf[key][0].size and perf[key][1].size for key in SWEEP_KEYS)


@dataclass(frozen=True)
class SloVerdict:
    """The rule's outcome: ratio (NaN when not evaluated), pass, reason, both models' rates."""

    evaluated: bool
    passed: bool
    ratio: float
    reason: str
    candidate: RateAtSlo | None = None
    baseline: RateAtSlo | None = None


def evaluate(perf: _Arrays, slo: tuple[float, float], min_ratio: float) -> SloVerdict:
    """The ``perf_ratio_min`` rule on ``max_rate_at_slo``."""
    if not has_sweep(perf):
        return SloVerdict(False, False, math.nan, "not evaluated: no capacity sweep steps")
    cand, base = max_rate_at_slo(perf, 0, slo), max_rate_at_slo(perf, 1, slo)
    target = f"the SLO (ttft p95 <= {slo[0]:g} s, tpot p95 <= {slo[1]:g} s)"
    sides = f"candidate {cand.rate:g}/s ({cand.stopped}), baseline {base.rate:g}/s ({base.stopped})"
    if base.rate <= 0.0:
        reason = f"not evaluated: the baseline meets {target} at no swept rate; {sides}"
        return SloVerdict(False, False, math.nan, reason, cand, base)
    ratio = cand.rate / base.rate
    if ratio >= min_ratio:
        reason = f"passes: max rate at {target}: {sides}; ratio {ratio:.4f} >= {min_ratio:g}"
        return SloVerdict(True, True, ratio, reason, cand, base)
    reason = (
        f"capacity regression: max rate at {target}: {sides}; ratio {ratio:.4f} < "
        f"min_ratio {min_ratio:g}"
    )
    return SloVerdict(True, False, ratio, reason, cand, base)
