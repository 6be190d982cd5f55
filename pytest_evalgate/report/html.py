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
from typing import Any

from pytest_evalgate.report.facts import (
    EVALGATE_FACT_KEYS,
    EvalgateChangeRow,
    EvalgateReportContext,
    EvalgateSignatureStatus,
    EvalgateSliceRow,
    evalgate_definition_changes,
    evalgate_error_rows,
    evalgate_facts,
    evalgate_latency_rows,
    evalgate_latency_source,
    evalgate_pin_changes,
    evalgate_previous_text,
    evalgate_rule_rows,
    evalgate_seconds,
    evalgate_signature_text,
    evalgate_slice_rows,
    evalgate_unflipped_shown,
    evalgate_verdict_reason,
)
from pytest_evalgate.report.forest import evalgate_forest_svg, evalgate_latency_svg

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
_CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--soft:#f6f8fa;
--pass:#1a7f37;--fail:#cf222e;--warn:#9a6700;color-scheme:light}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--fg);line-height:1.45;
font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
overflow-wrap:anywhere}
main,header.verdict,footer{max-width:72rem;margin:0 auto;padding:0 1rem}
header.verdict{margin-top:1rem;padding:1rem;border-left:.5rem solid var(--warn);
background:var(--soft);border-radius:.4rem}
header.verdict.v-pass{border-color:var(--pass)}header.verdict.v-fail{border-color:var(--fail)}
.eyebrow{margin:0;color:var(--muted);font-size:.85rem}
h1{margin:.2rem 0;font-size:1.7rem}h2{font-size:1.25rem;margin:2rem 0 .6rem;
border-bottom:1px solid var(--line);padding-bottom:.3rem}h3{font-size:1.05rem}
.why{margin:.3rem 0 0;font-size:1.05rem}
code{font:.86em/1.3 ui-monospace,"DejaVu Sans Mono",monospace;background:var(--soft);
padding:0 .2em;border-radius:.2em;overflow-wrap:break-word}
code.h{word-break:break-all}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--soft);font-weight:600}
th,.slice-head span{overflow-wrap:normal;word-break:normal}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{color:var(--pass);font-weight:600}.fail{color:var(--fail);font-weight:600}
.facts{padding-left:1.1rem}.facts li{margin:.15rem 0}
.slices{border-top:1px solid var(--line);font-size:.9rem}
.slice-head,.slice>summary{display:grid;gap:.4rem;padding:.4rem .5rem;
grid-template-columns:minmax(6rem,1.3fr) 3rem repeat(2,minmax(6.5rem,1.3fr)) 4.8rem
minmax(9rem,1.5fr) 5.6rem minmax(4rem,1fr) 5.5rem;border-bottom:1px solid var(--line)}
.slice-head{background:var(--soft);font-weight:600}
.slice>summary{cursor:pointer;list-style:none}
.slice>summary::-webkit-details-marker{display:none}
.slice>summary .c-name::before{content:"\\25B8\\00A0";color:var(--muted)}
.slice[open]>summary .c-name::before{content:"\\25BE\\00A0"}
.slice[open]>summary{background:var(--soft)}
.cell.num{text-align:right;font-variant-numeric:tabular-nums}
.cell .label{display:none}
.flips{padding:.5rem 1rem .8rem 1.6rem;border-bottom:1px solid var(--line)}
.flips p{margin:.3rem 0}.flips code{display:inline-block;margin:0 .15rem .15rem 0}
.case-text{margin:.4rem 0;padding:.4rem .6rem;background:var(--soft);border-radius:.3rem}
.case-text dt{font-weight:600}.case-text dd{margin:0 0 .3rem;white-space:pre-wrap}
figure{margin:0}.plot{overflow-x:auto}
.plot svg{display:block;width:100%;height:auto;max-width:52rem}
figcaption{color:var(--muted);font-size:.85rem}
.changed{font-weight:600;white-space:nowrap}
footer{color:var(--muted);font-size:.85rem;margin:2.5rem auto 1.5rem}
@media (max-width:44rem){
body{font-size:14px}h1{font-size:1.4rem}
.slice-head{display:none}
.slice>summary{grid-template-columns:1fr 1fr;row-gap:.15rem;grid-auto-flow:dense}
.slice>summary .c-baseline,.slice>summary .c-candidate{grid-column:1/-1}
.slice>summary .c-name{grid-column:1/-1;font-weight:600}
.cell .label{display:inline;color:var(--muted);margin-right:.35rem;font-weight:400}
.cell.num{text-align:left}.slice>summary .c-interval{grid-column:1/-1}
.plot svg{min-width:34rem}
table.stack thead{display:none}
table.stack,table.stack tbody,table.stack tr{display:block;width:100%}
table.stack tr{border-bottom:2px solid var(--line);padding:.3rem 0}
table.stack td{display:flex;gap:.5rem;width:100%;border:0;padding:.1rem .3rem;text-align:left;
white-space:normal}
table.stack td::before{content:attr(data-label);color:var(--muted);flex:0 0 6.5rem}
table.stack td>.v{min-width:0}
}
@media print{
@page{margin:14mm}
body{font-size:10pt;color:#000;background:#fff}
header.verdict{background:none;border:2px solid #000;border-left-width:.5rem}
h2{break-after:avoid}tr,.slice,figure,.case-text{break-inside:avoid}
.slice>summary .c-name::before{content:""}
.slice-head{display:grid}
code{background:none}
footer{margin-top:1rem}
}
"""


def evalgate_html(decision: Mapping[str, Any], context: EvalgateReportContext | None = None) -> str:
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


def _banner(decision: Mapping[str, Any], verdict: str) -> str:
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


def _head(decision: Mapping[str, Any]) -> str:
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
            f"<style>{_CSS}</style>",
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


def _summary(decision: Mapping[str, Any], context: EvalgateReportContext) -> str:
    sides = [
        ("", [escape(role), _code(side["model"]), _code(side["key"])])
        for role in ("candidate", "baseline")
        if (side := decision.get(role))
    ]
    table = _table([("role", ""), ("model", ""), ("candidate key", "")], sides) if sides else []
    return _section("summary", "Summary", [*table, _summary_facts(decision, context)])


def _summary_facts(decision: Mapping[str, Any], context: EvalgateReportContext) -> str:
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


def _slices(decision: Mapping[str, Any], context: EvalgateReportContext) -> str:
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
        f"<dt>{escape(label)}</dt><dd>{escape(_cut(text.get(key, '')))}</dd>"
        for key, label in fields
    )
    head = f"<dt>case</dt><dd>{_code(case_id)}</dd>"
    return f'<dl class="case-text" data-case="{escape(case_id)}">{head}{items}</dl>'


def _figure(svg: str, caption: str) -> str:
    """An inline SVG that scales to the page (scrolls in its own box on a phone)."""
    return f'<figure><div class="plot">{svg}</div><figcaption>{caption}</figcaption></figure>'


def _cut(text: str) -> str:
    return text if len(text) <= _TEXT_CUT else text[: _TEXT_CUT - 3] + "..."


def _forest(decision: Mapping[str, Any]) -> str:
    svg = evalgate_forest_svg(decision)
    if svg is None:
        return ""
    caption = (
        "Each paired rule's estimate and interval, grouped by slice (n paired cases), coloured "
        "by result; the shaded region is the non-inferiority margin."
    )
    return _section("forest", "Forest plot", [_figure(svg, caption)])


def _rules(decision: Mapping[str, Any]) -> str:
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


def _latency(decision: Mapping[str, Any]) -> str:
    rows = evalgate_latency_rows(decision)
    if not rows:
        return ""
    source = f"<p>From {escape(evalgate_latency_source(decision))}.</p>"
    svg = evalgate_latency_svg(decision)
    caption = "Whiskers p5 to p99, box p25 to p75, line at the median, cross at p95."
    figure = _figure(svg, caption) if svg else ""
    header = [("metric", ""), ("side", ""), ("n", "num"), ("p50", "num"), ("p95", "num"),
              ("p99", "num")]  # fmt: skip
    table = _table(header, [_latency_row(metric, side, figures) for metric, side, figures in rows])
    return _section("latency", "Latency", [source, figure, *table])


def _latency_row(metric: str, side: str, figures: Mapping[str, Any]) -> tuple[str, list[str]]:
    p99 = (figures.get("quantiles") or {}).get("p99")
    cells = [escape(metric), escape(side), str(figures["n"]), evalgate_seconds(figures.get("p50")),
             evalgate_seconds(figures.get("p95")), evalgate_seconds(p99)]  # fmt: skip
    return f' data-metric="{escape(metric)}" data-side="{escape(side)}"', cells


def _errors(decision: Mapping[str, Any]) -> str:
    rows = [
        (f' data-error="{escape(category)}"', [escape(phase), escape(category), str(count)])
        for phase, category, count in evalgate_error_rows(decision)
    ]
    if not rows:
        return _section("errors", "Errors", ["<p>None: every requested identity has a result.</p>"])
    return _section(
        "errors", "Errors", _table([("phase", ""), ("category", ""), ("identities", "num")], rows)
    )


def _facts(decision: Mapping[str, Any], key: str) -> str:
    rows = [("", [_code(name), escape(value)]) for name, value in evalgate_facts(decision, key)]
    if not rows:
        return ""
    return _section(key, key.capitalize(), _table([("fact", ""), ("value", "")], rows))


def _changes(decision: Mapping[str, Any], context: EvalgateReportContext) -> str:
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
