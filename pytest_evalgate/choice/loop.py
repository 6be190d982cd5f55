"""One multiple-choice identity's requests, run by the runner's child (SPEC 18).

``evalgate_run_choices(call, body, spec)`` sends one ``/v1/completions`` request per choice,
all at once (each through ``call``, so through the run-wide budget): the prompt is
``spec["context"]`` then the choice's continuation (the target delimiter and the choice), with
``echo: true``, ``logprobs: 1`` and ``max_tokens: spec["max_tokens"]`` (0, or 1 for a server
that refuses 0: the pytest side probed it once per candidate). It returns one
``EvalgateCallResult`` standing for them all (tokens and attempts summed, the first request's
queue time, the wall time of the whole as ``e2e_s``; the first error, if any) and the record's
``choice`` member: ``{"method", "max_tokens", "choices": [{"loglikelihood", "tokens",
"greedy"}]}`` in the choices' order. Scoring (``acc``, ``acc_norm``) is the pytest side's.

An answer without usable ``logprobs`` is ``malformed_response`` (an endpoint error, never a
wrong answer: the identity has no result and a rerun asks again).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from pytest_evalgate.choice.loglik import EvalgateChoiceLoglik, evalgate_choice_loglik
from pytest_evalgate.client.types import EvalgateCallError, EvalgateCallResult
from pytest_evalgate.errors import EvalgateAnswerError

EvalgateModelCall = Callable[[Mapping[str, Any]], Awaitable[EvalgateCallResult]]


def evalgate_choice_body(
    body: Mapping[str, Any], context: str, continuation: str, max_tokens: int
) -> dict[str, Any]:
    """The request body of one choice: ``body`` with the whole prompt and the echo settings."""
    return {
        **body,
        "prompt": context + continuation,
        "echo": True,
        "logprobs": 1,
        "max_tokens": max_tokens,
        "temperature": 0,
    }


async def evalgate_run_choices(
    call: EvalgateModelCall, body: Mapping[str, Any], spec: Mapping[str, Any]
) -> tuple[EvalgateCallResult, dict[str, Any]]:
    """Request every choice of one identity concurrently (see the module docstring)."""
    context = str(spec["context"])
    continuations = [str(c) for c in spec["continuations"]]
    max_tokens = int(spec["max_tokens"])
    started = time.perf_counter()
    results = await asyncio.gather(
        *(call(evalgate_choice_body(body, context, c, max_tokens)) for c in continuations)
    )
    wall = time.perf_counter() - started
    facts: dict[str, Any] = {"method": "loglikelihood", "max_tokens": max_tokens, "choices": []}
    combined = _combined(list(results), wall)
    if combined.error is not None:
        return combined, facts
    try:
        picks = [_loglik(r, context, c) for r, c in zip(results, continuations, strict=True)]
    except EvalgateAnswerError as exc:
        error = EvalgateCallError(exc.category, 200, exc.message, False)
        return replace(combined, error=error), facts
    facts["choices"] = [
        {"loglikelihood": p.loglikelihood, "tokens": p.tokens, "greedy": p.greedy} for p in picks
    ]
    return combined, facts


def _loglik(result: EvalgateCallResult, context: str, continuation: str) -> EvalgateChoiceLoglik:
    if result.logprobs is None:
        reason = "the completion carries no logprobs (echo: true, logprobs: 1 was asked)"
        raise EvalgateAnswerError("malformed_response", reason, retry=False)
    return evalgate_choice_loglik(result.logprobs, len(context), len(context + continuation))


def _sum(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v)


def _combined(results: list[EvalgateCallResult], wall_s: float) -> EvalgateCallResult:
    first = results[0]
    error = next((r.error for r in results if r.error is not None), None)
    return EvalgateCallResult(
        output="",
        finish_reason=first.finish_reason,
        prompt_tokens=_sum([r.prompt_tokens for r in results]),
        completion_tokens=_sum([r.completion_tokens for r in results]),
        ttft_s=None,
        tpot_s=None,
        itl_s=(),
        e2e_s=wall_s,
        queued_s=first.queued_s,
        attempts=sum(r.attempts for r in results),
        error=error,
        sent_at=first.sent_at,
        usage_flag=next((r.usage_flag for r in results if r.usage_flag), None),
        model=next((r.model for r in results if r.model), None),
        system_fingerprint=next(
            (r.system_fingerprint for r in results if r.system_fingerprint), None
        ),
    )
