"""What changed since the baseline: the candidate's pins against the baseline's, and the
definition (with policy and compared keys) against the last decision of the suite kept in the
store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_evalgate.report.facts import EvalgateReportContext, evalgate_fact_text
from pytest_evalgate.report.shape import EvalgateDecision

# Pins in the order a reader scans them (SPEC section 2); others follow sorted.
_PIN_ORDER = (
    "weights_digest",
    "serving_image",
    "tokenizer",
    "chat_template",
    "quantization",
    "tensor_parallel",
    "pipeline_parallel",
)


@dataclass(frozen=True)
class EvalgateChangeRow:
    """One compared field: its value before and now."""

    name: str
    before: str
    now: str
    changed: bool


def evalgate_pin_changes(decision: EvalgateDecision) -> list[EvalgateChangeRow]:
    """Model and pins of the baseline (before) against the candidate (now)."""
    cand, base = decision.get("candidate"), decision.get("baseline")
    if not cand or not base:
        return []
    rows = [_change("model", base.get("model"), cand.get("model"))]
    cand_pins, base_pins = cand.get("pins") or {}, base.get("pins") or {}
    names = set(cand_pins) | set(base_pins)
    order = [p for p in _PIN_ORDER if p in names] + sorted(names - set(_PIN_ORDER))
    return rows + [_change(name, base_pins.get(name), cand_pins.get(name)) for name in order]


def _change(name: str, before: object, now: object) -> EvalgateChangeRow:
    before_text, now_text = evalgate_fact_text(before), evalgate_fact_text(now)
    return EvalgateChangeRow(name, before_text, now_text, before != now)


def evalgate_definition_changes(
    decision: EvalgateDecision, previous: EvalgateDecision | None
) -> list[EvalgateChangeRow]:
    """Definition parts, policy and compared keys that differ from ``previous``."""
    if previous is None:
        return []
    rows = _part_changes(decision, previous)
    for label, path in (
        ("policy.version", ("policy", "version")),
        ("policy.digest", ("policy", "digest")),
        ("candidate.key", ("candidate", "key")),
        ("baseline.key", ("baseline", "key")),
    ):
        rows.append(_change(label, _dig(previous, path), _dig(decision, path)))
    return [row for row in rows if row.changed]


def _part_changes(
    decision: EvalgateDecision, previous: EvalgateDecision
) -> list[EvalgateChangeRow]:
    now, before = decision.get("definition_parts"), previous.get("definition_parts")
    if now is None or before is None:
        # A record from before definition parts were kept: only the digest can be compared.
        digest = ("definition_digest",)
        return [_change("definition_digest", _dig(previous, digest), _dig(decision, digest))]
    names = sorted(set(now) | set(before))
    return [_change(f"definition.{n}", before.get(n), now.get(n)) for n in names]


def _dig(record: EvalgateDecision, path: tuple[str, ...]) -> object:
    value: object = record
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def evalgate_previous_text(context: EvalgateReportContext, changed: int) -> str:
    """The sentence above (or instead of) the definition-change table."""
    previous = context.previous
    if previous is None:
        if not context.searched:
            return "Not compared: this report was rendered from decision.json alone."
        return "No earlier decision of this suite is kept in the store: nothing to compare."
    when = f"the decision of {previous.get('created_at', '?')} (verdict {previous.get('verdict')})"
    if not changed:
        return f"Unchanged since {when}: same definition, policy and compared models."
    return f"{changed} change(s) since {when}:"
