"""The judging stage (SPEC section 10): answers in, judgment records out, pipelined per case.

``EvalgateJudgeStage`` lives in the pytest process beside ``EvalgateRunner``. It is fed every
generation record as it exists (stored ones at the start, fresh ones the moment the runner
seals them: ``evalgate_answer``) and sends a judge request as soon as a case's answers exist:
pointwise one per answer; pairwise two per (case, repetition), candidate first and baseline
first, once both answers of that repetition exist. No barrier: the first case is judged while
later cases are still being generated.

Judge requests run in a child process of their own (``python -m pytest_evalgate.runner``, the
same program as generation's), so the judge's budget (``judge.budget``) has its own limiter,
counted apart from the candidates', with the same retry rules and error taxonomy. The child
returns the judge's raw text; this process parses it (``judge.parse``), seals the judgment
record (``store.judgments``) and commits it through its own ``EvalgateCommitter``: atomic
segments, so a SIGKILL loses only what was in flight and a rerun judges only what is missing.

A stored judgment of the same answers under the same judge key is reused, never requested again;
an errored one (``judge_<category>``, ``judge_unparseable``) is requested again. A judgment of
answers that are no longer the stored ones (a regenerated identity) is stale and re-judged. A
changed judge key is a new folder: every stored answer of every candidate is judged again, and
the candidates' endpoints see no request at all.

Beside the stage: the suite it judges and its golden set's requests (``runner.judge_suite``),
one judge request and the judgment record its answer makes (``runner.judge_work``), the judge's
child as this process drives it (``runner.judge_child``) and what an item of a judged suite sees
(``runner.judge_views``, the session's).

Why one module of ~360 lines: ``EvalgateJudgeStage`` is one state machine (answers arriving,
pairs completing, judge works in flight, stored judgments reused, the golden set) over one child
and one committer; what is not its state has moved to the four modules above.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.client.redact import evalgate_redact
from pytest_evalgate.errors import EvalgateError
from pytest_evalgate.judge.parse import EVALGATE_JUDGE_UNPARSEABLE
from pytest_evalgate.judge.prompt import EVALGATE_JUDGE_ORDERS
from pytest_evalgate.runner.committer import EvalgateCommitter
from pytest_evalgate.runner.judge_child import EvalgateJudgeChild
from pytest_evalgate.runner.judge_suite import (
    EvalgateJudgeSuite,
    evalgate_golden_requests,
    evalgate_golden_rows,
)
from pytest_evalgate.runner.judge_work import (
    EvalgateAnswers,
    EvalgateJudgeWork,
    evalgate_judge_request,
    evalgate_judge_stand_in,
    evalgate_judgment_of,
    evalgate_pairwise_works,
    evalgate_pointwise_work,
)
from pytest_evalgate.runner.wire import (
    EvalgateLimits,
    EvalgateToParent,
    EvalgateWireEndpoint,
    EvalgateWireHalted,
    EvalgateWireLog,
    EvalgateWireResult,
    EvalgateWireUrge,
)
from pytest_evalgate.store import EvalgateIdentity, EvalgateSegmentWriter
from pytest_evalgate.store.judgments import EVALGATE_GOLDEN_ORDER, EvalgateJudgmentKey

_POLL_S = 0.02


@dataclass
class EvalgateJudgeProgress:
    """What the stage did: requests sent, reused judgments, results by outcome."""

    sent: int = 0
    reused: int = 0
    done: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    # case id -> candidates whose judgment errored the same way as the stored one, at
    # temperature 0: it will go on doing so (session.defects names the case)
    repeated: dict[str, list[str]] = field(default_factory=dict)


class EvalgateJudgeStage:
    """Judges answers as they exist, in a child process of its own, inside ``judge.budget``.

    ``need(identity)`` asks the generation side to hurry an answer a pair waits for (False: it
    will never come); ``pump(timeout)`` lets the generation side read what its child reported
    while an item waits here (it may block up to ``timeout`` when no judge request is in
    flight). All methods are for one thread.
    """

    def __init__(
        self,
        writer: EvalgateSegmentWriter,
        limits: EvalgateLimits,
        *,
        concurrency: int,
        need: Callable[[EvalgateIdentity], bool] | None = None,
        pump: Callable[[float], None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._writer = writer
        self._limits = limits
        self._concurrency = max(1, concurrency)
        self._need = need or (lambda identity: False)
        self._pump_other = pump or (lambda timeout: None)
        self._log = log
        self._suites: dict[str, EvalgateJudgeSuite] = {}
        self._answers: dict[tuple[str, EvalgateIdentity], EvalgateAnswers] = {}
        self._judgments: dict[tuple[str, EvalgateJudgmentKey], dict[str, Any]] = {}
        self._pending: dict[tuple[str, EvalgateJudgmentKey], int] = {}
        self._before: dict[tuple[str, EvalgateJudgmentKey], str] = {}  # stored error categories
        self._wire: list[EvalgateJudgeWork] = []
        self._endpoints: dict[EvalgateEndpoint, int] = {}
        self._child: EvalgateJudgeChild | None = None
        self._committer = EvalgateCommitter(writer)
        self._started = False
        self.progress = EvalgateJudgeProgress()

    # -- feeding ----------------------------------------------------------------------------

    def evalgate_add_suite(self, path: str, suite: EvalgateJudgeSuite) -> None:
        """Judge the suite at ``path`` (its stored judgments are reused)."""
        self._suites[path] = suite

    def evalgate_judges(self, path: str) -> bool:
        """Whether the suite at ``path`` is judged here."""
        return path in self._suites

    def evalgate_answer(self, path: str, record: EvalgateAnswers) -> None:
        """A generation record of the suite at ``path`` exists: judge what it completes."""
        suite = self._suites.get(path)
        if suite is None:
            return
        identity = EvalgateIdentity.evalgate_from(record["identity"])
        self._answers[(path, identity)] = record
        if record.get("error") is not None:
            return
        if suite.pair is None:
            self._pointwise(path, suite, identity, record)
        else:
            self._pairwise(path, suite, identity)
        if self._child is not None:
            self._child.evalgate_flush()  # judged now, not at the item loop's next wait

    def _pointwise(
        self,
        path: str,
        suite: EvalgateJudgeSuite,
        identity: EvalgateIdentity,
        record: EvalgateAnswers,
    ) -> None:
        self._submit(evalgate_pointwise_work(path, suite, identity, record), path)

    def _pairwise(self, path: str, suite: EvalgateJudgeSuite, identity: EvalgateIdentity) -> None:
        assert suite.pair is not None
        candidate, baseline = suite.pair
        if identity.candidate not in suite.pair:
            return
        mine = identity._replace(candidate=candidate)
        theirs = identity._replace(candidate=baseline)
        first, second = self._answers.get((path, mine)), self._answers.get((path, theirs))
        if first is None or second is None or first.get("error") or second.get("error"):
            return
        for work in evalgate_pairwise_works(path, suite, mine, first, second):
            self._submit(work, path)

    def evalgate_golden(self, path: str) -> int:
        """Judge the suite's golden set with the pinned judge (calibration, SPEC section 10):
        one request per row not judged before; returns how many rows there are."""
        suite = self._suites[path]
        for key, answers, messages in evalgate_golden_requests(suite):
            self._submit(EvalgateJudgeWork(path, suite, key, answers, None, messages), path)
        if self._child is not None:
            self._child.evalgate_flush()
        return len(evalgate_golden_rows(suite))

    def _submit(self, work: EvalgateJudgeWork, path: str) -> None:
        slot = (path, work.key)
        if slot in self._judgments or slot in self._pending:
            return
        stored = work.suite.stored.evalgate_current(work.key, work.answers)
        if stored is not None and stored["error"] is None:
            self._judgments[slot] = stored
            self.progress.reused += 1
            return
        if stored is not None:
            self._before[slot] = str(stored["error"]["category"])
        self._send(work, slot)

    # -- sending ----------------------------------------------------------------------------

    def _send(self, work: EvalgateJudgeWork, slot: tuple[str, EvalgateJudgmentKey]) -> None:
        endpoint = work.suite.endpoint
        if endpoint is None:
            reason = "aggregate mode sends no judge request"
            self._judgments[slot] = evalgate_judge_stand_in("missing", reason)
            return
        child = self._ensure_child()
        index = len(self._wire)
        self._wire.append(work)
        self._pending[slot] = index
        halt = self._endpoint_index(child, endpoint)
        child.evalgate_send(evalgate_judge_request(work, index, halt))
        self.progress.sent += 1

    def _endpoint_index(self, child: EvalgateJudgeChild, endpoint: EvalgateEndpoint) -> int:
        index = self._endpoints.get(endpoint)
        if index is None:
            index = self._endpoints[endpoint] = len(self._endpoints)
            child.evalgate_send(EvalgateWireEndpoint(index, endpoint))
        return index

    def _ensure_child(self) -> EvalgateJudgeChild:
        if self._child is None:
            self._child = EvalgateJudgeChild(self._concurrency, self._limits)
            self._committer.start()
            self._started = True
        return self._child

    # -- the item loop's side ---------------------------------------------------------------

    def evalgate_judgments(
        self, path: str, identity: EvalgateIdentity
    ) -> list[Mapping[str, Any]] | Mapping[str, Any]:
        """Block until ``identity``'s judgments exist; returns them (pointwise: one; pairwise:
        the two orders), or a stand-in ``{"error": ...}`` when they cannot exist."""
        suite = self._suites[path]
        keys = self._keys(suite, identity)
        if isinstance(keys, dict):
            return keys
        slots = [(path, key) for key in keys]
        self._urge(slots)
        while not all(slot in self._judgments for slot in slots):
            missing = self._missing_answer(path, suite, identity)
            if missing is not None:
                return missing
            self._wait()
        return [self._judgments[slot] for slot in slots]

    def _keys(
        self, suite: EvalgateJudgeSuite, identity: EvalgateIdentity
    ) -> list[EvalgateJudgmentKey] | dict[str, Any]:
        if suite.pair is None:
            return [EvalgateJudgmentKey(*identity, None)]
        candidate = suite.pair[0]
        if identity.candidate != candidate:
            return {}  # the baseline's items show its answer; the pair is the candidate's
        return [EvalgateJudgmentKey(*identity, order) for order in EVALGATE_JUDGE_ORDERS]

    def _missing_answer(
        self, path: str, suite: EvalgateJudgeSuite, identity: EvalgateIdentity
    ) -> dict[str, Any] | None:
        if suite.pair is None:
            return None
        other = identity._replace(candidate=suite.pair[1])
        record = self._answers.get((path, other))
        if record is None:
            if self._need(other):
                return None
            reason = f"no answer of the baseline for {other[1]}"
            return evalgate_judge_stand_in("judge_no_baseline", reason)
        error = record.get("error")
        if error is not None:
            reason = f"the baseline's answer errored ({error['category']})"
            return evalgate_judge_stand_in("judge_no_baseline", reason)
        return None

    def _urge(self, slots: list[tuple[str, EvalgateJudgmentKey]]) -> None:
        child = self._child
        if child is None:
            return
        for slot in slots:
            index = self._pending.get(slot)
            if index is not None:
                child.evalgate_send(EvalgateWireUrge(index))
        child.evalgate_flush()

    def _wait(self) -> None:
        child = self._child
        # Nothing in flight here: only the generation side can bring answers, so wait on it.
        self._pump_other(_POLL_S if child is None or not self._pending else 0.0)
        if child is None:
            return
        child.evalgate_flush()
        for message in child.evalgate_pump(_POLL_S):
            self._receive(message)
        self._commit_due()

    def _receive(self, message: EvalgateToParent) -> None:
        if isinstance(message, EvalgateWireResult):
            self._result(message)
        elif isinstance(message, EvalgateWireHalted):
            work = self._wire[message.index]
            slot = (work.path, work.key)
            self._pending.pop(slot, None)
            self._judgments[slot] = evalgate_judge_stand_in("judge_not_requested", message.reason)
        elif isinstance(message, EvalgateWireLog):
            if self._log is not None:
                self._log(f"judge: {evalgate_redact(message.line)}")
        else:
            raise EvalgateError(f"evalgate judge runner failed: {message.reason}")

    def _result(self, message: EvalgateWireResult) -> None:
        work = self._wire[message.index]
        record, verdict = evalgate_judgment_of(work, message.outcome)
        self._writer.evalgate_add(work.suite.prefix, record)
        slot = (work.path, work.key)
        self._note_repeat(work, slot, verdict)
        self._pending.pop(slot, None)
        self._judgments[slot] = record
        self._count(record)

    def _note_repeat(
        self,
        work: EvalgateJudgeWork,
        slot: tuple[str, EvalgateJudgmentKey],
        verdict: Mapping[str, Any],
    ) -> None:
        error = verdict["error"]
        if error is None or error["category"] != EVALGATE_JUDGE_UNPARSEABLE:
            return
        same = self._before.get(slot) == error["category"]
        greedy = work.suite.judged.judge.temperature == 0
        if same and greedy and work.key.order != EVALGATE_GOLDEN_ORDER:
            found = self.progress.repeated.setdefault(work.key.case_id, [])
            if work.key.candidate not in found:
                found.append(work.key.candidate)

    def _count(self, record: Mapping[str, Any]) -> None:
        self.progress.done += 1
        error = record["error"]
        if error is not None:
            category = str(error["category"])
            self.progress.errors[category] = self.progress.errors.get(category, 0) + 1

    def _commit_due(self) -> None:
        if self._started and self._writer.evalgate_due():
            self._committer.evalgate_put(self._writer.evalgate_take())

    def evalgate_drain(self) -> None:
        """Wait for every judgment sent so far (the item loop is over, or a CLI is done)."""
        while self._pending:
            self._wait()

    def evalgate_close(self) -> None:
        """Finish what was sent, commit the tail, stop the child."""
        try:
            if self._child is not None:
                self.evalgate_drain()
        finally:
            if self._child is not None:
                self._child.evalgate_close()
            if self._started:
                self._committer.evalgate_stop()
