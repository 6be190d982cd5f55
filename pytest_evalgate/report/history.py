"""Decisions kept in the store: ``<store>/<suite>/decisions/<UTC stamp>-<digest>.json``.

The report step keeps a copy of every decision it reports, so the next report of the same suite
can say what changed in the definition since then. A copy is canonical JSON, published like a
segment (atomically, never replacing a file) and never read by aggregation (it lists segments,
``*.jsonl``, under definition folders only).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import cast

from pytest_evalgate.formats.canonical import evalgate_canonical_json, evalgate_sha256_hex
from pytest_evalgate.report.shape import EvalgateDecision
from pytest_evalgate.store import EvalgateStoreBackend

EVALGATE_DECISIONS_FOLDER = "decisions"


def evalgate_decisions_prefix(suite: str) -> str:
    """The store folder of a suite's kept decisions."""
    return f"{suite}/{EVALGATE_DECISIONS_FOLDER}"


def evalgate_keep_decision(
    backend: EvalgateStoreBackend, decision: EvalgateDecision, now: datetime | None = None
) -> str:
    """Publish a copy of ``decision``; returns its store path. Names sort by time (UTC,
    microseconds), then by the record's digest."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    body = evalgate_canonical_json(dict(decision))
    name = f"{stamp}-{evalgate_sha256_hex(dict(decision))[:12]}.json"
    relpath = f"{evalgate_decisions_prefix(str(decision['suite']))}/{name}"
    backend.evalgate_write_atomic(relpath, body + b"\n")
    return relpath


def evalgate_last_decision(backend: EvalgateStoreBackend, suite: str) -> EvalgateDecision | None:
    """The newest kept decision of ``suite`` that reads as a JSON object, or None."""
    prefix = evalgate_decisions_prefix(suite)
    names = [name for name in backend.evalgate_children(prefix) if name.endswith(".json")]
    for name in reversed(names):
        found = _load(backend, f"{prefix}/{name}")
        if found is not None:
            return found
    return None


def _load(backend: EvalgateStoreBackend, relpath: str) -> EvalgateDecision | None:
    """A kept copy as a decision record (written by ``evalgate_keep_decision``; an older one
    may lack optional keys, which the reports read with ``.get``)."""
    try:
        value = json.loads(backend.evalgate_read(relpath))
    except (OSError, ValueError):
        return None  # a damaged copy is history lost, not a reason to fail the report
    return cast(EvalgateDecision, value) if isinstance(value, dict) else None
