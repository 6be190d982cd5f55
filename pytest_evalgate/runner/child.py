"""The runner's child process: works from stdin, requests under the limiter, outcomes to stdout.

It owns an asyncio loop, the ``EvalgateLimiter`` (this process's share of ``budget``) and a
fixed pool of worker coroutines calling endpoints through ``EvalgateClient``; it talks to the
pytest process only in ``runner.wire`` messages. It never scores, seals or commits records (it
only journals answers, ``runner.journal``, before reporting them), and it imports nothing of
the parent side (no manifest, scoring or pytest; tests/test_layering.py).

The first request on each stop channel (one per suite and candidate) goes alone: if it ends in
a fatal error (401, 403, 400, ...) the channel is closed, and every later work on it is answered
``halted`` without a request. While it is out, the child opens the connections the works queued
behind it will need (``EvalgateClient.evalgate_warm``; no request on them), so the first wave
does not pay its connects after the probe.

The child never outlives the pytest process: when its stdin reaches end-of-file without a
``close`` message (the parent died, even by SIGKILL), it exits at once (status 3) without
another request. A bug reports itself with a ``fail`` message, then exit status 1. The process
around this loop (its event loop, pipes, profiling and clean exit) is ``runner.child_process``'s.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pytest_evalgate.choice.loop import evalgate_run_choices
from pytest_evalgate.client import (
    EvalgateCallResult,
    EvalgateClient,
    EvalgateEndpoint,
)
from pytest_evalgate.client.budget import EvalgateLimiter
from pytest_evalgate.client.checks import EvalgateBadRequests
from pytest_evalgate.client.redact import evalgate_add_secret, evalgate_redact
from pytest_evalgate.dialogue.loop import evalgate_run_dialogue
from pytest_evalgate.dialogue.toolrun import EvalgateToolBox
from pytest_evalgate.errors import EvalgateWireError
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.runner.execution import EvalgateExecutionStage
from pytest_evalgate.runner.journal import EvalgateJournalWriter
from pytest_evalgate.runner.wire import (
    EvalgateToChild,
    EvalgateToParent,
    EvalgateWireClose,
    EvalgateWireEndpoint,
    EvalgateWireFailure,
    EvalgateWireHalted,
    EvalgateWireLog,
    EvalgateWireRequest,
    EvalgateWireResult,
    EvalgateWireSetup,
    EvalgateWireTools,
    EvalgateWireUrge,
    evalgate_decode_for_child,
    evalgate_encode,
    evalgate_encode_result,
)
from pytest_evalgate.store.journal import evalgate_journal_line_of
from pytest_evalgate.store.location import evalgate_open_store
from pytest_evalgate.store.records import EvalgateOutcome, EvalgateUsage

_ORPHANED_EXIT = 3  # the child's exit status when the pytest process went away


class EvalgateChild:
    """The child's loop: works from stdin, requests under the limiter, outcomes to stdout."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._out = writer
        self._lines: list[bytes] = []
        self._endpoints: dict[int, EvalgateEndpoint] = {}
        self._works: dict[int, EvalgateWireRequest] = {}  # sent, not yet dispatched
        self._queue: deque[int] = deque()
        self._urgent: deque[int] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        self._closing = False
        self._halted: dict[int, str] = {}  # closed stop channel -> why
        self._probes: dict[int, asyncio.Future[None]] = {}
        self._bad_requests = EvalgateBadRequests()  # a 400 repeated across identities stops
        self._usage_flagged: set[int] = set()  # stop channels whose implausible usage was logged
        self._in_flight = 0
        self._concurrency = 1
        self._warming: set[asyncio.Task[int]] = set()
        self._journal: EvalgateJournalWriter | None = None
        self._stage = EvalgateExecutionStage(self._emit, self.evalgate_die)  # scorer: code
        self._boxes: dict[int, EvalgateToolBox] = {}  # tool fixtures by their wire number

    async def evalgate_run(self, reader: asyncio.StreamReader) -> None:
        """Serve until stdin ends: after ``close`` finish every work; without it, exit now."""
        first = await reader.readline()
        if not first:  # stdin ended before any setup: a prespawned child nobody took
            os._exit(_ORPHANED_EXIT)
        setup = _setup(evalgate_decode_for_child(first))
        limiter = EvalgateLimiter(
            setup.limits.max_concurrency,
            setup.limits.requests_per_second,
            setup.limits.tokens_per_minute,
            log=self._log,
        )
        client = EvalgateClient(limiter, log=self._log)
        self._concurrency = setup.concurrency
        self._journal = _journal(setup, self._log)
        workers = [asyncio.create_task(self._worker(client)) for _ in range(setup.concurrency)]
        while line := await reader.readline():
            self._take_message(evalgate_decode_for_child(line))
        if not self._closing:
            os._exit(_ORPHANED_EXIT)  # the pytest process is gone: not one more request
        self._wake(len(self._idle))
        await asyncio.gather(*workers)
        for task in self._warming:
            task.cancel()
        await self._stage.evalgate_drain()
        for box in self._boxes.values():
            await box.evalgate_close()
        if self._journal is not None:
            self._journal.evalgate_close()
        await client.aclose()
        self._flush()
        await self._out.drain()

    def _take_message(self, message: EvalgateToChild) -> None:
        if isinstance(message, EvalgateWireRequest):
            self._works[message.index] = message
            (self._urgent if message.urgent else self._queue).append(message.index)
            self._wake(1)
        elif isinstance(message, EvalgateWireUrge):
            self._urgent.append(message.index)
            self._wake(1)
        elif isinstance(message, EvalgateWireEndpoint):
            self._endpoints[message.index] = message.endpoint
            evalgate_add_secret(message.endpoint.api_key)  # redacted from all this process says
        elif isinstance(message, EvalgateWireTools):
            self._boxes[message.index] = EvalgateToolBox(message.fixture)
        elif isinstance(message, EvalgateWireClose):
            self._closing = True
        else:
            raise EvalgateWireError(f"unexpected {message.kind!r} message after the setup")

    def _wake(self, count: int) -> None:
        # One idle worker per new work, not all 64 on every message.
        while self._idle and count > 0:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    def _log(self, line: str) -> None:
        self._emit(EvalgateWireLog(evalgate_redact(line)))

    def _emit(self, message: EvalgateToParent) -> None:
        self._emit_line(evalgate_encode(message))

    def _emit_line(self, line: bytes) -> None:
        # Batched: one pipe write per loop iteration, however many results it finished.
        if not self._lines:
            asyncio.get_running_loop().call_soon(self._flush)
        self._lines.append(line)

    def _flush(self) -> None:
        if self._lines:
            self._out.write(b"".join(self._lines))
            self._lines.clear()

    async def evalgate_die(self, exc: BaseException) -> None:
        """Report ``exc`` after every result already finished, then exit with status 1.

        A bug must not leave the item loop waiting for a record that will never come.
        """
        self._emit(EvalgateWireFailure(evalgate_redact(f"{type(exc).__name__}: {exc}")))
        self._flush()
        transport = self._out.transport
        for _ in range(500):  # at most 5 s for the parent to read what is buffered
            if transport.is_closing() or not transport.get_write_buffer_size():
                break
            await asyncio.sleep(0.01)
        os._exit(1)

    async def _worker(self, client: EvalgateClient) -> None:
        try:
            while (work := await self._next()) is not None:
                await self._execute(client, work)
        except Exception as exc:  # never raised for endpoint trouble: a bug, reported at once
            await self.evalgate_die(exc)

    async def _next(self) -> EvalgateWireRequest | None:
        while True:
            work = self._take()
            if work is not None:
                return work
            if self._closing:
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            await waiter

    def _take(self) -> EvalgateWireRequest | None:
        for source in (self._urgent, self._queue):
            while source:
                work = self._works.pop(source.popleft(), None)
                if work is not None:  # None: already dispatched through the other queue
                    return work
        return None

    async def _execute(self, client: EvalgateClient, work: EvalgateWireRequest) -> None:
        probe = await self._enter_probe(work.halt)
        try:
            reason = self._halted.get(work.halt)
            if reason is not None:
                self._emit(EvalgateWireHalted(work.index, self._in_flight, reason))
                return
            if probe is not None:
                self._warm(client, work)
            result = await self._call(client, work)
            encoded = await self._journal_answer(work, result)
            if encoded is not None and work.execution is None:
                self._emit_line(evalgate_encode_result(result, encoded))  # encoded once
            else:
                self._stage.evalgate_after(work.execution, result)
        finally:
            if probe is not None:
                probe.set_result(None)

    async def _call(self, client: EvalgateClient, work: EvalgateWireRequest) -> EvalgateWireResult:
        started = _now()
        self._in_flight += 1
        facts = None
        try:
            endpoint = self._endpoints[work.endpoint]
            if work.dialogue is None:
                result = await client.call(endpoint, work.body, work.identity, work.est_tokens)
            else:
                result, facts = await self._converse(client, endpoint, work)
        finally:
            self._in_flight -= 1
        error = result.error
        stop = self._bad_requests.evalgate_seen(work.halt, error)  # repeated or refused
        fatal = error is not None and (error.fatal or stop is not None)
        if error is not None and fatal:
            self._halted.setdefault(work.halt, f"{error.category}{stop or ''}: {error.message}")
        if result.usage_flag is not None and work.halt not in self._usage_flagged:
            self._usage_flagged.add(work.halt)
            self._log(
                f"evalgate: {work.identity}: implausible usage ({result.usage_flag}): token counts"
                " not stored, usage.flagged in the record (logged once per candidate)"
            )
        outcome = evalgate_outcome(result, started, _now())
        if facts is not None and work.dialogue is not None and work.dialogue["kind"] == "choices":
            outcome["choice"] = facts
        elif facts is not None:
            outcome["dialogue"] = facts
        return EvalgateWireResult(work.index, self._in_flight, fatal, outcome)

    async def _converse(
        self, client: EvalgateClient, endpoint: EvalgateEndpoint, work: EvalgateWireRequest
    ) -> tuple[EvalgateCallResult, dict[str, Any]]:
        """A conversation or tool loop (``dialogue.loop``): every model call of it goes
        through the client, so through the limiter, like a one-answer work's."""

        async def call(body: Mapping[str, Any]) -> EvalgateCallResult:
            return await client.call(endpoint, body, work.identity, work.est_tokens)

        assert work.dialogue is not None
        if work.dialogue["kind"] == "choices":  # multiple choice (SPEC 18): one call a choice
            return await evalgate_run_choices(call, work.body, work.dialogue)
        return await evalgate_run_dialogue(
            call, work.body, work.dialogue, self._boxes, work.identity
        )

    async def _journal_answer(
        self, work: EvalgateWireRequest, result: EvalgateWireResult
    ) -> bytes | None:
        """Journal an answer before the parent hears of it (an answer is in the store before
        it can be scored); returns its outcome's canonical JSON, or None when not journaled."""
        if self._journal is None or not work.journal or result.outcome["error"] is not None:
            return None
        encoded = evalgate_canonical_json(result.outcome)
        await self._journal.evalgate_append(
            work.journal, evalgate_journal_line_of(work.identity, encoded)
        )
        return encoded

    def _warm(self, client: EvalgateClient, probe: EvalgateWireRequest) -> None:
        """While a stop channel's probe is out alone, open the connections the works queued
        behind it will use (no request on them: a fatal probe still means one request)."""
        count = min(self._concurrency, len(self._works) + 1) - 1
        if count > 0:
            task = asyncio.create_task(client.evalgate_warm(self._endpoints[probe.endpoint], count))
            self._warming.add(task)
            task.add_done_callback(self._warming.discard)

    async def _enter_probe(self, halt: int) -> asyncio.Future[None] | None:
        # The first work of a stop channel is its probe: the others wait until it is done.
        existing = self._probes.get(halt)
        if existing is None:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._probes[halt] = future
            return future
        if not existing.done():
            await asyncio.shield(existing)
        return None


def evalgate_outcome(result: EvalgateCallResult, started: str, finished: str) -> EvalgateOutcome:
    """What crosses to the parent of a call result: the record's call fields (ITL as its p95
    only, the error without ``fatal``, which travels beside the outcome)."""
    error = result.error
    usage: EvalgateUsage = {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
    }
    if result.usage_flag is not None:
        usage["flagged"] = result.usage_flag
    if result.usage_source is not None:
        usage["source"] = result.usage_source
    return {
        "output": result.output,
        "finish_reason": result.finish_reason,
        "attempts": result.attempts,
        "error": None
        if error is None
        else {"category": error.category, "status": error.status, "message": error.message},
        "timing": {
            "queued_s": result.queued_s,
            "ttft_s": result.ttft_s,
            "tpot_s": result.tpot_s,
            "e2e_s": result.e2e_s,
            "itl_p95_s": _p95(result.itl_s),
        },
        "usage": usage,
        "started_at": started,
        "finished_at": finished,
        "model": result.model,
        "system_fingerprint": result.system_fingerprint,
    }


def _setup(message: EvalgateToChild) -> EvalgateWireSetup:
    if not isinstance(message, EvalgateWireSetup):
        raise EvalgateWireError(f"expected the setup first, got a {message.kind!r} message")
    return message


def _journal(setup: EvalgateWireSetup, log: Callable[[str], None]) -> EvalgateJournalWriter | None:
    if setup.journal_store is None:
        return None
    backend = evalgate_open_store(setup.journal_store)
    return EvalgateJournalWriter(backend, setup.journal_writer or f"child-{os.getpid()}", log)


def _p95(values: tuple[float, ...]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)  # nearest rank, as docs/timings.md defines percentiles
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")
