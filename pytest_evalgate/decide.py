"""Decide one suite from the store: aggregate, gate, decision record, report, signature.

Pure of pytest: the plugin (``--evalgate`` at the controller, ``--evalgate-aggregate``) and the
CLI (``evalgate gate``) call ``evalgate_decide``. Every number comes from the store, so the
verdict is the same however the results got there (one process, xdist workers, pods).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.aggregate import EvalgateAggregate, EvalgateSelection, evalgate_aggregate
from pytest_evalgate.attest import (
    evalgate_refusal_reason,
    evalgate_sign,
    evalgate_statement,
    evalgate_write_envelope,
)
from pytest_evalgate.contamination import (
    evalgate_contaminated_verdict,
    evalgate_contamination_note,
    evalgate_contamination_record,
)
from pytest_evalgate.errors import EvalgatePolicyError
from pytest_evalgate.gate import (
    EvalgateGateResult,
    EvalgatePolicy,
    evalgate_evaluate,
    evalgate_exit_status,
    evalgate_load_policy,
    evalgate_verdict,
)
from pytest_evalgate.gate_single import evalgate_single_view
from pytest_evalgate.manifest import EvalgateManifest
from pytest_evalgate.perf import EvalgatePerfResult, evalgate_merge_perf
from pytest_evalgate.report import evalgate_decision, evalgate_write_report
from pytest_evalgate.store import EvalgateStoreBackend
from pytest_evalgate.tiers import evalgate_tier_member, evalgate_tier_record, evalgate_tier_spec

EVALGATE_POLICY_NAME = "gate.yaml"
EVALGATE_ENVELOPE_NAME = "decision.dsse.json"


@dataclass(frozen=True)
class EvalgateOutcome:
    """One suite's decision: the record, the exit status, and what was written."""

    decision: dict[str, Any]
    exit_status: int
    written: tuple[str, ...]
    notes: tuple[str, ...]


def evalgate_policy_path(manifest: EvalgateManifest, override: str | None) -> str:
    """``override`` if given, else the suite's gate.yaml."""
    return override or os.path.join(manifest.suite_dir, EVALGATE_POLICY_NAME)


def evalgate_decide(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    selection: EvalgateSelection,
    policy: EvalgatePolicy,
    *,
    report_dir: str | None = None,
    sign_key: str | None = None,
    perf: EvalgatePerfResult | None = None,
    tier: str | None = None,
) -> EvalgateOutcome:
    """Aggregate ``selection`` from the store, gate it with ``policy``, report and sign.

    With ``perf`` (the load phase's result), perf rules are judged on its samples, measured over
    one window for both sides, instead of the eval requests' timings. With ``tier`` (a name of
    the manifest's ``tiers``) the selection is complete when it is the tier's cases, and the
    decision records the tier and is never attestable.
    """
    pair = evalgate_pair(manifest, policy)
    aggregate = evalgate_aggregate(backend, manifest, selection, pair)
    if policy.baseline is None and aggregate.gate_input is not None:
        aggregate.gate_input = evalgate_single_view(aggregate.gate_input)
    tier_record = None if tier is None else _tier(manifest, selection, aggregate, tier)
    if perf is not None and aggregate.gate_input is not None:
        aggregate.gate_input = evalgate_merge_perf(aggregate.gate_input, perf)
    gate = _evaluate(manifest, policy, aggregate)
    status = "partial" if aggregate.partial and aggregate.status == "complete" else aggregate.status
    verdict = evalgate_verdict(status, gate.rules if gate else ())
    verdict = evalgate_contaminated_verdict(verdict, aggregate.canary_identities)
    decision = evalgate_decision(manifest, policy, aggregate, gate, verdict)
    if aggregate.canary_identities:
        decision["contamination"] = evalgate_contamination_record(aggregate.canary_identities)
    if tier_record is not None:
        decision.update(tier=tier_record, attestable=False)
    decision["perf_phase"] = None if perf is None else perf.to_dict(include_samples=False)
    written, notes = _publish(decision, report_dir, sign_key)
    if aggregate.canary_identities:
        notes = (evalgate_contamination_note(aggregate.canary_identities), *notes)
    all_pass = gate is not None and gate.passed
    return EvalgateOutcome(decision, evalgate_exit_status(verdict, all_pass), written, notes)


def evalgate_load_suite_policy(manifest: EvalgateManifest, override: str | None) -> EvalgatePolicy:
    """Load the policy for ``manifest`` (its gate.yaml unless ``override``) and check it against
    the suite: compared candidates exist, slices name the suite's categories."""
    policy = evalgate_load_policy(evalgate_policy_path(manifest, override))
    evalgate_pair(manifest, policy)
    _check_slices(manifest, policy)
    return policy


def evalgate_pair(manifest: EvalgateManifest, policy: EvalgatePolicy) -> tuple[str, str]:
    """(candidate, baseline) names the policy compares, checked against the manifest.

    A single-model policy (``baseline: null``) pairs the candidate with itself: its paired rules
    are refused at load, and ``evalgate_decide`` blanks the mirrored baseline side."""
    baseline = policy.candidate if policy.baseline is None else policy.baseline
    for role, name in (("candidate", policy.candidate), ("baseline", baseline)):
        if name not in manifest.candidates:
            known = ", ".join(manifest.candidates)
            reason = f"{role} {name!r} is not a candidate of {manifest.path} ({known})"
            raise EvalgatePolicyError(policy.source, role, reason)
    return (policy.candidate, baseline)


def _evaluate(
    manifest: EvalgateManifest, policy: EvalgatePolicy, aggregate: EvalgateAggregate
) -> EvalgateGateResult | None:
    data = aggregate.gate_input
    if data is None or not data.case_ids:
        return None
    _check_slices(manifest, policy)
    if aggregate.partial:
        return evalgate_evaluate(_selected_rules(policy, data), data)
    if aggregate.status != "complete":
        # A store still missing shards may hold no paired case of a slice yet: the verdict is
        # incomplete whatever the rules say, so gate what it holds instead of refusing the policy.
        return evalgate_evaluate(_held_rules(policy, data), data)
    return evalgate_evaluate(policy, data)


def _tier(
    manifest: EvalgateManifest,
    selection: EvalgateSelection,
    aggregate: EvalgateAggregate,
    name: str,
) -> dict[str, Any]:
    """Judge completeness against the tier's cases (not the suite's); the decision's ``tier``."""
    spec = evalgate_tier_spec(manifest.tiers, name, manifest.path)
    members = {c.case_id for c in manifest.cases if evalgate_tier_member(spec, c.case_id)}
    whole = set(selection.candidates) == set(manifest.candidates)
    aggregate.partial = not whole or set(selection.case_ids) != members
    return evalgate_tier_record(name, spec, len(members), len(manifest.cases))


def _check_slices(manifest: EvalgateManifest, policy: EvalgatePolicy) -> None:
    """A slice must name a category of the suite (not only of what the store holds so far)."""
    known = sorted({case.category for case in manifest.cases})
    for rule in policy.rules:
        if rule.slice not in (None, "*", "all") and rule.slice not in known:
            reason = f"no category {rule.slice!r} in the suite; categories: {', '.join(known)}"
            raise EvalgatePolicyError(policy.source, f"rules[{rule.index}].slice", reason)


def _held_rules(policy: EvalgatePolicy, data: Any) -> EvalgatePolicy:
    present = {str(value) for value in data.categories}
    rules = tuple(rule for rule in policy.rules if rule.slice in (None, "*", "all", *present))
    return dataclasses.replace(policy, rules=rules)


def _selected_rules(policy: EvalgatePolicy, data: Any) -> EvalgatePolicy:
    # A partial selection is gated over the rules it covers: slices of the selected categories
    # ("*" expands to those), and perf and error-rate rules; "all" is not all of a subset.
    # Perf rules judge the deployment as a whole and are left out of a partial verdict.
    present = {str(value) for value in data.categories}
    rules = tuple(
        rule
        for rule in policy.rules
        if rule.rule == "max_delta" or rule.slice == "*" or rule.slice in present
    )
    return dataclasses.replace(policy, rules=rules)


def _publish(
    decision: dict[str, Any], report_dir: str | None, sign_key: str | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    written: list[str] = []
    notes: list[str] = []
    if report_dir:
        written += evalgate_write_report(report_dir, decision)
    if sign_key:
        refusal = evalgate_refusal_reason(decision)
        if refusal is not None:
            notes.append(f"decision not signed: {refusal}")
        else:
            envelope = evalgate_sign(evalgate_statement(decision), sign_key)
            path = os.path.join(report_dir or ".", EVALGATE_ENVELOPE_NAME)
            evalgate_write_envelope(envelope, path)
            written.append(path)
    return tuple(written), tuple(notes)
