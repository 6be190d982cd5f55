"""One measured window folded into a result, and whether it can be judged.

A shot is one request of the load (its arrival, its side, its result). The window's shots give
the samples per metric and side (from the send and from the schedule), the achieved rates, the
scheduling delay and the error counts; a window is **judgeable** only if each side kept up with
the schedule, the p95 scheduling delay stayed within its bound, few enough requests errored and
each side has a sample (the limits are ``phase``'s; ``reason`` names what failed, with numbers).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pytest_evalgate.client import EvalgateCallResult
from pytest_evalgate.perf.metrics import EVALGATE_PERF_METRICS
from pytest_evalgate.perf.plan import EvalgatePerfPlan
from pytest_evalgate.perf.result import EvalgatePerfResult
from pytest_evalgate.stats import evalgate_percentile

FloatArray = npt.NDArray[np.float64]

EVALGATE_PERF_SCHEDULE_METRICS = ("ttft", "e2e")


@dataclass(frozen=True)
class Shot:
    """One request of the load: arrival index, side (0 candidate, 1 baseline), its result."""

    arrival: int
    side: int
    result: EvalgateCallResult


def fold(
    plan: EvalgatePerfPlan,
    shots: Sequence[Shot],
    pair: tuple[str, str],
    limits: tuple[float, float, float],
) -> EvalgatePerfResult:
    """Fold the measured window's shots into a result and decide whether it can be judged."""
    measured = [shot for shot in shots if plan.measured[shot.arrival]]
    by_side = [[s.result for s in measured if s.side == side] for side in (0, 1)]
    delays = np.array([s.result.queued_s for s in measured], dtype=np.float64)
    window = (plan.warmup_s, plan.warmup_s + plan.duration_s)
    in_window = [_sent_in_window(plan, shots, side, window) for side in (0, 1)]
    result = EvalgatePerfResult(
        pair=pair,
        profile=plan.profile,
        duration_s=plan.duration_s,
        warmup_s=plan.warmup_s,
        requested_rate=plan.rate,
        scheduled_rate=plan.scheduled_rate,
        achieved_rate={n: c / plan.duration_s for n, c in zip(pair, in_window, strict=True)},
        scheduled=int(plan.measured.sum()),
        completed={
            n: sum(r.error is None for r in rs) for n, rs in zip(pair, by_side, strict=True)
        },
        errors={n: _error_counts(rs) for n, rs in zip(pair, by_side, strict=True)},
        delay_p50_s=_finite_or_nan(delays, 50),
        delay_p95_s=_finite_or_nan(delays, 95),
        delay_max_s=float(delays.max()) if delays.size else math.nan,
        samples=_pair_samples(by_side, _send_metrics),
        from_schedule=_pair_samples(by_side, _schedule_metrics),
        judgeable=True,
        reason="",
    )
    problems = _problems(result, limits)
    reason = "; ".join(problems) if problems else _judgeable_reason(result)
    return dataclasses.replace(result, judgeable=not problems, reason=reason)


def _finite_or_nan(values: FloatArray, q: float) -> float:
    return evalgate_percentile(values, q) if values.size else math.nan


def _sent_in_window(
    plan: EvalgatePerfPlan, shots: Sequence[Shot], side: int, window: tuple[float, float]
) -> int:
    # The send time relative to t0 is the scheduled offset plus the scheduling delay.
    sent = (plan.offsets[s.arrival] + s.result.queued_s for s in shots if s.side == side)
    return sum(window[0] <= t < window[1] for t in sent)


def _error_counts(results: Sequence[EvalgateCallResult]) -> dict[str, int]:
    return dict(sorted(Counter(r.error.category for r in results if r.error).items()))


def _send_metrics(r: EvalgateCallResult) -> dict[str, float | None]:
    return {
        "ttft": r.ttft_s,
        "tpot": r.tpot_s,
        "itl": _nearest_rank(r.itl_s, 95),
        "e2e": r.e2e_s,
        "output_tokens": None if r.completion_tokens is None else float(r.completion_tokens),
    }


def _schedule_metrics(r: EvalgateCallResult) -> dict[str, float | None]:
    return {
        "ttft": None if r.ttft_s is None else r.queued_s + r.ttft_s,
        "e2e": r.queued_s + r.e2e_s,
    }


def _nearest_rank(values: Sequence[float], q: float) -> float | None:
    # Per request, the p95 of its inter-token latencies: the eval records' ``itl_p95_s``.
    return evalgate_percentile(values, q) if values else None


def _pair_samples(
    by_side: Sequence[Sequence[EvalgateCallResult]],
    metrics: Callable[[EvalgateCallResult], dict[str, float | None]],
) -> dict[str, tuple[FloatArray, FloatArray]]:
    rows = [[metrics(r) for r in results if r.error is None] for results in by_side]
    names = EVALGATE_PERF_METRICS if metrics is _send_metrics else EVALGATE_PERF_SCHEDULE_METRICS
    return {name: (_column(rows[0], name), _column(rows[1], name)) for name in names}


def _column(rows: Sequence[Mapping[str, float | None]], name: str) -> FloatArray:
    return np.array([row[name] for row in rows if row[name] is not None], dtype=np.float64)


def _problems(result: EvalgatePerfResult, limits: tuple[float, float, float]) -> list[str]:
    max_delay, min_fraction, max_errors = limits
    problems = []
    for name in result.pair:
        achieved, wanted = result.achieved_rate[name], result.scheduled_rate
        if wanted > 0 and achieved < min_fraction * wanted:
            problems.append(
                f"load generator could not keep up: {name} achieved {achieved:.2f}/s of "
                f"{wanted:.2f}/s scheduled (< {min_fraction:.0%})"
            )
    if not result.delay_p95_s <= max_delay:
        problems.append(
            f"load generator could not keep up: p95 scheduling delay "
            f"{result.delay_p95_s * 1e3:.1f} ms > {max_delay * 1e3:.1f} ms"
        )
    return problems + _sample_problems(result, max_errors)


def _sample_problems(result: EvalgatePerfResult, max_errors: float) -> list[str]:
    problems = []
    for name in result.pair:
        errored = sum(result.errors[name].values())
        if result.scheduled and errored > max_errors * result.scheduled:
            counts = ", ".join(f"{k} {v}" for k, v in result.errors[name].items())
            problems.append(
                f"{name}: {errored} of {result.scheduled} requests errored ({counts}); "
                f"latency of the survivors would flatter it"
            )
        if result.completed[name] == 0:
            problems.append(f"{name}: no successful request in the measured window")
    return problems


def _judgeable_reason(result: EvalgatePerfResult) -> str:
    rates = ", ".join(f"{n} {r:.2f}/s" for n, r in result.achieved_rate.items())
    return (
        f"judgeable: {result.scheduled} arrivals at {result.requested_rate:g}/s requested "
        f"({rates} achieved), p95 scheduling delay {result.delay_p95_s * 1e3:.2f} ms"
    )
