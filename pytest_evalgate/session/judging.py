"""The judging stage's start in a session (SPEC section 10; the stage is ``runner/judging.py``).

``session`` imports this module only when a collected suite is judged: the judge's modules
(its endpoints, agreement statistics, numpy) cost every other run nothing at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pytest_evalgate.endpoints.judge import EvalgateJudgeEndpoints
from pytest_evalgate.manifest.judge import EvalgateJudged
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.runner.judge_suite import EvalgateJudgeSuite
from pytest_evalgate.runner.judging import EvalgateJudgeStage
from pytest_evalgate.runner.work import EvalgateSuiteRun
from pytest_evalgate.session.launch import evalgate_limits
from pytest_evalgate.session.suite import EvalgateSuite
from pytest_evalgate.shard.plan import EvalgateTopology
from pytest_evalgate.store import EvalgateIdentity, EvalgateSegmentWriter, EvalgateStoreBackend


def evalgate_start_judging(
    endpoints: EvalgateJudgeEndpoints,
    backend: EvalgateStoreBackend,
    topology: EvalgateTopology,
    judged: Mapping[str, EvalgateSuiteRun],
    suites: Mapping[str, EvalgateSuite | None],
    need: Callable[[EvalgateIdentity], bool],
    pump: Callable[[float], None],
) -> EvalgateJudgeStage:
    """The judging stage for the ``judged`` suites (path -> run): its writer, this process's
    share of the first suite's ``judge.budget`` (``evalgate_check_one_budget`` refused others),
    each suite's judge endpoint from ``endpoints``, and calibration on the golden set (part 0).
    ``need`` and ``pump`` reach the generation side. A stage that fails to start is closed."""
    writer = EvalgateSegmentWriter(backend, topology.shard_dir)
    budget = _judge(next(iter(judged.values())).manifest).judge.budget
    limits = evalgate_limits(budget, topology, key="judge.budget.max_concurrency")
    stage = EvalgateJudgeStage(
        writer, limits, concurrency=limits.max_concurrency, need=need, pump=pump
    )
    try:
        for path, run in judged.items():
            endpoint = endpoints.evalgate_endpoint(run.manifest)
            pair = _judge_pair(run.manifest, suites.get(path))
            suite = EvalgateJudgeSuite.evalgate_load(
                backend, run.manifest, endpoint, pair, writer.writer
            )
            stage.evalgate_add_suite(path, suite)
            if topology.part_index == 0:
                stage.evalgate_golden(path)  # calibration: judged once per run
    except BaseException:
        stage.evalgate_close()
        raise
    return stage


def _judge(manifest: EvalgateManifest) -> EvalgateJudged:
    assert manifest.judged is not None
    return manifest.judged


def _judge_pair(manifest: EvalgateManifest, suite: EvalgateSuite | None) -> tuple[str, str] | None:
    if _judge(manifest).mode != "pairwise":
        return None
    if suite is not None and suite.policy is not None:
        return suite.policy.pair
    return ("candidate", "baseline")
