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
from pytest_evalgate.errors import EvalgatePolicyError
from pytest_evalgate.gate import (
    EvalgateGateResult,
    EvalgatePolicy,
    evalgate_evaluate,
    evalgate_exit_status,
    evalgate_load_policy,
    evalgate_verdict,
)
from pytest_evalgate.judged import evalgate_judge_facts, evalgate_with_facts
from pytest_evalgate.manifest import EvalgateManifest
from pytest_evalgate.perf import EvalgatePerfResult, evalgate_merge_perf
from pytest_evalgate.report import evalgate_decision, evalgate_write_report
from pytest_evalgate.store import EvalgateStoreBackend

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
) -> EvalgateOutcome:
    """Aggregate ``selection`` from the store, gate it with ``policy``, report and sign.

    With ``perf`` (the load phase's result), perf rules are judged on its samples, measured over
    one window for both sides, instead of the eval requests' timings.
    """
    pair = evalgate_pair(manifest, policy)
    aggregate = evalgate_aggregate(backend, manifest, selection, pair)
    if perf is not None and aggregate.gate_input is not None:
        aggregate.gate_input = evalgate_merge_perf(aggregate.gate_input, perf)
    judge = evalgate_judge_facts(backend, manifest, selection.case_ids, pair, seed=policy.seed)
    aggregate.gate_input = evalgate_with_facts(aggregate.gate_input, judge)
    gate = _evaluate(manifest, policy, aggregate)
    status = "partial" if aggregate.partial and aggregate.status == "complete" else aggregate.status
    verdict = evalgate_verdict(status, gate.rules if gate else ())
    decision = evalgate_decision(manifest, policy, aggregate, gate, verdict)
    decision["perf_phase"] = None if perf is None else perf.to_dict(include_samples=False)
    if judge is not None:
        decision["judge"] = judge.evalgate_json()  # which judge decided (SPEC section 10)
    written, notes = _publish(decision, report_dir, sign_key)
    if judge is not None and aggregate.status == "incomplete" and judge.evalgate_note():
        notes = (*notes, str(judge.evalgate_note()))
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
    """(candidate, baseline) names the policy compares, checked against the manifest."""
    for role, name in (("candidate", policy.candidate), ("baseline", policy.baseline)):
        if name not in manifest.candidates:
            known = ", ".join(manifest.candidates)
            reason = f"{role} {name!r} is not a candidate of {manifest.path} ({known})"
            raise EvalgatePolicyError(policy.source, role, reason)
    return (policy.candidate, policy.baseline)


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
