"""Decide one suite from the store: aggregate, gate, decision record, signature, report.

Pure of pytest: the plugin (``--evalgate`` at the controller, ``--evalgate-aggregate``) and the
CLI (``evalgate gate``) call ``evalgate_decide``. Every number comes from the store, so the
verdict is the same however the results got there (one process, xdist workers, pods).

With a report folder, the report step (``decision.publish``) also keeps a copy of the decision
in the store (``<store>/<suite>/decisions/``, see ``report.history``), compares the definition
with the last copy kept before it, and appends report.md to ``$GITHUB_STEP_SUMMARY`` when that
is set.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from pytest_evalgate.aggregate.code import evalgate_code_record
from pytest_evalgate.aggregate.combine import (
    EvalgateAggregate,
    EvalgateSelection,
    evalgate_aggregate,
)
from pytest_evalgate.aggregate.contamination import (
    evalgate_contaminated_verdict,
    evalgate_contamination_note,
    evalgate_contamination_record,
)
from pytest_evalgate.aggregate.judged import evalgate_judge_facts, evalgate_with_facts
from pytest_evalgate.aggregate.paired import EvalgateGateInput
from pytest_evalgate.attest.trust import EvalgateTrust
from pytest_evalgate.decision.approval import evalgate_approval_record
from pytest_evalgate.decision.publish import Publish
from pytest_evalgate.decision.weights import evalgate_weights_record
from pytest_evalgate.gate import slo
from pytest_evalgate.gate.result import EvalgateGateResult
from pytest_evalgate.gate.rules import (
    evalgate_evaluate,
    evalgate_exit_status,
    evalgate_verdict,
)
from pytest_evalgate.gate.single import evalgate_single_view
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.manifest.tiers import (
    evalgate_tier_member,
    evalgate_tier_record,
    evalgate_tier_spec,
)
from pytest_evalgate.perf.result import EvalgatePerfResult, evalgate_merge_perf
from pytest_evalgate.policy.load import EvalgateSuitePolicy
from pytest_evalgate.policy.values import EvalgatePolicy
from pytest_evalgate.report import evalgate_decision
from pytest_evalgate.report.record import evalgate_sources_notes, evalgate_sources_record
from pytest_evalgate.report.shape import (
    EvalgateDecision,
    EvalgateJudgeRecord,
    EvalgatePerfPhaseRecord,
)
from pytest_evalgate.store import EvalgateStoreBackend
from pytest_evalgate.store.verified import EvalgateVerifiedSegments


@dataclass(frozen=True)
class EvalgateOutcome:
    """One suite's decision: the record, the exit status, and what was written."""

    decision: EvalgateDecision
    exit_status: int
    written: tuple[str, ...]
    notes: tuple[str, ...]


def evalgate_decide(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    selection: EvalgateSelection,
    policy: EvalgateSuitePolicy,
    *,
    report_dir: str | None = None,
    sign_key: str | None = None,
    perf: EvalgatePerfResult | None = None,
    tier: str | None = None,
    report_text: bool = False,
    verified: EvalgateVerifiedSegments | None = None,
    trust: EvalgateTrust | None = None,
) -> EvalgateOutcome:
    """Aggregate ``selection`` from the store, gate it with ``policy`` (checked against
    ``manifest`` when it was loaded, ``policy.evalgate_check_policy``), sign and report.

    With ``perf`` (the load phase's result), perf rules are judged on its samples, measured over
    one window for both sides, instead of the eval requests' timings. With ``tier`` (a name of
    the manifest's ``tiers``) the selection is complete when it is the tier's cases, and the
    decision records the tier and is never attestable. ``report_text``
    (``--evalgate-report-text``) lets the reports show the flipped cases' input, target and
    outputs; the decision record never holds them. ``verified``: the segments this process
    committed and verified as it went (``store.table``), replayed when their bytes are unchanged.
    With ``trust`` (a trust file) the decision records whether the policy is approved, and is
    not attestable when it is not (``decision.approval``).
    """
    pair = policy.pair
    aggregate = evalgate_aggregate(backend, manifest, selection, pair, verified)
    if policy.baseline is None and aggregate.gate_input is not None:
        aggregate.gate_input = evalgate_single_view(aggregate.gate_input)
    tier_record = None if tier is None else _tier(manifest, selection, aggregate, tier)
    if perf is not None and aggregate.gate_input is not None:
        aggregate.gate_input = evalgate_merge_perf(aggregate.gate_input, perf)
    judge = evalgate_judge_facts(backend, manifest, selection.case_ids, pair, seed=policy.seed)
    aggregate.gate_input = evalgate_with_facts(aggregate.gate_input, judge)
    gate = _evaluate(policy, aggregate)
    status = "partial" if aggregate.partial and aggregate.status == "complete" else aggregate.status
    verdict = evalgate_verdict(status, gate.rules if gate else ())
    verdict = evalgate_contaminated_verdict(verdict, aggregate.canary_identities)
    decision = evalgate_decision(manifest, policy, aggregate, gate, verdict)
    if aggregate.canary_identities:
        decision["contamination"] = evalgate_contamination_record(aggregate.canary_identities)
    if tier_record is not None:
        decision["tier"] = tier_record
        decision["attestable"] = False
    if aggregate.sandbox is not None:  # scorer: code only; unsandboxed: never attestable
        decision["sandbox"] = evalgate_code_record(aggregate.sandbox)
        decision["attestable"] = decision["attestable"] and aggregate.sandbox["sandboxed"]
    if aggregate.dialogue is not None:  # conversations and tool loops: outcomes per slice
        decision["dialogue"] = aggregate.dialogue
    approval_note = _approval(decision, trust, policy)
    weights = evalgate_weights_record(_weights_digest(decision), trust)
    candidate = manifest.candidates.get(policy.candidate)
    rewrite = candidate is not None and candidate.model_rewrite
    # which model answered: compared with the manifest's on every answer, unless opted out
    weights["model_check"] = "off: model_rewrite (a gateway renames)" if rewrite else "exact"
    decision["weights"] = weights
    sources = evalgate_sources_record(aggregate)
    if sources is not None:  # imported results (evalgate import): which harness files
        decision["sources"] = sources
    if manifest.exclusions:  # dataset.exclude: which cases were left out, and why (signed)
        decision["exclusions"] = [exclusion.evalgate_json() for exclusion in manifest.exclusions]
    # The load phase's and the judge's blocks are built by their stages as builtins; the
    # record's types name the keys the reports read of them.
    phase = None if perf is None else perf.to_dict(include_samples=False)
    if phase is not None and perf is not None and perf.sweep:
        phase["max_rate_at_slo"] = _rates_at_slo(policy, aggregate.gate_input)
    decision["perf_phase"] = cast(EvalgatePerfPhaseRecord | None, phase)
    if judge is not None:  # which judge decided (SPEC section 10)
        decision["judge"] = cast(EvalgateJudgeRecord, judge.evalgate_json())
    publish = Publish(backend, manifest, report_dir, sign_key, report_text)
    written, notes = publish.run(decision)
    if approval_note is not None and not sign_key:  # with a key, the refusal to sign says it
        notes = (approval_note, *notes)
    if aggregate.canary_identities:
        notes = (evalgate_contamination_note(aggregate.canary_identities), *notes)
    if sources is not None:
        notes = (*evalgate_sources_notes(sources), *notes)
    if manifest.exclusions:
        notes = (*notes, _exclusions_note(manifest))
    if judge is not None and aggregate.status == "incomplete" and judge.evalgate_note():
        notes = (*notes, str(judge.evalgate_note()))
    all_pass = gate is not None and gate.passed
    return EvalgateOutcome(decision, evalgate_exit_status(verdict, all_pass), written, notes)


def _exclusions_note(manifest: EvalgateManifest) -> str:
    count = len(manifest.exclusions)
    shown = "; ".join(f"{e.case_id}: {e.reason}" for e in manifest.exclusions)
    return f"excluded {count} case{'' if count == 1 else 's'} (dataset.exclude): {shown}"


def _rates_at_slo(policy: EvalgateSuitePolicy, gate_input: Any) -> list[dict[str, Any]]:
    """Per ``max_rate_at_slo`` rule: its SLO and both models' max rate at it (the candidate's is
    the per-replica rate ``evalgate plan --decision`` sizes replicas with)."""
    out: list[dict[str, Any]] = []
    if gate_input is None:
        return out
    for rule in policy.rules:
        if rule.rule != "perf_ratio_min" or rule.slo is None:
            continue
        verdict = slo.evaluate(gate_input.perf, rule.slo, float(rule.limit or 0.0))
        sides = zip(policy.pair, (verdict.candidate, verdict.baseline), strict=True)
        out.append({
            "rule": f"rules[{rule.index}]",
            "candidate": policy.pair[0],
            "slo": {"ttft_p95_s": rule.slo[0], "tpot_p95_s": rule.slo[1]},
            "rates": {name: None if r is None else r.rate for name, r in sides},
            "ratio": verdict.ratio if verdict.evaluated else None,
        })  # fmt: skip
    return out


def _weights_digest(decision: EvalgateDecision) -> object:
    candidate = decision["candidate"]
    pins = candidate["pins"] if candidate else {}
    return pins.get("weights_digest") if isinstance(pins, dict) else None


def _approval(
    decision: EvalgateDecision, trust: EvalgateTrust | None, policy: EvalgatePolicy
) -> str | None:
    """Record the policy's approval (with a trust file); the note when it is not approved."""
    if trust is None:
        return None
    record = evalgate_approval_record(trust, policy, datetime.now(UTC))
    decision["policy_approval"] = record
    if record.get("approved"):
        return None
    decision["attestable"] = False
    return f"evalgate: {record.get('reason')}; the decision is not attestable"


def _evaluate(policy: EvalgatePolicy, aggregate: EvalgateAggregate) -> EvalgateGateResult | None:
    data = aggregate.gate_input
    if data is None or not data.case_ids:
        return None
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
) -> dict[str, str | float | int | bool]:
    """Judge completeness against the tier's cases (not the suite's); the decision's ``tier``."""
    spec = evalgate_tier_spec(manifest.tiers, name, manifest.path)
    members = {c.case_id for c in manifest.cases if evalgate_tier_member(spec, c.case_id)}
    whole = set(selection.candidates) == set(manifest.candidates)
    aggregate.partial = not whole or set(selection.case_ids) != members
    return evalgate_tier_record(name, spec, len(members), len(manifest.cases))


def _held_rules(policy: EvalgatePolicy, data: EvalgateGateInput) -> EvalgatePolicy:
    present = {str(value) for value in data.categories}
    rules = tuple(rule for rule in policy.rules if rule.slice in (None, "*", "all", *present))
    return dataclasses.replace(policy, rules=rules)


def _selected_rules(policy: EvalgatePolicy, data: EvalgateGateInput) -> EvalgatePolicy:
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
