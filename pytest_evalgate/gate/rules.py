"""The ``gate.yaml`` policy's rules, evaluated, and the verdict (SPEC sections 6-7).

The policy as data (schema, loading, checks against a suite) is ``policy``; this module only
evaluates. ``evalgate_evaluate`` turns a gate input
(see ``docs/architecture.md``) into one ``EvalgateRuleResult`` per expanded rule; the numbers come
from ``stats``. ``evalgate_verdict`` folds the aggregation status and the rule outcomes into the
session verdict, and ``evalgate_exit_status`` into pytest's exit status.

Quality rules share one cluster bootstrap per slice, seeded by ``(policy seed, slice name)``, so a
slice's interval is the same whichever other rules or slices are selected (``-k billing`` gives
the same billing numbers as the full run). Slice ``all`` is stratified by category: its resample
is the union of each category's resample (the suite's category mix is fixed by design, not
sampled), which also reuses the per-category draws. If one cluster spans two categories the
strata would split it, so ``all`` then falls back to a plain cluster bootstrap over the suite.

The result types and what every rule kind builds a result from are ``gate.result``; the metric
rules (``perf_ratio``, ``perf_ratio_min``, ``max_delta``) are ``gate.metrics``; the rules with
their own statistics live apart (``gate_single``, ``gate_private``, ``gate_judge``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pytest_evalgate import stats
from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.gate.judge import EVALGATE_JUDGE_RULES, evalgate_judge_rule
from pytest_evalgate.gate.metrics import max_delta_rule, perf_rule, rate_at_slo_rule
from pytest_evalgate.gate.private import (
    evalgate_gap_name,
    evalgate_gap_rule,
)
from pytest_evalgate.gate.result import (
    EvalgateGateInputLike,
    EvalgateGateResult,
    EvalgateRuleResult,
    ExpandedRule,
    base_result,
    more_cases,
    rule_seed,
)
from pytest_evalgate.gate.single import (
    evalgate_max_rate,
    evalgate_min_rate,
)
from pytest_evalgate.policy.checks import evalgate_unknown_category
from pytest_evalgate.policy.values import (
    EVALGATE_GAP_RULE,
    EVALGATE_QUALITY_RULES,
    EVALGATE_VERDICTS,
    EvalgatePolicy,
    EvalgateRule,
    evalgate_bound,
    evalgate_policy_digest,
)

# --------------------------------------------------------------------------- evaluation


def evalgate_evaluate(
    policy: EvalgatePolicy,
    gate_input: EvalgateGateInputLike,
    selected_rules: Collection[str] | None = None,
) -> EvalgateGateResult:
    """Evaluate every rule (``"*"`` expanded per category) or only ``selected_rules`` (names).

    Raises ``EvalgatePolicyError`` for a slice that names no category of the suite (the message
    lists the categories) or a selected name that is not a rule. ``no_regression`` p-values are
    corrected across the evaluated ``no_regression`` rules with ``policy.correction``.
    """
    expanded = _select(policy, _expand(policy, gate_input), selected_rules)
    slices = _SliceStats(policy, gate_input)
    results = [_evaluate_one(item, policy, gate_input, slices) for item in expanded]
    return EvalgateGateResult(
        rules=tuple(_correct(results, policy)),
        policy_version=policy.version,
        policy_digest=evalgate_policy_digest(policy),
        correction=policy.correction,
        confidence=policy.confidence,
        selected=selected_rules is not None,
    )


def _expand(policy: EvalgatePolicy, gate_input: EvalgateGateInputLike) -> list[ExpandedRule]:
    categories = sorted({str(value) for value in gate_input.categories})
    out: list[ExpandedRule] = []
    for rule in policy.rules:
        for target in _targets(rule, categories, policy.source):
            out.append(ExpandedRule(f"{rule.rule}[{target}]", rule, target))
    return _unique_names(out)


def _targets(rule: EvalgateRule, categories: list[str], source: str) -> list[str]:
    if rule.rule == EVALGATE_GAP_RULE:
        return [evalgate_gap_name(rule.private)]
    if rule.slice is None:
        return [str(rule.metric)]
    if rule.slice == "*":
        return categories
    reason = None if rule.slice == "all" else evalgate_unknown_category(rule.slice, categories)
    if reason is None:
        return [rule.slice]
    raise EvalgatePolicyError(source, f"rules[{rule.index}].slice", reason)


def _unique_names(items: list[ExpandedRule]) -> list[ExpandedRule]:
    # A "*" rule and an explicit slice may expand to the same name; keep both, tell them apart.
    seen: set[str] = set()
    out: list[ExpandedRule] = []
    for item in items:
        name = item.name if item.name not in seen else f"{item.name}@rules[{item.rule.index}]"
        seen.add(name)
        out.append(dataclasses.replace(item, name=name))
    return out


def _select(
    policy: EvalgatePolicy, items: list[ExpandedRule], selected: Collection[str] | None
) -> list[ExpandedRule]:
    if selected is None:
        return items
    names = {item.name for item in items}
    unknown = sorted(set(selected) - names)
    if unknown:
        reason = f"no rule named {', '.join(unknown)}; rules: {', '.join(sorted(names))}"
        raise EvalgatePolicyError(policy.source, "selected_rules", reason)
    return [item for item in items if item.name in selected]


def _evaluate_one(
    item: ExpandedRule,
    policy: EvalgatePolicy,
    gate_input: EvalgateGateInputLike,
    slices: _SliceStats,
) -> EvalgateRuleResult:
    kind = item.rule.rule
    if kind in EVALGATE_QUALITY_RULES:
        return _quality(item, policy, slices.get(item.target))
    if kind == "floor":
        return _floor(item, policy, gate_input)
    if kind == "perf_ratio":
        return perf_rule(item, policy, gate_input)
    if kind == "perf_ratio_min":
        return rate_at_slo_rule(item, gate_input)
    if kind in EVALGATE_JUDGE_RULES:
        return _judge(item, policy, gate_input)
    if kind in ("min_rate", "max_rate"):
        return _single(item, policy, gate_input)
    if kind == EVALGATE_GAP_RULE:
        return _gap(item, policy, gate_input)
    return max_delta_rule(item, policy, gate_input)


# --------------------------------------------------------------------------- slice statistics


@dataclass(frozen=True)
class _Slice:
    n_cases: int
    n_clusters: int
    estimate: float
    se: float
    dof: int
    totals: npt.NDArray[np.float64]
    sizes: npt.NDArray[np.float64]

    @property
    def boot(self) -> npt.NDArray[np.float64]:
        return self.totals / self.sizes


class _SliceStats:
    """Lazily computed, cached bootstrap totals and clustered SE per slice (one per evaluation)."""

    def __init__(self, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike) -> None:
        self._policy = policy
        self._categories = np.asarray(gate_input.categories).astype(str)
        self._clusters = np.asarray(gate_input.clusters).astype(str)
        cand = np.asarray(gate_input.candidate_scores, dtype=np.float64)
        self._diffs = cand - np.asarray(gate_input.baseline_scores, dtype=np.float64)
        self._cache: dict[str, _Slice] = {}

    def get(self, name: str) -> _Slice:
        """Statistics of slice ``name`` (a category or ``all``), computed once."""
        if name not in self._cache:
            self._cache[name] = self._compute(name)
        return self._cache[name]

    def _compute(self, name: str) -> _Slice:
        if name == "all" and self._strata_hold():
            return self._stratified_all()
        mask = np.ones(self._diffs.size, bool) if name == "all" else self._categories == name
        diffs, clusters = self._diffs[mask], self._clusters[mask]
        sums, sizes = stats.evalgate_cluster_sums(diffs, clusters)
        seed = rule_seed(self._policy.seed, f"slice:{name}")
        totals, counts = stats.evalgate_bootstrap_totals(sums, sizes, self._policy.resamples, seed)
        mean, se, dof = stats.evalgate_clustered_se(diffs, clusters)
        return _Slice(int(mask.sum()), sums.size, mean, se, dof, totals, counts)

    def _strata_hold(self) -> bool:
        pairs = np.unique(np.char.add(np.char.add(self._clusters, "\x1f"), self._categories))
        return bool(self._diffs.size) and pairs.size == np.unique(self._clusters).size

    def _stratified_all(self) -> _Slice:
        parts = [self.get(str(name)) for name in np.unique(self._categories)]
        mean, se, dof = stats.evalgate_clustered_se(self._diffs, self._clusters)
        totals = np.sum([part.totals for part in parts], axis=0)
        sizes = np.sum([part.sizes for part in parts], axis=0)
        clusters = sum(part.n_clusters for part in parts)
        return _Slice(self._diffs.size, clusters, mean, se, dof, totals, sizes)


# --------------------------------------------------------------------------- rule kinds


def _quality(item: ExpandedRule, policy: EvalgatePolicy, data: _Slice) -> EvalgateRuleResult:
    base = base_result(
        item, n_cases=data.n_cases, n_clusters=data.n_clusters, estimate=data.estimate
    )
    if data.n_clusters < 2:
        reason = f"not evaluated: {data.n_clusters} cluster(s); an interval needs at least 2"
        return dataclasses.replace(base, evaluated=False, reason=reason)
    boot = data.boot
    lo, hi = stats.evalgate_percentile_interval(boot, policy.confidence)
    t_lo, t_hi = stats.evalgate_t_interval(data.estimate, data.se, data.dof, policy.confidence)
    numbers = dataclasses.replace(
        base, lo=lo, hi=hi, se=data.se, t_lo=t_lo, t_hi=t_hi,
        p_value=stats.evalgate_bootstrap_pvalue_drop(boot),
    )  # fmt: skip
    if item.rule.rule == "no_regression":
        return dataclasses.replace(numbers, limit=1.0 - policy.confidence)
    return _bound_rule(numbers, item.rule, policy.confidence)


def _bound_rule(
    result: EvalgateRuleResult, rule: EvalgateRule, confidence: float
) -> EvalgateRuleResult:
    limit = float(rule.limit or 0.0)
    bound = evalgate_bound(rule.rule, limit)
    passed = result.lo > bound
    if passed:
        reason = f"passes: lower bound {result.lo:+.4f} > {bound:+.4f}"
    else:
        reason = _quality_failure(result, bound, confidence)
    return dataclasses.replace(result, limit=limit, passed=passed, reason=reason)


def _quality_failure(result: EvalgateRuleResult, bound: float, confidence: float) -> str:
    if result.hi < 0.0:
        return f"regression: the candidate is worse (upper bound {result.hi:+.4f} < 0)"
    if result.hi <= bound:
        return f"short of target: upper bound {result.hi:+.4f} <= {bound:+.4f}"
    variance = result.se**2 * result.n_cases  # design-effect variance of one case's difference
    needed = stats.evalgate_cases_needed(variance, result.estimate - bound, confidence)
    return more_cases(needed, result.n_cases, "cases")


def _correct(results: list[EvalgateRuleResult], policy: EvalgatePolicy) -> list[EvalgateRuleResult]:
    family = [i for i, r in enumerate(results) if r.rule == "no_regression" and r.evaluated]
    raw = np.array([results[i].p_value for i in family], dtype=np.float64)
    adjusted = stats.evalgate_adjust_pvalues(raw, policy.correction)
    out = list(results)
    for i, p_adj in zip(family, adjusted, strict=True):
        out[i] = _alarm(results[i], float(p_adj), policy)
    return out


def _alarm(result: EvalgateRuleResult, p_adj: float, policy: EvalgatePolicy) -> EvalgateRuleResult:
    alpha = 1.0 - policy.confidence
    passed = not p_adj < alpha
    if passed:
        reason = f"no significant drop (adjusted p {p_adj:.4g} >= {alpha:.4g}"
    else:
        reason = f"regression: significant drop (adjusted p {p_adj:.4g} < {alpha:.4g}"
    reason += f", {policy.correction})"
    return dataclasses.replace(result, p_adjusted=p_adj, passed=passed, reason=reason)


def _floor(
    item: ExpandedRule, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    mask = _slice_mask(gate_input, item.target)
    k = int(np.asarray(gate_input.candidate_fail_counts)[mask].sum())
    n = int(np.asarray(gate_input.candidate_trials)[mask].sum())
    clusters = np.unique(np.asarray(gate_input.clusters).astype(str)[mask]).size
    base = base_result(item, n_cases=int(mask.sum()), n_clusters=clusters)
    if n == 0:
        return dataclasses.replace(base, evaluated=False, reason="not evaluated: no scored trials")
    one_sided = (1.0 + policy.confidence) / 2.0
    lo = stats.evalgate_clopper_pearson_lower(k, n, one_sided)
    hi = stats.evalgate_clopper_pearson_upper(k, n, one_sided)
    max_rate = float(item.rule.limit or 0.0)
    numbers = dataclasses.replace(base, estimate=k / n, lo=lo, hi=hi, limit=max_rate)
    if hi <= max_rate:
        return dataclasses.replace(
            numbers,
            passed=True,
            reason=f"passes: {k}/{n} failed, upper bound {hi:.4f} <= {max_rate}",
        )
    return dataclasses.replace(numbers, reason=_floor_failure(k, n, numbers, one_sided))


def _floor_failure(k: int, n: int, result: EvalgateRuleResult, one_sided: float) -> str:
    if result.lo > result.limit:
        return f"regression: failure rate {k}/{n} is above max_rate (lower bound {result.lo:.4f})"
    needed = stats.evalgate_floor_cases_needed(k, n, result.limit, one_sided)
    if needed is None:
        rate = f"{k}/{n} failed, not below max_rate"
        return f"too little evidence: {rate}; more cases at this rate would not pass"
    per_case = n / max(result.n_cases, 1)
    return more_cases(math.ceil(needed / per_case), result.n_cases, "cases")


def _slice_mask(gate_input: EvalgateGateInputLike, name: str) -> npt.NDArray[np.bool_]:
    categories = np.asarray(gate_input.categories).astype(str)
    return np.ones(categories.size, bool) if name == "all" else categories == name


def _judge(
    item: ExpandedRule, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    numbers = evalgate_judge_rule(
        item.rule.rule,
        item.target,
        float(item.rule.limit or 0.0),
        getattr(gate_input, "judge", None),
        confidence=policy.confidence,
        resamples=policy.resamples,
        seed=rule_seed(policy.seed, item.name),
    )
    return dataclasses.replace(base_result(item), **numbers)


def _gap(
    item: ExpandedRule, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    cand = np.asarray(gate_input.candidate_scores, dtype=np.float64)
    numbers = evalgate_gap_rule(
        cand - np.asarray(gate_input.baseline_scores, dtype=np.float64),
        gate_input.categories, gate_input.clusters, item.rule.public, item.rule.private,
        float(item.rule.limit or 0.0), confidence=policy.confidence,
        resamples=policy.resamples, seed=rule_seed(policy.seed, item.name),
    )  # fmt: skip
    return dataclasses.replace(base_result(item), metric=None, **numbers)


def _single(
    item: ExpandedRule, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    limit = float(item.rule.limit or 0.0)
    if item.rule.rule == "max_rate":
        errored, expected = gate_input.error_rates.get("candidate", (0, 0))
        return dataclasses.replace(base_result(item), **evalgate_max_rate(errored, expected, limit))
    mask = _slice_mask(gate_input, item.target)
    trials = int(np.asarray(gate_input.candidate_trials)[mask].sum())
    passed = trials - int(np.asarray(gate_input.candidate_fail_counts)[mask].sum())
    clusters = np.unique(np.asarray(gate_input.clusters).astype(str)[mask]).size
    base = base_result(item, n_cases=int(mask.sum()), n_clusters=clusters)
    numbers = evalgate_min_rate(passed, trials, limit, policy.confidence)
    return dataclasses.replace(base, **numbers)


# --------------------------------------------------------------------------- verdict


def evalgate_verdict(status: str, rule_results: Collection[EvalgateRuleResult]) -> str:
    """Fold the aggregation status and rule outcomes into ``pass|fail|incomplete|invalid|partial``.

    ``invalid``, ``incomplete`` and ``partial`` statuses pass through whatever the rules say (a
    partial verdict covers the selected rules only and is never attestable); on a ``complete``
    aggregation the verdict is ``pass`` when every rule passed, else ``fail``.
    """
    if status in ("invalid", "incomplete", "partial"):
        return status
    if status != "complete":
        raise EvalgateConfigError("evalgate_verdict", "status", f"unknown status {status!r}")
    return "pass" if all(result.passed for result in rule_results) else "fail"


def evalgate_exit_status(verdict: str, rules_all_pass: bool) -> int:
    """0 for ``pass`` and for a ``partial`` whose rules all pass; 1 for every other verdict."""
    if verdict not in EVALGATE_VERDICTS:
        raise EvalgateConfigError("evalgate_exit_status", "verdict", f"unknown verdict {verdict!r}")
    return 0 if verdict == "pass" or (verdict == "partial" and rules_all_pass) else 1
