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

Why one module of ~600 lines: one job, the evaluation of the paired and single rules over one
gate input, sharing the per-slice bootstrap, the seeds and the multiplicity correction; the
rules with their own statistics live apart (``gate_single``, ``gate_private``, ``gate_judge``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pytest_evalgate import stats
from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.gate import slo
from pytest_evalgate.gate.judge import EVALGATE_JUDGE_RULES, evalgate_judge_rule
from pytest_evalgate.gate.private import (
    evalgate_gap_name,
    evalgate_gap_rule,
)
from pytest_evalgate.gate.single import (
    evalgate_max_rate,
    evalgate_min_rate,
)
from pytest_evalgate.perf.metrics import SWEEP_KEYS
from pytest_evalgate.policy.load import (
    EVALGATE_GAP_RULE,
    EVALGATE_QUALITY_RULES,
    EVALGATE_VERDICTS,
    EvalgatePolicy,
    EvalgateRule,
    evalgate_bound,
    evalgate_policy_digest,
    evalgate_unknown_category,
)

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
    ``1 - confidence`` for no_regression's p-value; ``policy.evalgate_bound`` turns it into the
    boundary on the estimate's scale (decision.json's ``threshold``, built in
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


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class _Expanded:
    name: str
    rule: EvalgateRule
    target: str  # the slice, or the metric for perf/max_delta rules


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


def _expand(policy: EvalgatePolicy, gate_input: EvalgateGateInputLike) -> list[_Expanded]:
    categories = sorted({str(value) for value in gate_input.categories})
    out: list[_Expanded] = []
    for rule in policy.rules:
        for target in _targets(rule, categories, policy.source):
            out.append(_Expanded(f"{rule.rule}[{target}]", rule, target))
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


def _unique_names(items: list[_Expanded]) -> list[_Expanded]:
    # A "*" rule and an explicit slice may expand to the same name; keep both, tell them apart.
    seen: set[str] = set()
    out: list[_Expanded] = []
    for item in items:
        name = item.name if item.name not in seen else f"{item.name}@rules[{item.rule.index}]"
        seen.add(name)
        out.append(dataclasses.replace(item, name=name))
    return out


def _select(
    policy: EvalgatePolicy, items: list[_Expanded], selected: Collection[str] | None
) -> list[_Expanded]:
    if selected is None:
        return items
    names = {item.name for item in items}
    unknown = sorted(set(selected) - names)
    if unknown:
        reason = f"no rule named {', '.join(unknown)}; rules: {', '.join(sorted(names))}"
        raise EvalgatePolicyError(policy.source, "selected_rules", reason)
    return [item for item in items if item.name in selected]


def _evaluate_one(
    item: _Expanded,
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
        return _perf(item, policy, gate_input)
    if kind == "perf_ratio_min":
        return _rate_at_slo(item, gate_input)
    if kind in EVALGATE_JUDGE_RULES:
        return _judge(item, policy, gate_input)
    if kind in ("min_rate", "max_rate"):
        return _single(item, policy, gate_input)
    if kind == EVALGATE_GAP_RULE:
        return _gap(item, policy, gate_input)
    return _max_delta(item, policy, gate_input)


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
        seed = _seed(self._policy.seed, f"slice:{name}")
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


def _seed(seed: int, key: str) -> list[int]:
    """Per-rule seed: the policy seed plus 64 bits of sha256(key), so rules draw independently."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return [seed, int.from_bytes(digest[:8], "big")]


# --------------------------------------------------------------------------- rule kinds


def _quality(item: _Expanded, policy: EvalgatePolicy, data: _Slice) -> EvalgateRuleResult:
    base = _base(item, n_cases=data.n_cases, n_clusters=data.n_clusters, estimate=data.estimate)
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
    return _more_cases(needed, result.n_cases, "cases")


def _more_cases(needed: int | None, have: int, unit: str) -> str:
    if needed is None:
        return "too little evidence: the estimate sits on the threshold; no sample size settles it"
    return f"too little evidence: about {max(1, needed - have)} more {unit} would settle it"


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
    item: _Expanded, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    mask = _slice_mask(gate_input, item.target)
    k = int(np.asarray(gate_input.candidate_fail_counts)[mask].sum())
    n = int(np.asarray(gate_input.candidate_trials)[mask].sum())
    clusters = np.unique(np.asarray(gate_input.clusters).astype(str)[mask]).size
    base = _base(item, n_cases=int(mask.sum()), n_clusters=clusters)
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
    return _more_cases(math.ceil(needed / per_case), result.n_cases, "cases")


def _slice_mask(gate_input: EvalgateGateInputLike, name: str) -> npt.NDArray[np.bool_]:
    categories = np.asarray(gate_input.categories).astype(str)
    return np.ones(categories.size, bool) if name == "all" else categories == name


def _judge(
    item: _Expanded, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    numbers = evalgate_judge_rule(
        item.rule.rule,
        item.target,
        float(item.rule.limit or 0.0),
        getattr(gate_input, "judge", None),
        confidence=policy.confidence,
        resamples=policy.resamples,
        seed=_seed(policy.seed, item.name),
    )
    return dataclasses.replace(_base(item), **numbers)


def _gap(
    item: _Expanded, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    cand = np.asarray(gate_input.candidate_scores, dtype=np.float64)
    numbers = evalgate_gap_rule(
        cand - np.asarray(gate_input.baseline_scores, dtype=np.float64),
        gate_input.categories, gate_input.clusters, item.rule.public, item.rule.private,
        float(item.rule.limit or 0.0), confidence=policy.confidence,
        resamples=policy.resamples, seed=_seed(policy.seed, item.name),
    )  # fmt: skip
    return dataclasses.replace(_base(item), metric=None, **numbers)


def _base(
    item: _Expanded,
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


def _perf(
    item: _Expanded, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    metric, _, level = item.target.rpartition("_")
    cand, base_samples = gate_input.perf.get(metric, (np.empty(0), np.empty(0)))
    cand, base_samples = np.asarray(cand, np.float64), np.asarray(base_samples, np.float64)
    max_ratio = float(item.rule.limit or 0.0)
    base = _base(item, n_cases=int(cand.size), limit=max_ratio)
    if cand.size == 0 or base_samples.size == 0:
        counts = f"candidate {cand.size}, baseline {base_samples.size}"
        reason = f"not evaluated: no {metric} samples ({counts})"
        return dataclasses.replace(base, evaluated=False, reason=reason)
    q = float(level.lstrip("p"))
    seed = _seed(policy.seed, f"perf:{item.target}")
    est, lo, hi, boot = stats.evalgate_percentile_ratio_ci(
        cand, base_samples, q, policy.resamples, seed, policy.confidence
    )
    numbers = dataclasses.replace(base, estimate=est, lo=lo, hi=hi)
    if hi <= max_ratio:
        return dataclasses.replace(
            numbers, passed=True, reason=f"passes: ratio upper bound {hi:.4f} <= {max_ratio}"
        )
    noise = evalgate_aa_noise(base_samples, q, max_ratio)
    if noise is not None:
        return dataclasses.replace(numbers, reason=noise)
    return dataclasses.replace(numbers, reason=_perf_failure(numbers, boot, policy.confidence))


def _rate_at_slo(item: _Expanded, gate_input: EvalgateGateInputLike) -> EvalgateRuleResult:
    """``max_rate_at_slo`` (``gate/slo.py``): the candidate's highest swept rate meeting the SLO
    over the baseline's, at least ``min_ratio``."""
    min_ratio = float(item.rule.limit or 0.0)
    slo_limits = item.rule.slo or (math.inf, math.inf)
    verdict = slo.evaluate(gate_input.perf, slo_limits, min_ratio)
    steps = int(np.asarray(gate_input.perf.get(SWEEP_KEYS[0], (np.empty(0),))[0]).size)
    base = _base(item, n_cases=steps, estimate=verdict.ratio, limit=min_ratio)
    return dataclasses.replace(
        base, evaluated=verdict.evaluated, passed=verdict.passed, reason=verdict.reason
    )


# Samples per half below which an A/A comparison is left out: its percentile is then mostly the
# sample's own spread, which more samples settle ("too little evidence" says how many).
EVALGATE_AA_MIN_SAMPLES = 20


def evalgate_aa_noise(base: npt.NDArray[np.float64], q: float, max_ratio: float) -> str | None:
    """ "Too noisy to judge" when the baseline against itself (an A/A comparison: its alternate
    samples, which the load phase's paired arrivals spread over the same window) already differs
    by the rule's whole margin: the machine's jitter, not the candidate, would then decide the
    rule. None when the A/A ratio lies inside ``[1 / max_ratio, max_ratio]``, or when either
    half has fewer than :data:`EVALGATE_AA_MIN_SAMPLES` samples (then the sample is small, and
    "too little evidence" says how many more would settle it)."""
    first, second = base[0::2], base[1::2]
    if min(first.size, second.size) < EVALGATE_AA_MIN_SAMPLES or max_ratio <= 1.0:
        return None
    low = stats.evalgate_percentile(second, q)
    aa = stats.evalgate_percentile(first, q) / low if low > 0 else math.inf
    if 1.0 / max_ratio <= aa <= max_ratio:
        return None
    return (
        f"too noisy to judge: the baseline against itself (A/A, alternate samples) gives ratio "
        f"{aa:.4f}, outside [{1.0 / max_ratio:.4f}, {max_ratio}]: the measurement's jitter is "
        "as large as the margin; rerun on a quieter machine or with a longer perf.duration_s"
    )


def _perf_failure(
    result: EvalgateRuleResult, boot: npt.NDArray[np.float64], confidence: float
) -> str:
    if result.lo > result.limit:
        return f"regression: ratio lower bound {result.lo:.4f} > max_ratio {result.limit}"
    logs = np.log(boot[np.isfinite(boot) & (boot > 0)])
    if logs.size < 2 or not (math.isfinite(result.estimate) and result.estimate > 0):
        return _more_cases(None, result.n_cases, "samples")
    variance = float(np.var(logs)) * result.n_cases  # the log-ratio SE scales as 1/sqrt(n)
    delta = math.log(result.estimate) - math.log(result.limit)
    return _more_cases(
        stats.evalgate_cases_needed(variance, delta, confidence), result.n_cases, "samples"
    )


def _max_delta(
    item: _Expanded, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    max_delta = float(item.rule.limit or 0.0)
    cand = _rate(gate_input.error_rates, policy.candidate, "candidate")
    base_rate = _rate(gate_input.error_rates, str(policy.baseline), "baseline")
    base = _base(item, limit=max_delta)
    if cand is None or base_rate is None:
        return dataclasses.replace(
            base, evaluated=False, reason="not evaluated: no expected identities"
        )
    delta = cand - base_rate
    numbers = dataclasses.replace(base, estimate=delta, passed=delta <= max_delta)
    if numbers.passed:
        return dataclasses.replace(
            numbers, reason=f"passes: error rate delta {delta:+.4f} <= {max_delta}"
        )
    return dataclasses.replace(
        numbers, reason=f"regression: error rate rose by {delta:+.4f} > {max_delta}"
    )


def _rate(rates: Mapping[str, tuple[int, int]], name: str, role: str) -> float | None:
    # The contract keys error_rates by role; a policy naming its candidates may also key by name.
    errored, expected = rates.get(role, rates.get(name, (0, 0)))
    return errored / expected if expected else None


def _single(
    item: _Expanded, policy: EvalgatePolicy, gate_input: EvalgateGateInputLike
) -> EvalgateRuleResult:
    limit = float(item.rule.limit or 0.0)
    if item.rule.rule == "max_rate":
        errored, expected = gate_input.error_rates.get("candidate", (0, 0))
        return dataclasses.replace(_base(item), **evalgate_max_rate(errored, expected, limit))
    mask = _slice_mask(gate_input, item.target)
    trials = int(np.asarray(gate_input.candidate_trials)[mask].sum())
    passed = trials - int(np.asarray(gate_input.candidate_fail_counts)[mask].sum())
    clusters = np.unique(np.asarray(gate_input.clusters).astype(str)[mask]).size
    base = _base(item, n_cases=int(mask.sum()), n_clusters=clusters)
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
