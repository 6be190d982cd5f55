"""The plugin object registered under ``--evalgate``: per-session state and the hooks that wire
the stages together (collection, the runner ahead of the item loop, the gate at the controller).

It lives apart from ``plugin.py`` (the pytest11 entry point) because pytest imports the entry point
in every run of every project that has pytest-evalgate installed; this module pulls in the
manifest's schemas, the runner and the store, so it is imported only when ``--evalgate`` is on.
It imports nothing that needs numpy or scipy before the first request: the gate
(``session_gate``), the judging stage's start (``session_judging``) and the perf, report and judge
modules are imported when a suite needs them.

Why one module of ~800 lines: its job is the plugin object, whose hooks and state pytest calls
back into (collection, selection, the runner's start, early or at the item loop, and stop, the
hand-over of records to items, an xdist worker's stop reaching the controller); what is not a
callback of that object has moved out (the gate, judging, ``early``, ``preload``, the budget's
share check). Splitting the object itself would spread one state over modules.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_evalgate.aggregate.suitecheck import evalgate_expectation
from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.client.budget import evalgate_check_shares, evalgate_share
from pytest_evalgate.endpoints.resolve import EvalgateEndpointPool, evalgate_check_endpoints
from pytest_evalgate.errors import EvalgateConfigError, EvalgateStorePathError
from pytest_evalgate.items import (
    EvalgateFile,
    EvalgateItem,
    EvalgateTally,
)
from pytest_evalgate.manifest.load import (
    EVALGATE_MANIFEST_NAME,
    EvalgateManifest,
    evalgate_load_manifest,
)
from pytest_evalgate.manifest.revision import EVALGATE_DEFINITION_ENV, evalgate_check_definition
from pytest_evalgate.manifest.tiers import (
    evalgate_tier_member,
    evalgate_tier_policy,
    evalgate_tier_spec,
)
from pytest_evalgate.policy.load import (
    evalgate_load_suite_policy,
    evalgate_pair,
    evalgate_policy_path,
)
from pytest_evalgate.runner.execution import (
    evalgate_code_scorer,
    evalgate_execution_settings,
    evalgate_prepare_sandbox,
)
from pytest_evalgate.runner.parent import (
    EvalgateLimits,
    EvalgateRunner,
    EvalgateSuiteRun,
    EvalgateWork,
)
from pytest_evalgate.runner.spawn import evalgate_discard_prespawned, evalgate_prespawn_child
from pytest_evalgate.scoring import evalgate_make_scorer, evalgate_threshold
from pytest_evalgate.session.early import evalgate_may_start_early
from pytest_evalgate.session.gcpause import evalgate_resume_gc
from pytest_evalgate.session.preload import evalgate_preload_gate
from pytest_evalgate.session.progress import EvalgateProgressLine, evalgate_progress_wanted
from pytest_evalgate.session.usage import evalgate_usage_errors
from pytest_evalgate.shard.plan import (
    EvalgateTopology,
    evalgate_manifest_plan,
    evalgate_parse_shard,
    evalgate_shard_of,
    evalgate_sub_shard,
    evalgate_worker_position,
)
from pytest_evalgate.shard.scheduler import EvalgateScheduling
from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateIdentity,
    EvalgateRecord,
    EvalgateSegmentWriter,
    EvalgateStoreBackend,
    evalgate_candidate_prefix,
    evalgate_check_store_folder,
    evalgate_open_store,
    evalgate_read_generation,
    evalgate_use_generation,
)
from pytest_evalgate.store.verified import EvalgateVerifiedSegments

if TYPE_CHECKING:  # judged suites only: imported when one runs (session_judging.py)
    from pytest_evalgate.endpoints.judge import EvalgateJudgeEndpoints
    from pytest_evalgate.runner.judging import EvalgateJudgeStage

_WORKER_STOP = "evalgate_stop"  # the workeroutput key: why an xdist worker stopped at collection
_LOG = logging.getLogger("pytest_evalgate")


class EvalgateSuite:
    """A loaded suite: manifest, scorer, threshold."""

    def __init__(
        self, config: pytest.Config, path: str, policy_path: str | None, gates: bool
    ) -> None:
        self.manifest = evalgate_load_manifest(path)
        # a pod rendered for another definition must not run this one (polyaxon render)
        expected = os.environ.get(EVALGATE_DEFINITION_ENV)
        evalgate_check_definition(path, self.manifest.definition_digest, expected)
        evaluator = self.manifest.evaluator
        options = dict(evaluator["options"])
        extra: dict[str, Any] = {}
        for found in config.hook.pytest_evalgate_scorers(config=config):
            extra.update(found or {})
        code = self.manifest.sandbox is not None  # scorer: code
        self.scorer = (
            evalgate_code_scorer(options, path)
            if code
            else evalgate_make_scorer(evaluator["scorer"], options, extra, path)
        )
        self.threshold = evalgate_threshold(options, path)
        tier = config.getoption("evalgate_tier")
        if tier is not None and policy_path is None:  # a tier's own policy, if it names one
            spec = evalgate_tier_spec(self.manifest.tiers, tier, path)
            policy_path = evalgate_tier_policy(spec, self.manifest.suite_dir)
        # The sandbox is probed once per process at collection, before any request.
        runs = not (config.getoption("evalgate_aggregate") or config.option.collectonly)
        sandbox = self.manifest.sandbox
        self.sandbox = evalgate_prepare_sandbox(sandbox) if sandbox is not None and runs else None
        self.execution: dict[str, Any] | None = None  # set by the plugin, which knows the share
        # The policy is checked at collection, before any request: a typo in gate.yaml must not
        # cost a whole run. A shard run without a gate.yaml may still run (it does not gate).
        found = evalgate_policy_path(self.manifest, policy_path)
        needed = gates or policy_path is not None or os.path.exists(found)
        self.policy = evalgate_load_suite_policy(self.manifest, policy_path) if needed else None


class EvalgatePlugin:
    """Per-session state and the hooks that wire the stages together."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.suites: dict[str, EvalgateSuite | None] = {}
        self.config_errors: list[EvalgateConfigError] = []
        self.writer_run = uuid.uuid4().hex
        self.topology = self._topology()
        self.store_root = str(config.getoption("evalgate_store") or config.getini("evalgate_store"))
        with evalgate_usage_errors():  # an S3 store is probed here, before any request
            self.backend = evalgate_open_store(self.store_root)
            _check_output_folders(config, self.backend)
        self.candidates = set(config.getoption("evalgate_candidate"))
        self.aggregate_only = bool(config.getoption("evalgate_aggregate"))
        self.runner: EvalgateRunner | None = None
        self.pool: EvalgateEndpointPool | None = None
        self.stored: dict[EvalgateIdentity, EvalgateRecord] = {}
        self.works: dict[Any, EvalgateWork] = {}
        self.selection: dict[str, dict[str, list[str]]] = {}
        self.crashed: list[str] = []
        self.worker_stop: dict[str, Any] | None = None  # xdist worker: why it stops at collection
        self.worker_stops: list[dict[str, Any]] = []  # xdist controller: why its workers stopped
        self.summary: list[str] = []
        self.gate_exit = 0
        self.tally = EvalgateTally()
        self.plans: dict[tuple[str, int], dict[str, int] | None] = {}
        self.progress_line: EvalgateProgressLine | None = None
        self.judging: EvalgateJudgeStage | None = None  # judged suites only (SPEC section 10)
        self.judge_endpoints: EvalgateJudgeEndpoints | None = None
        self.run_paths: dict[int, str] = {}
        self.verified = EvalgateVerifiedSegments()  # segments this process committed
        self.frozen = False  # gc.freeze() was called when the runner started
        self.stopped = False  # the runner, the judging stage and the endpoints were closed
        self.early: bool | None = None  # may the runner start while pytest collects (early.py)
        # runs prepared (generations claimed, stored records loaded) before the item loop: the
        # early start's suite, and an xdist worker's suites at the end of its collection
        self.ready_runs: dict[str, EvalgateSuiteRun] = {}
        self.preload: threading.Thread | None = None  # the gate's modules, imported during the run

    def _topology(self) -> EvalgateTopology:
        text = self.config.getoption("evalgate_shard")
        with evalgate_usage_errors():
            shard = None if text is None else evalgate_parse_shard(text)
        workerinput = getattr(self.config, "workerinput", None)
        index, count = evalgate_worker_position(workerinput)
        # Every process of one run must name the same generation: pods share the env var,
        # xdist workers the controller's testrunuid.
        default = str(workerinput["testrunuid"]) if workerinput else self.writer_run
        run_id = os.environ.get("PYTEST_EVALGATE_RUN_ID", default)
        return EvalgateTopology(shard, index, count, run_id)

    # -- collection -------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> None:
        # The runner child starts while pytest collects (its interpreter and imports overlap
        # collection); a run that needs no request stops it again in _stop.
        controller = self.config.pluginmanager.get_plugin("dsession") is not None
        if not (self.aggregate_only or self.config.option.collectonly or controller):
            evalgate_prespawn_child()

    def _prepare_runs(self, items: Sequence[Any]) -> None:
        """Prepare the run (generations claimed, stored records loaded) of every suite of
        ``items`` that is not in ``ready_runs`` yet."""
        paths = {item.suite_path for item in items if isinstance(item, EvalgateItem)}
        for path in sorted(paths - set(self.ready_runs)):
            self.ready_runs[path] = self._suite_run(self._loaded(path))

    def _prepare_worker_runs(self, items: list[Any]) -> None:
        """An xdist worker prepares its runs before it reports its collection, not at its item
        loop: a store refused there ended the worker with items the controller had scheduled to
        it (an INTERNALERROR that hid the reason)."""
        try:
            self._prepare_runs(items)
        except EvalgateStorePathError as exc:
            self.worker_stop = {"message": _refused(exc), "returncode": 1}
            raise pytest.UsageError(_refused(exc)) from exc

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.ready_runs and not self.stopped:
            # prepared (an early start, an xdist worker) and the item loop never came (collection
            # failed or was stopped): commit what was answered, end the child and the endpoints
            self._stop()
        evalgate_discard_prespawned()
        evalgate_resume_gc()  # a session that never started its runner (usage error, no work)
        if self.frozen:
            # What the gate and the summary made joins the frozen generation too: pytest's
            # clean-up then collects garbage five times over (unraisableexception), and the
            # interpreter once more at exit.
            gc.freeze()

    def pytest_collect_file(self, file_path: Any, parent: pytest.Collector) -> pytest.File | None:
        if file_path.name == EVALGATE_MANIFEST_NAME:
            return EvalgateFile.from_parent(parent, path=file_path)
        return None

    def evalgate_suite(self, path: str) -> EvalgateSuite | None:
        """The suite at ``path``, loaded once; a config error is kept for a usage error."""
        if path not in self.suites:
            try:
                suite = EvalgateSuite(self.config, path, self._policy_option(), self._gates())
                self._check_shares(suite.manifest)
                suite.execution = self._execution(suite)  # scorer: code: its sandbox share
                self._check_endpoints(suite.manifest)
                self.suites[path] = suite
            except EvalgateConfigError as exc:
                self.config_errors.append(exc)
                self.suites[path] = None
        return self.suites[path]

    def _check_shares(self, manifest: EvalgateManifest) -> None:
        # Every process that requests needs a slot of each run-wide concurrency budget: a budget
        # smaller than the processes is a usage error at collection, naming the file and key.
        if self.aggregate_only or self.config.option.collectonly:
            return
        totals = {"budget.max_concurrency": int(manifest.budget["max_concurrency"])}
        if manifest.judged is not None:
            judge_budget = manifest.judged.judge.budget
            totals["judge.budget.max_concurrency"] = int(judge_budget["max_concurrency"])
        if manifest.sandbox is not None:
            totals["sandbox.max_concurrency"] = int(manifest.sandbox["max_concurrency"])
        topology = self.topology
        evalgate_check_shares(manifest.path, totals, topology.parts, topology.processes)

    def _check_endpoints(self, manifest: EvalgateManifest) -> None:
        # Keys, URL overrides, simulator knobs and the load phase's prompts are checked at
        # collection, in the process that will use them: a run that would stop at its first
        # request (or at its load phase, after the eval phase committed) stops before any.
        if self.aggregate_only or self.config.option.collectonly:
            return
        names = [name for name in manifest.candidates if self.evalgate_wants_candidate(name)]
        evalgate_check_endpoints(manifest, names)
        if manifest.judged is not None:  # imported only then (numpy, the judge's modules)
            from pytest_evalgate.endpoints.judge import evalgate_check_judge_endpoint

            evalgate_check_judge_endpoint(manifest)
        if manifest.perf is not None:
            from pytest_evalgate.perf.phase import evalgate_perf_bodies  # a load phase only

            evalgate_perf_bodies(manifest)

    def evalgate_wants_candidate(self, name: str) -> bool:
        """Whether ``--evalgate-candidate`` selects ``name`` (all when not given)."""
        return not self.candidates or name in self.candidates

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[Any]) -> None:
        try:
            self._modify_items(config, items)
        except pytest.UsageError as exc:
            if hasattr(config, "workerinput"):
                # An xdist worker that stops here (a bad manifest, a refused store) reports an
                # empty collection (pytest reports it even when this hook raises), so nothing is
                # scheduled to it, and tells the controller why: the controller stops the session
                # with it (pytest_testnodedown, pytest_runtestloop) as a session without xdist.
                items.clear()
                stop = self.worker_stop or {"message": str(exc), "returncode": 4}
                config.workeroutput[_WORKER_STOP] = stop  # type: ignore[attr-defined]
            raise

    def _modify_items(self, config: pytest.Config, items: list[Any]) -> None:
        if self.config_errors:
            raise pytest.UsageError("\n".join(str(exc) for exc in self.config_errors))
        tier = config.getoption("evalgate_tier")
        if tier is not None:  # the cases outside --evalgate-tier (an unknown tier: usage error)
            _deselect(config, items, lambda path, case: self._case_in_tier(path, case, tier))
        if self.topology.sharded:
            _deselect(config, items, self._case_in_shard)
        worker = hasattr(config, "workerinput")
        if worker and not (self.aggregate_only or config.option.collectonly):
            self._prepare_worker_runs(items)

    def _case_in_tier(self, path: str, case_id: str, name: str) -> bool:
        manifest = self._loaded(path).manifest
        with evalgate_usage_errors():
            spec = evalgate_tier_spec(manifest.tiers, name, manifest.path)
        return evalgate_tier_member(spec, case_id)

    def _case_in_shard(self, path: str, case_id: str) -> bool:
        topology = self.topology
        return self._case_shard(path, case_id, topology.shard_count) == topology.shard_index

    def _case_shard(self, path: str, case_id: str, count: int) -> int:
        """The case's shard among ``count``: the manifest's shard plan if it names one."""
        key = (path, count)
        if key not in self.plans:
            with evalgate_usage_errors():
                self.plans[key] = evalgate_manifest_plan(self._loaded(path).manifest, count)
        return evalgate_shard_of(case_id, count, self.plans[key])

    def _loaded(self, path: str) -> EvalgateSuite:
        suite = self.suites[path]
        assert suite is not None  # loaded at collection (config errors stop the session first)
        return suite

    # -- running ----------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        if session.config.option.collectonly:
            return (yield)  # listing items sends no request, commits nothing, gates nothing
        items = [item for item in session.items if isinstance(item, EvalgateItem)]
        try:
            if items and not self.aggregate_only:
                self._start_or_exit(items)
            elif items:
                self._load_outcomes(items)  # aggregate mode: each item shows its stored record
            evalgate_resume_gc()  # at the latest here (gcpause.py): the item loop collects as usual
            result = yield
        finally:
            self._stop()
        if self.worker_stops:  # the xdist controller: what stopped its workers
            _stop_for_workers(self.worker_stops)
        if self.frozen:
            # What the item loop left (pytest's reports, mostly) joins the frozen generation
            # before the gate: a full collection during the gate traversed it (~90 ms at 10,000
            # items, on the tail after the last answer).
            gc.freeze()
        self._remember_selection(items)
        if hasattr(self.config, "workerinput"):
            self.config.workeroutput["evalgate"] = {"selection": self.selection}  # type: ignore[attr-defined]
        elif self._gates():
            self._gate(session)
        elif self.topology.shard is not None and self.topology.shard_index == 0:
            self._shard_zero_perf()
        session.testsfailed = self.tally.evalgate_failed_count(self.gate_exit, self._gates())
        return result

    def _gates(self) -> bool:
        return self.aggregate_only or not self.topology.sharded

    def _remember_selection(self, items: list[EvalgateItem]) -> None:
        for item in items:
            entry = self.selection.setdefault(item.suite_path, {"candidates": [], "cases": []})
            entry["candidates"].append(item.candidate)
            entry["cases"].append(item.case.case_id)
        for entry in self.selection.values():
            entry["candidates"] = sorted(set(entry["candidates"]))
            entry["cases"] = sorted(set(entry["cases"]))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        workeroutput = getattr(node, "workeroutput", {})
        stop = workeroutput.get(_WORKER_STOP)
        if stop is not None and stop not in self.worker_stops:
            self.worker_stops.append(stop)  # every worker reports the same manifest's
        output = workeroutput.get("evalgate")
        if output is None:
            self.crashed.append(str(getattr(node.gateway, "id", "worker")))
            return
        for path, entry in output["selection"].items():
            self.selection.setdefault(path, entry)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> EvalgateScheduling:
        from xdist.workermanage import parse_tx_spec_config

        numnodes = len(parse_tx_spec_config(config))
        return EvalgateScheduling(numnodes, self.topology.shard_count, log)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.tally.evalgate_count(report)

    def _gate(self, session: pytest.Session) -> None:
        # Imported here, not at start-up: the first request is not held for the gate's modules.
        from pytest_evalgate.session.gate import evalgate_session_gate

        evalgate_session_gate(self)

    def _shard_zero_perf(self) -> None:
        from pytest_evalgate.session.gate import evalgate_shard_zero_perf

        evalgate_shard_zero_perf(self)

    def evalgate_say(self, line: str) -> None:
        """A line on the terminal (unless ``-q -q``)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and self.config.get_verbosity() >= 0:
            reporter.write_line(line)

    def _policy_option(self) -> str | None:
        value = self.config.getoption("evalgate_policy") or self.config.getini("evalgate_policy")
        return str(value) if value else None

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.summary:
            return
        terminalreporter.write_sep("=", "evalgate")
        for line in self.summary:
            terminalreporter.write_line(line)

    def _start_or_exit(self, items: list[EvalgateItem]) -> None:
        try:
            self._start(items)
        except EvalgateStorePathError as exc:
            # nothing was requested or committed: the store would lead writes outside it
            pytest.exit(_refused(exc), returncode=1)

    def _start(self, items: list[EvalgateItem]) -> None:
        self._prepare_runs(items)  # those not prepared while pytest collected
        runs = dict(self.ready_runs)
        works = self._prefetch(self._works(items, runs))
        self._start_judging(runs)
        if self.runner is not None:
            self.runner.evalgate_confirm(works)  # the collected items, in their order
        elif works:
            self._launch(runs, works, early=False)
        else:
            return  # every identity is committed: no endpoint is started, nothing is requested
        if self._gates() and not hasattr(self.config, "workerinput"):
            self.preload = evalgate_preload_gate()
        self.progress_line = self._progress_line()
        # Items, works and the manifest live until the process ends: frozen, the collections of
        # the item loop, pytest's final one and the interpreter's at exit skip them (10,000
        # items: ~0.5 s less per run). Not unfrozen at cleanup, which gave that time back; the
        # price: an in-process nested session (pytester) keeps its cyclic garbage.
        gc.freeze()
        self.frozen = True
        evalgate_resume_gc()

    def evalgate_start_early(self, path: str) -> None:
        """Start the runner on the suite at ``path`` while pytest still collects its items, when
        this session will request exactly the suite's identities (``early.py``): the first
        requests go out ~0.4 s sooner at 10,000 items. ``_start`` confirms the works."""
        if self.early is None:
            self.early = self._may_start_early()
        suite = self.suites.get(path)
        if not self.early or suite is None or self.runner is not None:
            return
        self.early = False  # one suite only (early.py); a second one waits for the item loop
        if suite.manifest.judged is not None or not self._selection_loads(path):
            return  # judged: the judging stage starts with the item loop, sees every answer
        try:
            run = self._suite_run(suite)
            self.ready_runs[path] = run
            works = self._suite_works(path, run)
            if works:
                self._launch({path: run}, works, early=True)
                # The manifest, the works and every module imported so far live as long as the
                # process: frozen, the full collections while pytest builds the items do not
                # traverse them (two such passes, ~0.1 s, at 10,000 items).
                gc.freeze()
                self.frozen = True
                evalgate_resume_gc()
        except EvalgateStorePathError:
            # Not from inside collection (pytest would call it a collection error): the item
            # loop's start meets the same refusal and stops the run as before, nothing requested.
            self.ready_runs.pop(path, None)
            self.works.clear()

    def _selection_loads(self, path: str) -> bool:
        """Whether the tier and the shard plan load (if not, collection reports the usage error
        as before, and nothing starts early)."""
        manifest = self._loaded(path).manifest
        tier = self.config.getoption("evalgate_tier")
        if not manifest.cases:
            return False
        first = manifest.cases[0].case_id
        try:
            if tier is not None:
                self._case_in_tier(path, first, tier)
            self._case_shard(path, first, manifest.shards)
            if self.topology.sharded:
                self._case_in_shard(path, first)
        except pytest.UsageError:
            return False
        return True

    def _may_start_early(self) -> bool:
        controller = self.config.pluginmanager.get_plugin("dsession") is not None
        return not (controller or self.config_errors) and evalgate_may_start_early(self.config)

    def _suite_works(self, path: str, run: EvalgateSuiteRun) -> list[EvalgateWork]:
        """The works of every identity of the suite this process would collect and keep: the
        items' order (candidates, cases, repetitions), ``--evalgate-candidate``, the tier and
        this shard applied as ``pytest_collection_modifyitems`` applies them."""
        manifest = run.manifest
        tier = self.config.getoption("evalgate_tier")
        works = []
        for name in manifest.candidates:
            if not self.evalgate_wants_candidate(name):
                continue
            for case in manifest.cases:
                if tier is not None and not self._case_in_tier(path, case.case_id, tier):
                    continue
                shard = self._case_shard(path, case.case_id, manifest.shards)
                if self.topology.sharded and not self._case_in_shard(path, case.case_id):
                    continue
                for repetition in range(manifest.repetitions):
                    key = EvalgateIdentity(
                        manifest.dataset_revision, case.case_id, name, repetition
                    )
                    work = EvalgateWork(key, run, case, name, repetition, shard)
                    self.works[key] = work
                    if key not in self.stored:
                        works.append(work)
        return works

    def _launch(
        self, runs: Mapping[str, EvalgateSuiteRun], works: list[EvalgateWork], *, early: bool
    ) -> None:
        """Start the endpoints, the segment writer and the runner on ``works`` (``early``:
        while pytest still collects, with a larger first window)."""
        self.pool = EvalgateEndpointPool(self.config.getoption("evalgate_request_log"))
        for run in runs.values():
            run.endpoints.update(self._endpoints(run.manifest))
            for name, prefix in run.prefixes.items():  # verified as committed (store.table)
                expect = evalgate_expectation(run.manifest, name)
                self.verified.evalgate_watch(prefix, expect, run.manifest.canary)
        writer = EvalgateSegmentWriter(
            self.backend, self.topology.shard_dir, on_commit=self.verified.evalgate_on_commit
        )
        budget = next(iter(runs.values())).manifest.budget
        parts = self.topology.parts
        index = self.topology.part_index
        share = int(evalgate_share(budget["max_concurrency"], parts, index, integer=True))
        limits = EvalgateLimits(
            share,
            _share_or_none(budget["requests_per_second"], parts, index),
            _share_or_none(budget["tokens_per_minute"], parts, index),
        )
        # AIMD changes (logged by the runner's child): shown with --log-cli-level=INFO
        self.runner = EvalgateRunner(
            works,
            writer,
            limits,
            concurrency=share,
            early=early,
            log=_LOG.info,
            journal_store=self.store_root,
            on_record=self._on_record,
        )
        self.runner.evalgate_start()

    def _load_outcomes(self, items: list[EvalgateItem]) -> None:
        from pytest_evalgate.aggregate.items import evalgate_stored_outcomes  # aggregate mode only

        for path in sorted({item.suite_path for item in items}):
            suite = self.suites[path]
            assert suite is not None
            names = sorted({item.candidate for item in items if item.suite_path == path})
            with evalgate_usage_errors():  # a policy naming an unknown candidate
                pair = None if suite.policy is None else evalgate_pair(suite.manifest, suite.policy)
            self.stored.update(evalgate_stored_outcomes(self.backend, suite.manifest, names, pair))

    def _progress_line(self) -> EvalgateProgressLine | None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return None
        is_worker = hasattr(self.config, "workerinput")
        tty = bool(getattr(reporter, "isatty", False))
        wanted = evalgate_progress_wanted(tty, self.config.get_verbosity(), is_worker)
        return EvalgateProgressLine() if wanted else None

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        if self.runner is None or self.progress_line is None:
            return
        line = self.progress_line.evalgate_maybe_line(self.runner.progress)
        if line:
            self.evalgate_say(line)

    def _endpoints(self, manifest: EvalgateManifest) -> dict[str, EvalgateEndpoint]:
        assert self.pool is not None
        replica = self.topology.part_index
        return {
            c.name: self.pool.evalgate_endpoint(manifest, c, replica)
            for c in manifest.candidates.values()
        }

    def _suite_run(self, suite: EvalgateSuite) -> EvalgateSuiteRun:
        manifest = suite.manifest
        candidates = manifest.candidates.values()
        keys = {c.name: c.key for c in candidates}
        prefixes = {
            name: self._generation(
                evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
            )
            for name, key in keys.items()
        }
        for name, prefix in prefixes.items():
            self._load_stored(
                manifest.definition_digest, manifest.dataset_revision, keys[name], prefix
            )
        run = EvalgateSuiteRun(manifest, suite.scorer, suite.threshold, {}, prefixes, keys)
        run.sandbox = suite.execution
        return run

    def _execution(self, suite: EvalgateSuite) -> dict[str, Any] | None:
        manifest = suite.manifest
        if suite.sandbox is None or manifest.sandbox is None:
            return None
        return evalgate_execution_settings(
            suite.sandbox,
            manifest.sandbox,
            manifest.evaluator,
            hide=(os.path.abspath(self.store_root),),
            stage=manifest.path,
            parts=self.topology.parts,
            index=self.topology.part_index,
        )

    def _generation(self, candidate_prefix: str) -> str:
        # Resume into the newest generation; --evalgate-fresh claims a new one for this run.
        fresh = bool(self.config.getoption("evalgate_fresh"))
        try:
            return evalgate_use_generation(
                self.backend, candidate_prefix, self.topology.run_id if fresh else None
            )
        except OSError as exc:  # the store's folders cannot be made or written: refused
            reason = f"cannot be written ({exc.strerror or exc})"
            raise EvalgateStorePathError(self.store_root, reason) from exc

    def _load_stored(self, digest: str, revision: str, key: str, prefix: str) -> None:
        view = evalgate_read_generation(
            self.backend, prefix, EvalgateExpectation(digest, revision, key)
        )
        self.stored.update(view.results)

    def _works(
        self, items: list[EvalgateItem], runs: dict[str, EvalgateSuiteRun]
    ) -> list[EvalgateWork]:
        works = []
        for item in items:
            key = item.evalgate_key
            work = self.works.get(key)  # made already when the runner started early
            if work is None:
                run = runs[item.suite_path]
                shard = self._case_shard(item.suite_path, item.case.case_id, run.manifest.shards)
                work = EvalgateWork(key, run, item.case, item.candidate, item.repetition, shard)
                self.works[key] = work
            if key not in self.stored:
                works.append(work)
        return works

    def _prefetch(self, works: list[EvalgateWork]) -> list[EvalgateWork]:
        topology = self.topology
        if topology.worker_count <= 1:
            return works
        shards, count, index = topology.shard_count, topology.worker_count, topology.worker_index
        return [w for w in works if evalgate_sub_shard(w.case.case_id, shards, count) == index]

    def _stop(self) -> None:
        self.stopped = True
        try:
            if self.runner is not None:
                self.runner.evalgate_close()
        finally:
            evalgate_discard_prespawned()
            self._stop_judging()
            if self.pool is not None:
                self.pool.evalgate_close()

    def evalgate_record_for(self, item: EvalgateItem) -> Mapping[str, Any]:
        """The record of ``item``: from the store when committed before, else from the runner."""
        key = item.evalgate_key
        stored = self.stored.get(key)
        if stored is not None:
            return self._judged(item, stored)
        if self.aggregate_only or self.runner is None:
            return _missing(key)
        work = self.works[key]
        record = self.runner.evalgate_wait(work)
        return self._judged(item, record)

    # -- judging (SPEC section 10; the stage is runner/judging.py) ---------------------------

    def _start_judging(self, runs: dict[str, EvalgateSuiteRun]) -> None:
        judged = {path: run for path, run in runs.items() if run.manifest.judged is not None}
        self.run_paths = {id(run): path for path, run in runs.items()}
        if judged:  # imported only then: the judge's modules (numpy) cost every other run
            from pytest_evalgate.session.judging import evalgate_start_judging

            evalgate_start_judging(self, judged)

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
        finally:
            if self.judge_endpoints is not None:
                self.judge_endpoints.evalgate_close()


def _deselect(config: pytest.Config, items: list[Any], keeps: Callable[[str, str], bool]) -> None:
    """Deselect the identity items whose (suite path, case id) ``keeps`` refuses."""
    keep: list[Any] = []
    drop: list[Any] = []
    for item in items:
        mine = not isinstance(item, EvalgateItem) or keeps(item.suite_path, item.case.case_id)
        (keep if mine else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _refused(exc: EvalgateStorePathError) -> str:
    return f"evalgate: store refused: {exc}; nothing was requested"


def _stop_for_workers(stops: list[dict[str, Any]]) -> None:
    """Stop the xdist controller's session for what stopped its workers at collection: their
    usage errors (exit 4, every message), else a refused store (exit 1), as without xdist."""
    usage = [stop["message"] for stop in stops if stop["returncode"] == 4]
    if usage:
        raise pytest.UsageError("\n".join(usage))
    pytest.exit(stops[0]["message"], returncode=int(stops[0]["returncode"]))


def _share_or_none(total: float | None, parts: int, index: int) -> float | None:
    return None if total is None else float(evalgate_share(total, parts, index, integer=False))


def _missing(key: Any) -> dict[str, Any]:
    message = "no committed record in the store that verifies (aggregate mode sends no requests)"
    return {"error": {"category": "missing", "status": None, "message": message}, "attempts": 0}


def _check_output_folders(config: pytest.Config, backend: EvalgateStoreBackend) -> None:
    """Before any request: the report folder can be replaced whole, and no output folder
    inside a folder store leads out of it through a symlink (docs/security.md)."""
    report = config.getoption("evalgate_report")
    if report:
        evalgate_check_store_folder(backend, report, "--evalgate-report")
        from pytest_evalgate.report import evalgate_check_report_folder  # with a folder only

        evalgate_check_report_folder(report)
    junit = getattr(config.option, "xmlpath", None)
    if junit:
        folder = os.path.dirname(os.path.abspath(junit))
        evalgate_check_store_folder(backend, folder, "--junitxml")
