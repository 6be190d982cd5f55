"""Decide one suite from the store: aggregate, gate, decision record, signature, report.

Pure of pytest: the plugin (``--evalgate`` at the controller, ``--evalgate-aggregate``) and the
CLI (``evalgate gate``) call ``evalgate_decide``. Every number comes from the store, so the
verdict is the same however the results got there (one process, xdist workers, pods).

With a report folder, the report step also keeps a copy of the decision in the store
(``<store>/<suite>/decisions/``, see ``report.history``), compares the definition with the last
copy kept before it, and appends report.md to ``$GITHUB_STEP_SUMMARY`` when that is set.
"""

from __future__ import annotations

import dataclasses
import os
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
from pytest_evalgate.attest.dsse import (
    evalgate_refusal_reason,
    evalgate_sign,
    evalgate_statement,
    evalgate_write_envelope,
)
from pytest_evalgate.attest.trust import EvalgateTrust
from pytest_evalgate.decision.approval import evalgate_approval_record
from pytest_evalgate.decision.weights import evalgate_weights_record
from pytest_evalgate.dialogue.transcript import evalgate_transcript_text
from pytest_evalgate.errors import (
    EvalgateStoreError,
    EvalgateStorePathError,
)
from pytest_evalgate.gate import slo
from pytest_evalgate.gate.result import EvalgateGateResult
from pytest_evalgate.gate.rules import (
    evalgate_evaluate,
    evalgate_exit_status,
    evalgate_verdict,
)
from pytest_evalgate.gate.single import evalgate_single_view
from pytest_evalgate.manifest.dataset import EvalgateCase
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.manifest.tiers import (
    evalgate_tier_member,
    evalgate_tier_record,
    evalgate_tier_spec,
)
from pytest_evalgate.perf.result import EvalgatePerfResult, evalgate_merge_perf
from pytest_evalgate.policy.load import EvalgateSuitePolicy
from pytest_evalgate.policy.values import EvalgatePolicy
from pytest_evalgate.report import (
    EVALGATE_ENVELOPE_NAME,
    EvalgateReportContext,
    EvalgateSignatureStatus,
    evalgate_append_step_summary,
    evalgate_decision,
    evalgate_keep_decision,
    evalgate_keep_report,
    evalgate_last_decision,
    evalgate_markdown,
    evalgate_replace_folder,
    evalgate_report_prefix,
    evalgate_write_report,
)
from pytest_evalgate.report.record import evalgate_sources_notes, evalgate_sources_record
from pytest_evalgate.report.shape import (
    EvalgateDecision,
    EvalgateJudgeRecord,
    EvalgatePerfPhaseRecord,
)
from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateStoreBackend,
    evalgate_candidate_prefix,
    evalgate_check_store_folder,
    evalgate_read_candidate,
)
from pytest_evalgate.store.verified import EvalgateVerifiedSegments

EVALGATE_STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


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
    publish = _Publish(backend, manifest, report_dir, sign_key, report_text)
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


@dataclass(frozen=True)
class _Publish:
    """Sign the decision, then write its reports (which show the signature status)."""

    backend: EvalgateStoreBackend
    manifest: EvalgateManifest
    report_dir: str | None
    sign_key: str | None
    report_text: bool

    def run(self, decision: EvalgateDecision) -> tuple[tuple[str, ...], tuple[str, ...]]:
        notes: list[str] = []
        if not self.report_dir:
            _status, envelope = self._sign(decision, notes, ".")
            return ((envelope,) if envelope else ()), tuple(notes)
        report_dir = self.report_dir
        evalgate_check_store_folder(self.backend, report_dir, "--evalgate-report")
        summary: list[str] = []
        kept: list[str | None] = [None]

        def fill(folder: str) -> list[str]:
            status, envelope = self._sign(decision, notes, folder)
            written, kept[0] = self._report(folder, decision, status, notes, summary)
            return written + ([envelope] if envelope else [])

        # One story per folder: this run's files replace the folder whole (report.folder).
        written = evalgate_replace_folder(report_dir, fill)
        step = os.environ.get(EVALGATE_STEP_SUMMARY_ENV)
        if step and summary:
            evalgate_append_step_summary(step, summary[0])
        if kept[0] is not None:
            self._keep_report(kept[0], written, notes)
        return tuple(written), tuple(notes)

    def _sign(
        self, decision: EvalgateDecision, notes: list[str], folder: str
    ) -> tuple[EvalgateSignatureStatus, str | None]:
        if not self.sign_key:
            return EvalgateSignatureStatus("unsigned"), None
        refusal = evalgate_refusal_reason(decision)
        if refusal is not None:
            notes.append(f"decision not signed: {refusal}")
            return EvalgateSignatureStatus("refused", detail=refusal), None
        envelope = evalgate_sign(evalgate_statement(decision), self.sign_key)
        path = os.path.join(folder, EVALGATE_ENVELOPE_NAME)
        evalgate_write_envelope(envelope, path)
        keyid = str(envelope["signatures"][0]["keyid"])
        return EvalgateSignatureStatus("signed", keyid=keyid, envelope=EVALGATE_ENVELOPE_NAME), path

    def _report(
        self,
        folder: str,
        decision: EvalgateDecision,
        status: EvalgateSignatureStatus,
        notes: list[str],
        summary: list[str],
    ) -> tuple[list[str], str | None]:
        previous, kept = self._history(decision, notes)
        texts = _case_texts(self.backend, self.manifest, decision) if self.report_text else None
        context = EvalgateReportContext(status, previous, searched=True, texts=texts)
        written = evalgate_write_report(folder, decision, context)
        if os.environ.get(EVALGATE_STEP_SUMMARY_ENV):
            summary.append(evalgate_markdown(decision, context))
        return written, kept

    def _history(
        self, decision: EvalgateDecision, notes: list[str]
    ) -> tuple[EvalgateDecision | None, str | None]:
        """The last decision kept for this suite, then keep this one (a store that cannot
        take the copy costs the next report its comparison, not this run its verdict);
        returns it and the store path of this decision's copy."""
        try:
            previous = evalgate_last_decision(self.backend, self.manifest.suite)
            kept = evalgate_keep_decision(self.backend, decision)
        except (OSError, EvalgateStorePathError) as exc:
            notes.append(f"decision copy not kept in the store: {exc}")
            return None, None
        return previous, kept

    def _keep_report(self, kept: str, written: list[str], notes: list[str]) -> None:
        """Publish the report folder beside the decision copy (``report.artifacts``): on an
        S3 store, the aggregation pod's report lands in the bucket. A failure is a note."""
        try:
            published = evalgate_keep_report(self.backend, kept, written)
        except (OSError, EvalgateStoreError) as exc:
            notes.append(f"report not kept in the store: {exc}")
            return
        prefix = evalgate_report_prefix(kept)
        notes.append(f"report kept in the store: {prefix}/ ({len(published)} files)")


def _case_texts(
    backend: EvalgateStoreBackend, manifest: EvalgateManifest, decision: EvalgateDecision
) -> dict[str, dict[str, str]]:
    """Input, target and both outputs (first repetition with one) of the flipped cases."""
    ids = [flip["case_id"] for flip in decision["flipped"]["cases"]]
    index = manifest.evalgate_case_index()
    outputs = {
        role: _outputs(backend, manifest, side["name"], set(ids))
        for role, side in (
            ("candidate", decision.get("candidate")),
            ("baseline", decision.get("baseline")),
        )
        if side
    }
    return {
        case_id: {
            "input": _prompt_text(index[case_id]),
            "target": index[case_id].target,
            **{role: found.get(case_id, "") for role, found in outputs.items()},
        }
        for case_id in ids
        if case_id in index
    }


def _outputs(
    backend: EvalgateStoreBackend, manifest: EvalgateManifest, name: str, ids: set[str]
) -> dict[str, str]:
    key = manifest.candidates[name].key
    prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
    expect = EvalgateExpectation(manifest.definition_digest, manifest.dataset_revision, key)
    view = evalgate_read_candidate(backend, prefix, expect)
    found: dict[str, str] = {}
    for identity in sorted(view.results, key=lambda key: key.repetition):
        record = view.results[identity]
        case_id = identity.case_id
        facts = record.get("dialogue")
        if case_id in ids and facts is not None and case_id not in found:
            found[case_id] = evalgate_transcript_text(facts)  # the whole conversation
        elif case_id in ids and record.get("output") and case_id not in found:
            found[case_id] = str(record["output"])
    return found


def _prompt_text(case: EvalgateCase) -> str:
    """The case's own text: the rendered completion prompt, or the chat turns after the system
    message(s)."""
    if isinstance(case.prompt, str):
        return case.prompt
    turns = [m for m in case.prompt if m.get("role") != "system"]
    if len(turns) == 1:
        return str(turns[0].get("content", ""))
    return "\n".join(f"{m.get('role')}: {m.get('content', '')}" for m in turns)
