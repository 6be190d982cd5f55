"""Write a decision's reports into a folder, and append report.md to a step summary."""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
from typing import cast

from pytest_evalgate.report.facts import EvalgateReportContext, EvalgateSignatureStatus
from pytest_evalgate.report.folder import evalgate_replace_folder
from pytest_evalgate.report.forest import evalgate_forest_png
from pytest_evalgate.report.html import evalgate_html
from pytest_evalgate.report.markdown import evalgate_markdown
from pytest_evalgate.report.shape import EvalgateDecision

EVALGATE_ENVELOPE_NAME = "decision.dsse.json"


def evalgate_write_report(
    directory: str, decision: EvalgateDecision, context: EvalgateReportContext | None = None
) -> list[str]:
    """Write decision.json, report.md, report.html and forest.png (when a rule has a paired
    interval) into ``directory``; returns the paths written.

    Without ``context`` (re-rendering a decision.json), the signature status is whether an
    envelope lies in the folder, and the definition is not compared with earlier decisions.
    """
    os.makedirs(directory, exist_ok=True)
    context = context or evalgate_folder_context(directory)
    paths = [
        _write(directory, "decision.json", json.dumps(decision, indent=2, sort_keys=True) + "\n"),
        _write(directory, "report.md", evalgate_markdown(decision, context)),
        _write(directory, "report.html", evalgate_html(decision, context)),
    ]
    forest = os.path.join(directory, "forest.png")
    if evalgate_forest_png(decision, forest):
        paths.append(forest)
    return paths


def evalgate_rerender_report(directory: str) -> tuple[list[str], str | None]:
    """Re-render a report folder from its decision.json, replacing the folder whole.

    The envelope is carried over only when its (unverified) payload is a statement of exactly
    this decision.json; one that matches nothing is dropped, never left beside the new files.
    Returns the paths written and a note when an envelope was dropped.
    """
    with open(os.path.join(directory, "decision.json"), encoding="utf-8") as handle:
        decision = cast(EvalgateDecision, json.load(handle))  # as written by this module
    envelope = os.path.join(directory, EVALGATE_ENVELOPE_NAME)
    had = os.path.exists(envelope)
    keep = had and evalgate_envelope_states(envelope, decision)
    state = "present" if keep else "absent"
    context = EvalgateReportContext(EvalgateSignatureStatus(state, envelope=EVALGATE_ENVELOPE_NAME))

    def fill(folder: str) -> list[str]:
        written = evalgate_write_report(folder, decision, context)
        if keep:
            written.append(shutil.copy2(envelope, os.path.join(folder, EVALGATE_ENVELOPE_NAME)))
        return written

    written = evalgate_replace_folder(directory, fill)
    if had and not keep:
        return written, f"dropped {envelope}: its payload is not a statement of decision.json"
    return written, None


def evalgate_envelope_states(path: str, decision: EvalgateDecision) -> bool:
    """Whether the envelope at ``path`` states ``decision`` (its payload's predicate equals it).

    No signature is checked (that is ``evalgate verify``'s job): this only tells an envelope of
    this decision from a stale one of another run."""
    try:
        with open(path, "rb") as handle:
            payload = json.loads(handle.read())["payload"]
        padded = str(payload) + "=" * (-len(str(payload)) % 4)
        statement = json.loads(base64.urlsafe_b64decode(padded.replace("+", "-").replace("/", "_")))
    except (OSError, ValueError, KeyError, TypeError, binascii.Error):
        return False
    return isinstance(statement, dict) and statement.get("predicate") == decision


def evalgate_folder_context(directory: str) -> EvalgateReportContext:
    """The context of a report rendered from a folder alone."""
    present = os.path.exists(os.path.join(directory, EVALGATE_ENVELOPE_NAME))
    state = "present" if present else "absent"
    return EvalgateReportContext(EvalgateSignatureStatus(state, envelope=EVALGATE_ENVELOPE_NAME))


def evalgate_append_step_summary(path: str, markdown: str) -> None:
    """Append ``markdown`` to a GitHub Actions step summary file (``$GITHUB_STEP_SUMMARY``)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(markdown if markdown.endswith("\n") else markdown + "\n")


def _write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path
