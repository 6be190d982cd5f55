"""The decision record's shape (SPEC section 7) as types: what ``decision.json`` holds, what the
``pytest_evalgate_decision`` hook receives, and what ``evalgate verify`` finds in a signed
statement's predicate.

Builtins only (it crosses processes and is signed as canonical JSON). Later stages add keys
(``perf_phase``; judge, sandbox and tier facts), so the keys beyond the core are optional.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class EvalgateDecisionSide(TypedDict):
    """A compared candidate: name, candidate key, model id and pins."""

    name: str
    key: str
    model: str
    pins: dict[str, Any]


class EvalgateDecisionCounts(TypedDict):
    """Identities expected, completed, missing; errors by category; store problems."""

    expected: int
    completed: int
    missing: int
    errors: dict[str, int]
    duplicates_collapsed: int
    problems: list[str]
    problem_count: int


class EvalgateDecision(TypedDict):
    """One suite's decision record."""

    verdict: str  # pass | fail | incomplete | invalid | partial
    attestable: bool
    suite: str
    definition_digest: str
    dataset: dict[str, str]
    policy: dict[str, str]  # {"version", "digest"}
    candidate: EvalgateDecisionSide | None
    baseline: EvalgateDecisionSide | None
    counts: EvalgateDecisionCounts
    rates: dict[str, dict[str, dict[str, Any]]]  # side -> slice -> {passed, scored, rate}
    rules: list[dict[str, Any]]
    perf: dict[str, Any]
    flipped: dict[str, Any]  # {"count", "cases"}
    canary_hits: int
    partial: bool
    evalgate_version: str
    created_at: str
    perf_phase: NotRequired[dict[str, Any] | None]
    # the definition flattened to dotted keys, long texts as their sha256 (report.record)
    definition_parts: NotRequired[dict[str, Any]]
    slices: NotRequired[dict[str, dict[str, int]]]  # slice -> {"n_cases", "n_clusters"} paired
