"""The pytest side of multiple choice (SPEC 18): what a work carries to the child, the grade
of what comes back, and the probe of each candidate before the suite.

- ``evalgate_choice_spec(case, manifest, max_tokens)``: for ``method: loglikelihood``,
  ``{"kind": "choices", "context", "continuations", "max_tokens"}`` (each continuation is the
  target delimiter and one choice; ``choice.loop`` sends one request per choice); None for
  ``method: generate`` (one request whose prompt holds the lettered choices).
- ``evalgate_choice_graded(case, manifest, outcome)``: the outcome with its ``choice`` member
  completed (``count``, ``target``, ``acc``, ``acc_norm``) and its ``output`` the picked
  choice's text, and the grade to seal it with: 1.0 when the pick of ``evaluator.options.
  metric`` (``acc`` unless ``acc_norm`` is named) is the target, else 0.0.
- ``evalgate_choice_errored(case, outcome)``: an errored identity's ``choice`` member completed
  with the count and target and no picks (its record has no score, like every error's).
- ``evalgate_probe_choices(endpoint, candidate)``: one request with ``max_tokens: 0`` (a 400
  asks again with 1) before any case: returns the ``max_tokens`` the candidate's requests use
  (recorded in every record's ``choice.max_tokens``); an answer without ``logprobs``, or an
  endpoint that refuses both, is an ``EvalgateConfigError`` naming the candidate (exit 4).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pytest_evalgate.choice.loglik import (
    evalgate_acc_norm_pick,
    evalgate_acc_pick,
    evalgate_logprobs_lists,
)
from pytest_evalgate.choice.loop import evalgate_choice_body
from pytest_evalgate.client import EvalgateCallResult, EvalgateClient, EvalgateEndpoint
from pytest_evalgate.client.budget import EvalgateLimiter
from pytest_evalgate.errors import EvalgateAnswerError, EvalgateConfigError
from pytest_evalgate.manifest.choice import (
    evalgate_by_loglikelihood,
    evalgate_choice_delimiter,
    evalgate_letter_index,
)
from pytest_evalgate.store.records import EvalgateGrade, EvalgateOutcome

if TYPE_CHECKING:  # types only
    from pytest_evalgate.manifest.dataset import EvalgateCase
    from pytest_evalgate.manifest.load import EvalgateManifest

EVALGATE_PROBE_CONTEXT = "evalgate probe: is the sky blue?"
EVALGATE_PROBE_CHOICE = " yes"


def evalgate_is_loglikelihood(manifest: EvalgateManifest) -> bool:
    """Whether ``manifest`` scores multiple choice by log-likelihood."""
    return evalgate_by_loglikelihood(manifest.evaluator)


def evalgate_choice_spec(
    case: EvalgateCase, manifest: EvalgateManifest, max_tokens: int
) -> dict[str, Any] | None:
    """What the child needs for one loglikelihood identity (see the module docstring)."""
    if not case.choices or not evalgate_is_loglikelihood(manifest):
        return None
    delimiter = evalgate_choice_delimiter(manifest.evaluator.options)
    return {
        "kind": "choices",
        "context": case.evalgate_prompt_json(),
        "continuations": [delimiter + choice for choice in case.choices],
        "max_tokens": max_tokens,
    }


def evalgate_choice_graded(
    case: EvalgateCase, manifest: EvalgateManifest, outcome: EvalgateOutcome
) -> tuple[EvalgateOutcome, EvalgateGrade]:
    """The outcome completed and the grade that seals it (see the module docstring)."""
    target = int(case.target)
    facts = _facts(case, manifest, outcome)
    metric = str(manifest.evaluator.options.get("metric", "acc"))
    pick = facts[metric]
    score = 1.0 if pick == target else 0.0
    output = None if pick is None else case.choices[pick]
    graded: EvalgateOutcome = {**outcome, "choice": facts}
    if facts["method"] == "loglikelihood":
        graded["output"] = output

    def grade(_output: str) -> tuple[float | None, bool | None]:
        return score, score == 1.0

    return graded, grade


def evalgate_choice_errored(case: EvalgateCase, outcome: EvalgateOutcome) -> EvalgateOutcome:
    """An errored identity's outcome with its ``choice`` member complete: the count and the
    target, no picks (``acc`` and ``acc_norm`` null), the log-likelihoods that came back (none
    when any request failed)."""
    facts = {**outcome["choice"], "count": len(case.choices), "target": int(case.target)}
    return {**outcome, "choice": {**facts, "acc": None, "acc_norm": None}}


def _facts(
    case: EvalgateCase, manifest: EvalgateManifest, outcome: EvalgateOutcome
) -> dict[str, Any]:
    count, target = len(case.choices), int(case.target)
    if "choice" not in outcome:  # method: generate: the answer names a letter
        acc = evalgate_letter_index(outcome["output"] or "", count)
        base: dict[str, Any] = {"method": "generate", "max_tokens": None, "choices": []}
        return {**base, "count": count, "target": target, "acc": acc, "acc_norm": None}
    facts = dict(outcome["choice"])
    logliks = [float(c["loglikelihood"]) for c in facts["choices"]]
    facts |= {"count": count, "target": target}
    facts["acc"] = evalgate_acc_pick(logliks)
    facts["acc_norm"] = evalgate_acc_norm_pick(logliks, case.choices)
    return facts


def evalgate_probe_choices(endpoint: EvalgateEndpoint, candidate: str, source: str) -> int:
    """The ``max_tokens`` (0 or 1) ``candidate``'s choice requests use (module docstring)."""
    return asyncio.run(_probe(endpoint, candidate, source))


async def _probe(endpoint: EvalgateEndpoint, candidate: str, source: str) -> int:
    client = EvalgateClient(EvalgateLimiter(1, None, None))
    try:
        for max_tokens in (0, 1):
            result = await _ask(client, endpoint, max_tokens)
            if result.error is None:
                _check_logprobs(result, candidate, source, max_tokens)
                return max_tokens
            if result.error.status != 400:
                break
    finally:
        await client.aclose()
    error = result.error
    reason = (
        f"the log-likelihood probe failed before any case ran: {error.category}: {error.message}"
        if error is not None
        else "the log-likelihood probe failed"
    )
    raise EvalgateConfigError(source, f"candidates.{candidate}", reason)


async def _ask(
    client: EvalgateClient, endpoint: EvalgateEndpoint, max_tokens: int
) -> EvalgateCallResult:
    body = evalgate_choice_body({}, EVALGATE_PROBE_CONTEXT, EVALGATE_PROBE_CHOICE, max_tokens)
    tokens = len(EVALGATE_PROBE_CONTEXT) // 4 + 2
    return await client.call(endpoint, body, f"evalgate-probe/{endpoint.model}", tokens)


def _check_logprobs(
    result: EvalgateCallResult, candidate: str, source: str, max_tokens: int
) -> None:
    logprobs = result.logprobs
    usable = logprobs is not None
    if logprobs is not None:
        try:
            evalgate_logprobs_lists(logprobs)
        except EvalgateAnswerError:
            usable = False
    if not usable:
        reason = (
            f"candidate {candidate!r}: the endpoint returned no log probabilities (tokens,"
            f" token_logprobs, text_offset) for echo: true, logprobs: 1, max_tokens: {max_tokens};"
            " scorer: choice with method: loglikelihood needs a server that returns them"
            " (vLLM's /v1/completions does)"
        )
        raise EvalgateConfigError(source, f"candidates.{candidate}", reason)
