"""The decision record's shape (SPEC section 7) as types: what ``decision.json`` holds, what the
``pytest_evalgate_decision`` hook receives, what every report renders, and what ``evalgate
verify`` finds in a signed statement's predicate.

The types live here, beside the record's builder (``record``) and its renderers, because
``report`` may not import ``decision`` (which imports ``report``); ``decision.record`` re-exports
them under the names the package exports.

Builtins only (the record crosses processes and is signed as canonical JSON). Later stages add
keys (``perf_phase``; judge, sandbox, tier and contamination facts), so the keys beyond the core
are optional; a record read back from disk (``history``, a re-rendered folder) may be older and
lack some of them, which is why the renderers read optional keys with ``.get``.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypeAlias, TypedDict

from pytest_evalgate.aggregate.code import EvalgateSandboxSummary
from pytest_evalgate.aggregate.contamination import EvalgateContaminationRecord
from pytest_evalgate.aggregate.paired import EvalgateFlip

# Free-form JSON (blocks whose shape belongs to another stage and is shown, not computed on).
EvalgateJSON: TypeAlias = (
    bool | int | float | str | list["EvalgateJSON"] | dict[str, "EvalgateJSON"] | None
)


class EvalgateDecisionSide(TypedDict):
    """A compared candidate: name, candidate key, model id and pins."""

    name: str
    key: str
    model: str
    pins: dict[str, EvalgateJSON]


class EvalgateDecisionCounts(TypedDict):
    """Identities expected, completed, missing; errors by category; store problems."""

    expected: int
    completed: int
    missing: int
    errors: dict[str, int]
    duplicates_collapsed: int
    problems: list[str]
    problem_count: int


class EvalgateRateRecord(TypedDict):
    """One side's pass rate over one slice, with its denominator."""

    passed: int
    scored: int
    rate: float | None


class EvalgateSliceCounts(TypedDict):
    """Paired cases and clusters of one slice."""

    n_cases: int
    n_clusters: int


class EvalgateRuleRecord(TypedDict):
    """One evaluated rule (``gate.EvalgateRuleResult`` as builtins, non-finite numbers None).

    ``threshold`` is the rule's boundary on its estimate's scale (``policy.evalgate_bound``:
    ``-margin`` for ``non_inferior`` and ``pairwise``), not the gate.yaml number itself.
    """

    name: str
    rule: str
    passed: bool
    reason: str
    slice: str | None
    metric: str | None
    evaluated: bool
    n_cases: int
    n_clusters: int
    estimate: float | None
    lo: float | None
    hi: float | None
    se: float | None
    t_lo: float | None
    t_hi: float | None
    threshold: float | None
    p_value: float | None
    p_adjusted: float | None


class EvalgatePercentiles(TypedDict):
    """A latency distribution's summary: sample count, p50, p95 and order statistics."""

    n: int
    p50: float | None
    p95: float | None
    quantiles: dict[str, float] | None


class EvalgatePerfSides(TypedDict):
    """One perf metric, candidate and baseline."""

    candidate: EvalgatePercentiles
    baseline: EvalgatePercentiles


class EvalgateFlipped(TypedDict):
    """Cases whose pass flipped between baseline and candidate: the count, the first ids."""

    count: int
    cases: list[EvalgateFlip]


class EvalgatePerfPhaseRecord(TypedDict, total=False):
    """The keys of the load phase's record (``perf.result``'s ``to_dict``) that the reports
    read; the record holds more (pair, completed, percentiles), shown as they are."""

    profile: str
    duration_s: float
    requested_rate: float
    achieved_rate: dict[str, float]
    delay_p50_s: float | None
    delay_p95_s: float | None
    judgeable: bool
    reason: str
    errors: dict[str, dict[str, int]]
    # the capacity sweep (perf.sweep, perf/sweep.py Step.to_dict) and, per max_rate_at_slo
    # rule, its SLO and both models' max rate at it (decision/decide.py)
    sweep: list[dict[str, Any]]
    max_rate_at_slo: list[dict[str, Any]]


class EvalgateInconsistencyRecord(TypedDict):
    """Position inconsistency of one slice: pairs judged both ways, of them inconsistent."""

    pairs: int
    inconsistent: int


class EvalgateAgreementRecord(TypedDict, total=False):
    """The judge's agreement with people (``judge.agreement``'s ``evalgate_json``)."""

    n: int
    weights: str
    raw_agreement: float | None
    kappa: float | None
    interval: list[float | None]


class EvalgateJudgeRecord(TypedDict, total=False):
    """Which judge decided (``aggregate.judged``'s ``evalgate_json``): the keys the terminal
    summary reads; the rest of the block is shown as facts."""

    model: str
    revision: str
    mode: str
    key: str
    inconsistency: dict[str, EvalgateInconsistencyRecord]
    agreement: EvalgateAgreementRecord | None


class EvalgatePolicyApprovalRecord(TypedDict, total=False):
    """Whether the policy was approved by a ``policy`` key of the trust file (SPEC section 20):
    with ``approved`` the signer and the approval envelope (admission re-verifies it), without
    it the reason."""

    approved: bool
    reason: str
    identity: str
    keyid: str
    approved_at: str
    expires_at: str | None
    envelope: dict[str, EvalgateJSON]


class EvalgateSourceFile(TypedDict):
    """One harness file imported records of a side came from (``evalgate import``)."""

    harness: str
    version: str
    file: str
    sha256: str
    task: str
    task_version: str
    config_digest: str
    records: int


class EvalgateSourcesRecord(TypedDict):
    """Where imported results came from: per side (candidate name), its harness files; and the
    first identities missing (``revision/candidate/case[rN]``), so an incomplete import says
    which items one side lacks."""

    candidates: dict[str, list[EvalgateSourceFile]]
    missing: list[str]


class EvalgateDecision(TypedDict):
    """One suite's decision record."""

    verdict: str  # pass | fail | incomplete | invalid | partial
    attestable: bool
    suite: str
    definition_digest: str
    # the definition flattened to dotted keys, long texts as their sha256 (report.record)
    definition_parts: NotRequired[dict[str, EvalgateJSON]]
    dataset: dict[str, str]  # {"revision", "sha256"}
    policy: dict[str, str]  # {"version", "digest"}
    candidate: EvalgateDecisionSide | None
    baseline: EvalgateDecisionSide | None
    counts: EvalgateDecisionCounts
    rates: dict[str, dict[str, EvalgateRateRecord]]  # side -> slice -> rate
    slices: NotRequired[dict[str, EvalgateSliceCounts]]  # slice -> paired counts
    rules: list[EvalgateRuleRecord]
    perf: dict[str, EvalgatePerfSides]  # metric -> sides
    flipped: EvalgateFlipped
    canary_hits: int
    partial: bool
    evalgate_version: str
    created_at: str
    perf_phase: NotRequired[EvalgatePerfPhaseRecord | None]
    judge: NotRequired[EvalgateJudgeRecord]
    sandbox: NotRequired[EvalgateSandboxSummary]  # scorer: code only
    dialogue: NotRequired[dict[str, dict[str, dict[str, int]]]]  # conversations and tools only
    tier: NotRequired[dict[str, str | float | int | bool]]
    contamination: NotRequired[EvalgateContaminationRecord]
    policy_approval: NotRequired[EvalgatePolicyApprovalRecord]  # with a trust file only
    # {digest, binding: verified or declared, signature or why} (decision.weights)
    weights: NotRequired[dict[str, EvalgateJSON]]
    sources: NotRequired[EvalgateSourcesRecord]  # only when some records were imported
    exclusions: NotRequired[list[dict[str, str]]]  # dataset.exclude: [{case, reason}], when any
