"""Reports people read, made of the decision record (SPEC section 16).

- ``shape``: the decision record's types (``EvalgateDecision`` and its parts); ``record``: the
  decision record itself (``decision.json``), built from them.
- ``summary``: the terminal lines.
- ``facts``: what every format says (verdict reason, slice and rule rows, signature);
  ``changes``: candidate against baseline pins, and the definition against the last decision.
- ``markdown``: ``report.md``; ``html`` and ``style``: ``report.html``; ``forest``:
  ``forest.png`` and the inline SVG figures; ``write``: the files of a report folder and the
  step summary; ``folder``: a report folder replaced whole by each run; ``history``:
  decisions kept in the store; ``artifacts``: report folders kept in the store beside them.

No report holds a case's input, target or output unless the context carries case text
(``--evalgate-report-text``).
"""

from __future__ import annotations

from pytest_evalgate.report.artifacts import evalgate_keep_report, evalgate_report_prefix
from pytest_evalgate.report.facts import (
    EvalgateReportContext,
    EvalgateSignatureStatus,
    evalgate_verdict_reason,
)
from pytest_evalgate.report.folder import (
    EVALGATE_REPORT_FILES,
    evalgate_check_report_folder,
    evalgate_replace_folder,
)
from pytest_evalgate.report.history import evalgate_keep_decision, evalgate_last_decision
from pytest_evalgate.report.html import evalgate_html
from pytest_evalgate.report.markdown import evalgate_markdown
from pytest_evalgate.report.record import evalgate_decision
from pytest_evalgate.report.summary import evalgate_summary_lines
from pytest_evalgate.report.write import (
    EVALGATE_ENVELOPE_NAME,
    evalgate_append_step_summary,
    evalgate_write_report,
)

__all__ = [
    "EVALGATE_ENVELOPE_NAME",
    "EVALGATE_REPORT_FILES",
    "EvalgateReportContext",
    "EvalgateSignatureStatus",
    "evalgate_append_step_summary",
    "evalgate_check_report_folder",
    "evalgate_decision",
    "evalgate_html",
    "evalgate_keep_decision",
    "evalgate_keep_report",
    "evalgate_last_decision",
    "evalgate_markdown",
    "evalgate_replace_folder",
    "evalgate_report_prefix",
    "evalgate_summary_lines",
    "evalgate_verdict_reason",
    "evalgate_write_report",
]
