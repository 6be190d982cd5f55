"""The decision record (``decision.json``): what every report is made of.

Builtins only (SPEC section 7): verdict, suite, definition digest and its parts, policy version
and digest, candidate and baseline keys with pins, counts, per-slice rates with denominators and
paired case counts, every rule with its numbers, perf figures with a quantile summary of each
latency distribution, flipped case ids, evalgate version and time. ``attestable`` is true only
for ``pass``/``fail`` verdicts over the whole suite.

No case input, target or output enters the record: it is signed, copied into the store and
published beside the reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import cast

import numpy as np
import numpy.typing as npt

from pytest_evalgate import __version__
from pytest_evalgate.aggregate.combine import EvalgateAggregate
from pytest_evalgate.formats.canonical import evalgate_canonical_json, evalgate_sha256_hex
from pytest_evalgate.gate.result import EvalgateGateResult, EvalgateRuleResult
from pytest_evalgate.manifest.load import EvalgateCandidate, EvalgateManifest
from pytest_evalgate.policy.values import EvalgatePolicy, evalgate_bound, evalgate_policy_digest
from pytest_evalgate.report.shape import (
    EvalgateDecision,
    EvalgateDecisionCounts,
    EvalgateDecisionSide,
    EvalgateJSON,
    EvalgatePercentiles,
    EvalgatePerfSides,
    EvalgateRateRecord,
    EvalgateRuleRecord,
    EvalgateSliceCounts,
    EvalgateSourceFile,
    EvalgateSourcesRecord,
)
from pytest_evalgate.stats import evalgate_percentile

# Flipped case ids kept in the record (ids only; the terminal shows the first 20).
EVALGATE_FLIPS_KEPT = 1000
_PROBLEMS_KEPT = 100
# Order statistics kept per latency distribution (samples stay in the store); "p0" is the
# minimum and "p100" the maximum. Inverted-CDF percentiles, like the perf gate's.
EVALGATE_QUANTILES = (0, 5, 25, 50, 75, 95, 99, 100)
# A definition part (a list as its canonical JSON) longer than this is recorded by its sha256:
# the record names what changed without carrying prompt text.
_PART_TEXT_MAX = 64


def evalgate_decision(
    manifest: EvalgateManifest,
    policy: EvalgatePolicy,
    aggregate: EvalgateAggregate,
    gate: EvalgateGateResult | None,
    verdict: str,
) -> EvalgateDecision:
    """Assemble the decision record of one suite."""
    return {
        "verdict": verdict,
        "attestable": verdict in ("pass", "fail") and not aggregate.partial,
        "suite": manifest.suite,
        "definition_digest": manifest.definition_digest,
        "definition_parts": evalgate_definition_parts(manifest.definition),
        "dataset": {"revision": manifest.dataset_revision, "sha256": manifest.dataset_sha256},
        "policy": {"version": policy.version, "digest": evalgate_policy_digest(policy)},
        "candidate": _side(manifest.candidates.get(policy.candidate)),
        "baseline": _side(manifest.candidates.get(policy.baseline or "")),
        "counts": _counts(aggregate),
        "rates": _rates(aggregate),
        "slices": _slices(aggregate),
        "rules": [] if gate is None else [evalgate_rule_record(rule) for rule in gate.rules],
        "perf": _perf(aggregate),
        "flipped": {
            "count": len(aggregate.flipped),
            "cases": aggregate.flipped[:EVALGATE_FLIPS_KEPT],
        },
        "canary_hits": aggregate.canary_hits,
        "partial": aggregate.partial,
        "evalgate_version": __version__,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def evalgate_sources_record(aggregate: EvalgateAggregate) -> EvalgateSourcesRecord | None:
    """The decision's ``sources`` block, or None when no record was imported."""
    if not aggregate.sources:
        return None
    candidates = {
        name: [cast(EvalgateSourceFile, dict(item)) for item in files]
        for name, files in aggregate.sources.items()
    }
    return {"candidates": candidates, "missing": list(aggregate.missing_ids)}


def evalgate_sources_notes(record: EvalgateSourcesRecord) -> list[str]:
    """Terminal lines saying which harness files the results came from, and what is missing."""
    lines = [
        f"{name}: imported from {item['harness']} {item['version']} {item['file']} "
        f"(sha256 {item['sha256'][:12]}, task {item['task']} version {item['task_version']}, "
        f"{item['records']} records)"
        for name, files in record["candidates"].items()
        for item in files
    ]
    if record["missing"]:
        lines.append("missing: " + ", ".join(record["missing"]))
    return lines


def evalgate_rule_record(result: EvalgateRuleResult) -> EvalgateRuleRecord:
    """One rule of the record. ``threshold`` is the boundary the rule's gate.yaml number sets
    (``policy.evalgate_bound``: ``-margin`` for the margin rules), computed here and only here;
    non-finite numbers (NaN: does not apply) become None so canonical JSON accepts them."""
    return {
        "name": result.name,
        "rule": result.rule,
        "passed": result.passed,
        "reason": result.reason,
        "slice": result.slice,
        "metric": result.metric,
        "evaluated": result.evaluated,
        "n_cases": result.n_cases,
        "n_clusters": result.n_clusters,
        "estimate": _finite(result.estimate),
        "lo": _finite(result.lo),
        "hi": _finite(result.hi),
        "se": _finite(result.se),
        "t_lo": _finite(result.t_lo),
        "t_hi": _finite(result.t_hi),
        "threshold": _finite(evalgate_bound(result.rule, result.limit)),
        "p_value": _finite(result.p_value),
        "p_adjusted": _finite(result.p_adjusted),
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def evalgate_definition_parts(definition: Mapping[str, object]) -> dict[str, EvalgateJSON]:
    """The definition flattened to ``{"prompt.revision": ..., "generation.seed": ...}``.

    Scalars are kept; a string longer than 64 characters (a system prompt, a template) becomes
    ``sha256:<hex>`` of it, so two records show *that* it changed, not what it says.
    """
    flat: dict[str, EvalgateJSON] = {}
    _flatten(definition, "", flat)
    return flat


def _flatten(value: object, prefix: str, out: dict[str, EvalgateJSON]) -> None:
    if isinstance(value, Mapping):
        for key in sorted(value):
            _flatten(value[key], f"{prefix}{key}.", out)
        if not value and prefix:
            out[prefix[:-1]] = {}
        return
    out[prefix[:-1]] = _part_value(value)


def _part_value(value: object) -> EvalgateJSON:
    """A definition leaf: a scalar as it is, a list as its canonical JSON, a long text as its
    sha256 (the definition is builtins from YAML, so a leaf is a JSON scalar or a list)."""
    if isinstance(value, list | tuple):
        value = evalgate_canonical_json(list(value)).decode()
    if isinstance(value, str) and len(value) > _PART_TEXT_MAX:
        return f"sha256:{evalgate_sha256_hex(value)}"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _side(candidate: EvalgateCandidate | None) -> EvalgateDecisionSide | None:
    if candidate is None:
        return None
    return {
        "name": candidate.name,
        "key": candidate.key,
        "model": candidate.model,
        "pins": dict(candidate.pins),
    }


def _counts(aggregate: EvalgateAggregate) -> EvalgateDecisionCounts:
    return {
        "expected": aggregate.expected,
        "completed": aggregate.completed,
        "missing": aggregate.missing,
        "errors": dict(sorted(aggregate.errors.items())),
        "duplicates_collapsed": aggregate.duplicates,
        "problems": [str(problem) for problem in aggregate.problems[:_PROBLEMS_KEPT]],
        "problem_count": len(aggregate.problems),
    }


def _rates(aggregate: EvalgateAggregate) -> dict[str, dict[str, EvalgateRateRecord]]:
    return {
        name: {
            slice_name: {"passed": rate.passed, "scored": rate.scored, "rate": rate.rate}
            for slice_name, rate in slices.items()
        }
        for name, slices in aggregate.rates.items()
    }


def _slices(aggregate: EvalgateAggregate) -> dict[str, EvalgateSliceCounts]:
    """Paired cases and clusters per slice ("all" and every category present)."""
    data = aggregate.gate_input
    if data is None:
        return {}
    categories = np.asarray(data.categories, dtype=str)
    clusters = np.asarray(data.clusters, dtype=str)
    out = {"all": _slice_counts(clusters)}
    for name in sorted(set(categories.tolist())):
        out[name] = _slice_counts(clusters[categories == name])
    return out


def _slice_counts(clusters: npt.NDArray[np.str_]) -> EvalgateSliceCounts:
    return {"n_cases": int(clusters.size), "n_clusters": len(set(clusters.tolist()))}


def _perf(aggregate: EvalgateAggregate) -> dict[str, EvalgatePerfSides]:
    data = aggregate.gate_input
    if data is None:
        return {}
    figures: dict[str, EvalgatePerfSides] = {}
    for metric, (cand, base) in data.perf.items():
        if metric.startswith("sweep."):  # the capacity sweep's steps: perf_phase.sweep has them
            continue
        figures[metric] = {"candidate": _percentiles(cand), "baseline": _percentiles(base)}
    return figures


def _percentiles(values: npt.NDArray[np.float64]) -> EvalgatePercentiles:
    if values.size == 0:
        return {"n": 0, "p50": None, "p95": None, "quantiles": None}
    p50, p95 = np.percentile(values, [50, 95], method="inverted_cdf")
    quantiles = {f"p{q}": evalgate_percentile(values, q) for q in EVALGATE_QUANTILES}
    return {"n": int(values.size), "p50": float(p50), "p95": float(p95), "quantiles": quantiles}
