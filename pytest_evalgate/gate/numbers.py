"""The numbers a rule module returns (``single``, ``private``, ``judge``): the fields of an
``EvalgateRuleResult`` it computed, which ``rules`` spreads into the result. A module of its own
so the rule modules share the type without importing ``rules`` (which imports them).
"""

from __future__ import annotations

from typing import TypedDict


class EvalgateRuleNumbers(TypedDict, total=False):
    """Any subset of an ``EvalgateRuleResult``'s computed fields (see its docstring)."""

    passed: bool
    evaluated: bool
    reason: str
    n_cases: int
    n_clusters: int
    estimate: float
    lo: float
    hi: float
    se: float
    t_lo: float
    t_hi: float
    limit: float
