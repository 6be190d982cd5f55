"""The runner's pytest side: ``EvalgateRunner`` sends works to the child and seals what returns.

pytest runs one item at a time; an evaluation needs many requests in flight. ``EvalgateRunner``
(in the pytest process) starts a child process (``python -m pytest_evalgate.runner``, see
``runner.child``) that requests identities ahead of the item loop. The item loop calls
``evalgate_wait(work)`` and gets its own identity's sealed record.

Why a child process and not a thread: in one process the item loop (pytest's own ~0.4 ms of
Python per item) and the HTTP loop (~0.3 ms per request) take turns on one GIL, and every
syscall of the item loop (capture's dup2, terminal writes) waited for the loop thread to hand
the GIL back. ``bench/throughput.py`` measured the thread version at 31-48 % of the endpoint
bound; split over two processes each side gets its own core.

The split (only ``runner.wire`` messages cross, as JSON lines over the child's stdin and stdout):

- the child sends requests and returns call outcomes; it never scores, seals or writes;
- the pytest process scores (user scorers registered by conftest hooks exist only here), seals
  the record (``store.evalgate_record``) and hands it to ``EvalgateSegmentWriter``, whose
  write + fsync runs in the ``EvalgateCommitter`` thread, so a slow disk never stalls the item
  loop. A record is committed only after it is sealed; a SIGKILL loses only the uncommitted
  tail (and what the child had not reported yet).

Memory stays flat: the pytest process sends work ``j`` only when ``j < consumed + window``, so
at most ``window`` works are in the child or finished-but-unconsumed. An item asked for out of
order is sent (or moved to the front of the child's queue) at once, so the window can never
deadlock. Each (suite, candidate) has a stop channel: after a fatal error on it (401, 403, 400,
...) nothing else is sent to that candidate, and its other items get a ``not_requested``
stand-in.

Why one module of ~460 lines: ``EvalgateRunner`` is one state machine (the window, urgent works,
stop channels, the journal's replay, commits awaited, the early start's confirmation) over one
pipe; splitting it would pass its state between modules. What is not its state lives beside it:
the works, their requests and their seal (``runner.work``), the child's pipes
(``runner.child_pipe``), and the commits' thread (``runner.committer``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.client.redact import evalgate_redact
from pytest_evalgate.errors import EvalgateError
from pytest_evalgate.runner.child_pipe import EvalgateChildPipe
from pytest_evalgate.runner.choice import evalgate_choice_spec
from pytest_evalgate.runner.committer import EvalgateCommitter
from pytest_evalgate.runner.dialogue import evalgate_dialogue_spec
from pytest_evalgate.runner.execution import evalgate_execution_request
from pytest_evalgate.runner.wire import (
    EvalgateLimits,
    EvalgateToParent,
    EvalgateWireEndpoint,
    EvalgateWireHalted,
    EvalgateWireLog,
    EvalgateWireRequest,
    EvalgateWireResult,
    EvalgateWireSetup,
    EvalgateWireTools,
    EvalgateWireUrge,
    evalgate_decode_for_parent,
)
from pytest_evalgate.runner.work import (
    EvalgateWork,
    evalgate_estimate_tokens,
    evalgate_identity_header,
    evalgate_request_body,
)
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateOutcome,
    EvalgateRecord,
    EvalgateRecordError,
    EvalgateSegmentWriter,
    EvalgateStandIn,
    evalgate_not_requested,
    evalgate_store_failed,
)
from pytest_evalgate.store.journal import evalgate_journal_folder, evalgate_read_journal

__all__ = ["EvalgateLimits", "EvalgateProgress", "EvalgateRunner"]

_SEND_EVERY = 16  # top the window up every 16 consumed items: one pipe write, not sixteen
_POLL_S = 0.25  # how often a waiting item loop checks commits and the child's health
_MIN_POLL_S = 0.01

_HaltKey = tuple[int, str]  # (id of the suite run, candidate): one stop channel


@dataclass
class EvalgateProgress:
    """Counters the progress line reads (written by the item loop as results arrive)."""

    done: int = 0
    expected: int = 0
    in_flight: int = 0
    output_tokens: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)


class EvalgateRunner:
    """Runs ``works`` in order in a child process; ``evalgate_wait`` hands out sealed records.

    ``log`` receives the child's log lines (AIMD changes). All methods are for one thread.
    """

    def __init__(
        self,
        works: Sequence[EvalgateWork],
        writer: EvalgateSegmentWriter,
        limits: EvalgateLimits,
        *,
        concurrency: int,
        window: int | None = None,
        early: bool = False,
        log: Callable[[str], None] | None = None,
        journal_store: str | None = None,
        on_record: Callable[[EvalgateWork, EvalgateRecord], None] | None = None,
    ) -> None:
        self._works = list(works)
        self._journal_store = journal_store  # the resume journal's store (store.journal)
        self._replay: dict[tuple[str, str], EvalgateOutcome] = {}
        self.replayed = 0
        self._writer = writer
        self._limits = limits
        self._concurrency = max(1, concurrency)
        self._window = window or 4 * self._concurrency + 64
        # ``early``: started while pytest still collects (session.evalgate_start_early), so not
        # pumped until the item loop: its first window (16 per slot, ~0.8 s of requests at 64 in
        # flight against a 50 ms endpoint) is all the child gets to do meanwhile.
        # ``evalgate_confirm`` returns to the usual window, so a run stopped early (``-x``, a
        # KeyboardInterrupt) still finishes at most about one usual window of requests.
        self._loop_window = self._window
        if early:
            self._window = max(self._window, 16 * self._concurrency)
        self._log = log
        self._on_record = on_record  # the judging stage: a case is judged once answered
        self._next = 0  # the next position in ``_works`` to send
        self._consumed = 0
        self._sent: dict[EvalgateIdentity, int] = {}
        self._wire: list[EvalgateWork] = []  # wire index -> work
        self._answered = 0  # results and halts the child reported (of len(_wire) sent)
        self._urged: set[int] = set()
        self._endpoints: dict[EvalgateEndpoint, int] = {}
        self._halts: dict[_HaltKey, int] = {}  # stop channel -> its number on the wire
        self._boxes: dict[int, int] = {}  # id of a suite's tool fixture -> its number on the wire
        self._done: dict[EvalgateIdentity, EvalgateRecord | EvalgateStandIn] = {}
        self._stopped: dict[_HaltKey, str] = {}
        self._pipe = EvalgateChildPipe()
        self._failure: str | None = None
        self._committer = EvalgateCommitter(writer)
        # a record is handed to its item only once committed (docs/store.md): the batch it
        # was committed in, or in ``_unbatched`` while it waits in the writer
        self._batch: dict[EvalgateIdentity, int] = {}
        self._unbatched: dict[EvalgateIdentity, None] = {}
        self.store_failure: str | None = None  # the commit failure that stopped the requests
        self.lost = 0  # answers sealed but never committed, once the store failed
        self.progress = EvalgateProgress(expected=len(self._works))

    # -- the item loop's side ---------------------------------------------------------------

    def evalgate_start(self) -> None:
        """Start the child and send it the setup and the first window of works."""
        self._pipe.evalgate_start()
        self._committer.start()
        self._replay = self._journaled()
        setup = EvalgateWireSetup(
            self._concurrency, self._limits, self._journal_store, self._writer.writer
        )
        self._pipe.evalgate_send(setup)
        self._fill()
        self._pipe.evalgate_flush()

    def evalgate_confirm(self, works: Sequence[EvalgateWork]) -> None:
        """Run ``works`` (the collected items' works, in their order) instead of the works the
        runner started with (``session.evalgate_start_early`` starts it on the suite's own
        while pytest collects). A work sent before and not among ``works`` is still answered,
        sealed and committed, never waited for; one not sent yet is never sent."""
        self._works = list(works)
        self._next = 0
        self._window = self._loop_window
        wanted = {work.key for work in self._works}
        self.progress.expected = len(self._works) + sum(key not in wanted for key in self._sent)
        self._fill()
        self._pipe.evalgate_flush()

    def evalgate_wait(self, work: EvalgateWork) -> EvalgateRecord | EvalgateStandIn:
        """Block until ``work``'s record is ready; returns the sealed record, or the
        ``not_requested`` stand-in when its candidate was stopped."""
        key = work.key
        self._pump(0.0)
        if key not in self._done and self.store_failure is None:
            self._urge(work)
        while key not in self._done and self.store_failure is None:
            self._check_alive()
            self._pump(self._writer_timeout())
        if not self._await_commit(key):
            self._done.pop(key, None)
            self._consumed += 1
            return evalgate_store_failed(work.candidate, self.store_failure or "")
        record = self._done.pop(key)
        self._consumed += 1
        if self._consumed % _SEND_EVERY == 0:
            self._fill()
        self._pipe.evalgate_flush()
        return record

    def evalgate_urge(self, work: EvalgateWork) -> None:
        """Send ``work`` now (or move it to the front) without waiting for it: a pair that the
        judging stage waits for needs the other side's answer ahead of the item loop."""
        if work.key not in self._done:
            self._urge(work)

    def evalgate_pump(self, timeout: float = 0.0) -> None:
        """Read what the child reported, waiting up to ``timeout`` for it (the judging stage's
        loop: 0 while its own child has work in flight)."""
        self._pump(timeout)

    def evalgate_stopped_reason(self, work: EvalgateWork) -> str | None:
        """Why ``work``'s candidate was stopped (a fatal endpoint error), or None."""
        return self._stopped.get(_halt_key(work))

    def evalgate_close(self) -> None:
        """Let the child finish what it was sent, seal and commit the tail, stop the child."""
        try:
            self._drain()
        finally:
            self._reap()
            self._committer.evalgate_stop(raise_failure=False)
            self._store_ok()  # a failed commit, the tail's too, is the session's verdict
        if self._failure is not None and self.store_failure is None:
            raise EvalgateError(f"evalgate runner failed: {self._failure}")

    def _drain(self) -> None:
        if self.store_failure is not None or not self._pipe.evalgate_close_input():
            return
        while not self._pipe.eof:
            self._pump(self._writer_timeout())
        self._commit_due()

    def _reap(self) -> None:
        failure = self._pipe.evalgate_reap()
        if failure is not None and self._failure is None:
            self._failure = failure

    def _check_alive(self) -> None:
        if self._failure is not None or self._pipe.eof:
            reason = self._failure or f"child process ended: {self._pipe.evalgate_stderr_tail()}"
            raise EvalgateError(f"evalgate runner stopped: {reason}")

    def _writer_timeout(self) -> float:
        # Never 0: a waiting item loop sleeps in select() instead of spinning.
        return min(_POLL_S, max(_MIN_POLL_S, self._writer.max_age_s / 2))

    # -- sending ----------------------------------------------------------------------------

    def _fill(self) -> None:
        limit = min(len(self._works), self._consumed + self._window)
        while self._next < limit:
            work = self._works[self._next]
            self._next += 1
            if work.key not in self._sent:
                self._send(work, urgent=False)

    def _urge(self, work: EvalgateWork) -> None:
        index = self._sent.get(work.key)
        if index is None:
            self._send(work, urgent=True)
        elif index not in self._urged:
            self._urged.add(index)
            self._pipe.evalgate_send(EvalgateWireUrge(index))
        self._pipe.evalgate_flush()

    def _journaled(self) -> dict[tuple[str, str], EvalgateOutcome]:
        # Answers a killed run journaled but did not commit: replayed instead of requested.
        if self._journal_store is None:
            return {}
        found = {}
        for prefix in {work.suite.prefixes[work.candidate] for work in self._works}:
            for header, outcome in evalgate_read_journal(self._writer.backend, prefix).items():
                found[(prefix, header)] = outcome
        return found

    def _replayed(self, work: EvalgateWork) -> bool:
        """Seal and commit ``work`` from the journal (each line once); False if not there."""
        prefix = work.suite.prefixes[work.candidate]
        outcome = self._replay.pop((prefix, evalgate_identity_header(work)), None)
        if outcome is None:
            return False
        self._sent[work.key] = -1  # never sent: answered by a run before this one
        record, line = work.evalgate_seal_line(outcome, self._writer.writer)
        self._writer.evalgate_add(prefix, record, line)
        self._unbatched[work.key] = None
        self._count(None, record["usage"]["completion_tokens"])
        self._done[work.key] = record
        self.replayed += 1
        return True

    def _journal_folder(self, work: EvalgateWork) -> str | None:
        # A code suite's answer is not final until the sandbox ran it in the child, so it is
        # neither journaled nor replayed: a rerun asks again (docs/decisions.md).
        if self._journal_store is None or work.suite.sandbox is not None:
            return None
        prefix = work.suite.prefixes[work.candidate]
        return evalgate_journal_folder(prefix, self._writer.shard_dir)

    def _send(self, work: EvalgateWork, *, urgent: bool) -> None:
        if self._replayed(work):
            return
        index = len(self._wire)
        self._wire.append(work)
        self._sent[work.key] = index
        request = EvalgateWireRequest(
            index,
            self._endpoint_index(work.suite.endpoints[work.candidate]),
            self._halt_index(work),
            evalgate_request_body(work),
            evalgate_identity_header(work),
            evalgate_estimate_tokens(work),
            urgent,
            self._journal_folder(work),
            evalgate_execution_request(work.suite.sandbox, work.case.target),
            self._dialogue(work),
        )
        self._pipe.evalgate_send(request)

    def _dialogue(self, work: EvalgateWork) -> dict[str, Any] | None:
        if work.case.choices:  # multiple choice (SPEC 18): None for method: generate
            max_tokens = work.suite.choice_max_tokens.get(work.candidate, 0)
            return evalgate_choice_spec(work.case, work.suite.manifest, max_tokens)
        spec = evalgate_dialogue_spec(work.case, work.suite.manifest)
        fixture = work.suite.tools
        if spec is not None and fixture is not None:
            index = self._boxes.get(id(fixture))
            if index is None:  # declared on the wire before the first work that runs it
                index = self._boxes[id(fixture)] = len(self._boxes)
                self._pipe.evalgate_send(EvalgateWireTools(index, fixture))
            spec["box"] = index
        return spec

    def _endpoint_index(self, endpoint: EvalgateEndpoint) -> int:
        # Declared on the wire before the first work that names it.
        index = self._endpoints.get(endpoint)
        if index is None:
            index = self._endpoints[endpoint] = len(self._endpoints)
            self._pipe.evalgate_send(EvalgateWireEndpoint(index, endpoint))
        return index

    def _halt_index(self, work: EvalgateWork) -> int:
        return self._halts.setdefault(_halt_key(work), len(self._halts))

    # -- receiving --------------------------------------------------------------------------

    def _pump(self, timeout: float) -> None:
        """Read what the child reported (waiting up to ``timeout`` for the first byte)."""
        pipe = self._pipe
        if not pipe.evalgate_readable():
            return
        if timeout > 0 and not pipe.evalgate_wait(timeout):
            self._commit_due()
            return
        self._read(pipe.evalgate_read())
        self._commit_due()

    def _read(self, lines: list[bytes]) -> None:
        for line in lines:
            try:
                self._receive(evalgate_decode_for_parent(line))
            except Exception as exc:  # a scorer that raised: stop, never leave items waiting
                self._failure = self._failure or f"a result could not be scored: {exc}"

    def _receive(self, message: EvalgateToParent) -> None:
        if isinstance(message, EvalgateWireResult):
            self._result(message)
        elif isinstance(message, EvalgateWireHalted):
            self._halted(message)
        elif isinstance(message, EvalgateWireLog):
            if self._log is not None:
                self._log(evalgate_redact(message.line))
        else:
            self._failure = message.reason

    def _result(self, message: EvalgateWireResult) -> None:
        work = self._wire[message.index]
        self._answered += 1
        self.progress.in_flight = message.in_flight
        error = message.outcome["error"]
        if message.fatal and error is not None:
            self._stopped.setdefault(_halt_key(work), f"{error['category']}: {error['message']}")
        record, line = work.evalgate_seal_line(message.outcome, self._writer.writer)
        self._writer.evalgate_add(work.suite.prefixes[work.candidate], record, line)
        self._unbatched[work.key] = None
        self._count(error, record["usage"]["completion_tokens"])
        self._done[work.key] = record
        if self._on_record is not None:
            self._on_record(work, record)

    def _halted(self, message: EvalgateWireHalted) -> None:
        work = self._wire[message.index]
        self._answered += 1
        self.progress.in_flight = message.in_flight
        stand_in = evalgate_not_requested(work.candidate, message.reason)
        self._count(stand_in["error"], None)
        self._done[work.key] = stand_in

    def _commit_due(self) -> None:
        if self._store_ok() and self._writer.evalgate_due():
            self._take()

    def _take(self) -> None:
        number = self._committer.evalgate_put(self._writer.evalgate_take())
        for key in self._unbatched:
            self._batch[key] = number
        self._unbatched.clear()

    def _await_commit(self, key: EvalgateIdentity) -> bool:
        """Wait until ``key``'s record (if it has one to commit) is committed; False when
        the store failed first (the record will never be committed)."""
        while self._store_ok():
            number = self._batch.get(key)
            if number is None and key not in self._unbatched:
                return True  # a stand-in, or committed before
            if number is not None and self._committer.evalgate_wait(number, _MIN_POLL_S):
                del self._batch[key]
                return True
            if number is None and (
                self._pipe.eof or len(self._unbatched) >= self._window // 2 or self._idle()
            ):
                # the child is done, half the window waits for this commit, or no answer is
                # on its way (every work sent is answered: the run's tail, or a window the
                # blocked item loop cannot refill): commit now rather than wait for the
                # writer's age, which kept each such item (and the gate) waiting 0.5 s
                self._take()
            elif number is None:
                self._pump(self._writer_timeout())
        return False

    def _idle(self) -> bool:
        """Every work sent so far is answered: no answer in flight could join the batch."""
        return self._answered == len(self._wire)

    def _store_ok(self) -> bool:
        """False once a commit failed; the first time, stop requesting (docs/store.md)."""
        failure = self._committer.failure
        if failure is None:
            return True
        if self.store_failure is None:
            self.store_failure = str(failure)
            self._next = len(self._works)  # nothing more is sent
            self._pipe.evalgate_kill()  # our own child: what it was still asking cannot be kept
        self.lost = self._writer.sealed - self._writer.committed
        return False

    def _count(self, error: EvalgateRecordError | None, completion_tokens: int | None) -> None:
        self.progress.done += 1
        if error is not None:
            self.progress.errors[error["category"]] += 1
        if isinstance(completion_tokens, int):
            self.progress.output_tokens += completion_tokens


def _halt_key(work: EvalgateWork) -> _HaltKey:
    return (id(work.suite), work.candidate)
