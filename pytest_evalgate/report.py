"""The decision record and what is made of it: terminal lines, report.md, forest.png.

The decision record (``decision.json``) is builtins only (SPEC section 7): verdict, suite,
definition digest, policy version and digest, candidate and baseline keys with pins, counts,
per-slice rates with denominators, every rule with its numbers, perf figures, evalgate version
and time. ``attestable`` is true only for ``pass``/``fail`` verdicts over the whole suite.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from pytest_evalgate import __version__
from pytest_evalgate.aggregate import EvalgateAggregate
from pytest_evalgate.gate import EvalgateGateResult, EvalgatePolicy, evalgate_policy_digest
from pytest_evalgate.manifest import EvalgateCandidate, EvalgateManifest

_FLIPS_SHOWN = 20
_PROBLEMS_KEPT = 100


def evalgate_decision(
    manifest: EvalgateManifest,
    policy: EvalgatePolicy,
    aggregate: EvalgateAggregate,
    gate: EvalgateGateResult | None,
    verdict: str,
) -> dict[str, Any]:
    """Assemble the decision record of one suite."""
    return {
        "verdict": verdict,
        "attestable": verdict in ("pass", "fail") and not aggregate.partial,
        "suite": manifest.suite,
        "definition_digest": manifest.definition_digest,
        "dataset": {"revision": manifest.dataset_revision, "sha256": manifest.dataset_sha256},
        "policy": {"version": policy.version, "digest": evalgate_policy_digest(policy)},
        "candidate": _side(manifest.candidates.get(policy.candidate)),
        "baseline": _side(manifest.candidates.get(policy.baseline)),
        "counts": _counts(aggregate),
        "rates": _rates(aggregate),
        "rules": [] if gate is None else [rule.to_dict() for rule in gate.rules],
        "perf": _perf(aggregate),
        "flipped": {"count": len(aggregate.flipped), "cases": aggregate.flipped[:_FLIPS_SHOWN]},
        "canary_hits": aggregate.canary_hits,
        "partial": aggregate.partial,
        "evalgate_version": __version__,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _side(candidate: EvalgateCandidate | None) -> dict[str, Any] | None:
    if candidate is None:
        return None
    return {
        "name": candidate.name,
        "key": candidate.key,
        "model": candidate.model,
        "pins": dict(candidate.pins),
    }


def _counts(aggregate: EvalgateAggregate) -> dict[str, Any]:
    return {
        "expected": aggregate.expected,
        "completed": aggregate.completed,
        "missing": aggregate.missing,
        "errors": dict(sorted(aggregate.errors.items())),
        "duplicates_collapsed": aggregate.duplicates,
        "problems": [str(problem) for problem in aggregate.problems[:_PROBLEMS_KEPT]],
        "problem_count": len(aggregate.problems),
    }


def _rates(aggregate: EvalgateAggregate) -> dict[str, Any]:
    return {
        name: {
            slice_name: {"passed": rate.passed, "scored": rate.scored, "rate": rate.rate}
            for slice_name, rate in slices.items()
        }
        for name, slices in aggregate.rates.items()
    }


def _perf(aggregate: EvalgateAggregate) -> dict[str, Any]:
    data = aggregate.gate_input
    if data is None:
        return {}
    figures: dict[str, Any] = {}
    for metric, (cand, base) in data.perf.items():
        figures[metric] = {"candidate": _percentiles(cand), "baseline": _percentiles(base)}
    return figures


def _percentiles(values: np.ndarray[Any, Any]) -> dict[str, float | int | None]:
    if values.size == 0:
        return {"n": 0, "p50": None, "p95": None}
    p50, p95 = np.percentile(values, [50, 95], method="inverted_cdf")
    return {"n": int(values.size), "p50": float(p50), "p95": float(p95)}


def evalgate_summary_lines(decision: Mapping[str, Any]) -> list[str]:
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
    if decision["canary_hits"]:
        lines.append(f"CANARY: {decision['canary_hits']} output(s) contain the canary string")
    return lines


def _perf_phase_lines(phase: Mapping[str, Any] | None) -> list[str]:
    if not phase:
        return []
    achieved = ", ".join(f"{name} {rate:.1f}/s" for name, rate in phase["achieved_rate"].items())
    line = (
        f"load phase ({phase['profile']}, {phase['duration_s']:g} s): requested "
        f"{phase['requested_rate']:g}/s, achieved {achieved}; scheduling delay p50 "
        f"{1000 * phase['delay_p50_s']:.1f} ms, p95 {1000 * phase['delay_p95_s']:.1f} ms"
    )
    verdict = "judged" if phase["judgeable"] else f"NOT JUDGED: {phase['reason']}"
    return [line, f"load phase {verdict}"]


def _judge_lines(judge: Mapping[str, Any] | None) -> list[str]:
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


def _errors_text(errors: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in errors.items()) or "none"


def _rate_lines(rates: Mapping[str, Any]) -> list[str]:
    lines = []
    for name, slices in rates.items():
        parts = [f"{s} {v['passed']}/{v['scored']}" for s, v in slices.items()]
        lines.append(f"{name}: " + ", ".join(parts))
    return lines


def _rule_table(rules: Sequence[Mapping[str, Any]]) -> list[str]:
    if not rules:
        return []
    header = f"{'rule':<34} {'estimate':>9} {'interval':>21} {'threshold':>9}  result"
    lines = [header]
    for rule in rules:
        interval = f"[{_num(rule.get('lo'))}, {_num(rule.get('hi'))}]"
        result = "pass" if rule["passed"] else "FAIL"
        lines.append(
            f"{rule['name']:<34} {_num(rule.get('estimate')):>9} {interval:>21} "
            f"{_num(rule.get('threshold')):>9}  {result}: {rule.get('reason', '')}"
        )
    return lines


def _num(value: Any) -> str:
    return "-" if value is None else f"{float(value):+.4f}"


def _flip_lines(flipped: Mapping[str, Any]) -> list[str]:
    if not flipped["count"]:
        return ["flipped cases: none"]
    shown = ", ".join(
        f"{flip['case_id']} ({flip['baseline']:.1f}->{flip['candidate']:.1f})"
        for flip in flipped["cases"]
    )
    more = flipped["count"] - len(flipped["cases"])
    return [f"flipped cases ({flipped['count']}): {shown}" + (f", +{more} more" if more else "")]


def evalgate_write_report(directory: str, decision: Mapping[str, Any]) -> list[str]:
    """Write decision.json, report.md and forest.png into ``directory``; returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = [
        _write(directory, "decision.json", json.dumps(decision, indent=2, sort_keys=True) + "\n"),
        _write(directory, "report.md", evalgate_markdown(decision)),
    ]
    forest = os.path.join(directory, "forest.png")
    if _forest(decision["rules"], forest):
        paths.append(forest)
    return paths


def _write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def evalgate_markdown(decision: Mapping[str, Any]) -> str:
    """report.md: the decision as a human-readable page."""
    lines = [f"# Release gate: {decision['suite']}", ""]
    lines.append(f"**Verdict: {decision['verdict'].upper()}**")
    lines += ["", f"- definition digest `{decision['definition_digest']}`"]
    lines.append(f"- policy {decision['policy']['version']} `{decision['policy']['digest'][:16]}`")
    for role in ("candidate", "baseline"):
        side = decision.get(role)
        if side:
            lines.append(f"- {role}: {side['model']} (`{side['key']}`)")
    lines += ["", "```", *evalgate_summary_lines(decision), "```", ""]
    lines.append(f"evalgate {decision['evalgate_version']}, {decision['created_at']}")
    return "\n".join(lines) + "\n"


def _forest(rules: Sequence[Mapping[str, Any]], path: str) -> bool:
    quality = [
        r for r in rules if r.get("slice") and r.get("lo") is not None and r["rule"] != "floor"
    ]
    if not quality:
        return False
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 0.4 * len(quality) + 1.2))
    for row, rule in enumerate(quality):
        color = "tab:green" if rule["passed"] else "tab:red"
        axes.plot([rule["lo"], rule["hi"]], [row, row], color=color, linewidth=2)
        axes.plot([rule["estimate"]], [row], "o", color=color)
        if rule.get("threshold") is not None and rule["rule"] != "no_regression":
            axes.plot([rule["threshold"]], [row], "|", color="black", markersize=12)
    axes.axvline(0.0, color="grey", linestyle="--", linewidth=1)
    axes.set_yticks(range(len(quality)), [r["name"] for r in quality])
    axes.set_xlabel("candidate - baseline (paired, cluster bootstrap interval)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True
