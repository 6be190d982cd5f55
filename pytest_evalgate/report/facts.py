"""What a report says, computed once from the decision and shown by every format.

``report.md`` and ``report.html`` render the same facts: the verdict and why, one row per
slice, one row per rule, errors by category, flipped cases by id, the judge and sandbox facts
when the decision has them, what changed since the baseline, latency distributions and the
signature status. Numbers are formatted here, so both formats print the same digits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_evalgate.report.shape import (
    EvalgateDecision,
    EvalgatePercentiles,
    EvalgateRateRecord,
    EvalgateRuleRecord,
)

_PAIRED = ("non_inferior", "must_improve", "pairwise", "no_regression")
# Rules on the paired candidate-minus-baseline scale (the forest plot's axis).
EVALGATE_DELTA_RULES = frozenset(_PAIRED)
EVALGATE_FACT_KEYS = ("judge", "sandbox", "dialogue")
_FACTS_SHOWN = 60
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True)
class EvalgateSignatureStatus:
    """Whether the decision was signed, as the report shows it.

    ``state`` is ``signed`` (``keyid`` and ``envelope`` set), ``refused`` (``detail`` says why),
    ``unsigned`` (no key given) or ``present`` (a re-rendered report found an envelope beside
    decision.json and did not check it) or ``absent`` (none there).
    """

    state: str
    detail: str = ""
    keyid: str | None = None
    envelope: str | None = None


@dataclass(frozen=True)
class EvalgateReportContext:
    """What a report shows beside the decision; none of it is in ``decision.json``.

    ``previous`` is the last earlier decision of the same suite kept in the store (``searched``
    says whether the store was looked at). ``texts`` maps a flipped case id to its ``input``,
    ``target``, ``candidate`` and ``baseline`` output, and is given only when
    ``--evalgate-report-text`` asks for case text.
    """

    signature: EvalgateSignatureStatus | None = None
    previous: EvalgateDecision | None = None
    searched: bool = False
    texts: Mapping[str, Mapping[str, str]] | None = None


@dataclass(frozen=True)
class EvalgateSliceRow:
    """One slice: paired n, both rates with denominators, the paired delta of its main rule."""

    name: str
    n: str
    baseline: str
    candidate: str
    delta: str
    interval: str
    threshold: str
    result: str
    rules: tuple[str, ...]
    fixed: tuple[str, ...] = field(default=())
    broken: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class EvalgateRuleRow:
    """One rule with its numbers formatted."""

    name: str
    estimate: str
    interval: str
    threshold: str
    n: str
    result: str
    reason: str


# --------------------------------------------------------------------------- numbers


def evalgate_num(value: float | None) -> str:
    """A signed number with four decimals (``+0.0233``), ``-`` for None: the terminal's form."""
    return "-" if value is None else f"{float(value):+.4f}"


def evalgate_interval(lo: float | None, hi: float | None) -> str:
    """``[lo, hi]`` in :func:`evalgate_num` form."""
    return f"[{evalgate_num(lo)}, {evalgate_num(hi)}]"


def evalgate_rate(entry: EvalgateRateRecord | None) -> str:
    """``passed/scored (rate %)``, ``-`` when nothing was scored."""
    if not entry or not entry.get("scored"):
        return "-"
    return (
        f"{entry['passed']}/{entry['scored']} ({100.0 * entry['passed'] / entry['scored']:.1f} %)"
    )


def evalgate_seconds(value: float | None) -> str:
    """A latency in milliseconds (``31.6 ms``), ``-`` for None."""
    return "-" if value is None else f"{1000.0 * float(value):.1f} ms"


# --------------------------------------------------------------------------- verdict


def evalgate_verdict_reason(decision: EvalgateDecision) -> str:
    """One sentence saying why the verdict is what it is."""
    verdict = decision["verdict"]
    reason = {
        "invalid": _invalid_reason,
        "incomplete": _incomplete_reason,
        "partial": _partial_reason,
        "fail": _fail_reason,
    }.get(verdict, _pass_reason)(decision)
    if decision.get("canary_hits"):
        reason += f"; {decision['canary_hits']} output(s) contain the suite's canary string"
    return reason + "."


def _pass_reason(decision: EvalgateDecision) -> str:
    counts = decision["counts"]
    return (
        f"all {len(decision['rules'])} rules pass over {counts['completed']}/"
        f"{counts['expected']} identities"
    )


def _fail_reason(decision: EvalgateDecision) -> str:
    failed = [rule for rule in decision["rules"] if not rule["passed"]]
    name, reason = (failed[0]["name"], failed[0].get("reason", "")) if failed else ("?", "")
    more = f" (and {', '.join(r['name'] for r in failed[1:4])})" if len(failed) > 1 else ""
    return (
        f"{len(failed)} of {len(decision['rules'])} rules failed: {name} {reason}".rstrip() + more
    )


def _incomplete_reason(decision: EvalgateDecision) -> str:
    counts = decision["counts"]
    errored = sum(counts["errors"].values())
    errors = ", ".join(f"{name} {count}" for name, count in counts["errors"].items())
    return (
        f"only {counts['completed']} of {counts['expected']} identities have a result "
        f"({counts['missing']} missing, {errored} errored{': ' + errors if errors else ''}), "
        "so the rules cannot decide; a rerun resumes and retries them"
    )


def _invalid_reason(decision: EvalgateDecision) -> str:
    counts = decision["counts"]
    first = counts["problems"][0] if counts["problems"] else "see the store"
    return (
        f"the store failed verification with {counts['problem_count']} problem(s), first: {first}"
    )


def _partial_reason(decision: EvalgateDecision) -> str:
    rules = decision["rules"]
    failed = sum(1 for rule in rules if not rule["passed"])
    outcome = "all pass" if not failed else f"{failed} failed"
    return (
        f"a selection of the suite was run; its {len(rules)} selected rules {outcome}, and a "
        "partial verdict never authorises a release"
    )


# --------------------------------------------------------------------------- slices and rules


def evalgate_slice_rows(decision: EvalgateDecision) -> list[EvalgateSliceRow]:
    """One row per slice: ``all`` first, then the categories in order."""
    rates = decision.get("rates") or {}
    cand_rates = rates.get(_role_name(decision, "candidate")) or {}
    base_rates = rates.get(_role_name(decision, "baseline")) or {}
    names = sorted(set(cand_rates) | set(base_rates), key=lambda s: (s != "all", s))
    flips = _flips_by_slice(decision)
    return [_slice_row(decision, name, cand_rates, base_rates, flips) for name in names]


def _role_name(decision: EvalgateDecision, role: str) -> str:
    side = decision.get("candidate") if role == "candidate" else decision.get("baseline")
    return str(side["name"]) if side else role


def _slice_row(
    decision: EvalgateDecision,
    name: str,
    cand: Mapping[str, EvalgateRateRecord],
    base: Mapping[str, EvalgateRateRecord],
    flips: Mapping[str, tuple[list[str], list[str]]],
) -> EvalgateSliceRow:
    rules = [rule for rule in decision["rules"] if rule.get("slice") == name]
    main = next((r for kind in _PAIRED for r in rules if r["rule"] == kind), None)
    fixed, broken = flips.get(name, ([], []))
    return EvalgateSliceRow(
        name=name,
        n=_slice_n(decision, name, main),
        baseline=evalgate_rate(base.get(name)),
        candidate=evalgate_rate(cand.get(name)),
        delta=evalgate_num(main.get("estimate")) if main else "-",
        interval=evalgate_interval(main.get("lo"), main.get("hi")) if main else "-",
        threshold=_slice_threshold(main),
        result=_slice_result(rules),
        rules=tuple(rule["name"] for rule in rules),
        fixed=tuple(fixed),
        broken=tuple(broken),
    )


def _slice_threshold(main: EvalgateRuleRecord | None) -> str:
    """The main rule's boundary on the delta scale; no_regression's is its test's level."""
    return "-" if main is None else evalgate_threshold_text(main)


def evalgate_threshold_text(rule: EvalgateRuleRecord) -> str:
    """A rule's threshold cell: its boundary on the estimate's scale, except no_regression's,
    whose number is the alpha its corrected p-value is tested at (``α = 0.05 (test level)``),
    no bar for the estimate to pass (issue 37: "+0.0500" read as one)."""
    threshold = rule.get("threshold")
    if rule["rule"] == "no_regression" and threshold is not None:
        return f"α = {float(threshold):.4g} (test level)"
    return evalgate_num(threshold)


def _slice_n(decision: EvalgateDecision, name: str, main: EvalgateRuleRecord | None) -> str:
    entry = (decision.get("slices") or {}).get(name)
    if entry is not None:
        return str(entry["n_cases"])
    return str(main["n_cases"]) if main and main.get("n_cases") else "-"


def _slice_result(rules: Sequence[EvalgateRuleRecord]) -> str:
    if not rules:
        return "no rule"
    failed = [rule["rule"] for rule in rules if not rule["passed"]]
    return "FAIL: " + ", ".join(failed) if failed else "pass"


def _flips_by_slice(decision: EvalgateDecision) -> dict[str, tuple[list[str], list[str]]]:
    """Slice -> (fixed: baseline wrong, candidate right; broken: the other way)."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for flip in decision["flipped"]["cases"]:
        for name in ("all", flip["category"]):
            fixed, broken = out.setdefault(name, ([], []))
            (fixed if flip["candidate"] >= flip["baseline"] else broken).append(flip["case_id"])
    return out


def evalgate_rule_rows(decision: EvalgateDecision) -> list[EvalgateRuleRow]:
    """One row per rule, in policy order."""
    return [
        EvalgateRuleRow(
            name=rule["name"],
            estimate=evalgate_num(rule.get("estimate")),
            interval=evalgate_interval(rule.get("lo"), rule.get("hi")),
            threshold=evalgate_threshold_text(rule),
            n=str(rule["n_cases"]) if rule.get("n_cases") else "-",
            result=_rule_result(rule),
            reason=str(rule.get("reason", "")),
        )
        for rule in decision["rules"]
    ]


def _rule_result(rule: EvalgateRuleRecord) -> str:
    result = "pass" if rule["passed"] else "FAIL"
    return result if rule.get("evaluated", True) else f"{result} (not evaluated)"


def evalgate_unflipped_shown(decision: EvalgateDecision) -> int:
    """Flipped cases counted but not listed (the record keeps the first 1000 ids)."""
    flipped = decision["flipped"]
    return int(flipped["count"]) - len(flipped["cases"])


# --------------------------------------------------------------------------- errors, facts


def evalgate_error_rows(decision: EvalgateDecision) -> list[tuple[str, str, int]]:
    """(phase, category, identities): the eval's errors, then the load phase's per side."""
    rows = [("eval", name, int(count)) for name, count in decision["counts"]["errors"].items()]
    phase = decision.get("perf_phase") or {}
    for side, counts in sorted((phase.get("errors") or {}).items()):
        rows += [(f"load phase, {side}", name, int(count)) for name, count in counts.items()]
    return rows


def evalgate_facts(decision: EvalgateDecision, key: str) -> list[tuple[str, str]]:
    """The judge's or sandbox's facts as (dotted name, value) rows; [] when the key is absent.

    The shape of those blocks belongs to their stages; any nesting of builtins is shown.
    """
    block = decision.get(key)
    if block is None:
        return []
    if not isinstance(block, Mapping):
        return [(key, evalgate_fact_text(block))]
    return list(_leaves(block, ""))[:_FACTS_SHOWN]


def _leaves(value: Mapping[object, object], prefix: str) -> Iterator[tuple[str, str]]:
    for name in sorted(value, key=str):
        item = value[name]
        if isinstance(item, Mapping) and item:
            yield from _leaves(item, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", evalgate_fact_text(item)


def evalgate_fact_text(value: object) -> str:
    """A fact as a reader sees it: ``-`` for None, yes/no, four significant digits."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return ", ".join(evalgate_fact_text(item) for item in value) or "-"
    return str(value)


# --------------------------------------------------------------------------- perf, signature


def evalgate_latency_source(decision: EvalgateDecision) -> str:
    """Where the latency samples come from: the load phase, or the eval requests."""
    phase = decision.get("perf_phase")
    if not phase:
        return "the eval requests' timings (the suite has no load phase)"
    judged = "judged" if phase.get("judgeable") else "not judged"
    return (
        f"the load phase: {phase.get('profile')} arrivals at {phase.get('requested_rate')}/s "
        f"for {phase.get('duration_s')} s, both models over the same window ({judged})"
    )


def evalgate_chunk_counted_note(decision: EvalgateDecision) -> str | None:
    """What the report says when token counts were counted from stream chunks (the server sent
    no usage), or None when every count was the server's."""
    sides = (decision.get("perf") or {}).get("chunk_counted")
    counts = {"candidate": 0, "baseline": 0}
    for side in counts:
        figures = sides.get(side) if sides else None
        counts[side] = int(figures.get("n") or 0) if isinstance(figures, dict) else 0
    if not any(counts.values()):
        return None
    which = " and ".join(f"{n} {side}" for side, n in counts.items() if n)
    return (
        f"Output tokens and TPOT of {which} answers were counted from stream chunks: the server "
        "sent no usage, and a chunk may hold several tokens (TPOT is then per chunk)"
    )


def evalgate_latency_rows(
    decision: EvalgateDecision,
) -> list[tuple[str, str, EvalgatePercentiles]]:
    """(metric, side, figures) for each latency metric and side that has samples."""
    perf = decision.get("perf") or {}
    rows = []
    for metric in LATENCY_METRICS:
        sides = perf.get(metric)
        both = (None, None) if sides is None else (sides.get("candidate"), sides.get("baseline"))
        for side, figures in zip(("candidate", "baseline"), both, strict=True):
            if figures and figures.get("n"):
                rows.append((metric, side, EvalgatePercentiles(**figures)))
    return rows


def evalgate_signature_text(status: EvalgateSignatureStatus) -> str:
    """One sentence on the signature of the decision."""
    if status.state == "signed":
        return (
            f"signed: DSSE envelope {status.envelope}, ECDSA P-256 key id {status.keyid}; "
            "check it with evalgate verify"
        )
    if status.state == "refused":
        return f"not signed: {status.detail}"
    if status.state == "present":
        return (
            f"an envelope {status.envelope} lies beside decision.json (not checked by this "
            "report: run evalgate verify)"
        )
    if status.state == "absent":
        return "not signed: no decision.dsse.json beside decision.json"
    return "not signed: no signing key was given (--evalgate-sign-key)"
