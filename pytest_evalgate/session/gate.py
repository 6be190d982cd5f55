"""The gate at the end of a gating session: one decision per selected suite (SPEC sections 6-9).

``session`` calls ``evalgate_session_gate`` after the item loop (the controller of an xdist
run, a single process, or an aggregation pod) and ``evalgate_shard_zero_perf`` in shard pod 0.
This module is imported then, not at start-up: it pulls in the aggregation, the gate, numpy,
the attestation and the reports (``preload.py`` imports them while the requests are out).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

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
from pytest_evalgate.policy.load import evalgate_pair
from pytest_evalgate.report import evalgate_summary_lines
from pytest_evalgate.session.usage import evalgate_usage_errors

if TYPE_CHECKING:  # the plugin imports this module, not the other way
    from pytest_evalgate.session.core import EvalgatePlugin


def evalgate_session_gate(plugin: EvalgatePlugin) -> None:
    """Decide every selected suite; the summary lines and ``gate_exit`` go to ``plugin``."""
    plugin.gate_exit = 0
    if plugin.preload is not None:
        plugin.preload.join()  # never two threads importing the gate's modules at once
    if plugin.crashed and not plugin.selection:
        plugin.summary.append(
            f"evalgate: workers {plugin.crashed} crashed before reporting; no verdict"
        )
        plugin.gate_exit = 1
        return
    for path in sorted(plugin.selection):
        _gate_suite(plugin, path)


def evalgate_shard_zero_perf(plugin: EvalgatePlugin) -> None:
    """In an Indexed Job, pod 0 runs the load phase after its items and commits it to the
    store, where the aggregation pod (which sends no requests) finds it."""
    for path in sorted(plugin.selection):
        suite = plugin.suites[path]
        assert suite is not None
        if suite.policy is None:
            continue
        with evalgate_usage_errors():
            _perf(plugin, suite.manifest, evalgate_pair(suite.manifest, suite.policy), True)


def _gate_suite(plugin: EvalgatePlugin, path: str) -> None:
    suite = plugin.evalgate_suite(path)
    assert suite is not None
    config = plugin.config
    entry = plugin.selection[path]
    selection = EvalgateSelection(tuple(entry["candidates"]), tuple(entry["cases"]))
    policy = suite.policy
    assert policy is not None  # loaded at collection whenever the session gates
    with evalgate_usage_errors(), _store_refusal(plugin.summary) as refused:
        full = selection.evalgate_is_full(suite.manifest)
        perf = _perf(plugin, suite.manifest, evalgate_pair(suite.manifest, policy), full)
        outcome = evalgate_decide(
            plugin.backend,
            suite.manifest,
            selection,
            policy,
            report_dir=config.getoption("evalgate_report"),
            sign_key=config.getoption("evalgate_sign_key"),
            perf=perf,
            tier=config.getoption("evalgate_tier"),
            report_text=bool(config.getoption("evalgate_report_text")),
            verified=plugin.verified,
        )
    if refused:
        plugin.gate_exit = 1
        return
    plugin.gate_exit = max(plugin.gate_exit, outcome.exit_status)
    plugin.summary += [*evalgate_summary_lines(outcome.decision), *outcome.notes]
    plugin.summary += [f"wrote {path}" for path in outcome.written]
    config.hook.pytest_evalgate_decision(config=config, decision=outcome.decision)
    evalgate_junit_decision(config, outcome.decision)
    properties = evalgate_testcase_properties(config)
    for rule in outcome.decision["rules"]:
        for report in evalgate_rule_reports(rule, outcome.decision, properties):
            config.hook.pytest_runtest_logreport(report=report)


def _perf(
    plugin: EvalgatePlugin, manifest: EvalgateManifest, pair: tuple[str, str], run: bool
) -> EvalgatePerfResult | None:
    """The load phase (SPEC section 8): reused from the store, else run when ``run`` and
    requests are allowed. It runs after the eval phase, so the two do not compete."""
    if manifest.perf is None or pair[0] == pair[1]:
        return None  # no load phase without a baseline (a single-model policy)
    if plugin.aggregate_only or not run:
        return evalgate_perf_phase(plugin.backend, manifest, None, pair)
    pool = EvalgateEndpointPool(plugin.config.getoption("evalgate_request_log"))
    try:
        plugin.evalgate_say(
            f"evalgate: load phase of {manifest.suite} ({manifest.perf['duration_s']} s)"
        )
        return evalgate_perf_phase(
            plugin.backend,
            manifest,
            lambda: {n: pool.evalgate_endpoint(manifest, manifest.candidates[n], 0) for n in pair},
            pair,
        )
    finally:
        pool.evalgate_close()


@contextmanager
def _store_refusal(summary: list[str]) -> Iterator[list[str]]:
    """A store path that leads out of the store ends the gate with no verdict (exit 1); the
    summary names the path and the reason. Yields a list that holds the line when it did."""
    refused: list[str] = []
    try:
        yield refused
    except EvalgateStorePathError as exc:
        refused.append(f"evalgate: store refused: {exc}; no verdict")
        summary.extend(refused)
