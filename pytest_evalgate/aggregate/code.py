"""What aggregation and the decision add for ``scorer: code`` suites (SPEC section 11).

- ``evalgate_case_scores``: a case's score for the paired rules: the mean over its repetitions,
  or with ``pass_at_k: k`` the unbiased pass@k estimate over them (``sandbox.passk``). A code
  record's score is exactly 1.0 (passed) or 0.0, so the passes are the repetitions scored 1.
- ``evalgate_sandbox_summary``: the sandbox facts of a decision: isolation(s) used, whether
  every execution was sandboxed, outcome counts per candidate, sandbox errors, pass@k, sandbox
  start and run time percentiles (nearest rank, as docs/timings.md).
- ``evalgate_code_record``: the summary as the decision's ``sandbox`` member; a decision with any
  unsandboxed execution (``isolation: none``) is not attestable, so it is never signed (the
  decide step reads ``sandboxed``). A suite of any other scorer gets no ``sandbox`` key: its
  decision is what it always was.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import NotRequired, TypedDict

import numpy as np
import numpy.typing as npt

from pytest_evalgate.sandbox.passk import evalgate_case_pass_at_k
from pytest_evalgate.store import EvalgateRecord

EVALGATE_UNSANDBOXED_REASON = (
    "code ran without a sandbox (isolation: none): the decision is marked unsandboxed and is "
    "never signed"
)


class EvalgateNearestRanks(TypedDict):
    """p50 and p95 by nearest rank (both None when nothing ran)."""

    p50: float | None
    p95: float | None


class EvalgateSandboxSummary(TypedDict):
    """The sandbox facts of a code suite's decision (see ``evalgate_sandbox_summary``)."""

    isolation: list[str]
    sandboxed: bool
    unsandboxed_executions: int
    executions: int
    outcomes: dict[str, dict[str, int]]  # candidate -> outcome -> executions
    sandbox_errors: int
    pass_at_k: int | None
    start_s: EvalgateNearestRanks
    run_s: EvalgateNearestRanks
    reason: NotRequired[str]  # only when unsandboxed


def evalgate_case_scores(
    scores: npt.NDArray[np.float64], pass_at_k: int | None
) -> npt.NDArray[np.float64]:
    """Per case (row) of ``scores`` (cases x repetitions): the mean, or pass@k when given."""
    if pass_at_k is None:
        return np.asarray(scores.mean(axis=1), dtype=float)
    rows = [evalgate_case_pass_at_k([bool(s == 1.0) for s in row], pass_at_k) for row in scores]
    return np.array(rows, dtype=float)


def evalgate_sandbox_summary(
    records: Iterable[EvalgateRecord], errors: Mapping[str, int], pass_at_k: int | None
) -> EvalgateSandboxSummary:
    """The sandbox facts over ``records`` (results of a code suite) and the ``errors`` counts."""
    outcomes: dict[str, Counter[str]] = {}
    isolations: set[str] = set()
    start: list[float] = []
    run: list[float] = []
    unsandboxed = 0
    for record in records:
        facts = record.get("sandbox")
        if facts is None:
            continue
        outcomes.setdefault(record["identity"]["candidate"], Counter())[facts["outcome"]] += 1
        isolations.add(facts["isolation"])
        unsandboxed += not facts["sandboxed"]
        start.append(facts["start_s"])
        run.append(facts["run_s"])
    return {
        "isolation": sorted(isolations),
        "sandboxed": unsandboxed == 0,
        "unsandboxed_executions": unsandboxed,
        "executions": len(start),
        "outcomes": {name: dict(sorted(c.items())) for name, c in sorted(outcomes.items())},
        "sandbox_errors": int(errors.get("sandbox", 0)),
        "pass_at_k": pass_at_k,
        "start_s": _percentiles(start),
        "run_s": _percentiles(run),
    }


def _percentiles(values: list[float]) -> EvalgateNearestRanks:
    ordered = sorted(values)

    def rank(q: float) -> float | None:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None

    return {"p50": rank(0.50), "p95": rank(0.95)}


def evalgate_code_record(summary: EvalgateSandboxSummary) -> EvalgateSandboxSummary:
    """The decision's ``sandbox`` member of a code suite: ``summary``, with the reason it is
    never attestable when any execution ran unsandboxed."""
    record = EvalgateSandboxSummary(**summary)
    if not summary["sandboxed"]:
        record["reason"] = EVALGATE_UNSANDBOXED_REASON
    return record


def evalgate_sandbox_lines(facts: EvalgateSandboxSummary | None) -> list[str]:
    """Terminal summary lines of a code suite's sandbox facts (the decision's ``sandbox``
    member; none for other suites)."""
    if not facts:
        return []
    start = facts["start_s"]
    isolation = ", ".join(facts["isolation"]) or "none ran"
    head = f"sandbox: isolation {isolation}, {facts['executions']} executions"
    p50, p95 = start["p50"], start["p95"]
    if p50 is not None and p95 is not None:  # both or neither
        head += f", start p50 {p50 * 1000:.0f} ms p95 {p95 * 1000:.0f} ms"
    if facts["pass_at_k"] is not None:
        head += f", scores are pass@{facts['pass_at_k']} per case"
    lines = [head]
    for name, counts in facts["outcomes"].items():
        lines.append(
            f"sandbox outcomes {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items())
        )
    if facts["sandbox_errors"]:
        lines.append(f"sandbox errors (no result, retried next run): {facts['sandbox_errors']}")
    if not facts["sandboxed"]:
        lines.append(
            f"UNSANDBOXED: {facts['unsandboxed_executions']} executions; {facts['reason']}"
        )
    return lines
