"""The plugin object registered under ``--evalgate``: per-session state and the hooks that wire
the stages together (collection, the runner ahead of the item loop, the gate at the controller).

It lives apart from ``plugin.py`` (the pytest11 entry point) because pytest imports the entry point
in every run of every project that has pytest-evalgate installed; this module pulls in the
manifest's schemas, the runner and the store, so it is imported only when ``--evalgate`` is on.
It imports nothing that needs numpy or scipy before the first request: the gate (``gate``), the
judging stage's start (``judging``) and the perf, report and judge modules are imported when a
suite needs them.

The object composes; its hooks delegate to the modules beside it, whose steps return typed
values that only this object assigns to itself: ``options`` (what the command line says),
``suite`` (a suite loaded and checked), ``select`` (tier and shard of a case), ``running`` (the
requests from their start to their stop: ``prepare``, ``launch``, ``judging``), ``workers`` (the
xdist side) and ``gate`` (the verdict at the end).
"""

from __future__ import annotations

import gc
import threading
import uuid
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_evalgate.errors import EvalgateConfigError, EvalgateStorePathError
from pytest_evalgate.items import EvalgateFile, EvalgateItem, EvalgateTally
from pytest_evalgate.manifest.load import EVALGATE_MANIFEST_NAME, EvalgateManifest
from pytest_evalgate.runner.spawn import evalgate_discard_prespawned, evalgate_prespawn_child
from pytest_evalgate.scoring import EvalgateScorer
from pytest_evalgate.session.early import evalgate_may_start_early
from pytest_evalgate.session.gcpause import evalgate_resume_gc
from pytest_evalgate.session.launch import (
    evalgate_check_distinct_identities,
    evalgate_check_one_budget,
    evalgate_progress_line,
)
from pytest_evalgate.session.options import (
    evalgate_check_output_folders,
    evalgate_check_sign_key,
    evalgate_read_options,
    evalgate_topology,
)
from pytest_evalgate.session.preload import evalgate_preload_gate
from pytest_evalgate.session.prepare import EvalgateChosen, evalgate_selection
from pytest_evalgate.session.progress import EvalgateProgressLine
from pytest_evalgate.session.running import EvalgateReuse, EvalgateRunning
from pytest_evalgate.session.select import EvalgateSelector, evalgate_deselect
from pytest_evalgate.session.suite import EvalgateSuite, evalgate_load_suite
from pytest_evalgate.session.usage import evalgate_usage_errors
from pytest_evalgate.session.workers import (
    EvalgateWorkerNode,
    EvalgateWorkerStop,
    evalgate_node_report,
    evalgate_scheduling,
    evalgate_stop_for_workers,
    evalgate_tell_selection,
    evalgate_tell_stop,
)
from pytest_evalgate.shard.scheduler import EvalgateScheduling
from pytest_evalgate.store import evalgate_open_store

if TYPE_CHECKING:  # the gate is imported when the session gates (gate.py)
    from pytest_evalgate.session.gate import EvalgateGateContext, EvalgateVerdict


class EvalgatePlugin:
    """Per-session state and the hooks that wire the stages together."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.writer_run = uuid.uuid4().hex
        self.topology = evalgate_topology(config, self.writer_run)
        self.options = evalgate_read_options(config)
        with evalgate_usage_errors():  # an S3 store is probed here, before any request
            evalgate_check_sign_key(self.options)
            self.backend = evalgate_open_store(self.options.store_root)
            evalgate_check_output_folders(config, self.options, self.backend)
        self.suites: dict[str, EvalgateSuite | None] = {}
        self.config_errors: list[EvalgateConfigError] = []
        self.selector = EvalgateSelector(self._manifest, self.topology, self.options.tier)
        self.running = EvalgateRunning(
            self.options, self.topology, self.backend, self.selector, self.suites
        )
        self.selection: dict[str, EvalgateChosen] = {}
        self.crashed: list[str] = []
        self.worker_stop: EvalgateWorkerStop | None = None  # xdist worker: why it stops
        self.worker_stops: list[EvalgateWorkerStop] = []  # xdist controller: why workers stopped
        self.summary: list[str] = []
        self.gate_exit = 0
        self.tally = EvalgateTally()
        self.progress_line: EvalgateProgressLine | None = None
        self.early: bool | None = None  # may the runner start while pytest collects (early.py)
        self.preload: threading.Thread | None = None  # the gate's modules, imported during the run
        self.collection_error: pytest.UsageError | None = None  # raised again at its finish
        self.worker_reuse = EvalgateReuse()  # xdist controller: what its workers reused

    # -- collection -------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> None:
        # The runner child starts while pytest collects (its interpreter and imports overlap
        # collection); a run that needs no request stops it again (EvalgateRunning.evalgate_stop).
        if self.options.requests and not self._controller():
            evalgate_prespawn_child()

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.File | None:
        if file_path.name == EVALGATE_MANIFEST_NAME:
            return EvalgateFile.from_parent(parent, path=file_path)
        return None

    def evalgate_suite(self, path: str) -> EvalgateSuite | None:
        """The suite at ``path``, loaded once; a config error is kept for a usage error."""
        if path not in self.suites:
            try:
                suite = evalgate_load_suite(
                    path, self.options, self.topology, self._scorers, self._gates()
                )
            except EvalgateConfigError as exc:
                self.config_errors.append(exc)
                self.suites[path] = None
            else:
                self.suites[path] = suite
        return self.suites[path]

    def _scorers(self) -> dict[str, EvalgateScorer]:
        extra: dict[str, EvalgateScorer] = {}
        for found in self.config.hook.pytest_evalgate_scorers(config=self.config):
            extra.update(found or {})
        return extra

    def _manifest(self, path: str) -> EvalgateManifest:
        suite = self.suites[path]
        assert suite is not None  # loaded at collection (config errors stop the session first)
        return suite.manifest

    def evalgate_wants_candidate(self, name: str) -> bool:
        """Whether ``--evalgate-candidate`` selects ``name`` (all when not given)."""
        return self.options.evalgate_wants_candidate(name)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        try:
            self._modify_items(config, items)
        except pytest.UsageError as exc:
            if self.options.worker:
                # An xdist worker that stops here (a bad manifest, a refused store) reports an
                # empty collection (pytest reports it even when this hook raises), so nothing is
                # scheduled to it, and tells the controller why: the controller stops the session
                # with it (pytest_testnodedown, pytest_runtestloop) as a session without xdist.
                items.clear()
                stop = self.worker_stop or EvalgateWorkerStop(message=str(exc), returncode=4)
                evalgate_tell_stop(config, stop)
            else:
                self.collection_error = exc
            raise

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # pytest calls this hook even when collection raised (its ``finally``), and the terminal
        # reporter's then printed "collected 0 items" above the configuration error (issue 37).
        # Raised again before it, the error is the only thing said. Not in an xdist worker,
        # which must report its (empty) collection to the controller from this hook.
        if self.collection_error is not None:
            raise self.collection_error

    def _modify_items(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if self.config_errors:
            raise pytest.UsageError("\n".join(str(exc) for exc in self.config_errors))
        if self.options.tier is not None:  # cases outside --evalgate-tier (unknown: usage error)
            evalgate_deselect(config, items, self.selector.evalgate_in_tier)
        if self.topology.sharded:
            evalgate_deselect(config, items, self.selector.evalgate_in_shard)
        if not self.options.requests:
            return
        paths = sorted({item.suite_path for item in items if isinstance(item, EvalgateItem)})
        evalgate_check_one_budget([self._manifest(path) for path in paths])  # one runner
        evalgate_check_distinct_identities(i for i in items if isinstance(i, EvalgateItem))
        if self.options.worker:
            self._prepare_worker_runs(items)

    def _prepare_worker_runs(self, items: list[pytest.Item]) -> None:
        """An xdist worker prepares its runs before it reports its collection, not at its item
        loop: a store refused there ended the worker with items the controller had scheduled to
        it (an INTERNALERROR that hid the reason)."""
        try:
            self.running.evalgate_prepare(items)
        except EvalgateStorePathError as exc:
            self.worker_stop = EvalgateWorkerStop(message=_refused(exc), returncode=1)
            raise pytest.UsageError(_refused(exc)) from exc

    def evalgate_start_early(self, path: str) -> None:
        """Start the runner on the suite at ``path`` while pytest still collects its items, when
        this session will request exactly the suite's identities (``early.py``): the first
        requests go out ~0.4 s sooner at 10,000 items. ``pytest_runtestloop`` confirms them."""
        if self.early is None:
            self.early = not (self._controller() or self.config_errors) and (
                evalgate_may_start_early(self.config)
            )
        suite = self.suites.get(path)
        if not self.early or suite is None or self.running.runner is not None:
            return
        self.early = False  # one suite only (early.py); a second one waits for the item loop
        if suite.manifest.judged is not None or not self.selector.evalgate_loads(path):
            return  # judged: the judging stage starts with the item loop, sees every answer
        if suite.manifest.fixture is not None:
            return  # tools: the mock services start with the item loop (a refusal is exit 4)
        if suite.manifest.evaluator.scorer == "choice":
            return  # multiple choice: each candidate is probed at the item loop (a refusal: exit 4)
        self.running.evalgate_start_early(path, suite)

    # -- running ----------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        if self.options.collect_only:
            return (yield)  # listing items sends no request, commits nothing, gates nothing
        items = [item for item in session.items if isinstance(item, EvalgateItem)]
        try:
            if items and not self.options.aggregate_only:
                self._start_or_exit(items)
            elif items:
                self.running.evalgate_load_outcomes(items)  # aggregate mode: stored records
            evalgate_resume_gc()  # at the latest here (gcpause.py): the item loop collects as usual
            result = yield
        finally:
            self.running.evalgate_stop()
        if self.worker_stops:  # the xdist controller: what stopped its workers
            evalgate_stop_for_workers(self.worker_stops)
        if self.running.frozen:
            # What the item loop left (pytest's reports, mostly) joins the frozen generation
            # before the gate: a full collection during the gate traversed it (~90 ms at 10,000
            # items, on the tail after the last answer).
            gc.freeze()
        self.selection = evalgate_selection(self.selection, items)
        if self.options.worker:
            reuse, defects = self.running.reuse, self.running.defects.evalgate_json()
            counts = (reuse.reused, reuse.requested)
            evalgate_tell_selection(self.config, self.selection, counts, defects)
        elif self._gates():
            self._gate(session)
        elif self.topology.shard is not None and self.topology.shard_index == 0:
            self._shard_zero_perf()
        session.testsfailed = self.tally.evalgate_failed_count(self.gate_exit, self._gates())
        return result

    def _start_or_exit(self, items: list[EvalgateItem]) -> None:
        try:
            started = self.running.evalgate_start(items)
        except EvalgateStorePathError as exc:
            # nothing was requested or committed: the store would lead writes outside it
            pytest.exit(_refused(exc), returncode=1)
        except EvalgateConfigError as exc:  # a tool fixture's mock service did not start
            raise pytest.UsageError(str(exc)) from None
        if not started:
            return  # every identity is committed: no endpoint is started, nothing is requested
        if self._gates() and not self.options.worker:
            self.preload = evalgate_preload_gate()
        self.progress_line = evalgate_progress_line(self.config)
        # Items, works and the manifest live until the process ends: frozen, the collections of
        # the item loop, pytest's final one and the interpreter's at exit skip them (10,000
        # items: ~0.5 s less per run). Not unfrozen at cleanup, which gave that time back; the
        # price: an in-process nested session (pytester) keeps its cyclic garbage.
        self.running.evalgate_freeze()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        progress = self.running.progress
        if progress is None or self.progress_line is None:
            return
        line = self.progress_line.evalgate_maybe_line(progress)
        if line:
            self.evalgate_say(line)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.tally.evalgate_count(report)

    def evalgate_record_for(self, item: EvalgateItem) -> Mapping[str, Any]:
        """The record of ``item``: from the store when committed before, else from the runner."""
        return self.running.evalgate_record_for(item)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.running.ready_runs and not self.running.stopped:
            # prepared (an early start, an xdist worker) and the item loop never came (collection
            # failed or was stopped): commit what was answered, end the child and the endpoints
            self.running.evalgate_stop()
        evalgate_discard_prespawned()
        evalgate_resume_gc()  # a session that never started its runner (usage error, no work)
        if self.running.frozen:
            # What the gate and the summary made joins the frozen generation too: pytest's
            # clean-up then collects garbage five times over (unraisableexception), and the
            # interpreter once more at exit.
            gc.freeze()

    # -- xdist controller ----------------------------------------------------------------------

    def _controller(self) -> bool:
        return self.config.pluginmanager.get_plugin("dsession") is not None

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: EvalgateWorkerNode, error: object) -> None:
        report = evalgate_node_report(node)
        if report.stop is not None and report.stop not in self.worker_stops:
            self.worker_stops.append(report.stop)  # every worker reports the same manifest's
        if report.crashed is not None:
            self.crashed.append(report.crashed)
        self.worker_reuse.reused += report.reused[0]
        self.worker_reuse.requested += report.reused[1]
        self.running.defects.evalgate_merge(report.defects)
        for path, entry in report.selection.items():
            self.selection.setdefault(path, entry)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> EvalgateScheduling:
        return evalgate_scheduling(config, self.topology.shard_count, log)

    # -- the gate ------------------------------------------------------------------------------

    def _gates(self) -> bool:
        return self.options.aggregate_only or not self.topology.sharded

    def _gate(self, session: pytest.Session) -> None:
        # Imported here, not at start-up: the first request is not held for the gate's modules.
        from pytest_evalgate.session.gate import (
            evalgate_crash_verdict,
            evalgate_gate_suite,
            evalgate_store_failed_verdict,
        )

        self.gate_exit = 0
        if self.preload is not None:
            self.preload.join()  # never two threads importing the gate's modules at once
        failed = self.running.store_failure
        if failed is not None:  # the store cannot be read either: no decision, no traceback
            self._keep_verdict(evalgate_store_failed_verdict(*failed))
            return
        crash = evalgate_crash_verdict(self.crashed, self.selection)
        if crash is not None:
            self._keep_verdict(crash)
            return
        for path in sorted(self.selection):
            suite = self.evalgate_suite(path)  # an xdist controller loads its suites here
            assert suite is not None
            chosen = self.selection[path]
            self._keep_verdict(evalgate_gate_suite(self._gate_context(), suite, chosen))

    def _keep_verdict(self, verdict: EvalgateVerdict) -> None:
        # a suite after the first keeps a failed gate failed (only whether it failed counts)
        self.gate_exit = max(self.gate_exit, verdict.exit_status)
        self.summary.extend(verdict.summary)

    def _gate_context(self) -> EvalgateGateContext:
        from pytest_evalgate.session.gate import EvalgateGateContext

        return EvalgateGateContext(
            self.config, self.options, self.backend, self.running.verified, self.evalgate_say
        )

    def _shard_zero_perf(self) -> None:
        from pytest_evalgate.session.gate import evalgate_shard_zero_perf

        for path in sorted(self.selection):
            suite = self.suites[path]
            assert suite is not None
            evalgate_shard_zero_perf(self._gate_context(), suite)

    def evalgate_say(self, line: str) -> None:
        """A line on the terminal (unless ``-q -q``)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and self.config.get_verbosity() >= 0:
            reporter.write_line(line)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        reuse = self.worker_reuse if self._controller() else self.running.reuse
        reused = reuse.evalgate_line()  # a resumed run says so (issue 37)
        defects = self.running.defects.evalgate_lines()  # permanent per-case errors
        lines = [*([reused] if reused else []), *self.summary, *defects]
        if not lines:
            return
        terminalreporter.write_sep("=", "evalgate")
        for line in lines:
            terminalreporter.write_line(line)


def _refused(exc: EvalgateStorePathError) -> str:
    return f"evalgate: store refused: {exc}; nothing was requested"
