"""The seeded arrival schedule of the performance gate's load phase (SPEC section 8, issue 6).

``evalgate_perf_plan`` turns a manifest's ``perf`` block into an ``EvalgatePerfPlan``: when each
arrival is due and which prompt it sends. ``perf.evalgate_run_perf`` drives the load on it.

Contract (the definitions are written out in ``docs/timings.md``, section "Load phase"):

- **Schedule.** Arrival ``i`` is due at ``t0 + offset[i]``: ``constant`` gives
  ``offset[i] = i / rate``; ``poisson`` gives cumulative sums of exponential gaps with mean
  ``1 / rate`` drawn from ``numpy.random.default_rng(seed)``. Arrivals cover
  ``[0, warmup_s + duration_s)``; those due before ``warmup_s`` are sent but not measured.

Pure: no pytest, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.schema import EvalgatePerfSchema

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class EvalgatePerfPlan:
    """The seeded arrival schedule: ``offsets[i]`` seconds after t0 uses prompt ``prompts[i]``.

    Arrivals with ``offsets[i] < warmup_s`` are warm-up; the rest form the measured window
    ``[warmup_s, warmup_s + duration_s)``.
    """

    profile: str
    rate: float
    duration_s: float
    warmup_s: float
    seed: int
    offsets: FloatArray
    prompts: npt.NDArray[np.int64]

    @property
    def measured(self) -> npt.NDArray[np.bool_]:
        """Per arrival: True if it lies in the measured window."""
        return self.offsets >= self.warmup_s

    @property
    def scheduled_rate(self) -> float:
        """Arrivals due in the measured window per second (the Poisson draw's realised rate)."""
        return float(self.measured.sum()) / self.duration_s


def evalgate_perf_offsets(profile: str, rate: float, total_s: float, seed: int) -> FloatArray:
    """Arrival offsets in ``[0, total_s)``: ``i / rate`` (constant) or seeded Poisson."""
    if profile == "constant":
        return np.arange(math.ceil(rate * total_s - 1e-9), dtype=np.float64) / rate
    if profile != "poisson":
        raise EvalgateConfigError("perf", "profile", f"must be constant or poisson, not {profile}")
    rng = np.random.default_rng(seed)
    mean = rate * total_s
    gaps = rng.exponential(1.0 / rate, size=math.ceil(mean + 10.0 * math.sqrt(mean) + 10.0))
    offsets = np.cumsum(gaps)
    for _ in range(100):  # bounded; 10 sigma above the mean already covers total_s in practice
        if offsets[-1] >= total_s:
            break
        offsets = np.concatenate([offsets, offsets[-1] + np.cumsum(rng.exponential(1 / rate, 64))])
    return offsets[offsets < total_s]


def evalgate_perf_plan(perf: EvalgatePerfSchema, prompt_count: int) -> EvalgatePerfPlan:
    """The plan for a manifest's ``perf`` block over ``prompt_count`` prompts.

    Prompts are used in a seeded random order, cycling when there are more arrivals than
    prompts, so the prompt mix of any stretch of the run is the file's mix.
    """
    rate, warmup, duration, seed = perf.rate, perf.warmup_s, perf.duration_s, perf.seed
    offsets = evalgate_perf_offsets(perf.profile, rate, warmup + duration, seed)
    order = np.random.default_rng([seed, 1]).permutation(prompt_count)
    prompts = order[np.arange(offsets.size) % prompt_count].astype(np.int64)
    return EvalgatePerfPlan(perf.profile, rate, duration, warmup, seed, offsets, prompts)
