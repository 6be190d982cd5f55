"""The judging stage's start in a session (SPEC section 10; the stage is ``runner/judging.py``).

``session`` imports this module only when a collected suite is judged: the judge's modules
(its endpoints, agreement statistics, numpy) cost every other run nothing at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_evalgate.client.budget import evalgate_share
from pytest_evalgate.endpoints.judge import EvalgateJudgeEndpoints
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.policy.load import evalgate_pair
from pytest_evalgate.runner.judge_suite import EvalgateJudgeSuite
from pytest_evalgate.runner.judging import EvalgateJudgeStage
from pytest_evalgate.runner.parent import EvalgateLimits, EvalgateSuiteRun
from pytest_evalgate.store import EvalgateSegmentWriter

if TYPE_CHECKING:  # the plugin imports this module, not the other way
    from pytest_evalgate.session.core import EvalgatePlugin


def evalgate_start_judging(plugin: EvalgatePlugin, judged: dict[str, EvalgateSuiteRun]) -> None:
    """Start the judging stage for the ``judged`` suites (path -> run): its endpoints, its
    writer, calibration on the golden set (part 0), and the answers already committed."""
    plugin.judge_endpoints = EvalgateJudgeEndpoints(plugin.config.getoption("evalgate_request_log"))
    writer = EvalgateSegmentWriter(plugin.backend, plugin.topology.shard_dir)
    share, limits = _judge_limits(plugin, next(iter(judged.values())).manifest)
    judging = EvalgateJudgeStage(
        writer,
        limits,
        concurrency=share,
        need=plugin.evalgate_need_answer,
        pump=plugin.evalgate_pump_answers,
    )
    plugin.judging = judging
    for path, run in judged.items():
        endpoint = plugin.judge_endpoints.evalgate_endpoint(run.manifest)
        pair = _judge_pair(plugin, path, run.manifest)
        suite = EvalgateJudgeSuite.evalgate_load(
            plugin.backend, run.manifest, endpoint, pair, writer.writer
        )
        judging.evalgate_add_suite(path, suite)
        if plugin.topology.part_index == 0:
            judging.evalgate_golden(path)  # calibration: judged once per run
    for key, work in plugin.works.items():
        if key in plugin.stored:
            judging.evalgate_answer(plugin.run_paths[id(work.suite)], plugin.stored[key])


def _judge_limits(plugin: EvalgatePlugin, manifest: EvalgateManifest) -> tuple[int, EvalgateLimits]:
    assert manifest.judged is not None
    budget = manifest.judged.judge.budget  # the judge's own run-wide budget
    parts, index = plugin.topology.parts, plugin.topology.part_index
    total = budget["max_concurrency"]
    share = int(
        evalgate_share(total, parts, index, integer=True, key="judge.budget.max_concurrency")
    )
    rps = budget["requests_per_second"]
    tpm = budget["tokens_per_minute"]
    return share, EvalgateLimits(
        share,
        None if rps is None else float(evalgate_share(rps, parts, index, integer=False)),
        None if tpm is None else float(evalgate_share(tpm, parts, index, integer=False)),
    )


def _judge_pair(
    plugin: EvalgatePlugin, path: str, manifest: EvalgateManifest
) -> tuple[str, str] | None:
    assert manifest.judged is not None
    if manifest.judged.mode != "pairwise":
        return None
    suite = plugin.suites[path]
    if suite is not None and suite.policy is not None:
        return evalgate_pair(manifest, suite.policy)
    return ("candidate", "baseline")
