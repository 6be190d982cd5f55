"""The gate's results, and the pieces every rule kind builds one from.

``EvalgateGateInputLike`` is what the rules read of a gate input (see ``docs/architecture.md``);
``EvalgateRuleResult`` is one evaluated rule and ``EvalgateGateResult`` all of one evaluation.
``ExpandedRule`` is one rule of the policy expanded to its slice or metric, ``base_result`` its
result before it passed, ``rule_seed`` its bootstrap seed and ``more_cases`` the "too little
evidence" reason the rule kinds share (``gate.rules`` for the slice rules, ``gate.metrics`` for
the perf and error-rate rules).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy.typing as npt

from pytest_evalgate.policy.values import EvalgateRule

# --------------------------------------------------------------------------- gate input


class EvalgateGateInputLike(Protocol):
    """What ``evalgate_evaluate`` reads: the attributes of ``aggregate.EvalgateGateInput``."""

    @property
    def case_ids(self) -> tuple[str, ...]: ...
    @property
    def categories(self) -> npt.NDArray[Any]: ...
    @property
    def clusters(self) -> npt.NDArray[Any]: ...
    @property
    def candidate_scores(self) -> npt.NDArray[Any]: ...
    @property
    def baseline_scores(self) -> npt.NDArray[Any]: ...
    @property
    def candidate_fail_counts(self) -> npt.NDArray[Any]: ...
    @property
    def candidate_trials(self) -> npt.NDArray[Any]: ...
    @property
    def repetitions(self) -> tuple[int, int]: ...
    @property
    def perf(self) -> Mapping[str, tuple[npt.NDArray[Any], npt.NDArray[Any]]]: ...
    @property
    def error_rates(self) -> Mapping[str, tuple[int, int]]: ...


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class EvalgateRuleResult:
    """One evaluated rule. NaN means "does not apply"; ``to_dict`` turns it into None.

    ``lo``/``hi`` are the decision interval (cluster bootstrap percentiles for quality rules,
    exact Clopper-Pearson bounds for floors, bootstrap for perf ratios); ``t_lo``/``t_hi`` the
    clustered-SE t interval reported beside it. ``limit`` is the rule's number as gate.yaml
    writes it, sign included (``policy.EvalgateRule.limit``: a margin stays positive), or
    ``1 - confidence`` for no_regression's p-value; ``policy.values.evalgate_bound`` turns it
    into the boundary on the estimate's scale (decision.json's ``threshold``, built in
    ``report.record``). ``p_value`` is the one-sided bootstrap p for a drop (quality rules),
    ``p_adjusted`` its corrected value (no_regression only).
    """

    name: str
    rule: str
    passed: bool
    reason: str
    slice: str | None = None
    metric: str | None = None
    evaluated: bool = True
    n_cases: int = 0
    n_clusters: int = 0
    estimate: float = math.nan
    lo: float = math.nan
    hi: float = math.nan
    se: float = math.nan
    t_lo: float = math.nan
    t_hi: float = math.nan
    limit: float = math.nan
    p_value: float = math.nan
    p_adjusted: float = math.nan

    def to_dict(self) -> dict[str, str | float | bool | None]:
        """The result's own fields as builtins (``limit``, not decision.json's ``threshold``);
        non-finite floats become None so canonical JSON accepts them."""
        return {key: _finite_or_none(value) for key, value in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class EvalgateGateResult:
    """All rule results of one evaluation, in policy order (``"*"`` expanded in sorted order)."""

    rules: tuple[EvalgateRuleResult, ...]
    policy_version: str
    policy_digest: str
    correction: str
    confidence: float
    selected: bool = field(default=False)

    @property
    def passed(self) -> bool:
        """True when every evaluated rule passed (vacuously true with no rules)."""
        return all(result.passed for result in self.rules)

    def to_dict(self) -> dict[str, Any]:
        """Builtins of the results' own fields (decision.json's rules are built, with their
        ``threshold``, by ``report.record``)."""
        return {
            "policy_version": self.policy_version,
            "policy_digest": self.policy_digest,
            "correction": self.correction,
            "confidence": self.confidence,
            "selected": self.selected,
            "passed": self.passed,
            "rules": [result.to_dict() for result in self.rules],
        }


def _finite_or_none(value: str | float | bool | None) -> str | float | bool | None:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(frozen=True)
class ExpandedRule:
    name: str
    rule: EvalgateRule
    target: str  # the slice, or the metric for perf/max_delta rules


def rule_seed(seed: int, key: str) -> list[int]:
    """Per-rule seed: the policy seed plus 64 bits of sha256(key), so rules draw independently."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return [seed, int.from_bytes(digest[:8], "big")]


def more_cases(needed: int | None, have: int, unit: str) -> str:
    if needed is None:
        return "too little evidence: the estimate sits on the threshold; no sample size settles it"
    return f"too little evidence: about {max(1, needed - have)} more {unit} would settle it"


def base_result(
    item: ExpandedRule,
    *,
    n_cases: int = 0,
    n_clusters: int = 0,
    estimate: float = math.nan,
    limit: float = math.nan,
) -> EvalgateRuleResult:
    """A result of ``item`` that has not passed yet, with its counts (and estimate, limit)."""
    is_slice = item.rule.slice is not None
    return EvalgateRuleResult(
        name=item.name,
        rule=item.rule.rule,
        passed=False,
        reason="",
        slice=item.target if is_slice else None,
        metric=None if is_slice else item.target,
        n_cases=n_cases,
        n_clusters=n_clusters,
        estimate=estimate,
        limit=limit,
    )
