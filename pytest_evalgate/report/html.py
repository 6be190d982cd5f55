"""``report.html``: one self-contained page with the content of report.md.

Nothing is fetched: styles and the one script are inline, the figures are inline SVG, fonts are
the reader's own, and a Content-Security-Policy (``default-src 'none'``, the script allowed by
its hash) makes a browser refuse any request the page might try. Slices are rows that expand
(``<details>``) to their flipped case ids. The layout reflows to a single column on a phone
(no horizontal scrolling of the page) and prints cleanly (every ``<details>`` opens before
printing, colour is never the only signal).

Elements carry ``data-`` attributes (``data-slice``, ``data-rule``, ``data-metric``,
``data-verdict``, ``data-signature``) so tools and tests can find them.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from html import escape

from pytest_evalgate.report.changes import (
    EvalgateChangeRow,
    evalgate_definition_changes,
    evalgate_pin_changes,
    evalgate_previous_text,
)
from pytest_evalgate.report.facts import (
    EVALGATE_FACT_KEYS,
    EvalgateReportContext,
    EvalgateSignatureStatus,
    EvalgateSliceRow,
    evalgate_chunk_counted_note,
    evalgate_error_rows,
    evalgate_facts,
    evalgate_latency_rows,
    evalgate_latency_source,
    evalgate_rule_rows,
    evalgate_seconds,
    evalgate_signature_text,
    evalgate_slice_rows,
    evalgate_unflipped_shown,
    evalgate_verdict_reason,
)
from pytest_evalgate.report.forest import evalgate_forest_svg, evalgate_latency_svg
from pytest_evalgate.report.shape import EvalgateDecision, EvalgatePercentiles
from pytest_evalgate.report.style import EVALGATE_REPORT_CSS

_TEXT_CUT = 400
_SCRIPT = (
    'addEventListener("beforeprint",function(){'
    'document.querySelectorAll("details").forEach(function(d){d.open=true;});});'
)
_SLICE_COLUMNS = (
    ("slice", "name"), ("n", "n"), ("baseline", "baseline"), ("candidate", "candidate"),
    ("paired delta", "delta"), ("interval", "interval"), ("threshold", "threshold"),
    ("result", "result"), ("flipped", ""),
)  # fmt: skip


def evalgate_html(decision: EvalgateDecision, context: EvalgateReportContext | None = None) -> str:
    """report.html: the decision as one self-contained page."""
    context = context or EvalgateReportContext()
    verdict = str(decision["verdict"])
    sections = [
        _summary(decision, context),
        _slices(decision, context),
        _forest(decision),
        _rules(decision),
        _latency(decision),
        _errors(decision),
        _excluded(decision),
        *(_facts(decision, key) for key in EVALGATE_FACT_KEYS),
        _changes(decision, context),
    ]
    return "\n".join(
        [
            _head(decision),
            _banner(decision, verdict),
            "<main>",
            *[section for section in sections if section],
            "</main>",
            f"<footer>evalgate {escape(str(decision['evalgate_version']))}, "
            f"{escape(str(decision['created_at']))}</footer>",
            f"<script>{_SCRIPT}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )


def _banner(decision: EvalgateDecision, verdict: str) -> str:
    """The verdict a reviewer sees first, and why."""
    kind = escape(verdict)
    return "\n".join(
        [
            f'<header class="verdict v-{kind}" id="verdict" data-verdict="{kind}">',
            f'<p class="eyebrow">Release gate &middot; {escape(str(decision["suite"]))}</p>',
            f"<h1>Verdict: {escape(verdict.upper())}</h1>",
            f'<p class="why">{escape(evalgate_verdict_reason(decision))}</p>',
            "</header>",
        ]
    )


def _head(decision: EvalgateDecision) -> str:
    digest = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    policy = (
        f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    title = f"Release gate: {decision['suite']}: {str(decision['verdict']).upper()}"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
            f"<title>{escape(title)}</title>",
            f"<style>{EVALGATE_REPORT_CSS}</style>",
            "</head>",
            "<body>",
        ]
    )


def _section(ident: str, title: str, body: Iterable[str]) -> str:
    return "\n".join([f'<section id="{ident}">', f"<h2>{escape(title)}</h2>", *body, "</section>"])


def _code(value: object, hashlike: bool = False) -> str:
    """Monospace; ``hashlike`` values (digests, pins) may break anywhere, names only where
    they must."""
    kind = ' class="h"' if hashlike else ""
    return f"<code{kind}>{escape(str(value))}</code>"


def _cls(result: str) -> str:
    if result.startswith("pass"):
        return "pass"
    return "fail" if result.startswith("FAIL") else ""


def _table(
    header: Sequence[tuple[str, str]], rows: Iterable[tuple[str, Sequence[str]]]
) -> list[str]:
    """A table that stacks into cards on a phone. ``header``: (label, "num" or ""); ``rows``:
    (attributes of the ``<tr>``, cells already escaped)."""
    head = "".join(f'<th class="{kind}">{escape(label)}</th>' for label, kind in header)
    lines = ['<table class="stack">', f"<thead><tr>{head}</tr></thead>", "<tbody>"]
    for attributes, cells in rows:
        tds = "".join(
            f'<td class="{kind}" data-label="{escape(label)}"><span class="v">{cell}</span></td>'
            for (label, kind), cell in zip(header, cells, strict=True)
        )
        lines.append(f"<tr{attributes}>{tds}</tr>")
    return [*lines, "</tbody>", "</table>"]


# --------------------------------------------------------------------------- sections


def _summary(decision: EvalgateDecision, context: EvalgateReportContext) -> str:
    sides = [
        ("", [escape(role), _code(side["model"]), _code(side["key"])])
        for role, side in (
            ("candidate", decision.get("candidate")),
            ("baseline", decision.get("baseline")),
        )
        if side
    ]
    table = _table([("role", ""), ("model", ""), ("candidate key", "")], sides) if sides else []
    return _section("summary", "Summary", [*table, _summary_facts(decision, context)])


def _summary_facts(decision: EvalgateDecision, context: EvalgateReportContext) -> str:
    counts, policy, dataset = decision["counts"], decision["policy"], decision["dataset"]
    signature = context.signature or EvalgateSignatureStatus("unsigned")
    items = [
        f"definition {_code(decision['definition_digest'], True)}",
        f"dataset {_code(dataset['revision'])} {_code(dataset['sha256'][:16])}",
        f"policy {_code(policy['version'])} {_code(policy['digest'][:16])}",
        f"identities completed {counts['completed']}/{counts['expected']}, missing "
        f"{counts['missing']}, duplicates collapsed {counts['duplicates_collapsed']}",
        f'<span id="signature" data-signature="{escape(signature.state)}">signature: '
        f"{escape(evalgate_signature_text(signature))}</span>",
    ]
    if decision.get("partial"):
        items.append("partial selection: not attestable")
    return '<ul class="facts">' + "".join(f"<li>{item}</li>" for item in items) + "</ul>"


def _slices(decision: EvalgateDecision, context: EvalgateReportContext) -> str:
    rows = evalgate_slice_rows(decision)
    if not rows:
        return ""
    head = "".join(
        f'<span class="cell{_slice_num(label)}">{escape(label)}</span>'
        for label, _attr in _SLICE_COLUMNS
    )
    body = [f'<div class="slice-head" aria-hidden="true">{head}</div>']
    body += [_slice(row, context) for row in rows]
    hidden = evalgate_unflipped_shown(decision)
    more = f"<p>{hidden} more flipped case(s) are counted but not listed.</p>" if hidden else ""
    note = "<p>Each slice opens to its flipped cases: fixed (wrong before, right now) and broken."
    return _section(
        "slices", "Slices", [note + "</p>", '<div class="slices">', *body, "</div>", more]
    )


def _slice_num(label: str) -> str:
    return " num" if label in ("n", "paired delta", "threshold") else ""


def _slice(row: EvalgateSliceRow, context: EvalgateReportContext) -> str:
    cells = []
    for label, attr in _SLICE_COLUMNS:
        value = getattr(row, attr) if attr else f"{len(row.fixed)} fixed, {len(row.broken)} broken"
        num = _slice_num(label)
        result = f" {_cls(value)}" if label == "result" else ""
        cells.append(
            f'<span class="cell c-{attr or "flips"}{num}{result}" data-col="{escape(label)}">'
            f'<span class="label">{escape(label)}</span> {escape(value)}</span>'
        )
    return (
        f'<details class="slice" data-slice="{escape(row.name)}">'
        f"<summary>{' '.join(cells)}</summary>{_flip_list(row, context)}</details>"
    )


def _flip_list(row: EvalgateSliceRow, context: EvalgateReportContext) -> str:
    rules = ", ".join(_code(name) for name in row.rules) or "none"
    parts = [f"<p>rules: {rules}</p>"]
    for label, ids in (("fixed", row.fixed), ("broken", row.broken)):
        listed = " ".join(_code(case_id) for case_id in ids) or "none"
        parts.append(f'<p data-flips="{label}">{label} ({len(ids)}): {listed}</p>')
    texts = context.texts or {}
    if row.name != "all":
        shown = [case_id for case_id in (*row.fixed, *row.broken) if case_id in texts]
        parts += [_case_text(case_id, texts[case_id]) for case_id in shown]
    return f'<div class="flips">{"".join(parts)}</div>'


def _case_text(case_id: str, text: Mapping[str, str]) -> str:
    fields = (("input", "input"), ("target", "target"), ("baseline", "baseline output"),
              ("candidate", "candidate output"))  # fmt: skip
    items = "".join(
        f"<dt>{escape(label)}</dt><dd>{_text_cell(key, text.get(key, ''))}</dd>"
        for key, label in fields
    )
    head = f"<dt>case</dt><dd>{_code(case_id)}</dd>"
    return f'<dl class="case-text" data-case="{escape(case_id)}">{head}{items}</dl>'


def _text_cell(key: str, value: str) -> str:
    # A conversation's transcript (one line per message) is collapsed per case: open to read.
    if key in ("baseline", "candidate") and "\n" in value:
        lines = value.count("\n") + 1
        body = escape(value)
        return (
            f"<details><summary>transcript ({lines} messages)</summary><pre>{body}</pre></details>"
        )
    return escape(_cut(value))


def _figure(svg: str, caption: str) -> str:
    """An inline SVG that scales to the page (scrolls in its own box on a phone)."""
    return f'<figure><div class="plot">{svg}</div><figcaption>{caption}</figcaption></figure>'


def _cut(text: str) -> str:
    return text if len(text) <= _TEXT_CUT else text[: _TEXT_CUT - 3] + "..."


def _forest(decision: EvalgateDecision) -> str:
    svg = evalgate_forest_svg(decision)
    if svg is None:
        return ""
    caption = (
        "Each paired rule's estimate and interval, grouped by slice (n paired cases), coloured "
        "by result; the shaded region is the non-inferiority margin."
    )
    return _section("forest", "Forest plot", [_figure(svg, caption)])


def _rules(decision: EvalgateDecision) -> str:
    rows = [
        (
            f' data-rule="{escape(r.name)}"',
            [
                _code(r.name),
                r.estimate,
                r.interval,
                r.threshold,
                r.n,
                f'<span class="{_cls(r.result)}">{escape(r.result)}</span>',
                escape(r.reason),
            ],
        )
        for r in evalgate_rule_rows(decision)
    ]
    if not rows:
        return _section("rules", "Rules", ["<p>No rule was evaluated (no paired case).</p>"])
    header = [("rule", ""), ("estimate", "num"), ("interval", "num"), ("threshold", "num"),
              ("n", "num"), ("result", ""), ("why", "")]  # fmt: skip
    return _section("rules", "Rules", _table(header, rows))


def _latency(decision: EvalgateDecision) -> str:
    rows = evalgate_latency_rows(decision)
    if not rows:
        return ""
    source = f"<p>From {escape(evalgate_latency_source(decision))}.</p>"
    chunks = evalgate_chunk_counted_note(decision)
    if chunks:
        source += f"<p>{escape(chunks)}.</p>"
    svg = evalgate_latency_svg(decision)
    caption = "Whiskers p5 to p99, box p25 to p75, line at the median, cross at p95."
    figure = _figure(svg, caption) if svg else ""
    header = [("metric", ""), ("side", ""), ("n", "num"), ("p50", "num"), ("p95", "num"),
              ("p99", "num")]  # fmt: skip
    table = _table(header, [_latency_row(metric, side, figures) for metric, side, figures in rows])
    return _section("latency", "Latency", [source, figure, *table])


def _latency_row(metric: str, side: str, figures: EvalgatePercentiles) -> tuple[str, list[str]]:
    p99 = (figures.get("quantiles") or {}).get("p99")
    cells = [escape(metric), escape(side), str(figures["n"]), evalgate_seconds(figures.get("p50")),
             evalgate_seconds(figures.get("p95")), evalgate_seconds(p99)]  # fmt: skip
    return f' data-metric="{escape(metric)}" data-side="{escape(side)}"', cells


def _errors(decision: EvalgateDecision) -> str:
    rows = [
        (f' data-error="{escape(category)}"', [escape(phase), escape(category), str(count)])
        for phase, category, count in evalgate_error_rows(decision)
    ]
    if not rows:
        return _section("errors", "Errors", ["<p>None: every requested identity has a result.</p>"])
    return _section(
        "errors", "Errors", _table([("phase", ""), ("category", ""), ("identities", "num")], rows)
    )


def _excluded(decision: EvalgateDecision) -> str:
    """The cases the manifest leaves out (``dataset.exclude``), with their reasons."""
    rows = [
        (f' data-excluded="{escape(e["case"])}"', [_code(e["case"]), escape(e["reason"])])
        for e in decision.get("exclusions", [])
    ]
    if not rows:
        return ""
    body = _table([("case", ""), ("reason", "")], rows)
    return _section("excluded", "Excluded cases (dataset.exclude)", body)


def _facts(decision: EvalgateDecision, key: str) -> str:
    rows = [("", [_code(name), escape(value)]) for name, value in evalgate_facts(decision, key)]
    if not rows:
        return ""
    return _section(key, key.capitalize(), _table([("fact", ""), ("value", "")], rows))


def _changes(decision: EvalgateDecision, context: EvalgateReportContext) -> str:
    pins = evalgate_pin_changes(decision)
    body: list[str] = []
    if pins:
        changed = sum(1 for row in pins if row.changed)
        body.append(f"<p>Candidate against baseline: {changed} of {len(pins)} pins differ.</p>")
        body += _change_table(("pin", "baseline", "candidate"), pins)
    else:
        body.append(
            "<p>Candidate or baseline is missing from the decision: no pins to compare.</p>"
        )
    rows = evalgate_definition_changes(decision, context.previous)
    body += ["<h3>Definition since the last decision</h3>",
             f"<p>{escape(evalgate_previous_text(context, len(rows)))}</p>"]  # fmt: skip
    if rows:
        body += _change_table(("field", "before", "now"), rows)
    return _section("changes", "What changed since the baseline", body)


def _change_table(labels: tuple[str, str, str], rows: Sequence[EvalgateChangeRow]) -> list[str]:
    header = [(labels[0], ""), (labels[1], ""), (labels[2], ""), ("", "")]
    cells = [
        (
            f' data-change="{escape(row.name)}"',
            [
                _code(row.name),
                _code(row.before, True),
                _code(row.now, True),
                '<span class="changed">changed</span>' if row.changed else "same",
            ],
        )
        for row in rows
    ]
    return _table(header, cells)
