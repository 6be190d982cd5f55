"""The shadow gate's preference: each kept pair judged by the suite's pinned judge.

A pair is judged when both sides answered (status 200, no error) and it keeps its question
(``shadow serve --keep-question``). With a **pairwise** judge, the pair is asked in both orders
exactly as offline pairwise judging asks a (case, repetition)
(``judge.prompt.evalgate_pairwise_orders``: candidate first, then stable first) and the two
verdicts become one outcome by ``judge.pairwise.evalgate_pair_outcome`` (orders that disagree
are a tie). With a **pointwise** judge, each side is scored as the online judge scores an
answer, and the higher score wins (equal scores: a tie). The outcome is the candidate's:
``win``, ``loss`` or ``tie``. A pair the judge gave no usable verdict for keeps no outcome
(counted by category); it never counts as a tie.

``evalgate_shadow_preferences`` returns copies of the pairs, each judged one with
``"preference"`` set; ``shadow.verdict`` turns them into the ``judge_preference_delta`` rule.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_evalgate.judge.pairwise import EvalgatePairResult, evalgate_pair_outcome
from pytest_evalgate.judge.parse import EvalgatePairwiseVerdict, evalgate_parse_pairwise
from pytest_evalgate.judge.prompt import evalgate_pairwise_orders
from pytest_evalgate.onlinejudge.feed import EvalgateOnlineAnswer
from pytest_evalgate.onlinejudge.judging import EvalgateOnlineScorer

EVALGATE_PREFERENCE_KEY = "preference"


@dataclass
class EvalgatePreferences:
    """The judged pairs and what happened to the others."""

    pairs: list[dict[str, Any]]
    judged: int = 0
    not_judged: Counter[str] = field(default_factory=Counter)  # reason -> pairs


def _judgeable(pair: Mapping[str, Any]) -> str | None:
    """Why a pair cannot be judged, or None."""
    if not isinstance(pair.get("question"), str):
        return "no question kept (shadow serve --keep-question)"
    for side in ("stable", "candidate"):
        answer = pair.get(side)
        if not isinstance(answer, dict) or answer.get("error") is not None:
            return "a side did not answer"
        if answer.get("status") != 200 or not isinstance(answer.get("text"), str):
            return "a side did not answer"
    return None


async def evalgate_shadow_preferences(
    scorer: EvalgateOnlineScorer, pairs: Sequence[Mapping[str, Any]]
) -> EvalgatePreferences:
    """Judge every judgeable pair (at most ``scorer.concurrency`` at once); see the module."""
    out = EvalgatePreferences([dict(pair) for pair in pairs])
    slots = asyncio.Semaphore(scorer.concurrency)

    async def one(index: int, pair: dict[str, Any]) -> None:
        async with slots:
            outcome = await _outcome(scorer, index, pair)
        if outcome in ("win", "loss", "tie"):
            pair[EVALGATE_PREFERENCE_KEY] = outcome
            out.judged += 1
        else:
            out.not_judged[outcome] += 1

    tasks = []
    for index, pair in enumerate(out.pairs):
        reason = _judgeable(pair)
        if reason is not None:
            out.not_judged[reason] += 1
        else:
            tasks.append(one(index, pair))
    try:
        await asyncio.gather(*tasks)
    finally:
        await scorer.aclose()
    return out


async def _outcome(scorer: EvalgateOnlineScorer, index: int, pair: Mapping[str, Any]) -> str:
    question = pair["question"]
    candidate, stable = pair["candidate"]["text"], pair["stable"]["text"]
    if scorer.judged.mode == "pointwise":
        return await _pointwise(scorer, question, candidate, stable)
    orders = evalgate_pairwise_orders(scorer.judged.evaluator, question, candidate, stable)
    winners = []
    for order, messages in zip(("candidate_first", "stable_first"), orders, strict=True):
        text = await scorer.ask(messages, f"preference/{index}/{order}")
        if text.error is not None:
            return text.error
        verdict = evalgate_parse_pairwise(text.output)
        if not isinstance(verdict, EvalgatePairwiseVerdict):
            return verdict.category
        winners.append(verdict.winner)
    result: EvalgatePairResult = evalgate_pair_outcome(winners[0], winners[1]).result
    return result


async def _pointwise(
    scorer: EvalgateOnlineScorer, question: str, candidate: str, stable: str
) -> str:
    scores = []
    for version, text in (("canary", candidate), ("stable", stable)):
        score = await scorer.score(EvalgateOnlineAnswer(version, question, text))
        if isinstance(score, str):
            return score
        scores.append(score)
    return "win" if scores[0] > scores[1] else "loss" if scores[0] < scores[1] else "tie"
