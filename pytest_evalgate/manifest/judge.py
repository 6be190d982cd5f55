"""The manifest's judge part (SPEC section 10): a judged suite's values, key and refusals.

Contracts
---------
- ``evalgate_judged(source, suite_dir, evaluator, judge, candidates)`` returns None for a suite
  that is not judged (``scorer`` other than ``judge``), else an ``EvalgateJudged``: the frozen
  judge, the judged evaluator (rubric read) and the **judge key**, the judged suite's second
  digest. Everything is refused before any request, with ``EvalgateConfigError`` naming the key
  (``judge``, ``judge.model``, ``judge.pins.family``, ``judge.pins.training_run``,
  ``judge.temperature``, ``evaluator.rubric``, ``evaluator.mode``, ``evaluator.scale``,
  ``judge.golden``). A ``judge:`` block beside another scorer is still checked against the
  candidates (a judge must never be a model under test).
- ``evalgate_definition_evaluator(dumped)`` is the evaluator as it enters the generation's
  definition digest: unchanged for every other scorer; ``{"scorer": "judge"}`` for a judged
  suite, whose revision, mode, rubric and scale are in the judge key instead (bumping them
  re-judges stored answers, never regenerates them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.judge.refusals import (
    EvalgateJudgeCandidate,
    evalgate_check_judge,
    evalgate_refuse_judge_candidates,
    evalgate_refuse_sampling,
)
from pytest_evalgate.judge.spec import (
    EvalgateJudge,
    EvalgateJudgeConfig,
    EvalgateJudgedEvaluator,
    evalgate_judge,
    evalgate_judge_key,
    evalgate_judge_key_material,
    evalgate_judged_evaluator,
    evalgate_judged_evaluator_config,
)

EVALGATE_JUDGE_SCORER = "judge"
_JUDGED_KEYS = ("mode", "rubric", "scale")


class _EvaluatorLike(Protocol):
    revision: str
    scorer: str
    mode: Any
    rubric: Any
    scale: Any


@dataclass(frozen=True)
class EvalgateJudged:
    """A judged suite's judge, evaluator and judge key (``key_material`` is what it hashes)."""

    judge: EvalgateJudge
    evaluator: EvalgateJudgedEvaluator
    key: str
    key_material: Mapping[str, Any]

    @property
    def mode(self) -> str:
        """``pointwise`` or ``pairwise``."""
        return self.evaluator.mode

    def evalgate_facts(self) -> dict[str, Any]:
        """What a decision says about the judge: key, model, revision and the key's material."""
        return {
            "key": self.key,
            "model": self.judge.model,
            "revision": self.judge.revision,
            "mode": self.evaluator.mode,
            "material": dict(self.key_material),
        }


def evalgate_judged(
    source: str,
    suite_dir: str,
    evaluator: _EvaluatorLike,
    judge: EvalgateJudgeConfig | None,
    candidates: Mapping[str, EvalgateJudgeCandidate],
) -> EvalgateJudged | None:
    """The judged suite's values, or None when ``evaluator.scorer`` is not ``judge``."""
    if evaluator.scorer != EVALGATE_JUDGE_SCORER:
        _refuse_stray_keys(source, evaluator)
        if judge is not None:
            evalgate_refuse_judge_candidates(source, evalgate_judge(suite_dir, judge), candidates)
        return None
    if judge is None:
        raise EvalgateConfigError(source, "judge", "scorer 'judge' needs a judge block")
    raw = {k: getattr(evaluator, k) for k in _JUDGED_KEYS if getattr(evaluator, k) is not None}
    if "rubric" not in raw:
        raise EvalgateConfigError(source, "evaluator.rubric", "scorer 'judge' needs a rubric file")
    config = evalgate_judged_evaluator_config(source, raw)
    value = evalgate_judge(suite_dir, judge)
    # The sampling and candidate refusals come before the rubric is read.
    evalgate_refuse_sampling(source, value)
    evalgate_refuse_judge_candidates(source, value, candidates)
    judged = evalgate_judged_evaluator(source, suite_dir, evaluator.revision, config)
    evalgate_check_judge(source, value, judged, candidates)
    material = evalgate_judge_key_material(value, judged)
    return EvalgateJudged(value, judged, evalgate_judge_key(value, judged), material)


def _refuse_stray_keys(source: str, evaluator: _EvaluatorLike) -> None:
    for key in _JUDGED_KEYS:
        if getattr(evaluator, key) is not None:
            reason = f"only scorer 'judge' takes {key!r} (scorer is {evaluator.scorer!r})"
            raise EvalgateConfigError(source, f"evaluator.{key}", reason)


def evalgate_definition_evaluator(dumped: Mapping[str, object]) -> dict[str, Any]:
    """The evaluator as the generation's definition digest sees it (see the module contract)."""
    if dumped.get("scorer") == EVALGATE_JUDGE_SCORER:
        return {"scorer": EVALGATE_JUDGE_SCORER}
    return dict(dumped)
