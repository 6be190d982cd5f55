"""The shadow gate: ``shadow:`` rules judged on the kept pairs, and its decision record.

Per rule (``policy.shadow``), over the pairs it can use (``error_rate_delta``: every pair;
the others: pairs where both sides answered), the estimate and its one-sided upper bound at the
policy's ``confidence``: the ``(1 + confidence) / 2`` percentile of a seeded bootstrap over
pairs (``bootstrap.resamples``, at most 2000, ``bootstrap.seed``), as the offline gate's
two-sided interval puts each bound. ``pass`` when the bound is at most ``max``, ``fail`` when it
is above, ``undecided`` with fewer than ``min_pairs`` pairs. The verdict: ``fail`` if any rule
fails, else ``undecided`` if any is, else ``pass``.

``judge_preference_delta`` uses the pairs the suite's pinned judge gave an outcome
(``"preference"``: ``win``, ``loss`` or ``tie``, the candidate's; set by
``onlinejudge.preference`` before the rules run): the share of losses minus the share of wins.

A refusal is an answer whose text starts (after spaces, within its first 200 characters) with
one of ``EVALGATE_REFUSAL_OPENINGS``, matched case-blind: a plain, documented rule rather than
a classifier, the same on both sides of a pair.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.policy.shadow import EvalgateShadowRule
from pytest_evalgate.policy.values import EvalgatePolicy

EVALGATE_REFUSAL_OPENINGS = (
    "i can't", "i cannot", "i can not", "i won't", "i will not", "i'm sorry, but",
    "i am sorry, but", "sorry, but i", "i'm not able to", "i am not able to", "i'm unable to",
    "i am unable to", "as an ai",
)  # fmt: skip
_REFUSAL = re.compile(
    r"^\s*(" + "|".join(re.escape(o) for o in EVALGATE_REFUSAL_OPENINGS) + ")", re.IGNORECASE
)
_MAX_RESAMPLES = 2000
FloatArray = np.ndarray[Any, np.dtype[np.float64]]


def evalgate_is_refusal(text: str) -> bool:
    """Whether an answer refuses (see the module)."""
    return bool(_REFUSAL.match(text[:200].replace("\u2019", "'")))


@dataclass(frozen=True)
class EvalgateShadowRuleResult:
    """One rule's numbers: estimate, its upper bound, the pairs used, and the outcome."""

    rule: EvalgateShadowRule
    pairs: int
    estimate: float | None
    upper: float | None
    outcome: str  # pass | fail | undecided

    def to_dict(self) -> dict[str, Any]:
        """Builtins for the decision record."""
        return {
            **self.rule.to_dict(),
            "pairs": self.pairs,
            "estimate": self.estimate,
            "upper_bound": self.upper,
            "outcome": self.outcome,
        }


def _answered(pair: dict[str, Any]) -> bool:
    return pair["stable"].get("error") is None and pair["candidate"].get("error") is None


def _columns(pairs: Sequence[dict[str, Any]], metric: str) -> tuple[FloatArray, FloatArray]:
    if metric == "judge_preference_delta":
        # the candidate's column holds its losses, stable's the candidate's wins: the mean
        # difference is the share stable is preferred minus the share the candidate is
        preferences = [pair["preference"] for pair in pairs if "preference" in pair]
        losses = [float(result == "loss") for result in preferences]
        wins = [float(result == "win") for result in preferences]
        return np.array(losses, dtype=np.float64), np.array(wins, dtype=np.float64)
    rows = pairs if metric == "error_rate_delta" else [pair for pair in pairs if _answered(pair)]
    value: Callable[[dict[str, Any]], float] = {
        "error_rate_delta": lambda side: float(side.get("error") is not None),
        "refusal_rate_delta": lambda side: float(evalgate_is_refusal(side.get("text") or "")),
        "output_length_ratio": lambda side: float(side.get("output_tokens") or 0),
        "latency_ratio": lambda side: float(side.get("e2e_s") or 0.0),
    }[metric]
    candidate = np.array([value(pair["candidate"]) for pair in rows], dtype=np.float64)
    stable = np.array([value(pair["stable"]) for pair in rows], dtype=np.float64)
    return candidate, stable


def _statistic(metric: str, candidate: FloatArray, stable: FloatArray, axis: int | None) -> Any:
    if metric == "latency_ratio":
        return np.median(candidate, axis=axis) / np.maximum(np.median(stable, axis=axis), 1e-9)
    if metric == "output_length_ratio":
        return np.mean(candidate, axis=axis) / np.maximum(np.mean(stable, axis=axis), 1e-9)
    return np.mean(candidate, axis=axis) - np.mean(stable, axis=axis)


def evalgate_shadow_rule(
    rule: EvalgateShadowRule, pairs: Sequence[dict[str, Any]], policy: EvalgatePolicy
) -> EvalgateShadowRuleResult:
    """One rule on the pairs (see the module)."""
    candidate, stable = _columns(pairs, rule.metric)
    n = len(candidate)
    if n == 0:
        return EvalgateShadowRuleResult(rule, 0, None, None, "undecided")
    estimate = float(_statistic(rule.metric, candidate, stable, None))
    rng = np.random.default_rng(policy.seed)
    index = rng.integers(0, n, size=(min(policy.resamples, _MAX_RESAMPLES), n))
    boot = _statistic(rule.metric, candidate[index], stable[index], 1)
    upper = float(np.quantile(boot, (1 + policy.confidence) / 2))
    outcome = "undecided" if n < rule.min_pairs else "pass" if upper <= rule.threshold else "fail"
    return EvalgateShadowRuleResult(rule, n, round(estimate, 6), round(upper, 6), outcome)


def evalgate_shadow_verdict(results: Sequence[EvalgateShadowRuleResult]) -> str:
    """``fail`` if any rule fails, else ``undecided`` if any is, else ``pass``."""
    outcomes = {result.outcome for result in results}
    return "fail" if "fail" in outcomes else "undecided" if "undecided" in outcomes else "pass"


def evalgate_shadow_decision(
    suite: str,
    policy: EvalgatePolicy,
    pairs: Sequence[dict[str, Any]],
    version: str,
    judge: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The shadow decision record (``shadow-decision.json``), builtins only; ``judge`` (the
    judge's key, model and counts, when a preference rule was judged) is kept as given."""
    results = [evalgate_shadow_rule(rule, pairs, policy) for rule in policy.shadow]
    extra = {} if judge is None else {"judge": judge}
    return {
        **extra,
        "kind": "shadow",
        "verdict": evalgate_shadow_verdict(results),
        "suite": suite,
        "policy": {"version": policy.version, "digest": evalgate_sha256_hex(policy.to_dict())},
        "counts": _counts(pairs),
        "rules": [result.to_dict() for result in results],
        "evalgate_version": version,
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _counts(pairs: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {
        "pairs": len(pairs),
        "answered_both": sum(_answered(pair) for pair in pairs),
        "candidate_errors": sum(pair["candidate"].get("error") is not None for pair in pairs),
        "stable_errors": sum(pair["stable"].get("error") is not None for pair in pairs),
        "candidate_tool_calls": sum(
            int(pair["candidate"].get("tool_calls") or 0) for pair in pairs
        ),
    }
