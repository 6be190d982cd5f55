"""A decision published: signed, its reports written, a copy kept in the store.

``Publish.run`` signs the decision (with a key; a decision that may not be signed is refused
with a note), then writes its reports into the report folder, which this run's files replace
whole, keeps a copy of the decision in the store (``report.history``) and of the report folder
beside it (``report.artifacts``), and appends report.md to ``$GITHUB_STEP_SUMMARY`` when that is
set. A store that cannot take a copy costs a note, never the verdict. With ``report_text`` the
reports show the flipped cases' input, target and outputs (read back from the store).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pytest_evalgate.attest.dsse import (
    evalgate_refusal_reason,
    evalgate_sign,
    evalgate_statement,
    evalgate_write_envelope,
)
from pytest_evalgate.dialogue.transcript import evalgate_transcript_text
from pytest_evalgate.errors import EvalgateStoreError, EvalgateStorePathError
from pytest_evalgate.manifest.dataset import EvalgateCase
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.report import (
    EVALGATE_ENVELOPE_NAME,
    EvalgateReportContext,
    EvalgateSignatureStatus,
    evalgate_append_step_summary,
    evalgate_keep_decision,
    evalgate_keep_report,
    evalgate_last_decision,
    evalgate_markdown,
    evalgate_replace_folder,
    evalgate_report_prefix,
    evalgate_write_report,
)
from pytest_evalgate.report.shape import EvalgateDecision
from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateStoreBackend,
    evalgate_candidate_prefix,
    evalgate_check_store_folder,
    evalgate_read_candidate,
)

EVALGATE_STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


@dataclass(frozen=True)
class Publish:
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
