"""Capacity arithmetic for ``evalgate plan`` (SPEC section 12, issue 16): output tokens, GPU-hours,
wall time on N replicas, and the replicas a target wall time needs.

Contracts (``docs/capacity.md`` writes them out with the seed's example):

- A candidate's **output tokens** are its requests (cases x repetitions) times the mean output
  tokens of one request (measured in the store, or assumed). Its **prefill tokens** (the
  prompts' tokens, what long-context cases spend their time on) are counted beside them, from
  the suite's prompts (``manifest.context``: characters / 4, stated as an estimate); replica
  time stays output tokens over the output rate (the rate measured includes the prefill).
- **Replica-seconds** are output tokens / the output tokens per second one replica sustains;
  **GPU-hours** are replica-seconds x GPUs per replica / 3600.
- **Wall time on N replicas** is replica-seconds / N: replicas are assumed to scale linearly and
  the run's concurrency to keep all of them at that rate.
- **Still to run**: the requests without a stored answer (a run resumes: stored answers, the
  baseline's included, are reused), with their share of tokens and replica-seconds.
- **Replicas for a target wall time** T: the smallest N with replica-seconds / N <= T, i.e.
  ``ceil(replica_seconds / T)``, at least 1.
- **Replicas for a target load** R (requests/s): the fewest N with N x r >= R, where r is the
  candidate's max rate at the SLO (``max_rate_at_slo``: the highest swept arrival rate at which
  one replica, the one endpoint the load phase calls, met the SLO), i.e. ``ceil(R / r)``, at
  least 1. The decision records r (``perf_phase.max_rate_at_slo``): the autoscaler's
  per-replica number.
- The **measured rate** of a stored run is its output tokens over its busy time, the length of
  the union of its requests' ``[started_at, finished_at]`` intervals (so pauses between resumed
  runs do not count), divided over the candidate's endpoint replicas (its base URLs). It is what
  the run achieved at its budget: below the endpoint's knee it understates a replica (then take
  ``evalgate probe``'s figure).

Pure: no I/O, no printing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_SECONDS_PER_HOUR = 3600.0
# one answered request: (completion_tokens, e2e_s, started_at, finished_at), times ISO 8601
EvalgateMeasuredRow = tuple[int | None, float, str, str]


@dataclass(frozen=True)
class EvalgateCapacityInput:
    """What one candidate's plan starts from; ``*_source`` says where each figure came from."""

    name: str
    requests: int
    tokens_per_request: float
    tokens_source: str
    tokens_per_s: float
    rate_source: str
    gpus_per_replica: int
    # long context (SPEC 18): the prompt tokens the requests prefill (None: not known)
    prefill_tokens: float | None = None
    prefill_source: str = "not counted"


@dataclass(frozen=True)
class EvalgateCapacityPlan:
    """One candidate's plan: tokens, replica time, GPU-hours, wall time on ``replicas``."""

    given: EvalgateCapacityInput
    output_tokens: float
    replica_s: float
    gpu_hours: float
    replicas: int
    wall_s: float


@dataclass(frozen=True)
class EvalgateMeasured:
    """What a stored run of one candidate measured (answers with a token count only)."""

    records: int
    output_tokens: int
    busy_s: float
    e2e_total_s: float
    replicas: int

    @property
    def tokens_per_request(self) -> float:
        """Mean output tokens of one request."""
        return self.output_tokens / self.records

    @property
    def e2e_mean_s(self) -> float:
        """Mean end-to-end seconds of one request."""
        return self.e2e_total_s / self.records

    @property
    def tokens_per_s(self) -> float | None:
        """Output tokens per second of one replica over the busy time (None without any)."""
        if self.busy_s <= 0.0:
            return None
        return self.output_tokens / self.busy_s / self.replicas


def evalgate_capacity_plan(given: EvalgateCapacityInput, replicas: int) -> EvalgateCapacityPlan:
    """The plan of ``given`` on ``replicas`` replicas (all figures checked positive)."""
    _check_input(given)
    _check_positive("--replicas", replicas)
    tokens = given.requests * given.tokens_per_request
    replica_s = tokens / given.tokens_per_s
    gpu_hours = replica_s * given.gpus_per_replica / EVALGATE_SECONDS_PER_HOUR
    return EvalgateCapacityPlan(given, tokens, replica_s, gpu_hours, replicas, replica_s / replicas)


def evalgate_still_to_run(plan: EvalgateCapacityPlan, stored: int) -> tuple[int, float, float]:
    """(requests, output tokens, replica-seconds) that the next run still sends when ``stored``
    identities already have an answer: those are reused (a run resumes), the rest are asked."""
    requests = max(0, plan.given.requests - stored)
    tokens = requests * plan.given.tokens_per_request
    return requests, tokens, tokens / plan.given.tokens_per_s


def evalgate_replicas_for(replica_s: float, target_s: float) -> int:
    """The fewest replicas that finish ``replica_s`` of work within ``target_s`` of wall time."""
    _check_positive("--target-hours", target_s)
    # a hair of tolerance so that 8000 s over a 1000 s target is 8 replicas, not 9 from rounding
    return max(1, math.ceil(replica_s / target_s - 1e-9))


@dataclass(frozen=True)
class RateAtSlo:
    """A ``max_rate_at_slo`` rule's figures as a decision records them."""

    rule: str
    candidate: str
    ttft_p95_s: float
    tpot_p95_s: float
    rates: Mapping[str, float | None]


def rates_at_slo(decision: Mapping[str, Any], source: str) -> list[RateAtSlo]:
    """The max rates at the SLO a decision record holds (``perf_phase.max_rate_at_slo``);
    ``EvalgateConfigError(source, key, reason)`` when it holds none or they are malformed."""
    key = "perf_phase.max_rate_at_slo"
    phase = decision.get("perf_phase")
    entries = phase.get("max_rate_at_slo") if isinstance(phase, Mapping) else None
    if not isinstance(entries, list) or not entries:
        reason = "no capacity sweep recorded (a max_rate_at_slo rule and perf.sweep make one)"
        raise EvalgateConfigError(source, key, reason)
    try:
        return [
            RateAtSlo(
                str(e["rule"]),
                str(e["candidate"]),
                float(e["slo"]["ttft_p95_s"]),
                float(e["slo"]["tpot_p95_s"]),
                {str(n): None if r is None else float(r) for n, r in e["rates"].items()},
            )
            for e in entries
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise EvalgateConfigError(source, key, f"malformed entry: {error!r}") from None


def replicas_for_rate(target_rate: float, per_replica: float) -> int:
    """The fewest replicas that sustain ``target_rate`` requests/s at ``per_replica`` each."""
    _check_positive("--target-rate", target_rate)
    _check_positive("max rate at the SLO per replica", per_replica)
    return max(1, math.ceil(target_rate / per_replica - 1e-9))


def evalgate_busy_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals (seconds; empty ones count 0)."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def evalgate_measure(records: Sequence[EvalgateMeasuredRow], replicas: int) -> EvalgateMeasured:
    """Measure answered requests: ``(completion_tokens, e2e_s, started_at, finished_at)`` rows
    (ISO 8601 times); rows without a token count are left out."""
    counted = [row for row in records if row[0] is not None]
    spans = [(_epoch(row[2]), _epoch(row[3])) for row in counted]
    return EvalgateMeasured(
        records=len(counted),
        output_tokens=sum(int(row[0] or 0) for row in counted),
        busy_s=evalgate_busy_seconds(spans),
        e2e_total_s=sum(float(row[1]) for row in counted),
        replicas=max(1, replicas),
    )


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _check_input(given: EvalgateCapacityInput) -> None:
    where = f"candidate {given.name}"
    if given.requests < 0:
        raise EvalgateConfigError(where, "requests", f"must be >= 0, got {given.requests}")
    if not math.isfinite(given.tokens_per_request) or given.tokens_per_request < 0:
        reason = f"must be a finite number >= 0, got {given.tokens_per_request}"
        raise EvalgateConfigError(where, "output tokens per request", reason)
    _check_positive(f"{where}: output tokens/s per replica", given.tokens_per_s)
    _check_positive(f"{where}: GPUs per replica", given.gpus_per_replica)


def _check_positive(key: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise EvalgateConfigError("command line", key, f"must be a finite number > 0, got {value}")
