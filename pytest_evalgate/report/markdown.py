"""``report.md``: the decision in Markdown tables (GitHub-flavoured), for a pull request, a
release ticket or ``$GITHUB_STEP_SUMMARY``.

The verdict line comes first, with one sentence saying why; then slices, rules, performance,
errors, flipped cases by id, judge and sandbox facts (when the decision has them), what changed
since the baseline, and the signature. Case text appears only when the context carries it
(``--evalgate-report-text``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

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
from pytest_evalgate.report.shape import (
    EvalgateDecision,
    EvalgatePercentiles,
    EvalgatePerfPhaseRecord,
)

_TEXT_CUT = 200


def evalgate_markdown(
    decision: EvalgateDecision, context: EvalgateReportContext | None = None
) -> str:
    """report.md: the decision as Markdown."""
    context = context or EvalgateReportContext()
    blocks = [
        _head(decision, context),
        _slices(decision),
        _rules(decision),
        _perf(decision),
        _errors(decision),
        _excluded(decision),
        _flips(decision, context),
        _sources(decision),
        *(_facts(decision, key) for key in EVALGATE_FACT_KEYS),
        _changes(decision, context),
        [f"evalgate {decision['evalgate_version']}, {decision['created_at']}"],
    ]
    return "\n".join(line for block in blocks if block for line in [*block, ""]).rstrip() + "\n"


def evalgate_md_cell(value: object) -> str:
    """Text for a table cell or a line: one line, ``|`` escaped, no raw HTML (``&`` and ``<``
    as entities)."""
    return _one_line(value).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def _one_line(value: object) -> str:
    return str(value).replace("\r", " ").replace("\n", " ")


def _code(value: object) -> str:
    """A code span: literal (entities would show as typed), only ``|`` escaped for tables."""
    text = _one_line(value)
    if "`" in text or text == "-":
        return evalgate_md_cell(text)
    return "`" + text.replace("|", "\\|") + "`"


def _table(header: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> list[str]:
    marks = [":--" if (align[i : i + 1] or "l") == "l" else "--:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def _head(decision: EvalgateDecision, context: EvalgateReportContext) -> list[str]:
    verdict = decision["verdict"].upper()
    lines = [
        f"# Release gate: {evalgate_md_cell(decision['suite'])}",
        "",
        f"**Verdict: {verdict}**: {evalgate_md_cell(evalgate_verdict_reason(decision))}",
        "",
    ]
    lines += _sides(decision)
    counts = decision["counts"]
    policy = decision["policy"]
    lines += [
        "",
        f"- definition `{decision['definition_digest']}`, dataset "
        f"{_code(decision['dataset']['revision'])} `{decision['dataset']['sha256'][:16]}`",
        f"- policy {_code(policy['version'])} `{policy['digest'][:16]}`",
        f"- identities completed {counts['completed']}/{counts['expected']}, missing "
        f"{counts['missing']}, duplicates collapsed {counts['duplicates_collapsed']}",
        f"- signature: {evalgate_md_cell(_signature(context))}",
    ]
    if decision.get("partial"):
        lines.append("- partial selection: not attestable")
    return lines


def _signature(context: EvalgateReportContext) -> str:
    return evalgate_signature_text(context.signature or EvalgateSignatureStatus("unsigned"))


def _sides(decision: EvalgateDecision) -> list[str]:
    rows = []
    for role, side in (
        ("candidate", decision.get("candidate")),
        ("baseline", decision.get("baseline")),
    ):
        if side:
            rows.append([role, _code(side["model"]), _code(side["key"])])
    return _table(["role", "model", "candidate key"], rows) if rows else []


def _slices(decision: EvalgateDecision) -> list[str]:
    rows = [
        [
            _code(r.name), r.n, r.baseline, r.candidate, r.delta, r.interval, r.threshold,
            evalgate_md_cell(r.result),
        ]
        for r in evalgate_slice_rows(decision)
    ]  # fmt: skip
    if not rows:
        return []
    header = ["slice", "n", "baseline", "candidate", "paired delta", "interval", "threshold"]
    return ["## Slices", "", *_table([*header, "result"], rows, "lrrrrlrl")]


def _rules(decision: EvalgateDecision) -> list[str]:
    rows = [
        [
            _code(r.name), r.estimate, r.interval, r.threshold, r.n, r.result,
            evalgate_md_cell(r.reason),
        ]
        for r in evalgate_rule_rows(decision)
    ]  # fmt: skip
    if not rows:
        return ["## Rules", "", "No rule was evaluated (no paired case in the store)."]
    header = ["rule", "estimate", "interval", "threshold", "n", "result", "why"]
    return ["## Rules", "", *_table(header, rows, "lrlrrll")]


def _perf(decision: EvalgateDecision) -> list[str]:
    rows = [
        [metric, side, figures["n"], *_latency_cells(figures)]
        for metric, side, figures in evalgate_latency_rows(decision)
    ]
    phase = decision.get("perf_phase")
    if not rows:
        # a load window that was not judged (the load generator could not keep up) leaves no
        # latency rows; the capacity sweep's own steps are still what the gate decided on
        sweep = _sweep(phase)
        if not sweep:
            return []
        reason = evalgate_md_cell((phase or {}).get("reason", ""))
        return ["## Latency", "", f"Load phase: {reason}", *sweep]
    lines = ["## Latency", "", f"From {evalgate_md_cell(evalgate_latency_source(decision))}.", ""]
    chunks = evalgate_chunk_counted_note(decision)
    if chunks:
        lines += [f"{evalgate_md_cell(chunks)}.", ""]
    if phase:
        lines += [f"Load phase: {evalgate_md_cell(phase.get('reason', ''))}", ""]
    header = ["metric", "side", "n", "p50", "p95", "p99"]
    return lines + _table(header, rows, "llrrrr") + _sweep(phase)


def _sweep(phase: EvalgatePerfPhaseRecord | None) -> list[str]:
    """The capacity sweep: per step and side, sent vs requested rate and the p95s."""
    steps = (phase or {}).get("sweep") or []
    if not steps:
        return []
    lines = ["", "### Capacity sweep (open loop, both models over the same windows)", ""]
    for entry in (phase or {}).get("max_rate_at_slo") or []:
        slo, rates = entry["slo"], entry["rates"]
        both = ", ".join(
            f"{n} {'-' if r is None else f'{r:g}'}/s" for n, r in sorted(rates.items())
        )
        lines += [
            f"Max rate at the SLO (ttft p95 <= {slo['ttft_p95_s']:g} s, tpot p95 <= "
            f"{slo['tpot_p95_s']:g} s): {both}.",
            "",
        ]
    rows = [_sweep_row(step, name) for step in steps for name in sorted(step["achieved_rate"])]
    header = ["requested", "side", "sent", "ttft p95", "tpot p95", "errors", "counts"]
    return lines + _table(header, rows, "llrrrrl")


def _sweep_row(step: dict[str, Any], name: str) -> list[object]:
    return [
        f"{step['requested_rate']:g}/s",
        name,
        f"{step['achieved_rate'][name]:.2f}/s",
        evalgate_seconds(step["ttft_p95_s"].get(name)),
        evalgate_seconds(step["tpot_p95_s"].get(name)),
        step["errored"].get(name, 0),
        "yes" if step["counts"].get(name) else "no",
    ]


def _latency_cells(figures: EvalgatePercentiles) -> list[str]:
    quantiles = figures.get("quantiles") or {}
    p99 = quantiles.get("p99")
    return [evalgate_seconds(figures.get("p50")), evalgate_seconds(figures.get("p95")),
            evalgate_seconds(p99)]  # fmt: skip


def _errors(decision: EvalgateDecision) -> list[str]:
    rows = evalgate_error_rows(decision)
    if not rows:
        return ["## Errors", "", "None: every requested identity has a result."]
    table = _table(["phase", "category", "identities"], rows, "llr")
    return ["## Errors", "", *table]


def _excluded(decision: EvalgateDecision) -> list[str]:
    """The cases the manifest leaves out (``dataset.exclude``), with their reasons."""
    rows = [
        [_code(e["case"]), evalgate_md_cell(e["reason"])] for e in decision.get("exclusions", [])
    ]
    if not rows:
        return []
    return ["## Excluded cases (`dataset.exclude`)", "", *_table(["case", "reason"], rows)]


def _flips(decision: EvalgateDecision, context: EvalgateReportContext) -> list[str]:
    count = decision["flipped"]["count"]
    if not count:
        return ["## Flipped cases", "", "None: no case changed between baseline and candidate."]
    rows = [
        [_code(r.name), len(r.fixed), _ids(r.fixed), len(r.broken), _ids(r.broken)]
        for r in evalgate_slice_rows(decision)
        if r.name != "all" and (r.fixed or r.broken)
    ]
    header = [
        "slice",
        "fixed",
        "fixed: wrong before, right now",
        "broken",
        "broken: right before, wrong now",
    ]
    lines = [f"## Flipped cases ({count})", "", *_table(header, rows, "lrlrl")]
    hidden = evalgate_unflipped_shown(decision)
    if hidden:
        lines += ["", f"{hidden} more flipped case(s) are counted but not listed."]
    return lines + _texts(decision, context)


def _ids(ids: Sequence[str]) -> str:
    return ", ".join(_code(case_id) for case_id in ids) or "-"


def _texts(decision: EvalgateDecision, context: EvalgateReportContext) -> list[str]:
    if not context.texts:
        return []
    rows = []
    for flip in decision["flipped"]["cases"]:
        text = context.texts.get(flip["case_id"])
        if text is not None:
            cells = [
                _cut(text.get(key, "")) for key in ("input", "target", "baseline", "candidate")
            ]
            rows.append([_code(flip["case_id"]), *cells])
    header = ["case", "input", "target", "baseline output", "candidate output"]
    note = "Case text (shown because --evalgate-report-text asked for it):"
    return ["", note, "", *_table(header, rows)]


def _cut(text: str) -> str:
    text = text if len(text) <= _TEXT_CUT else text[: _TEXT_CUT - 3] + "..."
    return evalgate_md_cell(text)


def _sources(decision: EvalgateDecision) -> list[str]:
    """Which harness files imported results came from (never their case text)."""
    record = decision.get("sources")
    if not record:
        return []
    rows = [
        [name, item["harness"], item["version"], _code(item["file"]), _code(item["sha256"][:16]),
         item["task"], item["task_version"], _code(item["config_digest"][:19]), item["records"]]
        for name, files in record["candidates"].items()
        for item in files
    ]  # fmt: skip
    header = ["side", "harness", "version", "file", "sha256", "task", "task version", "config"]
    lines = ["## Sources (imported results)", "", *_table([*header, "records"], rows)]
    if record["missing"]:
        lines += ["", f"Missing: {_ids(record['missing'])}"]
    return lines


def _facts(decision: EvalgateDecision, key: str) -> list[str]:
    rows = evalgate_facts(decision, key)
    if not rows:
        return []
    cells = [[_code(name), evalgate_md_cell(value)] for name, value in rows]
    return [f"## {key.capitalize()}", "", *_table(["fact", "value"], cells)]


def _changes(decision: EvalgateDecision, context: EvalgateReportContext) -> list[str]:
    lines = ["## What changed since the baseline", ""]
    pins = evalgate_pin_changes(decision)
    if pins:
        changed = sum(1 for row in pins if row.changed)
        lines += [f"Candidate against baseline: {changed} of {len(pins)} pins differ.", ""]
        lines += _change_table(["pin", "baseline", "candidate", ""], pins)
    else:
        lines.append("Candidate or baseline is missing from the decision: no pins to compare.")
    rows = evalgate_definition_changes(decision, context.previous)
    lines += ["", "### Definition since the last decision", ""]
    lines.append(evalgate_md_cell(evalgate_previous_text(context, len(rows))))
    if rows:
        lines += ["", *_change_table(["field", "before", "now", ""], rows)]
    return lines


def _change_table(header: list[str], rows: Sequence[EvalgateChangeRow]) -> list[str]:
    cells = [
        [_code(row.name), _code(row.before), _code(row.now), "changed" if row.changed else "same"]
        for row in rows
    ]
    return _table(header, cells)
