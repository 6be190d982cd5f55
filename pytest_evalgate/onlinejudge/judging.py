"""One production answer scored by the suite's pinned judge, as offline judging asks it.

The request is offline pointwise judging's (``judge.prompt.evalgate_pointwise_messages`` with
the suite's rubric and scale, ``evalgate_judge_body`` with the judge's pinned settings), sent to
the judge's endpoint (``endpoints.judge``: the same model, pins and budget; a ``simulated://``
judge is started for it) and parsed by ``judge.parse.evalgate_parse_pointwise``. So the judge key
is the offline one (``manifest.judged.key``), exported with the scores. Production answers have
no reference answer: none is sent.

The result is the verdict's 0..1 value, or the error category (``judge_<client category>`` or
``judge_unparseable``): an error is counted apart and never becomes a score. A pairwise judge
has no score of one answer and is refused (``EvalgateConfigError`` at ``evaluator.mode``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from pytest_evalgate.client import EvalgateClient, EvalgateEndpoint
from pytest_evalgate.client.budget import EvalgateLimiter
from pytest_evalgate.endpoints.judge import EvalgateJudgeEndpoints, evalgate_check_judge_endpoint
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.judge.parse import EvalgateJudgeUnparseable, evalgate_parse_pointwise
from pytest_evalgate.judge.prompt import evalgate_judge_body, evalgate_pointwise_messages
from pytest_evalgate.manifest.judge import EvalgateJudged
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.onlinejudge.feed import EvalgateOnlineAnswer


def evalgate_online_judged(manifest: EvalgateManifest, *, pairwise: bool = False) -> EvalgateJudged:
    """The suite's judge; a suite without one is refused, and so is a pairwise judge unless
    ``pairwise`` (the shadow gate's preference judges pairs; the online judge scores answers)."""
    judged = manifest.judged
    if judged is None:
        reason = f"suite {manifest.suite!r} is not judged (evaluator.scorer is not 'judge')"
        raise EvalgateConfigError(manifest.path, "evaluator.scorer", reason)
    if judged.mode != "pointwise" and not pairwise:
        reason = (
            "online judging scores each answer on its own, and a pairwise judge gives no score "
            "of one answer: use a pointwise judged suite (mode: pointwise, with a scale)"
        )
        raise EvalgateConfigError(manifest.path, "evaluator.mode", reason)
    return judged


@dataclass(frozen=True)
class EvalgateJudgeText:
    """What one judge request gave: the judge's text, or the error category."""

    output: str | None
    error: str | None


@contextlib.contextmanager
def evalgate_online_judge_endpoint(manifest: EvalgateManifest) -> Iterator[EvalgateEndpoint]:
    """The suite's judge endpoint, as offline judging builds it (a simulated judge is started
    and stopped on exit); a base URL or key variable that cannot work is refused first."""
    evalgate_check_judge_endpoint(manifest)
    endpoints = EvalgateJudgeEndpoints()
    try:
        yield endpoints.evalgate_endpoint(manifest)
    finally:
        endpoints.evalgate_close()


class EvalgateOnlineScorer:
    """Scores answers with one judge endpoint under the judge's budget, on one event loop."""

    def __init__(self, judged: EvalgateJudged, endpoint: EvalgateEndpoint) -> None:
        budget = judged.judge.budget
        self.judged = judged
        self.endpoint = endpoint
        self.concurrency = budget.max_concurrency
        limiter = EvalgateLimiter(
            budget.max_concurrency, budget.requests_per_second, budget.tokens_per_minute
        )
        self._client = EvalgateClient(limiter, rng_seed=0)
        self._numbers = itertools.count(1)

    async def score(self, answer: EvalgateOnlineAnswer) -> float | str:
        """The answer's 0..1 score, or the category of why there is none."""
        evaluator = self.judged.evaluator
        assert evaluator.scale is not None
        messages = evalgate_pointwise_messages(evaluator, answer.question, answer.answer, None)
        text = await self.ask(messages, f"{answer.version}/{next(self._numbers)}")
        if text.error is not None:
            return text.error
        verdict = evalgate_parse_pointwise(text.output, evaluator.scale)
        if isinstance(verdict, EvalgateJudgeUnparseable):
            return verdict.category
        return verdict.value

    async def ask(self, messages: list[dict[str, str]], label: str) -> EvalgateJudgeText:
        """One judge request of ``messages`` with the judge's pinned settings: its text, or
        the error category ``judge_<client category>``."""
        body = evalgate_judge_body(self.judged.judge, messages)
        tokens = sum(len(m["content"]) for m in messages) // 4 + 256
        result = await self._client.call(self.endpoint, body, f"judge/online/{label}", tokens)
        if result.error is not None:
            return EvalgateJudgeText(None, f"judge_{result.error.category}")
        return EvalgateJudgeText(result.output, None)

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self._client.aclose()
