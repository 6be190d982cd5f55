"""The concurrency sweep's numbers and its knee (``evalgate probe``, SPEC section 12, issue 16).

A level is a closed loop of ``concurrency`` requests in flight; :class:`EvalgateProbeLevel`
holds what it measured. Throughput is output tokens/s (requests/s when a level got no token
counts back) over the level's steady window (``probe_load``); latency is the end-to-end time of
the answers, nearest-rank percentiles (``docs/timings.md``).

The knee rule (:class:`EvalgateKneeRule`; ``docs/decisions.md``, issue 16 part B):

1. **Plateau.** The sweep has reached a plateau when, for two neighbouring clean levels
   L < L' (a doubling in the coarse sweep), L' gains less than ``min_gain`` (10 %) throughput
   while its latency rises by ``min_latency_rise`` (10 %) or more, in p50 or in p95: more
   requests in flight only wait in the server's queue.
2. **Knee.** Given a plateau, the knee is the fewest in flight whose throughput is within
   ``min_gain`` of the best measured (>= 90 % of it). Between the knee and the clean level below
   it, :func:`evalgate_next_level` asks for their midpoint until the gap is at most
   ``resolution`` (a quarter) of the lower level: a doubling sweep alone can only say "16 or 32".
3. **Recommendation.** The knee; without a plateau, the highest clean level (the endpoint took
   everything offered; probe higher). A level whose errors exceed ``max_error_fraction`` (1 %),
   and every level above it, is never recommended.

Pure: no I/O, no printing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

EVALGATE_PROBE_MIN_GAIN = 0.10
EVALGATE_PROBE_MIN_LATENCY_RISE = 0.10
EVALGATE_PROBE_MAX_ERROR_FRACTION = 0.01


@dataclass(frozen=True)
class EvalgateProbeLevel:
    """What one concurrency level measured.

    ``requests`` and ``errors`` count every request the level sent; throughput counts the
    ``window_answers`` (and their ``window_tokens``) that completed inside the steady window of
    ``window_s`` seconds (see ``probe_load``); the percentiles are over every answer's e2e time.
    """

    concurrency: int
    requests: int
    errors: int
    window_s: float
    window_answers: int
    window_tokens: int
    p50_s: float
    p95_s: float
    error_categories: tuple[tuple[str, int], ...] = ()
    first_error: str = ""  # "category: message" of the level's first error, for the user

    @property
    def answered(self) -> int:
        """Requests that came back with an answer."""
        return self.requests - self.errors

    @property
    def requests_per_s(self) -> float:
        """Answers per second of the steady window."""
        return self.window_answers / self.window_s if self.window_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of the steady window."""
        return self.window_tokens / self.window_s if self.window_s > 0 else 0.0

    @property
    def error_fraction(self) -> float:
        """Errored requests over all requests of the level."""
        return self.errors / self.requests if self.requests else 1.0


@dataclass(frozen=True)
class EvalgateKnee:
    """The sweep's verdict: the knee (None: none found), the recommended concurrency and why."""

    knee: int | None
    recommended: int | None
    reason: str


def evalgate_probe_levels(max_concurrency: int) -> tuple[int, ...]:
    """The default levels: 1, 2, 4, ... doubling up to and including ``max_concurrency``
    (which ends the list even when it is no power of two)."""
    if max_concurrency < 1:
        raise ValueError(f"max concurrency must be >= 1, got {max_concurrency}")
    levels = [1]
    while levels[-1] * 2 <= max_concurrency:
        levels.append(levels[-1] * 2)
    if levels[-1] != max_concurrency:
        levels.append(max_concurrency)
    return tuple(levels)


def evalgate_nearest_rank(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank: the ``ceil(n*q/100)``-th smallest; NaN when
    empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(len(ordered) * q / 100.0 - 1e-12))) - 1]


def evalgate_level_clean(level: EvalgateProbeLevel, max_error_fraction: float) -> bool:
    """Whether a level's errors stay within ``max_error_fraction`` and it answered at all."""
    return level.answered > 0 and level.error_fraction <= max_error_fraction


@dataclass(frozen=True)
class EvalgateKneeRule:
    """The thresholds of the knee rule (module docstring); ``resolution`` is how close the
    refinement brings the knee to the unsaturated level below it, as a fraction of that level."""

    min_gain: float = EVALGATE_PROBE_MIN_GAIN
    min_latency_rise: float = EVALGATE_PROBE_MIN_LATENCY_RISE
    max_error_fraction: float = EVALGATE_PROBE_MAX_ERROR_FRACTION
    resolution: float = 0.25


def evalgate_clean_levels(
    levels: Sequence[EvalgateProbeLevel], rule: EvalgateKneeRule
) -> list[EvalgateProbeLevel]:
    """The levels by ascending concurrency, up to (without) the first that is not clean."""
    clean: list[EvalgateProbeLevel] = []
    for level in sorted(levels, key=lambda one: one.concurrency):
        if not evalgate_level_clean(level, rule.max_error_fraction):
            break
        clean.append(level)
    return clean


def evalgate_plateau(
    levels: Sequence[EvalgateProbeLevel], rule: EvalgateKneeRule
) -> tuple[EvalgateProbeLevel, EvalgateProbeLevel] | None:
    """The first pair of neighbouring clean levels (low, high) where high gains less than
    ``min_gain`` throughput while its p50 or p95 rises by ``min_latency_rise`` or more; None if
    none."""
    clean = evalgate_clean_levels(levels, rule)
    for low, high in itertools.pairwise(clean):
        if _gain(low, high, clean) < rule.min_gain and _rise(low, high) >= rule.min_latency_rise:
            return low, high
    return None


def evalgate_find_knee(
    levels: Sequence[EvalgateProbeLevel], rule: EvalgateKneeRule | None = None
) -> EvalgateKnee:
    """The knee of ``levels`` (any order) by the module docstring's rule."""
    rule = rule or EvalgateKneeRule()
    clean = evalgate_clean_levels(levels, rule)
    if not clean:
        return EvalgateKnee(None, None, "no level answered cleanly: nothing to recommend")
    plateau = evalgate_plateau(clean, rule)
    if plateau is None:
        top = clean[-1].concurrency
        return EvalgateKnee(None, top, _no_knee_reason(levels, clean, top))
    knee, best = _saturating(clean, rule)
    low, high = plateau
    reason = (
        f"the fewest in flight with >= {100 * (1 - rule.min_gain):.0f} % of the best throughput, "
        f"{_throughput(best, _by_tokens(clean)):.1f}/s at {best.concurrency}; "
        f"{low.concurrency} -> {high.concurrency} in flight added "
        f"{100 * _gain(low, high, clean):+.1f} % throughput and {100 * _rise(low, high):+.1f} % "
        "latency"
    )
    return EvalgateKnee(knee.concurrency, knee.concurrency, reason)


def evalgate_next_level(
    levels: Sequence[EvalgateProbeLevel], rule: EvalgateKneeRule | None = None
) -> int | None:
    """The level to measure next to pin the knee down between the saturating level and the
    unsaturated one below it (their midpoint), or None: no plateau yet, or close enough (the gap
    is at most ``resolution`` x the lower level, or 1)."""
    rule = rule or EvalgateKneeRule()
    clean = evalgate_clean_levels(levels, rule)
    if evalgate_plateau(clean, rule) is None:
        return None
    knee, _ = _saturating(clean, rule)
    below = [level.concurrency for level in clean if level.concurrency < knee.concurrency]
    if not below:
        return None
    low = below[-1]
    if knee.concurrency - low <= max(1, int(low * rule.resolution)):
        return None
    middle = (low + knee.concurrency) // 2
    measured = {level.concurrency for level in levels}
    return None if middle in measured or middle <= low else middle


def _saturating(
    clean: Sequence[EvalgateProbeLevel], rule: EvalgateKneeRule
) -> tuple[EvalgateProbeLevel, EvalgateProbeLevel]:
    """(the smallest level within ``min_gain`` of the best throughput, the best level)."""
    by_tokens = _by_tokens(clean)
    best = max(clean, key=lambda level: _throughput(level, by_tokens))
    floor = (1.0 - rule.min_gain) * _throughput(best, by_tokens)
    knee = next(level for level in clean if _throughput(level, by_tokens) >= floor)
    return knee, best


def _gain(
    low: EvalgateProbeLevel, high: EvalgateProbeLevel, clean: Sequence[EvalgateProbeLevel]
) -> float:
    by_tokens = _by_tokens(clean)
    return _ratio(_throughput(high, by_tokens), _throughput(low, by_tokens)) - 1.0


def _rise(low: EvalgateProbeLevel, high: EvalgateProbeLevel) -> float:
    # the larger of the median's and the p95's rise: one slow outlier at the lower level can
    # hide a queue in its p95 (seen on a loaded machine), never in its median as well
    return max(_ratio(high.p50_s, low.p50_s), _ratio(high.p95_s, low.p95_s)) - 1.0


def _by_tokens(clean: Sequence[EvalgateProbeLevel]) -> bool:
    return bool(clean) and all(level.window_tokens > 0 for level in clean)


def _no_knee_reason(
    levels: Sequence[EvalgateProbeLevel], clean: Sequence[EvalgateProbeLevel], top: int
) -> str:
    if len(clean) < len(levels):
        failed = levels[len(clean)]
        share = 100 * failed.error_fraction
        return f"no knee before errors: {failed.concurrency} in flight had {share:.1f} % errors"
    return f"no knee up to {top} in flight: throughput still grew; probe higher to find it"


def _throughput(level: EvalgateProbeLevel, by_tokens: bool) -> float:
    return level.tokens_per_s if by_tokens else level.requests_per_s


def _ratio(high: float, low: float) -> float:
    if low <= 0.0:
        return math.inf if high > 0.0 else 1.0
    return high / low
