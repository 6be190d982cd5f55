"""One suite loaded for a session: its manifest, scorer, threshold, sandbox and policy.

``evalgate_load_suite`` is the whole of collection's check of a suite: everything that would
stop the run at its first request (or at its gate) is checked here, before any request, and
raised as ``EvalgateConfigError`` (the plugin turns it into one usage error for the session).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.client.budget import evalgate_check_shares
from pytest_evalgate.endpoints.resolve import evalgate_check_endpoints
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.manifest.revision import EVALGATE_DEFINITION_ENV, evalgate_check_definition
from pytest_evalgate.manifest.tiers import evalgate_chosen_policy
from pytest_evalgate.manifest.tools import EVALGATE_ANSWER_SCORER_OPTION, EVALGATE_TOOLS_SCORER
from pytest_evalgate.policy.load import (
    EvalgateSuitePolicy,
    evalgate_load_suite_policy,
    evalgate_policy_path,
)
from pytest_evalgate.runner.execution import (
    evalgate_code_scorer,
    evalgate_execution_settings,
    evalgate_prepare_sandbox,
)
from pytest_evalgate.scoring import EvalgateScorer, evalgate_make_scorer, evalgate_threshold
from pytest_evalgate.session.options import EvalgateOptions
from pytest_evalgate.shard.plan import EvalgateTopology


@dataclass(frozen=True)
class EvalgateSuite:
    """A loaded suite: manifest, scorer, threshold, the code stage's settings (``execution``,
    ``scorer: code`` suites of a requesting session only) and the policy (None when this
    session neither gates nor names one)."""

    manifest: EvalgateManifest
    scorer: EvalgateScorer
    threshold: float
    execution: dict[str, Any] | None
    policy: EvalgateSuitePolicy | None


def evalgate_load_suite(
    path: str,
    options: EvalgateOptions,
    topology: EvalgateTopology,
    scorers: Callable[[], Mapping[str, EvalgateScorer]],
    gates: bool,
) -> EvalgateSuite:
    """Load and check the suite at ``path``: its definition, scorer (``scorers``: the ones
    plugins add), policy (needed when ``gates``), budget shares, sandbox and endpoints."""
    manifest = evalgate_load_manifest(path)
    # a pod rendered for another definition must not run this one (polyaxon render)
    expected = os.environ.get(EVALGATE_DEFINITION_ENV)
    evalgate_check_definition(path, manifest.definition_digest, expected)
    evaluator = manifest.evaluator
    settings = dict(evaluator.options)
    extra = scorers()
    code = manifest.sandbox is not None  # scorer: code
    scorer = (
        evalgate_code_scorer(settings, path)
        if code
        else evalgate_make_scorer(*evalgate_text_scorer(evaluator.scorer, settings), extra, path)
    )
    threshold = evalgate_threshold(settings, path)
    policy_path = evalgate_chosen_policy(manifest, options.policy, options.tier)
    # The sandbox is probed once per process at collection, before any request.
    sandbox = manifest.sandbox
    prepared = (
        evalgate_prepare_sandbox(sandbox) if sandbox is not None and options.requests else None
    )
    # The policy is checked at collection, before any request: a typo in gate.yaml must not
    # cost a whole run. A shard run without a gate.yaml may still run (it does not gate).
    found = evalgate_policy_path(manifest, policy_path)
    needed = gates or policy_path is not None or os.path.exists(found)
    policy = evalgate_load_suite_policy(manifest, policy_path) if needed else None
    if options.requests:
        _check_shares(manifest, topology)
    execution = None
    if prepared is not None and sandbox is not None:  # scorer: code: its sandbox share
        execution = evalgate_execution_settings(
            prepared,
            sandbox,
            manifest.evaluator,
            hide=(os.path.abspath(options.store_root),),
            stage=manifest.path,
            parts=topology.parts,
            index=topology.part_index,
        )
    if options.requests:
        _check_endpoints(manifest, options)
    return EvalgateSuite(manifest, scorer, threshold, execution, policy)


def evalgate_text_scorer(name: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The text scorer (name, options) a suite's answers are scored with: ``scorer: tools``
    scores its final answers with ``options.answer_scorer`` (default ``contains``), the other
    options going with it; any other scorer is itself."""
    if name != EVALGATE_TOOLS_SCORER:
        return name, options
    rest = {key: value for key, value in options.items() if key != EVALGATE_ANSWER_SCORER_OPTION}
    return str(options.get(EVALGATE_ANSWER_SCORER_OPTION, "contains")), rest


def _check_shares(manifest: EvalgateManifest, topology: EvalgateTopology) -> None:
    # Every process that requests needs a slot of each run-wide concurrency budget: a budget
    # smaller than the processes is a usage error at collection, naming the file and key.
    totals = {"budget.max_concurrency": manifest.budget.max_concurrency}
    if manifest.judged is not None:
        judge_budget = manifest.judged.judge.budget
        totals["judge.budget.max_concurrency"] = judge_budget.max_concurrency
    if manifest.sandbox is not None:
        totals["sandbox.max_concurrency"] = manifest.sandbox.max_concurrency
    evalgate_check_shares(manifest.path, totals, topology.parts, topology.processes)


def _check_endpoints(manifest: EvalgateManifest, options: EvalgateOptions) -> None:
    # Keys, URL overrides, simulator knobs and the load phase's prompts are checked at
    # collection, in the process that will use them: a run that would stop at its first
    # request (or at its load phase, after the eval phase committed) stops before any.
    names = [name for name in manifest.candidates if options.evalgate_wants_candidate(name)]
    evalgate_check_endpoints(manifest, names)
    if manifest.judged is not None:  # imported only then (numpy, the judge's modules)
        from pytest_evalgate.endpoints.judge import evalgate_check_judge_endpoint

        evalgate_check_judge_endpoint(manifest)
    if manifest.perf is not None:
        from pytest_evalgate.perf.prompts import evalgate_perf_bodies  # a load phase only

        evalgate_perf_bodies(manifest)
