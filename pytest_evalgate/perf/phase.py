"""The open-loop load phase of the performance gate (SPEC section 8, issue 6).

``evalgate_run_perf`` sends production-shaped prompts to a candidate and its baseline on one
seeded arrival schedule (``perf_plan``), measures every streamed response with ``EvalgateClient``
and returns an ``EvalgatePerfResult`` (``perf_result``): samples per metric and side, requested
vs achieved rate, the load generator's own scheduling delay, and whether the run can be judged
at all. ``evalgate_perf_phase`` reuses the pair's stored result, or runs the load and commits it.

Contracts (the definitions are written out in ``docs/timings.md``, section "Load phase"):

- **Schedule**: ``perf_plan``'s. Arrivals due before ``warmup_s`` are sent but not measured.
- **Same window, paired arrivals.** Each arrival sends the same prompt to both sides at the
  same scheduled time; the side sent first alternates (even arrivals: candidate first) so
  neither side systematically gets the earlier slot of the event loop. Both sides therefore see
  identical load shape, prompt mix and harness noise.
- **Open loop.** A request is sent when it is due, whatever is still in flight: the limiter's
  concurrency cap is ``2 * rate * timeout_s`` (bounded to [16, 1024]) so it never holds an
  arrival back in a healthy run, and there is no rps or tpm pacing. One attempt per arrival:
  a retry would hide the failure and measure only the last attempt; an errored arrival is counted
  by category and yields no sample.
- **Scheduling delay** of a request is its send time minus its scheduled time (the client's
  ``queued_s`` given ``scheduled_at``). Latency is reported from the send (``samples``, the same
  definitions as the eval phase's records) and from the schedule (``from_schedule``: ttft and
  e2e plus the delay, which is what a user would have seen).
- **Judgeable** only if, for each side, the requests sent inside the measured window are at
  least ``min_rate_fraction`` (0.95) of those scheduled there, the p95 scheduling delay is at
  most ``max_delay_p95_s`` (10 ms), at most ``max_error_fraction`` (1 %) of the measured
  requests errored, and each side has at least one sample. Otherwise ``reason`` says which
  criterion failed with its numbers, and the perf rules are not evaluated (see
  ``perf_result.evalgate_merge_perf``).

The prompts file is read into request bodies by ``perf.prompts``; a window's shots are folded
into its result and judged by ``perf.window``.

Pure: no pytest. The asyncio loop is this module's own (``asyncio.run``), so call it from a
thread without a running loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_evalgate.client import EvalgateClient, EvalgateEndpoint
from pytest_evalgate.client.budget import EvalgateLimiter
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.perf.plan import EvalgatePerfPlan, evalgate_perf_plan
from pytest_evalgate.perf.prompts import evalgate_perf_bodies, perf_block
from pytest_evalgate.perf.result import EvalgatePerfResult, evalgate_load_perf, evalgate_save_perf
from pytest_evalgate.perf.sweep import Step, side_counts
from pytest_evalgate.perf.window import Shot, fold
from pytest_evalgate.stats import evalgate_percentile
from pytest_evalgate.store import EvalgateStoreBackend

EVALGATE_PERF_MAX_DELAY_P95_S = 0.010
EVALGATE_PERF_MIN_RATE_FRACTION = 0.95
EVALGATE_PERF_MAX_ERROR_FRACTION = 0.01
_CAP_MIN, _CAP_MAX = 16, 1024
_START_LEAD_S = 0.05  # t0 lies this far ahead so that setting up the first sends is not late


# --------------------------------------------------------------------------- the load


def evalgate_perf_concurrency(rate: float, timeout_s: float) -> int:
    """The open-loop concurrency cap: both sides' requests in flight over one timeout, bounded."""
    return int(min(_CAP_MAX, max(_CAP_MIN, math.ceil(2.0 * rate * timeout_s))))


async def _drive(
    plan: EvalgatePerfPlan,
    bodies: Sequence[dict[str, Any]],
    endpoints: tuple[EvalgateEndpoint, EvalgateEndpoint],
    on_arrival: Callable[[int], None] | None,
) -> list[Shot]:
    timeout = max(ep.timeout_s for ep in endpoints)
    client = EvalgateClient(
        EvalgateLimiter(evalgate_perf_concurrency(plan.rate, timeout), None, None)
    )
    try:
        return await _dispatch(client, plan, bodies, endpoints, on_arrival)
    finally:
        await client.aclose()


async def _dispatch(
    client: EvalgateClient,
    plan: EvalgatePerfPlan,
    bodies: Sequence[dict[str, Any]],
    endpoints: tuple[EvalgateEndpoint, EvalgateEndpoint],
    on_arrival: Callable[[int], None] | None,
) -> list[Shot]:
    loop = asyncio.get_running_loop()
    start_mono, start_wall = loop.time() + _START_LEAD_S, time.time() + _START_LEAD_S
    tasks: list[asyncio.Task[Shot]] = []
    for i, offset in enumerate(plan.offsets.tolist()):
        await asyncio.sleep(max(0.0, start_mono + offset - loop.time()))
        if on_arrival is not None:
            on_arrival(i)
        body = bodies[int(plan.prompts[i])]
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            shot = _shoot(client, endpoints[side], body, i, side, start_wall + offset)
            tasks.append(asyncio.create_task(shot))
    return list(await asyncio.gather(*tasks))


async def _shoot(
    client: EvalgateClient,
    endpoint: EvalgateEndpoint,
    body: dict[str, Any],
    arrival: int,
    side: int,
    scheduled_at: float,
) -> Shot:
    est = int(body.get("max_tokens", 256)) + 512  # no tpm bucket here; only an estimate
    identity = f"perf/{'cb'[side]}/{arrival}"
    result = await client.call(endpoint, body, identity, est, scheduled_at=scheduled_at)
    return Shot(arrival, side, result)


# --------------------------------------------------------------------------- running it


def evalgate_run_perf(
    manifest: EvalgateManifest,
    endpoints: Mapping[str, EvalgateEndpoint],
    pair: tuple[str, str],
    *,
    max_delay_p95_s: float = EVALGATE_PERF_MAX_DELAY_P95_S,
    min_rate_fraction: float = EVALGATE_PERF_MIN_RATE_FRACTION,
    max_error_fraction: float = EVALGATE_PERF_MAX_ERROR_FRACTION,
    on_arrival: Callable[[int], None] | None = None,
    rate: float | None = None,
) -> EvalgatePerfResult:
    """Run the manifest's perf block against ``pair = (candidate, baseline)`` and measure it.

    With ``perf.sweep`` (and no ``rate``) the capacity sweep follows the window at
    ``perf.rate``: one more window per swept rate, each a ``sweep.Step`` of the result.
    ``rate`` runs one window at that rate instead of ``perf.rate`` (a sweep's step).

    ``endpoints`` maps candidate names to endpoints (e.g. from ``EvalgateEndpointPool``); each is
    used with one attempt per request. ``on_arrival(i)`` is called in the event loop just before
    arrival ``i`` is sent (progress reporting; it must be quick, as anything slow delays the
    schedule and is reported as such). Raises ``EvalgateConfigError`` for a missing perf block,
    an unreadable prompts file or a pair without endpoints.
    """
    bodies = evalgate_perf_bodies(manifest)
    perf = perf_block(manifest)
    plan = evalgate_perf_plan(
        perf if rate is None else perf.model_copy(update={"rate": rate}), len(bodies)
    )
    sides = tuple(_single_attempt(manifest, endpoints, name) for name in pair)
    shots = asyncio.run(_drive(plan, bodies, (sides[0], sides[1]), on_arrival))
    limits = (max_delay_p95_s, min_rate_fraction, max_error_fraction)
    result = fold(plan, shots, pair, limits)
    if rate is not None or not perf.sweep:
        return result
    steps = [
        _step(
            evalgate_run_perf(manifest, endpoints, pair, rate=step, on_arrival=on_arrival), limits
        )
        for step in perf.sweep
    ]
    return dataclasses.replace(result, sweep=tuple(steps))


def _step(result: EvalgatePerfResult, limits: tuple[float, float, float]) -> Step:
    """One window of the sweep, reduced to what ``max_rate_at_slo`` reads."""
    max_delay, min_fraction, max_errors = limits
    kept = bool(result.delay_p95_s <= max_delay)  # NaN (nothing sent) does not keep up
    errored = {name: sum(result.errors[name].values()) for name in result.pair}
    counts = {
        name: side_counts(
            result.achieved_rate[name],
            result.scheduled_rate,
            errored[name],
            result.completed[name],
            result.scheduled,
            (kept, min_fraction, max_errors),
        )
        for name in result.pair
    }
    return Step(
        requested_rate=result.requested_rate,
        scheduled_rate=result.scheduled_rate,
        achieved_rate={name: float(rate) for name, rate in result.achieved_rate.items()},
        ttft_p95_s=_p95(result, "ttft"),
        tpot_p95_s=_p95(result, "tpot"),
        completed=dict(result.completed),
        errored=errored,
        counts=counts,
        delay_p95_s=result.delay_p95_s if math.isfinite(result.delay_p95_s) else None,
        reason=result.reason,
    )


def _p95(result: EvalgatePerfResult, metric: str) -> dict[str, float | None]:
    both = result.samples[metric]
    return {
        name: evalgate_percentile(values, 95) if values.size else None
        for name, values in zip(result.pair, both, strict=True)
    }


def _single_attempt(
    manifest: EvalgateManifest, endpoints: Mapping[str, EvalgateEndpoint], name: str
) -> EvalgateEndpoint:
    if name not in endpoints:
        raise EvalgateConfigError(manifest.path, "perf", f"no endpoint for candidate {name!r}")
    return dataclasses.replace(endpoints[name], max_attempts=1)


# --------------------------------------------------------------------------- reused or run


def evalgate_perf_phase(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    endpoints: Callable[[], Mapping[str, EvalgateEndpoint]] | None,
    pair: tuple[str, str],
) -> EvalgatePerfResult | None:
    """The load phase's result: reused from the store when there is one, else run (when
    ``endpoints`` is given) and committed. None without a perf block or anything to reuse."""
    if manifest.perf is None:
        return None
    stored = evalgate_load_perf(backend, manifest, pair)
    if stored is not None or endpoints is None:
        return stored
    result = evalgate_run_perf(manifest, endpoints(), pair)
    evalgate_save_perf(backend, manifest, pair, result)
    return result
