"""The gate policy's part of the reference (docs/reference.md), generated from its schema.

``evalgate_policy_reference()`` writes the top-level keys of ``gate.yaml`` (from the policy
schema), one table per rule kind of ``rules:`` (each kind's keys, types and bounds from its
model), and the ``online:`` and ``shadow:`` rule keys with their metrics. Every key, rule kind
and metric needs its meaning here; a missing or stale one raises ``KeyError``
(tests/test_reference.py).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping

from pydantic import BaseModel

from pytest_evalgate.manifest.reference import (
    evalgate_check_meanings,
    evalgate_model_rows,
    evalgate_table,
)
from pytest_evalgate.policy.load import EVALGATE_POLICY_SCHEMA, EVALGATE_RULE_MODELS
from pytest_evalgate.policy.online import EVALGATE_ONLINE_METRICS, EVALGATE_ONLINE_RULE_MODEL
from pytest_evalgate.policy.shadow import EVALGATE_SHADOW_METRICS, EVALGATE_SHADOW_RULE_MODEL

EVALGATE_POLICY_MEANINGS: dict[str, str] = {
    "version": "the policy's version, named in decisions and approvals",
    "confidence": "the one-sided confidence of every interval and test",
    "correction": "multiplicity control over the rules: none, bonferroni, holm or bh",
    "bootstrap": "the paired, clustered bootstrap",
    "bootstrap.resamples": "bootstrap resamples per rule",
    "bootstrap.seed": "the bootstrap's seed (a rule's own stream is derived from it)",
    "candidate": "the candidate's name in the manifest",
    "baseline": "the baseline's name (null: single-model rules only)",
    "rules": "the offline rules (below), at least one",
    "online": "the online canary's rules (below; docs/canary.md)",
    "shadow": "the shadow stage's rules (below; docs/shadow.md)",
}

EVALGATE_RULE_MEANINGS: dict[str, str] = {
    "non_inferior": "the candidate's pass rate on the slice is at most `margin` below the "
    "baseline's (the interval's lower bound of candidate minus baseline above -margin)",
    "must_improve": "the candidate's gain on the slice is at least `target` (lower bound)",
    "no_regression": "a one-sided test finds no significant drop on the slice (its level, "
    "alpha = 1 - confidence, is not a margin)",
    "floor": "the candidate's failure rate on the slice (a hard floor, e.g. jailbreaks) is at "
    "most `max_rate` (upper bound)",
    "perf_ratio": "candidate over baseline of a latency or length percentile (`ttft_p95`, "
    "`tpot_p95`, `output_tokens_p95`, ...) at most `max_ratio` (upper bound)",
    "perf_ratio_min": "the candidate's highest swept rate meeting `slo` is at least "
    "`min_ratio` x the baseline's (`perf.sweep`)",
    "max_delta": "the candidate's error rate minus the baseline's at most `max_delta`",
    "pairwise": "the pinned judge prefers the baseline at most `margin` more often than the "
    "candidate on the slice (`scorer: judge`, `mode: pairwise`)",
    "judge_agreement": "the judge agrees with people's golden labels (Cohen's kappa at least "
    "`min_kappa`)",
    "min_rate": "single model: the slice's pass rate is at least `min` (lower bound)",
    "max_rate": "single model: the error rate is at most `max` (upper bound)",
    "public_private_gap": "the candidate's gain on the public categories minus its gain on "
    "the private (held-out) ones is at most `max_gap` (contamination)",
}

EVALGATE_ONLINE_MEANINGS: dict[str, str] = {
    "metric": "what is compared, canary against stable over the same window (metrics below)",
    "max": "the bound of a `max` metric",
    "min": "the bound of a `min` metric",
    "interval": "how often the analysis measures (`<n>s`, `m` or `h`)",
    "window": "the PromQL range of each measurement",
    "failure_limit": "failed measurements the analysis tolerates before the rollout aborts",
}

EVALGATE_SHADOW_MEANINGS: dict[str, str] = {
    "metric": "what is compared, candidate against stable over the kept pairs (metrics below)",
    "max": "the rule's bound on the metric's upper confidence bound",
    "min_pairs": "kept pairs the rule needs before it decides (fewer: undecided)",
}

_HEAD = """## Gate policy (`gate.yaml`)

Unknown keys, rule kinds or metrics, wrong types and out-of-range values are refused naming the
file and the key (`rules[3].margin`). A policy under a trust file needs an approval
(`evalgate policy approve`, next section).

"""


def evalgate_policy_reference() -> str:
    """The policy section of docs/reference.md; ``KeyError`` for a missing or stale meaning."""
    top = evalgate_model_rows(EVALGATE_POLICY_SCHEMA, "")
    parts = [_HEAD, evalgate_table(top, EVALGATE_POLICY_MEANINGS, "EVALGATE_POLICY_MEANINGS")]
    parts.append("\n### `rules:` kinds\n\n| rule | keys | meaning |\n|---|---|---|\n")
    kinds = {_kind(model): model for model in EVALGATE_RULE_MODELS}
    evalgate_check_meanings(set(kinds), EVALGATE_RULE_MEANINGS, "EVALGATE_RULE_MEANINGS")
    for kind, model in kinds.items():
        keys = ", ".join(_key_cell(key, cells) for key, cells in _fields(model))
        parts.append(f"| `{kind}` | {keys} | {EVALGATE_RULE_MEANINGS[kind]} |\n")
    parts.append(_rule_list("online", EVALGATE_ONLINE_RULE_MODEL, EVALGATE_ONLINE_MEANINGS))
    parts.append(_metrics(EVALGATE_ONLINE_METRICS))
    parts.append(_rule_list("shadow", EVALGATE_SHADOW_RULE_MODEL, EVALGATE_SHADOW_MEANINGS))
    parts.append(_metrics(EVALGATE_SHADOW_METRICS))
    return "".join(parts)


def _kind(model: type[BaseModel]) -> str:
    (kind,) = typing.get_args(model.model_fields["rule"].annotation)
    return str(kind)


def _fields(model: type[BaseModel]) -> list[tuple[str, str]]:
    return [row for row in evalgate_model_rows(model, "") if row[0] != "rule"]


def _key_cell(key: str, cells: str) -> str:
    """``margin`` (number, >= 0, <= 1): one key of a rule, with its type and bounds."""
    kind, required, default, bounds = (part.strip() for part in cells.split(" | "))
    notes = [note for note in (kind, bounds, f"default {default}" if default else "") if note]
    optional = "" if required else " (optional)"
    return f"`{key}`{optional}: " + "; ".join(notes)


def _rule_list(name: str, model: type[BaseModel], meanings: dict[str, str]) -> str:
    rows = evalgate_model_rows(model, f"{name}[].")
    named = {f"{name}[].{key}": text for key, text in meanings.items()}
    table = evalgate_table(rows, named, f"EVALGATE_{name.upper()}_MEANINGS")
    return f"\n### `{name}:` rules\n\n" + table


def _metrics(metrics: Mapping[str, str]) -> str:
    listed = ", ".join(f"`{metric}` ({bound})" for metric, bound in metrics.items())
    return f"\nMetrics (and the bound each takes): {listed}.\n"
