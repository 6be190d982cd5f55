"""The unbiased pass@k estimate of a case (Chen et al. 2021, "Evaluating Large Language Models
Trained on Code"): with n samples of which c pass, 1 - C(n-c, k) / C(n, k).

Computed in the product form 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the binomial
coefficients: C(200, 100) alone is about 9e58, and their ratio in floating point loses every
digit long before n reaches a few hundred, while each factor of the product lies in [0, 1).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_evalgate.errors import EvalgateConfigError


def evalgate_pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k for ``c`` passing samples out of ``n``; refuses ``n < k`` (too few repetitions),
    ``k < 1`` and ``c`` outside ``[0, n]`` with ``EvalgateConfigError``."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    remaining = 1.0
    for i in range(n - c + 1, n + 1):
        remaining *= 1.0 - k / i
    return 1.0 - remaining


def evalgate_case_pass_at_k(passed: Sequence[bool], k: int) -> float:
    """pass@k of one case from its repetitions' pass flags (one flag per repetition)."""
    return evalgate_pass_at_k(len(passed), sum(bool(flag) for flag in passed), k)


def _check(n: int, c: int, k: int) -> None:
    if k < 1:
        raise EvalgateConfigError("evaluator", "pass_at_k", f"must be >= 1, not {k}")
    if n < k:
        reason = f"needs at least {k} repetitions per case, the suite has {n}"
        raise EvalgateConfigError("evaluator", "pass_at_k", reason)
    if not 0 <= c <= n:
        raise EvalgateConfigError("evaluator", "pass_at_k", f"{c} passes out of {n} samples")
