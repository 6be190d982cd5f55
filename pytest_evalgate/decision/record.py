"""The decision record's type (SPEC section 7): what ``decision.json`` holds, what the
``pytest_evalgate_decision`` hook receives, and what ``evalgate verify`` finds in a signed
statement's predicate.

Defined in ``report.shape``, beside the record's builder and its renderers (``report`` may not
import ``decision``, which imports it); re-exported here under the names the package exports.
"""

from __future__ import annotations

from pytest_evalgate.report.shape import (
    EvalgateDecision,
    EvalgateDecisionCounts,
    EvalgateDecisionSide,
    EvalgateRuleRecord,
)

__all__ = [
    "EvalgateDecision",
    "EvalgateDecisionCounts",
    "EvalgateDecisionSide",
    "EvalgateRuleRecord",
]
