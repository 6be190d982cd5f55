"""The requests of a session: prepared runs, works, stored records, the runner and the judging
stage, from their start (early, while pytest collects, or at the item loop) to their stop.

``EvalgateRunning`` is the plugin's part that the item loop waits on: an item asks it for its
record (``evalgate_record_for``); the judging stage asks it to urge or read answers. It owns its
state and assigns only its own attributes; the steps it calls (``prepare``, ``launch``,
``judging``) return what they made.
"""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_evalgate.dialogue.fixture import evalgate_fixture_wire
from pytest_evalgate.dialogue.service import EvalgateToolServices
from pytest_evalgate.endpoints.resolve import EvalgateEndpointPool
from pytest_evalgate.errors import EvalgateStorePathError
from pytest_evalgate.items import EvalgateItem
from pytest_evalgate.runner.parent import EvalgateProgress, EvalgateRunner
from pytest_evalgate.runner.spawn import evalgate_discard_prespawned
from pytest_evalgate.runner.work import EvalgateSuiteRun, EvalgateWork
from pytest_evalgate.session.defects import EvalgateDefects
from pytest_evalgate.session.gcpause import evalgate_resume_gc
from pytest_evalgate.session.launch import evalgate_make_runner
from pytest_evalgate.session.options import EvalgateOptions
from pytest_evalgate.session.prepare import (
    EvalgateWorks,
    evalgate_item_works,
    evalgate_prefetch,
    evalgate_prepare_run,
    evalgate_suite_works,
)
from pytest_evalgate.session.select import EvalgateSelector
from pytest_evalgate.session.suite import EvalgateSuite
from pytest_evalgate.shard.plan import EvalgateTopology
from pytest_evalgate.store import EvalgateIdentity, EvalgateRecord, EvalgateStoreBackend
from pytest_evalgate.store.verified import EvalgateVerifiedSegments

if TYPE_CHECKING:  # judged suites only: imported when one runs (judging.py)
    from pytest_evalgate.endpoints.judge import EvalgateJudgeEndpoints
    from pytest_evalgate.runner.judging import EvalgateJudgeStage


@dataclass
class EvalgateReuse:
    """Of the items this process ran: how many took a result committed before (``reused``,
    not asked again) and how many waited for a request (``requested``)."""

    reused: int = 0
    requested: int = 0

    def evalgate_line(self) -> str | None:
        """The terminal's line of a resumed run; None when nothing was reused."""
        if not self.reused:
            return None
        return f"reused {self.reused} results from the store, requested {self.requested}"


class EvalgateRunning:
    """The session's requests and what answered them (see the module docstring)."""

    def __init__(
        self,
        options: EvalgateOptions,
        topology: EvalgateTopology,
        backend: EvalgateStoreBackend,
        selector: EvalgateSelector,
        suites: Mapping[str, EvalgateSuite | None],
    ) -> None:
        self._options = options
        self._topology = topology
        self._backend = backend
        self._selector = selector
        self._suites = suites  # the plugin's loaded suites (read only)
        self.runner: EvalgateRunner | None = None
        self.pool: EvalgateEndpointPool | None = None
        self.stored: dict[EvalgateIdentity, EvalgateRecord] = {}
        self.works: dict[EvalgateIdentity, EvalgateWork] = {}
        self.judging: EvalgateJudgeStage | None = None  # judged suites only (SPEC section 10)
        self.judge_endpoints: EvalgateJudgeEndpoints | None = None
        self.run_paths: dict[int, str] = {}
        self.verified = EvalgateVerifiedSegments()  # segments this process committed
        self.frozen = False  # gc.freeze() was called when the runner started
        self.stopped = False  # the runner, the judging stage and the endpoints were closed
        # runs prepared (generations claimed, stored records loaded) before the item loop: the
        # early start's suite, and an xdist worker's suites at the end of its collection
        self.ready_runs: dict[str, EvalgateSuiteRun] = {}
        self.tool_services: list[EvalgateToolServices] = []  # started for tool suites
        self.reuse = EvalgateReuse()  # the items' results found in the store, and not
        self.defects = EvalgateDefects()  # cases whose error comes back on every run

    @property
    def store_failure(self) -> tuple[str, int] | None:
        """(reason, answers not committed) when a commit failed and stopped the requests."""
        runner = self.runner
        if runner is None or runner.store_failure is None:
            return None
        return runner.store_failure, runner.lost

    @property
    def progress(self) -> EvalgateProgress | None:
        """The runner's counters (None before it started)."""
        return None if self.runner is None else self.runner.progress

    def _loaded(self, path: str) -> EvalgateSuite:
        suite = self._suites[path]
        assert suite is not None  # loaded at collection (config errors stop the session first)
        return suite

    def evalgate_prepare(self, items: Sequence[pytest.Item]) -> None:
        """Prepare the run (generations claimed, stored records loaded) of every suite of
        ``items`` that is not in ``ready_runs`` yet; a refused store raises
        ``EvalgateStorePathError``."""
        paths = {item.suite_path for item in items if isinstance(item, EvalgateItem)}
        for path in sorted(paths - set(self.ready_runs)):
            self._prepare(path, self._loaded(path))

    def _prepare(self, path: str, suite: EvalgateSuite) -> EvalgateSuiteRun:
        prepared = evalgate_prepare_run(self._backend, suite, self._options, self._topology)
        self.stored.update(prepared.stored)
        self.ready_runs[path] = prepared.run
        return prepared.run

    def evalgate_start_early(self, path: str, suite: EvalgateSuite) -> None:
        """Start the runner on every identity of the suite at ``path`` this process keeps
        (``early.py``); a refused store leaves nothing prepared (the item loop's start meets
        the same refusal and stops the run, nothing requested)."""
        try:
            run = self._prepare(path, suite)
            made = evalgate_suite_works(path, run, self._options, self._selector, self.stored)
            works = self._keep(made)
            if works:
                self._launch({path: run}, works, early=True)
                # The manifest, the works and every module imported so far live as long as the
                # process: frozen, the full collections while pytest builds the items do not
                # traverse them (two such passes, ~0.1 s, at 10,000 items).
                self.evalgate_freeze()
        except EvalgateStorePathError:
            # Not from inside collection (pytest would call it a collection error).
            self.ready_runs.pop(path, None)
            self.works.clear()

    def evalgate_start(self, items: list[EvalgateItem]) -> bool:
        """Start (or confirm, after an early start) the requests of the collected ``items``
        and the judging stage; False when every identity was committed before (nothing is
        requested, no endpoint started). A refused store raises ``EvalgateStorePathError``."""
        self.evalgate_prepare(items)  # those not prepared while pytest collected
        runs = dict(self.ready_runs)
        made = evalgate_item_works(items, runs, self.works, self._selector, self.stored)
        works = evalgate_prefetch(self._keep(made), self._topology)
        self._start_judging(runs)
        if self.runner is not None:
            self.runner.evalgate_confirm(works)  # the collected items, in their order
        elif works:
            self._launch(runs, works, early=False)
        else:
            return False
        return True

    def evalgate_freeze(self) -> None:
        """Freeze what lives until the process ends (``gc.freeze``) and resume the collector."""
        gc.freeze()
        self.frozen = True
        evalgate_resume_gc()

    def _keep(self, works: EvalgateWorks) -> list[EvalgateWork]:
        """Keep the works a step made; return those to request."""
        self.works.update(works.made)
        return works.pending

    def _launch(
        self, runs: Mapping[str, EvalgateSuiteRun], works: list[EvalgateWork], *, early: bool
    ) -> None:
        """Start the endpoints, the tool fixtures' mock services, the segment writer and the
        runner on ``works``."""
        for run in runs.values():
            self._start_tools(run)
        self.pool = EvalgateEndpointPool(self._options.request_log)
        self.runner = evalgate_make_runner(
            self.pool,
            self._backend,
            runs,
            works,
            self._topology,
            self.verified,
            early=early,
            store_root=self._options.store_root,
            on_record=self._on_record,
        )
        self.runner.evalgate_start()

    def _start_tools(self, run: EvalgateSuiteRun) -> None:
        """A tool suite's fixture for the child, its mock services started (SPEC 17)."""
        fixture = run.manifest.fixture
        if fixture is None or run.tools is not None:
            return
        services = EvalgateToolServices(fixture, _tool_state_dir(self._options, run))
        self.tool_services.append(services)
        run.tools = evalgate_fixture_wire(fixture, services.evalgate_start())

    def evalgate_load_outcomes(self, items: list[EvalgateItem]) -> None:
        """Aggregate mode: each item shows its stored record."""
        from pytest_evalgate.aggregate.items import evalgate_stored_outcomes  # aggregate mode only

        for path in sorted({item.suite_path for item in items}):
            suite = self._loaded(path)
            names = sorted({item.candidate for item in items if item.suite_path == path})
            pair = None if suite.policy is None else suite.policy.pair
            outcomes = evalgate_stored_outcomes(self._backend, suite.manifest, names, pair)
            self.stored.update(outcomes)

    def evalgate_record_for(self, item: EvalgateItem) -> Mapping[str, Any]:
        """The record of ``item``: from the store when committed before, else from the runner."""
        key = item.evalgate_key
        stored = self.stored.get(key)
        if stored is not None:
            self.reuse.reused += 0 if self._options.aggregate_only else 1
            self.defects.evalgate_note(item.case.case_id, item.candidate, stored)
            return self._judged(item, stored)
        if self._options.aggregate_only or self.runner is None:
            return _missing()
        self.reuse.requested += 1
        record = self.runner.evalgate_wait(self.works[key])
        self.defects.evalgate_note(item.case.case_id, item.candidate, record)
        return self._judged(item, record)

    def evalgate_stop(self) -> None:
        """Close the runner (its child commits what was answered), the judging stage and the
        endpoints."""
        self.stopped = True
        try:
            if self.runner is not None:
                self.runner.evalgate_close()
        finally:
            evalgate_discard_prespawned()
            self._stop_judging()
            if self.pool is not None:
                self.pool.evalgate_close()
            for services in self.tool_services:
                services.evalgate_stop()

    # -- judging (SPEC section 10; the stage is runner/judging.py) ---------------------------

    def _start_judging(self, runs: dict[str, EvalgateSuiteRun]) -> None:
        judged = {path: run for path, run in runs.items() if run.manifest.judged is not None}
        self.run_paths = {id(run): path for path, run in runs.items()}
        if not judged:
            return
        # imported only then: the judge's modules (numpy) cost every other run
        from pytest_evalgate.endpoints.judge import EvalgateJudgeEndpoints
        from pytest_evalgate.session.judging import evalgate_start_judging

        self.judge_endpoints = EvalgateJudgeEndpoints(self._options.request_log)
        self.judging = evalgate_start_judging(
            self.judge_endpoints,
            self._backend,
            self._topology,
            judged,
            self._suites,
            need=self.evalgate_need_answer,
            pump=self.evalgate_pump_answers,
        )
        for key, work in self.works.items():  # the answers committed before
            if key in self.stored:
                self.judging.evalgate_answer(self.run_paths[id(work.suite)], self.stored[key])

    def _on_record(self, work: EvalgateWork, record: EvalgateRecord) -> None:
        if self.judging is not None:
            self.judging.evalgate_answer(self.run_paths[id(work.suite)], record)

    def evalgate_need_answer(self, identity: EvalgateIdentity) -> bool:
        """The judging stage's ``need``: urge ``identity``'s answer (False: none will come)."""
        work = self.works.get(identity)
        if work is None or self.runner is None or identity in self.stored:
            return False
        self.runner.evalgate_urge(work)
        return True

    def evalgate_pump_answers(self, timeout: float) -> None:
        """The judging stage's ``pump``: read what the runner's child reported."""
        if self.runner is not None:
            self.runner.evalgate_pump(timeout)

    def _judged(self, item: EvalgateItem, record: Mapping[str, Any]) -> Mapping[str, Any]:
        judging = self.judging
        if judging is None or not judging.evalgate_judges(item.suite_path):
            return record
        if record.get("error") is not None:
            return record
        from pytest_evalgate.runner.judge_views import evalgate_judged_view  # judged suites only

        judgments = judging.evalgate_judgments(item.suite_path, item.evalgate_key)
        return evalgate_judged_view(record, judgments)

    def _stop_judging(self) -> None:
        try:
            if self.judging is not None:
                self.judging.evalgate_close()
                self.defects.evalgate_note_judge(self.judging.progress.repeated)
        finally:
            if self.judge_endpoints is not None:
                self.judge_endpoints.evalgate_close()


def _tool_state_dir(options: EvalgateOptions, run: EvalgateSuiteRun) -> str:
    """Where a suite's mock services keep what outlives a run: beside a folder store (the
    store's ``.tool-state/<suite>``), else under the system's temporary folder."""
    root = options.store_root
    if "://" in root:
        root = os.path.join(tempfile.gettempdir(), "evalgate-store")
    return os.path.join(root, ".tool-state", run.manifest.suite)


def _missing() -> dict[str, Any]:
    message = "no committed record in the store that verifies (aggregate mode sends no requests)"
    return {"error": {"category": "missing", "status": None, "message": message}, "attempts": 0}
