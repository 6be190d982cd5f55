"""The terminal summary of a decision: verdict, counts, errors, rates, the rule table, flips.

Plain lines (the caller prints them); no case text, only case ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_evalgate.aggregate.code import evalgate_sandbox_lines
from pytest_evalgate.report.facts import evalgate_threshold_text
from pytest_evalgate.report.shape import (
    EvalgateDecision,
    EvalgateFlipped,
    EvalgateJudgeRecord,
    EvalgatePerfPhaseRecord,
    EvalgateRateRecord,
    EvalgateRuleRecord,
)

_FLIPS_SHOWN = 20


def evalgate_summary_lines(decision: EvalgateDecision) -> list[str]:
    """The terminal summary: verdict, counts, errors, the rule table, flipped cases."""
    counts = decision["counts"]
    lines = [
        f"suite {decision['suite']} ({decision['definition_digest'][:16]}): "
        f"verdict {decision['verdict'].upper()}"
        + (" (partial selection: not attestable)" if decision["partial"] else ""),
        f"identities completed {counts['completed']}/{counts['expected']}, missing "
        f"{counts['missing']}, errors {_errors_text(counts['errors'])}, duplicates collapsed "
        f"{counts['duplicates_collapsed']}",
    ]
    lines += [f"INVALID: {problem}" for problem in counts["problems"][:10]]
    lines += _rate_lines(decision["rates"])
    lines += _perf_phase_lines(decision.get("perf_phase"))
    lines += _judge_lines(decision.get("judge"))  # judged suites only (SPEC section 10)
    lines += _rule_table(decision["rules"])
    lines += _flip_lines(decision["flipped"])
    lines += evalgate_sandbox_lines(decision.get("sandbox"))  # scorer: code only
    if decision["canary_hits"]:
        lines.append(f"CANARY: {decision['canary_hits']} output(s) contain the canary string")
    return lines


def _judge_lines(judge: EvalgateJudgeRecord | None) -> list[str]:
    """Which judge decided, per-slice position inconsistency and agreement (judged suites)."""
    if not judge:
        return []
    lines = [
        f"judged by {judge['model']} ({judge['revision']}, {judge['mode']}), "
        f"judge key {str(judge['key'])[:16]}"
    ]
    slices = judge.get("inconsistency") or {}
    if slices:
        parts = [f"{name} {v['inconsistent']}/{v['pairs']}" for name, v in sorted(slices.items())]
        lines.append("position inconsistency (pairs judged both ways): " + ", ".join(parts))
    agreement = judge.get("agreement")
    if agreement:
        lo, hi = agreement["interval"]
        lines.append(
            f"judge agreement with people: kappa {_num(agreement['kappa'])} "
            f"[{_num(lo)}, {_num(hi)}], raw {_num(agreement['raw_agreement'])}, "
            f"n {agreement['n']} ({agreement['weights']})"
        )
    return lines


def _perf_phase_lines(phase: EvalgatePerfPhaseRecord | None) -> list[str]:
    if not phase:
        return []
    achieved = ", ".join(f"{name} {rate:.1f}/s" for name, rate in phase["achieved_rate"].items())
    line = (
        f"load phase ({phase['profile']}, {phase['duration_s']:g} s): requested "
        f"{phase['requested_rate']:g}/s, achieved {achieved}; scheduling delay p50 "
        f"{_ms(phase['delay_p50_s'])} ms, p95 {_ms(phase['delay_p95_s'])} ms"
    )
    verdict = "judged" if phase["judgeable"] else f"NOT JUDGED: {phase['reason']}"
    return [line, f"load phase {verdict}"]


def _ms(seconds: float | None) -> str:
    # None: nothing was measured (the record keeps no NaN)
    return "-" if seconds is None else f"{1000 * seconds:.1f}"


def _errors_text(errors: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in errors.items()) or "none"


def _rate_lines(rates: Mapping[str, Mapping[str, EvalgateRateRecord]]) -> list[str]:
    lines = []
    for name, slices in rates.items():
        parts = [f"{s} {v['passed']}/{v['scored']}" for s, v in slices.items()]
        lines.append(f"{name}: " + ", ".join(parts))
    return lines


def _rule_table(rules: Sequence[EvalgateRuleRecord]) -> list[str]:
    if not rules:
        return []
    # no_regression's cell is its test level (facts.evalgate_threshold_text), wider than a
    # number: the column widens only when such a rule is in the table.
    cells = [evalgate_threshold_text(rule) for rule in rules]
    width = max(9, *(len(cell) for cell in cells))
    header = f"{'rule':<34} {'estimate':>9} {'interval':>21} {'threshold':>{width}}  result"
    lines = [header]
    for rule, cell in zip(rules, cells, strict=True):
        interval = f"[{_num(rule.get('lo'))}, {_num(rule.get('hi'))}]"
        result = "pass" if rule["passed"] else "FAIL"
        lines.append(
            f"{rule['name']:<34} {_num(rule.get('estimate')):>9} {interval:>21} "
            f"{cell:>{width}}  {result}: {rule.get('reason', '')}"
        )
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{float(value):+.4f}"


def _flip_lines(flipped: EvalgateFlipped) -> list[str]:
    if not flipped["count"]:
        return ["flipped cases: none"]
    cases = flipped["cases"][:_FLIPS_SHOWN]
    shown = ", ".join(
        f"{flip['case_id']} ({flip['baseline']:.1f}->{flip['candidate']:.1f})" for flip in cases
    )
    more = flipped["count"] - len(cases)
    return [f"flipped cases ({flipped['count']}): {shown}" + (f", +{more} more" if more else "")]
