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

Pure: no pytest. The asyncio loop is this module's own (``asyncio.run``), so call it from a
thread without a running loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytest_evalgate.client import EvalgateCallResult, EvalgateClient, EvalgateEndpoint
from pytest_evalgate.client.budget import EvalgateLimiter
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.jsonlread import evalgate_jsonl_rows
from pytest_evalgate.manifest.dataset import evalgate_render_template
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.manifest.schema import EvalgatePerfSchema
from pytest_evalgate.perf.metrics import EVALGATE_PERF_METRICS
from pytest_evalgate.perf.plan import EvalgatePerfPlan, evalgate_perf_plan
from pytest_evalgate.perf.result import EvalgatePerfResult, evalgate_load_perf, evalgate_save_perf
from pytest_evalgate.perf.sweep import Step, side_counts
from pytest_evalgate.stats import evalgate_percentile
from pytest_evalgate.store import EvalgateStoreBackend

FloatArray = npt.NDArray[np.float64]

EVALGATE_PERF_MAX_DELAY_P95_S = 0.010
EVALGATE_PERF_MIN_RATE_FRACTION = 0.95
EVALGATE_PERF_MAX_ERROR_FRACTION = 0.01
EVALGATE_PERF_SCHEDULE_METRICS = ("ttft", "e2e")
_CAP_MIN, _CAP_MAX = 16, 1024
_START_LEAD_S = 0.05  # t0 lies this far ahead so that setting up the first sends is not late


# --------------------------------------------------------------------------- prompts


def evalgate_perf_bodies(manifest: EvalgateManifest) -> list[dict[str, Any]]:
    """Request bodies for the prompts file of ``manifest.perf`` (path relative to the suite).

    A row is ``{"messages": [...]}`` (sent as is, chat API only) or ``{"input": "..."}``
    (rendered with the manifest's prompt system and template, like a case). Generation settings
    are the manifest's, with ``perf.max_tokens`` overriding ``max_tokens`` when set.
    """
    perf = _perf_block(manifest)
    path = os.path.join(manifest.suite_dir, perf.prompts)
    generation = manifest.generation.evalgate_request_fields()
    if perf.max_tokens is not None:
        generation["max_tokens"] = perf.max_tokens
    prompts = [_prompt(manifest, path, n, row) for n, row in _rows(path)]
    if not prompts:
        raise EvalgateConfigError(path, "-", "the perf prompts file has no rows")
    return [{**generation, **prompt} for prompt in prompts]


def _perf_block(manifest: EvalgateManifest) -> EvalgatePerfSchema:
    if manifest.perf is None:
        raise EvalgateConfigError(manifest.path, "perf", "the manifest has no perf block")
    return manifest.perf


def _rows(path: str) -> list[tuple[int, Any]]:
    # The one safe reader: unreadable, non-UTF-8, invalid JSON and NaN name the file and line.
    return list(evalgate_jsonl_rows(path, "perf.prompts", path))


def _prompt(manifest: EvalgateManifest, path: str, number: int, row: object) -> dict[str, Any]:
    where = f"line {number}"
    if not isinstance(row, dict) or ("messages" in row) == ("input" in row):
        raise EvalgateConfigError(path, where, "a row needs exactly one of messages or input")
    if "messages" in row:
        if manifest.api != "chat" or not isinstance(row["messages"], list) or not row["messages"]:
            raise EvalgateConfigError(path, where, "messages must be a non-empty list (chat API)")
        return {"messages": row["messages"]}
    if not isinstance(row["input"], str):
        raise EvalgateConfigError(path, f"{where}: input", "must be a string")
    return _render_input(manifest, path, where, row["input"])


def _render_input(manifest: EvalgateManifest, path: str, where: str, text: str) -> dict[str, Any]:
    prompt = manifest.definition["prompt"]
    try:
        rendered = evalgate_render_template(str(prompt.get("template") or "{input}"), text)
    except (KeyError, IndexError, ValueError) as exc:
        reason = f"prompt.template cannot render: {exc}"
        raise EvalgateConfigError(path, where, reason) from None
    if manifest.api == "completions":
        return {"prompt": rendered}
    system = prompt.get("system")
    head = [] if system is None else [{"role": "system", "content": system}]
    return {"messages": [*head, {"role": "user", "content": rendered}]}


# --------------------------------------------------------------------------- the load


@dataclass(frozen=True)
class _Shot:
    """One request of the load: arrival index, side (0 candidate, 1 baseline), its result."""

    arrival: int
    side: int
    result: EvalgateCallResult


def evalgate_perf_concurrency(rate: float, timeout_s: float) -> int:
    """The open-loop concurrency cap: both sides' requests in flight over one timeout, bounded."""
    return int(min(_CAP_MAX, max(_CAP_MIN, math.ceil(2.0 * rate * timeout_s))))


async def _drive(
    plan: EvalgatePerfPlan,
    bodies: Sequence[dict[str, Any]],
    endpoints: tuple[EvalgateEndpoint, EvalgateEndpoint],
    on_arrival: Callable[[int], None] | None,
) -> list[_Shot]:
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
) -> list[_Shot]:
    loop = asyncio.get_running_loop()
    start_mono, start_wall = loop.time() + _START_LEAD_S, time.time() + _START_LEAD_S
    tasks: list[asyncio.Task[_Shot]] = []
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
) -> _Shot:
    est = int(body.get("max_tokens", 256)) + 512  # no tpm bucket here; only an estimate
    identity = f"perf/{'cb'[side]}/{arrival}"
    result = await client.call(endpoint, body, identity, est, scheduled_at=scheduled_at)
    return _Shot(arrival, side, result)


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
    perf = _perf_block(manifest)
    plan = evalgate_perf_plan(
        perf if rate is None else perf.model_copy(update={"rate": rate}), len(bodies)
    )
    sides = tuple(_single_attempt(manifest, endpoints, name) for name in pair)
    shots = asyncio.run(_drive(plan, bodies, (sides[0], sides[1]), on_arrival))
    limits = (max_delay_p95_s, min_rate_fraction, max_error_fraction)
    result = _result(plan, shots, pair, limits)
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


def _result(
    plan: EvalgatePerfPlan,
    shots: Sequence[_Shot],
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
    plan: EvalgatePerfPlan, shots: Sequence[_Shot], side: int, window: tuple[float, float]
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
