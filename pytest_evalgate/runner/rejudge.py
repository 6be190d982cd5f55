"""Re-judging stored answers and judging the golden set, outside a test run.

Contracts
---------
- ``evalgate_rejudge(backend, manifest, pair)`` feeds every stored answer of every candidate of
  a judged suite (the newest store generation; baseline included) to a judging stage under the
  manifest's current judge key, plus the golden set, waits for every judgment and commits them.
  It sends no request to a candidate endpoint: it has none. Judgments already stored under this
  key for the same answers are reused; errored ones are requested again. The next test run
  does the same on its own (``runner/judging.py``).
- ``evalgate_judge_agreement(backend, manifest)`` judges only the golden set (what is not judged
  under this key yet) and returns the judge's agreement with the people's labels
  (``judge.agreement.EvalgateAgreement``), or the reason it cannot be computed.
- Both raise ``EvalgateConfigError`` for a suite that is not judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_evalgate.aggregate.judged import evalgate_golden_agreement, evalgate_judgment_view
from pytest_evalgate.endpoints.judge import EvalgateJudgeEndpoints
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.judge.agreement import EvalgateAgreement
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.runner.judge_suite import EvalgateJudgeSuite
from pytest_evalgate.runner.judging import EvalgateJudgeProgress, EvalgateJudgeStage
from pytest_evalgate.runner.wire import EvalgateLimits
from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateSegmentWriter,
    EvalgateStoreBackend,
    evalgate_candidate_prefix,
    evalgate_read_candidate,
)

_SHARD_DIR = "rejudge"


@dataclass(frozen=True)
class EvalgateRejudged:
    """What a re-judging did: answers fed, judge requests sent, judgments reused, errors."""

    answers: int
    golden: int
    progress: EvalgateJudgeProgress


def _judged(manifest: EvalgateManifest) -> None:
    if manifest.judged is None:
        reason = f"suite {manifest.suite!r} is not judged (evaluator.scorer is not 'judge')"
        raise EvalgateConfigError(manifest.path, "evaluator.scorer", reason)


def _stage(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    pair: tuple[str, str] | None,
    endpoints: EvalgateJudgeEndpoints,
    log: Callable[[str], None] | None,
) -> EvalgateJudgeStage:
    assert manifest.judged is not None
    budget = manifest.judged.judge.budget
    share = budget.max_concurrency
    limits = EvalgateLimits(share, budget.requests_per_second, budget.tokens_per_minute)
    writer = EvalgateSegmentWriter(backend, _SHARD_DIR)
    stage = EvalgateJudgeStage(writer, limits, concurrency=share, log=log)
    mode_pair = pair if manifest.judged.mode == "pairwise" else None
    suite = EvalgateJudgeSuite.evalgate_load(
        backend, manifest, endpoints.evalgate_endpoint(manifest), mode_pair, writer.writer
    )
    stage.evalgate_add_suite(manifest.path, suite)
    return stage


def evalgate_rejudge(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    pair: tuple[str, str] | None,
    *,
    request_log: str | None = None,
    log: Callable[[str], None] | None = None,
) -> EvalgateRejudged:
    """Judge every stored answer (and the golden set) under the current judge key."""
    _judged(manifest)
    endpoints = EvalgateJudgeEndpoints(request_log)
    try:
        stage = _stage(backend, manifest, pair, endpoints, log)
        try:
            answers = 0
            for candidate in manifest.candidates.values():
                prefix = evalgate_candidate_prefix(
                    manifest.suite, manifest.definition_digest, candidate.key
                )
                expect = EvalgateExpectation(
                    manifest.definition_digest, manifest.dataset_revision, candidate.key
                )
                for record in evalgate_read_candidate(backend, prefix, expect).results.values():
                    stage.evalgate_answer(manifest.path, record)
                    answers += 1
            golden = stage.evalgate_golden(manifest.path)
        finally:
            stage.evalgate_close()
    finally:
        endpoints.evalgate_close()
    return EvalgateRejudged(answers, golden, stage.progress)


def evalgate_judge_agreement(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    *,
    request_log: str | None = None,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[EvalgateAgreement | None, str, EvalgateJudgeProgress]:
    """Judge the golden set (what is missing) and return (agreement | None, why, progress)."""
    _judged(manifest)
    assert manifest.judged is not None
    if manifest.judged.judge.golden_path is None:
        raise EvalgateConfigError(manifest.path, "judge.golden", "the judge has no golden set")
    endpoints = EvalgateJudgeEndpoints(request_log)
    try:
        stage = _stage(backend, manifest, None, endpoints, None)
        try:
            stage.evalgate_golden(manifest.path)
        finally:
            stage.evalgate_close()
    finally:
        endpoints.evalgate_close()
    view = evalgate_judgment_view(backend, manifest)
    agreement, why = evalgate_golden_agreement(
        manifest.judged, view, confidence=confidence, resamples=resamples, seed=seed
    )
    return agreement, why, stage.progress
