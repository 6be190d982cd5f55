"""Hand-built gate inputs for the exact-value gate tests (``test_gate_rules_exact.py``,
``test_gate_more_exact.py``): one case per cluster unless asked, binary-exact scores, rules
and policies in one line each."""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from pytest_evalgate.aggregate.paired import EvalgateGateInput as GateInput
from pytest_evalgate.gate.result import EvalgateGateResult, EvalgateRuleResult
from pytest_evalgate.policy import values as policy_values

Z_SUM = float(sps.norm.ppf(0.975) + sps.norm.ppf(0.8))


def make(
    slices: dict[str, tuple[list[float], list[float]]],
    *,
    fails: dict[str, list[int]] | None = None,
    trials: int = 1,
    perf: dict[str, tuple[list[float], list[float]]] | None = None,
    error_rates: dict[str, tuple[int, int]] | None = None,
    cluster_of: dict[str, int] | None = None,
) -> GateInput:
    """One case per cluster unless ``cluster_of[slice]`` groups that slice's cases by that size."""
    cats, clusters, cand, base, failed = [], [], [], [], []
    for name, (cand_scores, base_scores) in slices.items():
        size = (cluster_of or {}).get(name, 1)
        for i, (c, b) in enumerate(zip(cand_scores, base_scores, strict=True)):
            cats.append(name)
            clusters.append(f"{name}-{i // size}")
            cand.append(c)
            base.append(b)
        failed.extend((fails or {}).get(name, [int(c < 0.5) for c in cand_scores]))
    return GateInput(
        case_ids=tuple(f"case-{i:04d}" for i in range(len(cats))),
        categories=np.array(cats),
        clusters=np.array(clusters),
        candidate_scores=np.array(cand, dtype=float),
        baseline_scores=np.array(base, dtype=float),
        candidate_fail_counts=np.array(failed, dtype=np.int64),
        candidate_trials=np.full(len(cats), trials, dtype=np.int64),
        perf={k: (np.array(a, float), np.array(b, float)) for k, (a, b) in (perf or {}).items()},
        error_rates=error_rates or {},
    )


def policy(*rules: policy_values.EvalgateRule, **kwargs: object) -> policy_values.EvalgatePolicy:
    kwargs.setdefault("resamples", 200)
    return policy_values.EvalgatePolicy(version="t", rules=rules, **kwargs)  # type: ignore[arg-type]


def on_slice(
    kind: str, name: str, threshold: float | None = None, index: int = 0
) -> policy_values.EvalgateRule:
    return policy_values.EvalgateRule(kind, index, slice=name, limit=threshold)


def on_metric(kind: str, name: str, threshold: float, index: int = 0) -> policy_values.EvalgateRule:
    return policy_values.EvalgateRule(kind, index, metric=name, limit=threshold)


def by_name(result: EvalgateGateResult) -> dict[str, EvalgateRuleResult]:
    return {rule.name: rule for rule in result.rules}


# alpha: every case 0.25 worse; beta: every case 0.5 better; both exactly representable
WORSE_BETTER = {"alpha": ([0.75] * 4, [1.0] * 4), "beta": ([1.0] * 4, [0.5] * 4)}
