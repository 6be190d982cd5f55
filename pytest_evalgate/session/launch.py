"""The runner's wiring: one request budget for the run, this process's share of it, and the
runner (endpoints, the segment writer, verification at commit) built on the works to request.

One runner serves every suite of a session, so the suites that request together must name
one budget: ``evalgate_check_one_budget`` refuses, at collection and before any request, a
run whose suites name different ones (docs/decisions.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import pytest

from pytest_evalgate.aggregate.suitecheck import evalgate_expectation
from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.client.budget import evalgate_share
from pytest_evalgate.endpoints.resolve import EvalgateEndpointPool
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.items import EvalgateItem
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.runner.choice import evalgate_is_loglikelihood, evalgate_probe_choices
from pytest_evalgate.runner.parent import EvalgateLimits, EvalgateRunner
from pytest_evalgate.runner.work import EvalgateSuiteRun, EvalgateWork
from pytest_evalgate.session.progress import EvalgateProgressLine, evalgate_progress_wanted
from pytest_evalgate.session.usage import evalgate_usage_errors
from pytest_evalgate.shard.plan import EvalgateTopology
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateRecord,
    EvalgateSegmentWriter,
    EvalgateStoreBackend,
)
from pytest_evalgate.store.verified import EvalgateVerifiedSegments

_LOG = logging.getLogger("pytest_evalgate")


class EvalgateBudget(Protocol):
    """The run-wide keys of a budget block (``budget``, ``judge.budget``) a runner shares."""

    @property
    def max_concurrency(self) -> int: ...
    @property
    def requests_per_second(self) -> float | None: ...
    @property
    def tokens_per_minute(self) -> float | None: ...


_SHARED = ("max_concurrency", "requests_per_second", "tokens_per_minute")


def evalgate_check_one_budget(manifests: Sequence[EvalgateManifest]) -> None:
    """Refuse (usage error, exit 4) suites that would request together under different
    run-wide budgets: ``budget``, and ``judge.budget`` among the judged suites. Each of the
    shared keys (concurrency, requests per second, tokens per minute) must agree."""
    judged = [m for m in manifests if m.judged is not None]
    with evalgate_usage_errors():
        _check_same("budget", [(m, m.budget) for m in manifests])
        _check_same("judge.budget", [(m, m.judged.judge.budget) for m in judged if m.judged])


def evalgate_check_distinct_identities(items: Iterable[EvalgateItem]) -> None:
    """Refuse (usage error, exit 4) two collected suites whose items share an identity (same
    dataset revision, case id, candidate and repetition): one runner and one set of stored
    records serve a session by identity, so the second suite would wait for answers never
    requested, or take the first suite's records as its own."""
    seen: dict[EvalgateIdentity, str] = {}
    for item in items:
        first = seen.setdefault(item.evalgate_key, item.suite_path)
        if first != item.suite_path:
            key = item.evalgate_key
            reason = (
                f"identity (revision {key.dataset_revision!r}, case {key.case_id!r}, candidate"
                f" {key.candidate!r}, repetition {key.repetition}) is also an identity of"
                f" {first}: suites run together need distinct identities; give each dataset its"
                " own revision, or run the suites apart"
            )
            with evalgate_usage_errors():
                raise EvalgateConfigError(item.suite_path, "dataset.revision", reason)


def _check_same(key: str, budgets: list[tuple[EvalgateManifest, EvalgateBudget]]) -> None:
    for manifest, budget in budgets[1:]:
        first, expected = budgets[0]
        differs = [n for n in _SHARED if getattr(budget, n) != getattr(expected, n)]
        if differs:
            theirs = ", ".join(f"{n} {getattr(budget, n)}" for n in differs)
            ours = ", ".join(f"{n} {getattr(expected, n)}" for n in differs)
            reason = (
                f"{theirs} differs from {ours} in {first.path}: the suites of one run share one"
                " run-wide budget; give them the same one, or run them apart"
            )
            raise EvalgateConfigError(manifest.path, key, reason)


def evalgate_limits(
    budget: EvalgateBudget, topology: EvalgateTopology, key: str = "budget.max_concurrency"
) -> EvalgateLimits:
    """This process's share of the run-wide ``budget`` (``key``: its name in messages)."""
    parts, index = topology.parts, topology.part_index
    share = int(evalgate_share(budget.max_concurrency, parts, index, integer=True, key=key))
    return EvalgateLimits(
        share,
        _share_or_none(budget.requests_per_second, parts, index),
        _share_or_none(budget.tokens_per_minute, parts, index),
    )


def _share_or_none(total: float | None, parts: int, index: int) -> float | None:
    return None if total is None else float(evalgate_share(total, parts, index, integer=False))


def evalgate_make_runner(
    pool: EvalgateEndpointPool,
    backend: EvalgateStoreBackend,
    runs: Mapping[str, EvalgateSuiteRun],
    works: list[EvalgateWork],
    topology: EvalgateTopology,
    verified: EvalgateVerifiedSegments,
    *,
    early: bool,
    store_root: str,
    on_record: Callable[[EvalgateWork, EvalgateRecord], None],
) -> EvalgateRunner:
    """The runner on ``works`` (not started): each run's endpoints from ``pool``, its candidate
    folders watched by ``verified``, this process's share of the run's one budget (``early``:
    while pytest still collects, with a larger first window)."""
    for run in runs.values():
        run.endpoints.update(_endpoints(pool, run.manifest, topology.part_index))
        _probe_choices(run, {w.candidate for w in works if w.suite is run})
        for name, prefix in run.prefixes.items():  # verified as committed (store.table)
            expect = evalgate_expectation(run.manifest, name)
            verified.evalgate_watch(prefix, expect, run.manifest.canary)
    writer = EvalgateSegmentWriter(
        backend, topology.shard_dir, on_commit=verified.evalgate_on_commit
    )
    # one budget for every suite (evalgate_check_one_budget refused others at collection)
    limits = evalgate_limits(next(iter(runs.values())).manifest.budget, topology)
    # AIMD changes (logged by the runner's child): shown with --log-cli-level=INFO
    return EvalgateRunner(
        works,
        writer,
        limits,
        concurrency=limits.max_concurrency,
        early=early,
        log=_LOG.info,
        journal_store=store_root,
        on_record=on_record,
    )


def _probe_choices(run: EvalgateSuiteRun, candidates: set[str]) -> None:
    """Multiple choice by log-likelihood (SPEC 18): each candidate that will be asked is probed
    once, before any case: the ``max_tokens`` it accepts (0, else 1) is kept for its works;
    one that returns no log probabilities is a configuration error (exit 4) naming it."""
    if not evalgate_is_loglikelihood(run.manifest):
        return
    for name in sorted(candidates - set(run.choice_max_tokens)):
        endpoint = run.endpoints[name]
        run.choice_max_tokens[name] = evalgate_probe_choices(endpoint, name, run.manifest.path)
        _LOG.info(
            "evalgate: candidate %s: choice requests use max_tokens %d",
            name,
            run.choice_max_tokens[name],
        )


def _endpoints(
    pool: EvalgateEndpointPool, manifest: EvalgateManifest, replica: int
) -> dict[str, EvalgateEndpoint]:
    return {
        c.name: pool.evalgate_endpoint(manifest, c, replica) for c in manifest.candidates.values()
    }


def evalgate_progress_line(config: pytest.Config) -> EvalgateProgressLine | None:
    """The live progress line when the terminal wants one (a tty, not ``-q``, not a worker)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return None
    is_worker = hasattr(config, "workerinput")
    tty = bool(getattr(reporter, "isatty", False))
    wanted = evalgate_progress_wanted(tty, config.get_verbosity(), is_worker)
    return EvalgateProgressLine() if wanted else None
