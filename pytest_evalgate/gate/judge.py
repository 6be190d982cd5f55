"""The judge's gate rules (SPEC section 10): ``pairwise`` and ``judge_agreement``.

Contracts
---------
- ``{slice: S, rule: pairwise, margin: m}`` passes when the lower bound of the net win rate
  ((wins - losses) / cases, each repetition weighing 1/K; cluster bootstrap over the case
  clusters) over slice S is > -m. Only consistent verdicts count (``judge.pairwise``).
- ``{rule: judge_agreement, min_kappa: k}`` passes when the lower bound of Cohen's kappa between
  the pinned judge and the golden set's human labels (quadratic-weighted on a pointwise scale,
  unweighted on preferences) is >= k. Its reason names the judge: an uncalibrated judge fails
  the gate, and the candidate is not what failed.
- Both read ``gate_input.judge`` (``judged.EvalgateJudgeFacts``); without it (a suite that is
  not judged, or no judged pair yet) the rule is not evaluated and does not pass.
- ``evalgate_judge_rule`` returns the numbers of an ``EvalgateRuleResult`` as a mapping; the gate
  builds the result (this module imports nothing of the gate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

from pytest_evalgate.gate.numbers import EvalgateRuleNumbers
from pytest_evalgate.judge.agreement import EvalgateAgreement
from pytest_evalgate.judge.pairwise import (
    EvalgatePairwiseCases,
    evalgate_net_win_rate,
    evalgate_pairwise_slice,
)
from pytest_evalgate.policy.values import evalgate_bound
from pytest_evalgate.stats import EvalgateSeed

EVALGATE_JUDGE_RULES = ("pairwise", "judge_agreement")


class EvalgateJudgeFactsLike(Protocol):
    """What the judge rules read: the attributes of ``aggregate.judged.EvalgateJudgeFacts``."""

    @property
    def judge(self) -> Mapping[str, object]: ...
    @property
    def pairwise(self) -> EvalgatePairwiseCases | None: ...
    @property
    def agreement(self) -> EvalgateAgreement | None: ...
    @property
    def agreement_reason(self) -> str: ...


def evalgate_judge_rule(
    kind: str,
    target: str,
    limit: float,
    facts: EvalgateJudgeFactsLike | None,
    *,
    confidence: float,
    resamples: int,
    seed: EvalgateSeed,
) -> EvalgateRuleNumbers:
    """The numbers, pass and reason of one judge rule (see the module contract); ``limit`` is
    the rule's ``margin`` or ``min_kappa`` as gate.yaml writes it."""
    if facts is None:
        return _not_evaluated("not evaluated: the suite has no judged results")
    if kind == "pairwise":
        return _pairwise(target, limit, facts, confidence, resamples, seed)
    return _agreement(limit, facts)


def _not_evaluated(reason: str) -> EvalgateRuleNumbers:
    return {"passed": False, "evaluated": False, "reason": reason}


def _pairwise(
    target: str,
    margin: float,
    facts: EvalgateJudgeFactsLike,
    confidence: float,
    resamples: int,
    seed: EvalgateSeed,
) -> EvalgateRuleNumbers:
    cases = facts.pairwise
    if cases is None:
        return _not_evaluated("not evaluated: no pair judged in both orders")
    sliced = evalgate_pairwise_slice(cases, target)
    clusters = len(set(sliced.clusters.tolist()))
    if clusters < 2:
        reason = f"not evaluated: {clusters} cluster(s); an interval needs at least 2"
        return {**_not_evaluated(reason), "n_cases": len(sliced.case_ids), "n_clusters": clusters}
    rate = evalgate_net_win_rate(sliced, resamples, seed, confidence)
    bound = evalgate_bound("pairwise", margin)
    passed = rate.lo > bound
    why = f"net win rate {rate.estimate:+.4f}, lower bound {rate.lo:+.4f}"
    verdict = f"passes: {why} > {bound:+.4f}" if passed else f"fails: {why} <= {bound:+.4f}"
    return {
        "passed": passed, "reason": f"{verdict} (judge {_judge_name(facts)})",
        "n_cases": rate.cases, "n_clusters": clusters, "estimate": rate.estimate,
        "lo": rate.lo, "hi": rate.hi, "limit": margin,
    }  # fmt: skip


def _agreement(min_kappa: float, facts: EvalgateJudgeFactsLike) -> EvalgateRuleNumbers:
    agreement = facts.agreement
    name = _judge_name(facts)
    if agreement is None:
        return _not_evaluated(f"not evaluated: judge {name}: {facts.agreement_reason}")
    numbers: EvalgateRuleNumbers = {
        "n_cases": agreement.n, "estimate": agreement.kappa, "lo": agreement.lo,
        "hi": agreement.hi, "limit": min_kappa,
    }  # fmt: skip
    lo = agreement.lo
    if math.isfinite(lo) and lo >= min_kappa:
        reason = f"passes: judge {name} agrees with people, kappa lower bound {lo:.4f}"
        reason += f" >= {min_kappa}"
        return {**numbers, "passed": True, "reason": reason}
    reason = (
        f"the judge failed, not the candidate: judge {name} agrees too little with the golden "
        f"set (kappa {agreement.kappa:.4f}, lower bound {lo:.4f} < min_kappa {min_kappa})"
    )
    return {**numbers, "passed": False, "reason": reason}


def _judge_name(facts: EvalgateJudgeFactsLike) -> str:
    judge = facts.judge
    return f"{judge['model']} ({judge['revision']}, key {str(judge['key'])[:12]})"
