"""A judged suite's results as aggregation sees them: answers graded by their judgments.

Contracts
---------
- ``evalgate_judge_overlay(backend, manifest, views, pair)`` returns ``views`` unchanged for a
  suite that is not judged. For a judged suite it reads the judgments of the manifest's judge
  key (``store.judgments``) and returns new views in which every answer carries its judged
  grade: pointwise ``score`` = the verdict's 0..1 value, ``passed`` at ``scale.pass``; pairwise
  the candidate's ``score`` = win 1 / tie 0.5 / loss 0 of its (case, repetition) and the
  baseline's ``1 - score``, so a paired rule's per-case difference is the net win rate. An
  answer whose judgment errored is an error of that category (``judge_<category>``,
  ``judge_unparseable``); an answer not judged yet under this key is missing: the verdict is
  incomplete, never a comparison with judgments of another judge key.
- ``evalgate_judge_facts(backend, manifest, selection, pair)`` is what the gate and the
  decision need beyond the views: the judge (key, model, revision, mode and the key's
  material), the pairwise cases (``judge.pairwise.EvalgatePairwiseCases``) with the position
  inconsistency per slice, and the judge's agreement with the golden set when its golden
  judgments are stored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pytest_evalgate.judge.agreement import (
    EvalgateAgreement,
    evalgate_pairwise_agreement,
    evalgate_pointwise_agreement,
)
from pytest_evalgate.judge.golden import (
    EvalgateGoldenPairwise,
    EvalgateGoldenPointwise,
    evalgate_load_golden,
)
from pytest_evalgate.judge.pairwise import (
    EvalgatePairJudgment,
    EvalgatePairwiseCases,
    evalgate_inconsistency_by_slice,
    evalgate_pair_outcome,
    evalgate_pairwise_cases,
)
from pytest_evalgate.judge.prompt import EVALGATE_JUDGE_ORDERS
from pytest_evalgate.manifest.judge import EvalgateJudged
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateRecord,
    EvalgateStoreBackend,
    EvalgateStoreView,
)
from pytest_evalgate.store.judgments import (
    EVALGATE_GOLDEN_ORDER,
    EvalgateJudgmentContext,
    EvalgateJudgmentKey,
    EvalgateJudgmentView,
    evalgate_judgment_prefix,
    evalgate_read_judgments,
)


def evalgate_judgment_view(
    backend: EvalgateStoreBackend, manifest: EvalgateManifest
) -> EvalgateJudgmentView:
    """The verified judgments of ``manifest``'s judge key."""
    judged = manifest.judged
    assert judged is not None
    context = EvalgateJudgmentContext(judged.key, manifest.definition_digest, "")
    prefix = evalgate_judgment_prefix(manifest.suite, manifest.definition_digest, judged.key)
    return evalgate_read_judgments(backend, prefix, context)


def evalgate_judge_overlay(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    views: dict[str, EvalgateStoreView],
    pair: tuple[str, str] | None,
) -> dict[str, EvalgateStoreView]:
    """``views`` with every answer graded by its judgment (see the module contract)."""
    judged = manifest.judged
    if judged is None:
        return views
    judgments = evalgate_judgment_view(backend, manifest)
    if judged.mode == "pairwise":
        graded = _pairwise_views(views, judgments, pair)
    else:
        graded = {name: _pointwise_view(view, judgments) for name, view in views.items()}
    if graded and judgments.problems:
        first = next(iter(graded.values()))
        first.problems.extend(judgments.problems)
    return graded


def _copy(view: EvalgateStoreView) -> EvalgateStoreView:
    return EvalgateStoreView(
        errors=dict(view.errors),
        duplicates=view.duplicates,
        problems=list(view.problems),
        segments=view.segments,
    )


def _pointwise_view(view: EvalgateStoreView, judgments: EvalgateJudgmentView) -> EvalgateStoreView:
    out = _copy(view)
    for identity, record in view.results.items():
        key = EvalgateJudgmentKey(*identity, None)
        found = judgments.evalgate_current(key, [record["checksum"]])
        if found is None:
            continue  # not judged under this key yet: missing
        if found["error"] is not None:
            out.errors[identity] = _errored(record, found["error"])
            continue
        verdict = found["verdict"]
        out.results[identity] = _graded(record, float(verdict["value"]), bool(verdict["passed"]))
    return out


def _graded(record: EvalgateRecord, score: float, passed: bool) -> EvalgateRecord:
    graded = dict(record)
    graded["score"], graded["passed"] = score, passed
    return graded  # type: ignore[return-value]


def _errored(record: EvalgateRecord, error: Mapping[str, Any]) -> EvalgateRecord:
    errored = dict(record)
    errored["error"] = dict(error)
    errored["score"], errored["passed"] = None, None
    return errored  # type: ignore[return-value]


def _pairwise_views(
    views: dict[str, EvalgateStoreView],
    judgments: EvalgateJudgmentView,
    pair: tuple[str, str] | None,
) -> dict[str, EvalgateStoreView]:
    if pair is None or not all(name in views for name in pair):
        return {name: _copy(view) for name, view in views.items()}
    candidate, baseline = pair
    out = {name: _copy(view) for name, view in views.items()}
    for identity, record in views[candidate].results.items():
        other = views[baseline].results.get(identity._replace(candidate=baseline))
        if other is None:
            continue
        found = _pair_judgments(judgments, identity, [record["checksum"], other["checksum"]])
        _grade_pair(out, pair, identity, (record, other), found)
    return out


def _pair_judgments(
    judgments: EvalgateJudgmentView, identity: EvalgateIdentity, answers: list[str]
) -> list[dict[str, Any]] | None:
    found = [
        judgments.evalgate_current(EvalgateJudgmentKey(*identity, order), answers)
        for order in EVALGATE_JUDGE_ORDERS
    ]
    return None if any(f is None for f in found) else [f for f in found if f is not None]


def _grade_pair(
    out: dict[str, EvalgateStoreView],
    pair: tuple[str, str],
    identity: EvalgateIdentity,
    records: tuple[EvalgateRecord, EvalgateRecord],
    found: list[dict[str, Any]] | None,
) -> None:
    if found is None:
        return
    mine, theirs = identity, identity._replace(candidate=pair[1])
    errors = [f["error"] for f in found if f["error"] is not None]
    if errors:
        out[pair[0]].errors[mine] = _errored(records[0], errors[0])
        return
    outcome = evalgate_pair_outcome(*(f["verdict"]["winner"] for f in found))
    out[pair[0]].results[mine] = _graded(records[0], outcome.score, outcome.result != "loss")
    out[pair[1]].results[theirs] = _graded(records[1], 1.0 - outcome.score, outcome.result != "win")


# --------------------------------------------------------------------------- gate facts


@dataclass(frozen=True)
class EvalgateJudgeFacts:
    """What the gate's judge rules and the decision need (see the module contract)."""

    judge: Mapping[str, Any]
    pairwise: EvalgatePairwiseCases | None
    inconsistency: Mapping[str, Mapping[str, Any]]
    agreement: EvalgateAgreement | None
    agreement_reason: str
    other_keys: tuple[str, ...] = ()  # judge folders of other judge keys (never compared)

    def evalgate_note(self) -> str | None:
        """What to tell a user whose store holds judgments of other judge keys only."""
        if not self.other_keys:
            return None
        return (
            f"judgments under other judge keys ({', '.join(self.other_keys)}) are never "
            f"compared with judge {str(self.judge['key'])[:16]}'s: the suite must be "
            "re-baselined under this judge (evalgate rejudge SUITE, or run it again)"
        )

    def evalgate_json(self) -> dict[str, Any]:
        """Builtins for ``decision.json``'s ``judge`` member."""
        return {
            **self.judge,
            "inconsistency": {k: dict(v) for k, v in self.inconsistency.items()},
            "agreement": None if self.agreement is None else self.agreement.evalgate_json(),
            "agreement_reason": self.agreement_reason,
            "other_keys": list(self.other_keys),
        }


def evalgate_judge_facts(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    case_ids: tuple[str, ...],
    pair: tuple[str, str] | None,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> EvalgateJudgeFacts | None:
    """The judge facts of a judged suite over ``case_ids`` (None when not judged)."""
    judged = manifest.judged
    if judged is None:
        return None
    judgments = evalgate_judgment_view(backend, manifest)
    pairs = _pairs(manifest, judgments, set(case_ids), pair) if judged.mode == "pairwise" else []
    cases = evalgate_pairwise_cases(pairs) if pairs else None
    inconsistency = _inconsistency(pairs)
    agreement, why = evalgate_golden_agreement(
        judged, judgments, confidence=confidence, resamples=resamples, seed=seed
    )
    others = _other_keys(backend, manifest, judged)
    facts = judged.evalgate_facts()
    return EvalgateJudgeFacts(facts, cases, inconsistency, agreement, why, others)


def _other_keys(
    backend: EvalgateStoreBackend, manifest: EvalgateManifest, judged: EvalgateJudged
) -> tuple[str, ...]:
    folder = f"{manifest.suite}/{manifest.definition_digest[:16]}"
    mine = f"judge-{judged.key[:16]}"
    names = backend.evalgate_children(folder)
    # A judge folder is judge-<16 hex>; a candidate named "judge" has judge-<12 hex>.
    keys = [n.removeprefix("judge-") for n in names if n.startswith("judge-") and n != mine]
    return tuple(key for key in keys if len(key) == 16)


def _pairs(
    manifest: EvalgateManifest,
    judgments: EvalgateJudgmentView,
    case_ids: set[str],
    pair: tuple[str, str] | None,
) -> list[EvalgatePairJudgment]:
    if pair is None:
        return []
    index = manifest.evalgate_case_index()
    found: dict[tuple[str, int], dict[str, str]] = {}
    first, second = EVALGATE_JUDGE_ORDERS
    for key, record in judgments.results.items():
        mine = key.candidate == pair[0] and key.case_id in case_ids
        if mine and key.order in EVALGATE_JUDGE_ORDERS:
            winner = record["verdict"]["winner"]
            found.setdefault((key.case_id, key.repetition), {})[str(key.order)] = winner
    pairs = [
        EvalgatePairJudgment(
            case_id, index[case_id].category, index[case_id].cluster, rep,
            evalgate_pair_outcome(orders[first], orders[second]),  # type: ignore[arg-type]
        )
        for (case_id, rep), orders in sorted(found.items())
        if len(orders) == 2
    ]  # fmt: skip
    return pairs


def _inconsistency(pairs: list[EvalgatePairJudgment]) -> dict[str, dict[str, Any]]:
    return {
        name: {"inconsistent": value.inconsistent, "pairs": value.pairs, "rate": value.rate}
        for name, value in evalgate_inconsistency_by_slice(pairs).items()
    }


def evalgate_golden_agreement(
    judged: EvalgateJudged,
    judgments: EvalgateJudgmentView,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[EvalgateAgreement | None, str]:
    """Agreement of the stored golden judgments with the people's labels, or (None, why)."""
    path = judged.judge.golden_path
    if path is None:
        return None, "the judge has no golden set (judge.golden)"
    rows = evalgate_load_golden(path, judged.evaluator)
    verdicts = {
        key.case_id: record["verdict"]
        for key, record in judgments.results.items()
        if key.order == EVALGATE_GOLDEN_ORDER
    }
    labelled = [(row, verdicts.get(evalgate_golden_id(row.line))) for row in rows]
    judged_rows = [(row, verdict) for row, verdict in labelled if verdict is not None]
    if len(judged_rows) < len(rows):
        missing = len(rows) - len(judged_rows)
        return None, f"{missing} of {len(rows)} golden rows are not judged by this judge key"
    return _agreement(judged, judged_rows, confidence, resamples, seed), ""


def evalgate_golden_id(line: int) -> str:
    """The ``case_id`` a golden row's judgment is stored under: ``golden:<line>``."""
    return f"golden:{line}"


def _agreement(
    judged: EvalgateJudged,
    rows: list[tuple[Any, Mapping[str, Any]]],
    confidence: float,
    resamples: int,
    seed: int,
) -> EvalgateAgreement:
    if judged.mode == "pairwise":
        pairwise = [row for row, _ in rows if isinstance(row, EvalgateGoldenPairwise)]
        winners = [verdict["winner"] for _, verdict in rows]
        return evalgate_pairwise_agreement(
            pairwise, winners, resamples=resamples, seed=seed, confidence=confidence
        )
    scale = judged.evaluator.scale
    assert scale is not None
    pointwise = [row for row, _ in rows if isinstance(row, EvalgateGoldenPointwise)]
    scores = [float(verdict["score"]) for _, verdict in rows]
    return evalgate_pointwise_agreement(
        pointwise, scores, scale, resamples=resamples, seed=seed, confidence=confidence
    )


_Input = TypeVar("_Input")


def evalgate_with_facts(gate_input: _Input, facts: EvalgateJudgeFacts | None) -> _Input:
    """``gate_input`` (an ``aggregate.EvalgateGateInput``, or None) carrying ``facts`` for the
    judge rules (unchanged when either is None)."""
    if facts is None or gate_input is None:
        return gate_input
    data: Any = gate_input  # a frozen dataclass with a ``judge`` field (combine imports this)
    return dataclasses.replace(data, judge=facts)  # type: ignore[no-any-return]
