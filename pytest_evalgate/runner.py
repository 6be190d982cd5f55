"""The runner: a background asyncio loop that runs identities ahead of pytest's item loop.

pytest runs one item at a time; an evaluation needs many requests in flight. The runner owns a
thread with its own event loop and a fixed pool of worker coroutines (this process's share of
``budget.max_concurrency``). Workers take identities in item order, call the endpoint through
``EvalgateClient`` (which the ``EvalgateLimiter`` keeps inside the budget), score the answer,
seal the record and hand it to the segment writer. The item loop calls ``evalgate_wait(key)``
and gets its own identity's record.

Memory stays flat: at most ``window`` finished-but-unconsumed records are held; workers wait for
the item loop beyond that. An item asked for out of order jumps the queue, so the window can
never deadlock. The first request of each candidate goes alone: if it ends in a fatal error
(401, 403, 400, ...) the candidate is stopped and nothing else is sent to it.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pytest_evalgate.budget import EvalgateLimiter
from pytest_evalgate.client import EvalgateCallResult, EvalgateClient, EvalgateEndpoint
from pytest_evalgate.errors import EvalgateError
from pytest_evalgate.manifest import EvalgateCase, EvalgateManifest
from pytest_evalgate.scoring import EvalgateScorer, evalgate_passed
from pytest_evalgate.store import EvalgateIdentityKey, EvalgateSegmentWriter, evalgate_seal

_WAKE_EVERY = 16


@dataclass
class EvalgateSuiteRun:
    """Everything the runner needs about one suite in this process."""

    manifest: EvalgateManifest
    scorer: EvalgateScorer
    threshold: float
    endpoints: dict[str, EvalgateEndpoint]
    prefixes: dict[str, str]
    keys: dict[str, str]


@dataclass(frozen=True)
class EvalgateWork:
    """One identity to request: a case, a candidate, a repetition, and its shard."""

    key: EvalgateIdentityKey
    suite: EvalgateSuiteRun = field(compare=False, hash=False)
    case: EvalgateCase = field(compare=False, hash=False)
    candidate: str
    repetition: int
    shard: int


@dataclass
class EvalgateProgress:
    """Counters the progress line reads (written by the runner thread only)."""

    done: int = 0
    expected: int = 0
    in_flight: int = 0
    output_tokens: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)


class EvalgateRunner:
    """Runs ``works`` in order on a background loop; ``evalgate_wait`` hands out records."""

    def __init__(
        self,
        works: Sequence[EvalgateWork],
        writer: EvalgateSegmentWriter,
        limiter_factory: Callable[[], EvalgateLimiter],
        *,
        concurrency: int,
        window: int | None = None,
    ) -> None:
        self._works = list(works)
        self._planned = {work.key: work for work in self._works}
        self._writer = writer
        self._limiter_factory = limiter_factory
        self._concurrency = max(1, concurrency)
        self._window = window or 4 * self._concurrency + 64
        self._index = 0
        self._consumed = 0
        self._urgent: deque[EvalgateWork] = deque()
        self._dispatched: set[EvalgateIdentityKey] = set()
        self._done: dict[EvalgateIdentityKey, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._waiting: EvalgateIdentityKey | None = None
        self._blocked = False  # set by the runner thread when the window stops it
        self._idle: deque[asyncio.Future[None]] = deque()
        self._closing = False
        self._failure: BaseException | None = None
        self._stopped: dict[tuple[int, str], str] = {}
        self._probes: dict[tuple[int, str], asyncio.Future[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="evalgate-runner", daemon=True)
        self.progress = EvalgateProgress(expected=len(self._works))

    # -- main-thread side -------------------------------------------------------------------

    def evalgate_start(self) -> None:
        """Start the background thread and wait until its loop runs."""
        self._thread.start()
        self._ready.wait()

    def evalgate_wait(self, work: EvalgateWork) -> dict[str, Any]:
        """Block until ``work``'s record is ready; returns the sealed record."""
        with self._cond:
            if work.key not in self._done:
                self._request_urgent(work)
            self._waiting = work.key
            while work.key not in self._done:
                self._check_alive()
                self._cond.wait(timeout=0.5)
            self._waiting = None
            record = self._done.pop(work.key)
        self._consumed += 1
        # Wake the loop only when the window holds it back, and then every 16 items: each
        # wake-up is a syscall that hands the GIL over, which the item loop pays for.
        if self._blocked and self._consumed % _WAKE_EVERY == 0:
            self._blocked = False
            self._call_soon(self._notify)
        return record

    def evalgate_stopped_reason(self, work: EvalgateWork) -> str | None:
        """Why ``work``'s candidate was stopped (a fatal endpoint error), or None."""
        return self._stopped.get((id(work.suite), work.candidate))

    def evalgate_close(self) -> None:
        """Let the workers finish what is dispatched, commit the tail, stop the thread."""
        self._closing = True
        self._call_soon(self._notify)
        if self._thread.is_alive():
            self._thread.join()
        if self._failure is not None:
            raise EvalgateError(f"evalgate runner failed: {self._failure!r}") from self._failure

    def _request_urgent(self, work: EvalgateWork) -> None:
        if work.key not in self._dispatched:
            self._call_soon(lambda: self._urgent.append(work), notify=True)

    def _check_alive(self) -> None:
        if self._failure is not None or not self._thread.is_alive():
            raise EvalgateError(f"evalgate runner stopped: {self._failure!r}")

    def _call_soon(self, callback: Callable[[], None], notify: bool = False) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(callback)
            if notify:
                loop.call_soon_threadsafe(self._notify)
        except RuntimeError:  # the loop closed between the check and the call
            pass

    # -- runner-thread side -----------------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # surfaced to the item loop by _check_alive / close
            self._failure = exc
        finally:
            self._ready.set()
            with self._cond:
                self._cond.notify_all()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        client = EvalgateClient(self._limiter_factory())
        self._ready.set()
        committer = asyncio.create_task(self._commit_loop())
        try:
            workers = [self._worker(client) for _ in range(self._concurrency)]
            await asyncio.gather(*workers)
        finally:
            committer.cancel()
            self._writer.evalgate_commit()
            await client.aclose()

    def _notify(self) -> None:
        # Wake one idle worker per work it can take (all of them when closing), not every
        # worker on every change: 64 workers woken per item cost more than the request.
        wake = len(self._idle) if self._closing else self._available()
        while self._idle and wake > 0:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                wake -= 1

    def _available(self) -> int:
        limit = min(len(self._works), self._consumed + self._window)
        return len(self._urgent) + max(0, limit - self._index)

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self._writer.max_age_s / 2)
            self._writer.evalgate_maybe_commit()

    async def _worker(self, client: EvalgateClient) -> None:
        while True:
            work = await self._next()
            if work is None:
                return
            record = await self._execute(client, work)
            self._finish(work, record)

    async def _next(self) -> EvalgateWork | None:
        while True:
            work = self._take()
            if work is not None:
                return work
            if self._closing and not self._urgent:
                return None
            if self._index < len(self._works):
                self._blocked = True
            waiter = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            await waiter

    def _take(self) -> EvalgateWork | None:
        while self._urgent:
            work = self._urgent.popleft()
            if work.key not in self._dispatched:
                self._dispatched.add(work.key)
                return work
        while self._index < len(self._works) and self._index < self._consumed + self._window:
            work = self._works[self._index]
            self._index += 1
            if work.key not in self._dispatched:
                self._dispatched.add(work.key)
                return work
        return None

    async def _execute(self, client: EvalgateClient, work: EvalgateWork) -> dict[str, Any]:
        gate = (id(work.suite), work.candidate)
        probe = await self._enter_probe(gate)
        try:
            if gate in self._stopped:
                return _not_requested(work, self._stopped[gate])
            return await self._call(client, work, gate)
        finally:
            if probe is not None:
                probe.set_result(None)

    async def _enter_probe(self, gate: tuple[int, str]) -> asyncio.Future[None] | None:
        existing = self._probes.get(gate)
        if existing is None:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._probes[gate] = future
            return future
        if not existing.done():
            await asyncio.shield(existing)
        return None

    async def _call(
        self, client: EvalgateClient, work: EvalgateWork, gate: tuple[int, str]
    ) -> dict[str, Any]:
        started = _now()
        self.progress.in_flight += 1
        try:
            result = await client.call(
                work.suite.endpoints[work.candidate],
                evalgate_request_body(work),
                evalgate_identity_header(work),
                evalgate_estimate_tokens(work),
            )
        finally:
            self.progress.in_flight -= 1
        if result.error is not None and result.error.fatal:
            self._stopped.setdefault(gate, f"{result.error.category}: {result.error.message}")
        return evalgate_build_record(work, result, self._writer.writer, started, _now())

    def _finish(self, work: EvalgateWork, record: dict[str, Any]) -> None:
        if self._idle and self._available():
            self._notify()  # dispatched work may be skipped by _take; let a peer look
        self._count(record)
        if record.get("_not_requested") is None:
            self._writer.evalgate_add(work.suite.prefixes[work.candidate], record)
            self._writer.evalgate_maybe_commit()
        with self._cond:
            self._done[work.key] = record
            if self._waiting == work.key:
                self._cond.notify_all()

    def _count(self, record: dict[str, Any]) -> None:
        self.progress.done += 1
        error = record.get("error")
        if error is not None:
            self.progress.errors[error["category"]] += 1
        tokens = (record.get("usage") or {}).get("completion_tokens")
        if isinstance(tokens, int):
            self.progress.output_tokens += tokens


def evalgate_request_body(work: EvalgateWork) -> dict[str, Any]:
    """The request body (without model/stream): prompt plus generation settings.

    A fixed ``seed`` is offset by the repetition, so a deliberate re-sample differs when the
    temperature allows it; a transport retry resends the same body.
    """
    manifest = work.suite.manifest
    body: dict[str, Any] = dict(manifest.generation)
    if "seed" in body:
        body["seed"] = int(body["seed"]) + work.repetition
    prompt = work.case.evalgate_prompt_json()
    body["prompt" if isinstance(prompt, str) else "messages"] = prompt
    return body


def evalgate_identity_header(work: EvalgateWork) -> str:
    """The ``x-evalgate-identity`` header value: ``revision/candidate/case/rN``."""
    revision, case_id, candidate, repetition = work.key
    return f"{revision}/{candidate}/{case_id}/r{repetition}"


def evalgate_estimate_tokens(work: EvalgateWork) -> int:
    """Tokens to reserve from the tokens-per-minute budget: prompt size (4 chars a token) plus
    ``max_tokens``; corrected by the response's ``usage`` afterwards."""
    prompt = work.case.evalgate_prompt_json()
    chars = len(prompt) if isinstance(prompt, str) else sum(len(m["content"]) for m in prompt)
    return chars // 4 + 1 + int(work.suite.manifest.generation.get("max_tokens", 256))


def evalgate_build_record(
    work: EvalgateWork, result: EvalgateCallResult, writer: str, started: str, finished: str
) -> dict[str, Any]:
    """Score ``result`` and seal the record of SPEC section 5."""
    revision, case_id, candidate, repetition = work.key
    score: float | None = None
    passed: bool | None = None
    error = None
    if result.error is not None:
        error = {
            "category": result.error.category,
            "status": result.error.status,
            "message": result.error.message,
        }
    else:
        score = float(work.suite.scorer(result.output or "", work.case.target))
        passed = evalgate_passed(score, work.suite.threshold)
    return evalgate_seal(
        {
            "identity": {
                "dataset_revision": revision,
                "case_id": case_id,
                "candidate": candidate,
                "repetition": repetition,
            },
            "definition_digest": work.suite.manifest.definition_digest,
            "candidate_key": work.suite.keys[candidate],
            "category": work.case.category,
            "cluster": work.case.cluster,
            "output": result.output,
            "score": score,
            "passed": passed,
            "attempts": result.attempts,
            "error": error,
            "timing": {
                "queued_s": result.queued_s,
                "ttft_s": result.ttft_s,
                "tpot_s": result.tpot_s,
                "e2e_s": result.e2e_s,
                "itl_p95_s": _p95(result.itl_s),
            },
            "usage": {
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": result.completion_tokens,
            },
            "finish_reason": result.finish_reason,
            "shard": work.shard,
            "writer": writer,
            "started_at": started,
            "finished_at": finished,
        }
    )


def _not_requested(work: EvalgateWork, reason: str) -> dict[str, Any]:
    # Never stored: the identity stays missing so the next run requests it.
    message = f"not requested: candidate {work.candidate!r} was stopped after {reason}"
    return {
        "error": {"category": "not_requested", "status": None, "message": message},
        "_not_requested": True,
        "usage": {},
    }


def _p95(values: tuple[float, ...]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)  # nearest rank, as docs/timings.md defines percentiles
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")
