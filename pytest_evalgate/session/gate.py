"""The gate at the end of a gating session: one decision per selected suite (SPEC sections 6-9).

The plugin calls ``evalgate_gate_suite`` for each selected suite after the item loop (the
controller of an xdist run, a single process, or an aggregation pod), and
``evalgate_shard_zero_perf`` in shard pod 0. Each takes what it reads (``EvalgateGateContext``
and the suite) and returns an ``EvalgateVerdict``; the plugin keeps the summary and the exit.
This module is imported then, not at start-up: it pulls in the aggregation, the gate, numpy,
the attestation and the reports (``preload.py`` imports them while the requests are out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from pytest_evalgate.aggregate.combine import EvalgateSelection
from pytest_evalgate.decision.decide import evalgate_decide
from pytest_evalgate.endpoints.resolve import EvalgateEndpointPool
from pytest_evalgate.errors import EvalgateStorePathError
from pytest_evalgate.items import (
    evalgate_junit_decision,
    evalgate_rule_reports,
    evalgate_testcase_properties,
)
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.perf.phase import evalgate_perf_phase
from pytest_evalgate.perf.result import EvalgatePerfResult
from pytest_evalgate.report import evalgate_summary_lines
from pytest_evalgate.session.options import EvalgateOptions, evalgate_session_trust
from pytest_evalgate.session.prepare import EvalgateChosen
from pytest_evalgate.session.suite import EvalgateSuite
from pytest_evalgate.session.usage import evalgate_usage_errors
from pytest_evalgate.store import EvalgateStoreBackend
from pytest_evalgate.store.verified import EvalgateVerifiedSegments


@dataclass(frozen=True)
class EvalgateGateContext:
    """What the gate reads of the session: pytest's config (its hooks, JUnit), the options,
    the store, the segments verified at commit, and ``say`` (a line on the terminal)."""

    config: pytest.Config
    options: EvalgateOptions
    backend: EvalgateStoreBackend
    verified: EvalgateVerifiedSegments
    say: Callable[[str], None]


@dataclass(frozen=True)
class EvalgateVerdict:
    """One step of the gate: its exit status (0: passed) and its summary lines."""

    exit_status: int
    summary: tuple[str, ...]


def evalgate_crash_verdict(
    crashed: Sequence[str], selection: Mapping[str, EvalgateChosen]
) -> EvalgateVerdict | None:
    """No verdict (exit 1) when xdist workers crashed before any reported what it ran."""
    if crashed and not selection:
        line = f"evalgate: workers {list(crashed)} crashed before reporting; no verdict"
        return EvalgateVerdict(1, (line,))
    return None


def evalgate_store_failed_verdict(reason: str, lost: int) -> EvalgateVerdict:
    """Verdict incomplete (exit 1) of a run whose store failed mid-run: requests stopped, the
    answers never committed counted, no decision (the store that would hold it is failing)."""
    line = (
        f"evalgate: verdict INCOMPLETE: the store failed mid-run ({reason}); requests stopped,"
        f" {lost} answer(s) not committed; no decision. Rerun when the store is back: it"
        " resumes from what was committed"
    )
    return EvalgateVerdict(1, (line,))


def evalgate_gate_suite(
    context: EvalgateGateContext, suite: EvalgateSuite, chosen: EvalgateChosen
) -> EvalgateVerdict:
    """Decide ``suite`` over what was ``chosen`` of it: the load phase (reused or run), the
    decision, its record and reports; the decision hook, the JUnit properties and one report
    per rule go to pytest. A store path leading out of the store: no verdict, exit 1."""
    config = context.config
    selection = EvalgateSelection(tuple(chosen["candidates"]), tuple(chosen["cases"]))
    policy = suite.policy
    assert policy is not None  # loaded at collection whenever the session gates
    options = context.options
    with evalgate_usage_errors(), _store_refusal() as refused:
        full = selection.evalgate_is_full(suite.manifest)
        perf = _perf(context, suite.manifest, policy.pair, full)
        outcome = evalgate_decide(
            context.backend,
            suite.manifest,
            selection,
            policy,
            report_dir=options.report_dir,
            sign_key=options.sign_key,
            perf=perf,
            tier=options.tier,
            report_text=options.report_text,
            verified=context.verified,
            trust=evalgate_session_trust(options),
        )
    if refused:
        return EvalgateVerdict(1, tuple(refused))
    summary = [*evalgate_summary_lines(outcome.decision), *outcome.notes]
    summary += [f"wrote {path}" for path in outcome.written]
    config.hook.pytest_evalgate_decision(config=config, decision=outcome.decision)
    evalgate_junit_decision(config, outcome.decision)
    properties = evalgate_testcase_properties(config)
    reports = [
        report
        for rule in outcome.decision["rules"]
        for report in evalgate_rule_reports(rule, outcome.decision, properties)
    ]
    _count_as_collected(config, {report.nodeid for report in reports})
    for report in reports:
        config.hook.pytest_runtest_logreport(report=report)
    return EvalgateVerdict(outcome.exit_status, tuple(summary))


def _count_as_collected(config: pytest.Config, nodeids: set[str]) -> None:
    # Each rule is reported as a test (it counts in "N passed"), so the terminal's progress,
    # reported / collected, went past 100 % ("[106%]"): the rules join the collected count.
    session = config.pluginmanager.get_plugin("session")
    if isinstance(session, pytest.Session):
        session.testscollected += len(nodeids)


def evalgate_shard_zero_perf(context: EvalgateGateContext, suite: EvalgateSuite) -> None:
    """In an Indexed Job, pod 0 runs the load phase after its items and commits it to the
    store, where the aggregation pod (which sends no requests) finds it."""
    if suite.policy is None:
        return
    with evalgate_usage_errors():
        _perf(context, suite.manifest, suite.policy.pair, True)


def _perf(
    context: EvalgateGateContext, manifest: EvalgateManifest, pair: tuple[str, str], run: bool
) -> EvalgatePerfResult | None:
    """The load phase (SPEC section 8): reused from the store, else run when ``run`` and
    requests are allowed. It runs after the eval phase, so the two do not compete."""
    if manifest.perf is None or pair[0] == pair[1]:
        return None  # no load phase without a baseline (a single-model policy)
    if context.options.aggregate_only or not run:
        return evalgate_perf_phase(context.backend, manifest, None, pair)
    pool = EvalgateEndpointPool(context.options.request_log)
    try:
        steps = len(manifest.perf.sweep or ())
        sweep = f", then a capacity sweep of {steps} rate(s)" if steps else ""
        context.say(
            f"evalgate: load phase of {manifest.suite} ({manifest.perf.duration_s} s{sweep})"
        )
        return evalgate_perf_phase(
            context.backend,
            manifest,
            lambda: {n: pool.evalgate_endpoint(manifest, manifest.candidates[n], 0) for n in pair},
            pair,
        )
    finally:
        pool.evalgate_close()


@contextmanager
def _store_refusal() -> Iterator[list[str]]:
    """A store path that leads out of the store ends the gate with no verdict; yields a list
    that holds the summary line (naming the path and the reason) when it did."""
    refused: list[str] = []
    try:
        yield refused
    except EvalgateStorePathError as exc:
        refused.append(f"evalgate: store refused: {exc}; no verdict")
