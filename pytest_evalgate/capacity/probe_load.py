"""The concurrency sweep of ``evalgate probe``: closed-loop levels against one endpoint.

Contracts (``docs/capacity.md``):

- **One endpoint, one attempt.** Every request goes to the given base URL only, with
  ``max_attempts = 1``: a probe measures the endpoint, and retries would hide its failures and
  multiply the load exactly when it is overloaded. A fatal error (auth, bad request, no quota)
  stops the level's workers at once and ends the sweep.
- **A level** keeps ``concurrency`` requests in flight (one worker each; a worker sends its next
  request when its last one ends) until ``rounds x concurrency`` requests were sent or
  ``level_s`` seconds passed, whichever comes first; requests in flight then finish (each
  bounded by ``timeout_s``).
- **Steady window.** Throughput counts the answers completed from the level's first send to its
  last send, over that time: until the last send every worker has a request in flight, while
  the drain after it runs with fewer and would understate what the endpoint sustains. (A level
  of one round, or of one worker, counts to its last completion.)
- **Prompts** cycle in order from the first for every level, so levels see the same mix. A
  suite gives its ``perf.prompts`` (production-shaped by definition) or else its cases, with
  the manifest's generation settings; without a suite the documented default prompts
  (:data:`EVALGATE_PROBE_DEFAULT_PROMPTS`, ``max_tokens`` 256) are sent.
- **Order.** The levels are swept in order until one is not clean
  (``probe.evalgate_level_clean``: the sweep ends there) or a plateau is reached
  (``probe.evalgate_plateau``: higher levels would only queue); then at most ``refinements``
  levels that ``probe.evalgate_next_level`` asks for pin the knee down.

The asyncio loop is this module's own (``asyncio.run``). No printing: ``on_level`` hears of each
level as it ends.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_evalgate.capacity.probe import (
    EvalgateKneeRule,
    EvalgateProbeLevel,
    evalgate_level_clean,
    evalgate_nearest_rank,
    evalgate_next_level,
    evalgate_plateau,
)
from pytest_evalgate.client import EvalgateCallResult, EvalgateClient, EvalgateEndpoint
from pytest_evalgate.client.budget import EvalgateLimiter
from pytest_evalgate.manifest.load import EvalgateManifest

EVALGATE_PROBE_DEFAULT_MAX_TOKENS = 256
# Support-desk shaped questions of mixed length: short lookups, a multi-part request, a long
# pasted context. What a generic chat endpoint serves; a suite's own prompts are better.
EVALGATE_PROBE_DEFAULT_PROMPTS = (
    "How do I reset my password?",
    "My invoice for March shows two charges for the same subscription. Can you explain why "
    "and tell me how to get the duplicate refunded?",
    "Summarise the difference between the Basic and the Pro plan in three bullet points.",
    "I moved to a new address. Which settings do I need to change so that my next order and "
    "my billing statements go to the new place, and will it affect orders already shipped?",
    "Translate to French: 'Your order has shipped and will arrive within five working days.'",
    "Here is the error our integration logs every few minutes: 'HTTP 429 Too Many Requests, "
    "retry after 30 s'. We send about 20 requests a minute from three servers behind one NAT. "
    "What limit are we hitting, how should we back off, and can the limit be raised for our "
    "account? Please answer step by step and mention anything we should monitor.",
    "Is there a student discount?",
    "Write a short, polite reply to a customer whose delivery is three days late.",
)


@dataclass(frozen=True)
class EvalgateProbeSettings:
    """How to sweep: the endpoint (its ``max_attempts`` is forced to 1), the coarse levels, each
    level's bounds, the knee rule and how many refinement levels may follow."""

    endpoint: EvalgateEndpoint
    levels: tuple[int, ...]
    rounds: int = 8
    level_s: float = 30.0
    rule: EvalgateKneeRule = field(default_factory=EvalgateKneeRule)
    refinements: int = 4


def evalgate_default_bodies(api: str, max_tokens: int | None = None) -> list[dict[str, Any]]:
    """Request bodies of the default prompts for ``api`` (``chat`` or ``completions``)."""
    limit = EVALGATE_PROBE_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    key = "prompt" if api == "completions" else "messages"
    return [
        {"max_tokens": limit, "temperature": 0.0, key: _prompt(api, text)}
        for text in EVALGATE_PROBE_DEFAULT_PROMPTS
    ]


def evalgate_suite_bodies(
    manifest: EvalgateManifest, max_tokens: int | None = None
) -> list[dict[str, Any]]:
    """Request bodies from a suite: its perf prompts when it has a ``perf`` block, else its
    cases rendered as the eval renders them, with the manifest's generation settings."""
    if manifest.perf is not None:
        from pytest_evalgate.perf.prompts import evalgate_perf_bodies

        bodies = evalgate_perf_bodies(manifest)
    else:
        bodies = [_case_body(manifest, prompt) for prompt in _case_prompts(manifest)]
    if max_tokens is not None:
        bodies = [{**body, "max_tokens": max_tokens} for body in bodies]
    return bodies


def evalgate_run_probe(
    settings: EvalgateProbeSettings,
    bodies: Sequence[dict[str, Any]],
    on_level: Callable[[EvalgateProbeLevel], None] | None = None,
) -> list[EvalgateProbeLevel]:
    """Sweep ``settings.levels`` in order and refine (module docstring, "Order"); returns every
    level measured, in the order measured."""
    if not bodies:
        raise ValueError("a probe needs at least one request body")
    return asyncio.run(_sweep(settings, list(bodies), on_level))


def _prompt(api: str, text: str) -> Any:
    return text if api == "completions" else [{"role": "user", "content": text}]


def _case_prompts(manifest: EvalgateManifest) -> list[Any]:
    return [case.evalgate_prompt_json() for case in manifest.cases]


def _case_body(manifest: EvalgateManifest, prompt: object) -> dict[str, Any]:
    body: dict[str, Any] = manifest.generation.evalgate_request_fields()
    body["prompt" if isinstance(prompt, str) else "messages"] = prompt
    return body


async def _sweep(
    settings: EvalgateProbeSettings,
    bodies: list[dict[str, Any]],
    on_level: Callable[[EvalgateProbeLevel], None] | None,
) -> list[EvalgateProbeLevel]:
    endpoint = _one_attempt(settings.endpoint)
    top = max(settings.levels)
    client = EvalgateClient(EvalgateLimiter(top, None, None), rng_seed=0)
    measured: list[EvalgateProbeLevel] = []

    async def measure(concurrency: int) -> bool:
        level = await _level(client, endpoint, bodies, concurrency, settings)
        measured.append(level)
        if on_level is not None:
            on_level(level)
        return evalgate_level_clean(level, settings.rule.max_error_fraction)

    try:
        for concurrency in settings.levels:
            if not await measure(concurrency):
                return measured
            if evalgate_plateau(measured, settings.rule) is not None:
                break  # no need to load the endpoint further
        for _ in range(settings.refinements):
            following = evalgate_next_level(measured, settings.rule)
            if following is None or not await measure(following):
                break
    finally:
        await client.aclose()
    return measured


def _one_attempt(endpoint: EvalgateEndpoint) -> EvalgateEndpoint:
    return replace(endpoint, max_attempts=1)


async def _level(
    client: EvalgateClient,
    endpoint: EvalgateEndpoint,
    bodies: list[dict[str, Any]],
    concurrency: int,
    settings: EvalgateProbeSettings,
) -> EvalgateProbeLevel:
    count = settings.rounds * concurrency
    numbers = itertools.count()
    done: list[tuple[float, EvalgateCallResult]] = []  # (completion time, result)
    sends: list[float] = []
    halted: list[bool] = []
    start = time.perf_counter()
    deadline = start + settings.level_s

    async def worker() -> None:
        while not halted and time.perf_counter() < deadline:
            number = next(numbers)
            if number >= count:
                return
            body = bodies[number % len(bodies)]
            est = int(body.get("max_tokens") or EVALGATE_PROBE_DEFAULT_MAX_TOKENS) + 512
            sends.append(time.perf_counter())
            result = await client.call(endpoint, body, f"probe/c{concurrency}/{number}", est)
            done.append((time.perf_counter(), result))
            if result.error is not None and result.error.fatal:
                halted.append(True)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return _summary(concurrency, start, sends, done)


def _summary(
    concurrency: int,
    start: float,
    sends: Sequence[float],
    done: Sequence[tuple[float, EvalgateCallResult]],
) -> EvalgateProbeLevel:
    results = [result for _, result in done]
    answered = [r for r in results if r.error is None]
    end = _window_end(sends, done, concurrency)
    steady = [r for at, r in done if at <= end and r.error is None]
    categories = Counter(r.error.category for r in results if r.error is not None)
    return EvalgateProbeLevel(
        concurrency=concurrency,
        requests=len(results),
        errors=len(results) - len(answered),
        window_s=end - start,
        window_answers=len(steady),
        window_tokens=sum(r.completion_tokens or 0 for r in steady),
        p50_s=evalgate_nearest_rank([r.e2e_s for r in answered], 50.0),
        p95_s=evalgate_nearest_rank([r.e2e_s for r in answered], 95.0),
        error_categories=tuple(sorted(categories.items())),
        first_error=_first_error(results),
    )


def _window_end(
    sends: Sequence[float], done: Sequence[tuple[float, EvalgateCallResult]], concurrency: int
) -> float:
    """The end of the steady window: the last send, while every worker was still busy; the drain
    after it (fewer than ``concurrency`` in flight) would understate throughput. With no
    completion before the last send (a single round), the last completion."""
    last_send = max(sends, default=0.0)
    if concurrency > 1 and any(at <= last_send for at, _ in done):
        return last_send
    return max((at for at, _ in done), default=last_send)


def _first_error(results: Sequence[EvalgateCallResult]) -> str:
    for result in results:
        if result.error is not None:
            return f"{result.error.category}: {result.error.message}"
    return ""
