"""Single-model rules (SPEC section 12): a policy with ``baseline: null`` gates one candidate.

``min_rate`` passes when the exact (Clopper-Pearson) lower bound of the candidate's pass rate is
``>= min``; ``max_rate`` on ``error_rate`` passes when the share of errored identities is
``<= max``; ``floor`` (in ``gate.py``) works as in a paired policy. Every other rule compares the
candidate with a baseline, so a policy without one refuses it at load, before any request.

A case counts as one trial and passes when none of its repetitions failed: the same unit as
``floor`` (at temperature 0 repetitions are copies, and counting them as trials would shrink the
exact bound). The numbers are returned as plain mappings; ``gate.py`` turns them into results.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import numpy as np

from pytest_evalgate import stats
from pytest_evalgate.gate.numbers import EvalgateRuleNumbers


def evalgate_min_rate(
    passed: int, trials: int, minimum: float, confidence: float
) -> EvalgateRuleNumbers:
    """Numbers of a ``min_rate`` rule: ``passed`` of ``trials`` cases, two-sided ``confidence``.

    ``lo``/``hi`` are the exact interval's ends (each bound one-sided ``(1 - confidence) / 2``,
    equal to ``scipy.stats.binomtest(passed, trials).proportion_ci(confidence, "exact")``); the
    rule passes when ``lo >= minimum``. With no trials it is not evaluated (and does not pass).
    """
    if trials <= 0:
        return {"evaluated": False, "reason": "not evaluated: no scored trials"}
    one_sided = (1.0 + confidence) / 2.0
    lo = stats.evalgate_clopper_pearson_lower(passed, trials, one_sided)
    hi = stats.evalgate_clopper_pearson_upper(passed, trials, one_sided)
    numbers: EvalgateRuleNumbers = {
        "estimate": passed / trials,
        "lo": lo,
        "hi": hi,
        "limit": minimum,
    }
    if lo >= minimum:
        reason = f"passes: {passed}/{trials} passed, lower bound {lo:.4f} >= {minimum}"
        return {**numbers, "passed": True, "reason": reason}
    return {
        **numbers,
        "passed": False,
        "reason": _min_rate_failure(passed, trials, lo, hi, minimum),
    }


def _min_rate_failure(passed: int, trials: int, lo: float, hi: float, minimum: float) -> str:
    if hi < minimum:
        return f"below min: {passed}/{trials} passed, upper bound {hi:.4f} < {minimum}"
    return (
        f"too little evidence: {passed}/{trials} passed, lower bound {lo:.4f} < {minimum} "
        f"(the interval reaches {hi:.4f})"
    )


def evalgate_max_rate(errored: int, expected: int, maximum: float) -> EvalgateRuleNumbers:
    """Numbers of a ``max_rate`` rule on the error rate: errored of expected identities.

    The rate of this run is compared as observed (like ``max_delta``): errors are a property of
    the run, not a sample of a population. Not evaluated with no expected identities.
    """
    if expected <= 0:
        return {"evaluated": False, "reason": "not evaluated: no expected identities"}
    rate = errored / expected
    numbers: EvalgateRuleNumbers = {
        "estimate": rate,
        "limit": maximum,
        "n_cases": expected,
        "passed": rate <= maximum,
    }
    if rate <= maximum:
        return {**numbers, "reason": f"passes: error rate {errored}/{expected} <= {maximum}"}
    return {**numbers, "reason": f"too many errors: {errored}/{expected} = {rate:.4f} > {maximum}"}


_GateInput = TypeVar("_GateInput")


def evalgate_single_view(gate_input: _GateInput) -> _GateInput:
    """The gate input of a single-model policy, from one aggregated with the candidate as both
    sides: the baseline's scores become NaN, its perf samples empty and its error rate absent,
    so nothing reads a mirrored candidate as a baseline (``gate_input`` is a frozen dataclass
    with the fields of ``aggregate.EvalgateGateInput``)."""
    data: Any = gate_input
    empty = np.empty(0, dtype=np.float64)
    return dataclasses.replace(  # type: ignore[no-any-return]
        data,
        baseline_scores=np.full(len(data.case_ids), np.nan),
        perf={metric: (cand, empty) for metric, (cand, _) in data.perf.items()},
        error_rates={"candidate": data.error_rates.get("candidate", (0, 0))},
    )
