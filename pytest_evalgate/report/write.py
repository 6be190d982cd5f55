"""Write a decision's reports into a folder, and append report.md to a step summary."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pytest_evalgate.report.facts import EvalgateReportContext, EvalgateSignatureStatus
from pytest_evalgate.report.forest import evalgate_forest_png
from pytest_evalgate.report.html import evalgate_html
from pytest_evalgate.report.markdown import evalgate_markdown

EVALGATE_ENVELOPE_NAME = "decision.dsse.json"


def evalgate_write_report(
    directory: str, decision: Mapping[str, Any], context: EvalgateReportContext | None = None
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
