"""The runner: identities requested ahead of pytest's item loop, in a child process.

pytest runs one item at a time; an evaluation needs many requests in flight. ``EvalgateRunner``
(in the pytest process) starts a child process (``python -m pytest_evalgate.runner``) that owns
an asyncio loop, the ``EvalgateLimiter`` (this process's share of ``budget``) and a fixed pool of
worker coroutines calling the endpoint through ``EvalgateClient``. The item loop calls
``evalgate_wait(work)`` and gets its own identity's sealed record.

Why a child process and not a thread: in one process the item loop (pytest's own ~0.4 ms of
Python per item) and the HTTP loop (~0.3 ms per request) take turns on one GIL, and every
syscall of the item loop (capture's dup2, terminal writes) waited for the loop thread to hand
the GIL back. ``bench/throughput.py`` measured the thread version at 31-48 % of the endpoint
bound; split over two processes each side gets its own core.

The split (only builtins cross, as JSON lines over the child's stdin and stdout):

- the child sends requests and returns call results; it never scores, seals or writes;
- the pytest process scores (user scorers registered by conftest hooks exist only here), seals
  the record and hands it to ``EvalgateSegmentWriter``, whose write + fsync runs in a committer
  thread, so a slow disk never stalls the item loop. A record is committed only after it is
  sealed; a SIGKILL loses only the uncommitted tail (and what the child had not reported yet).

Memory stays flat: the pytest process sends work ``j`` only when ``j < consumed + window``, so
at most ``window`` works are in the child or finished-but-unconsumed. An item asked for out of
order is sent (or moved to the front of the child's queue) at once, so the window can never
deadlock. The first request of each candidate goes alone: if it ends in a fatal error (401,
403, 400, ...) the candidate is stopped and nothing else is sent to it.

The child never outlives the pytest process: when its stdin reaches end-of-file without a
``close`` message (the parent died, even by SIGKILL), it exits at once without another request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import queue
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from pytest_evalgate.budget import EvalgateLimiter
from pytest_evalgate.client import EvalgateCallResult, EvalgateClient, EvalgateEndpoint
from pytest_evalgate.errors import EvalgateError
from pytest_evalgate.scoring import EvalgateScorer, evalgate_passed
from pytest_evalgate.store import EvalgateIdentityKey, EvalgateSegmentWriter, evalgate_seal

if TYPE_CHECKING:  # the child process needs neither pydantic nor yaml
    from pytest_evalgate.manifest import EvalgateCase, EvalgateManifest

_SEND_EVERY = 16  # top the window up every 16 consumed items: one pipe write, not sixteen
_POLL_S = 0.25  # how often a waiting item loop checks commits and the child's health
_MIN_POLL_S = 0.01
_ORPHANED_EXIT = 3  # the child's exit status when the pytest process went away
_STDERR_TAIL = 2000


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


@dataclass(frozen=True)
class EvalgateLimits:
    """This process's share of the budget, as the child's ``EvalgateLimiter`` enforces it."""

    max_concurrency: int
    requests_per_second: float | None
    tokens_per_minute: float | None


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
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._works = list(works)
        self._writer = writer
        self._limits = limits
        self._concurrency = max(1, concurrency)
        self._window = window or 4 * self._concurrency + 64
        self._log = log
        self._next = 0  # the next position in ``_works`` to send
        self._consumed = 0
        self._sent: dict[EvalgateIdentityKey, int] = {}
        self._wire: list[EvalgateWork] = []  # wire index -> work
        self._urged: set[int] = set()
        self._endpoints: dict[EvalgateEndpoint, int] = {}
        self._gates: dict[tuple[int, str], int] = {}
        self._done: dict[EvalgateIdentityKey, dict[str, Any]] = {}
        self._stopped: dict[tuple[int, str], str] = {}
        self._outbox: list[bytes] = []
        self._inbox = b""
        self._child: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._eof = False
        self._failure: str | None = None
        self._committer = _EvalgateCommitter(writer)
        self.progress = EvalgateProgress(expected=len(self._works))

    # -- the item loop's side ---------------------------------------------------------------

    def evalgate_start(self) -> None:
        """Start the child and send it the setup and the first window of works."""
        # Kept open for the child's life (closed in _reap): a crash's traceback is read back.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._child = subprocess.Popen(
            [sys.executable, "-m", "pytest_evalgate.runner"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=_child_env(),
        )
        assert self._child.stdout is not None
        os.set_blocking(self._child.stdout.fileno(), False)
        self._committer.start()
        self._outbox.append(self._setup_line())
        self._fill()
        self._flush()

    def evalgate_wait(self, work: EvalgateWork) -> dict[str, Any]:
        """Block until ``work``'s record is ready; returns the sealed record."""
        key = work.key
        self._pump(0.0)
        if key not in self._done:
            self._urge(work)
        while key not in self._done:
            self._check_alive()
            self._pump(self._writer_timeout())
        record = self._done.pop(key)
        self._consumed += 1
        if self._consumed % _SEND_EVERY == 0:
            self._fill()
        self._flush()
        return record

    def evalgate_stopped_reason(self, work: EvalgateWork) -> str | None:
        """Why ``work``'s candidate was stopped (a fatal endpoint error), or None."""
        return self._stopped.get((id(work.suite), work.candidate))

    def evalgate_close(self) -> None:
        """Let the child finish what it was sent, seal and commit the tail, stop the child."""
        try:
            self._drain()
        finally:
            self._reap()
            self._committer.evalgate_stop()
        if self._failure is not None:
            raise EvalgateError(f"evalgate runner failed: {self._failure}")

    def _drain(self) -> None:
        child = self._child
        if child is None or child.stdin is None:
            return
        self._outbox.append(b'{"close":true}\n')
        self._flush()
        _close_quietly(child.stdin)
        while not self._eof:
            self._pump(self._writer_timeout())
        self._commit_due()

    def _reap(self) -> None:
        child = self._child
        if child is None:
            return
        if child.poll() is None and not self._eof:
            child.kill()  # only on an error path: the drain above ends with the child's exit
        try:
            status = child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            status = child.wait()
        if status != 0 and self._failure is None:
            self._failure = f"child exited with status {status}: {self._stderr_tail()}"
        _close_quietly(child.stdout)
        _close_quietly(self._stderr)

    def _check_alive(self) -> None:
        if self._failure is not None or self._eof:
            reason = self._failure or f"child process ended: {self._stderr_tail()}"
            raise EvalgateError(f"evalgate runner stopped: {reason}")

    def _stderr_tail(self) -> str:
        if self._stderr is None or self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-_STDERR_TAIL:].strip()

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
            self._outbox.append(b'{"u":%d}\n' % index)
        self._flush()

    def _send(self, work: EvalgateWork, *, urgent: bool) -> None:
        index = len(self._wire)
        self._wire.append(work)
        self._sent[work.key] = index
        endpoint = work.suite.endpoints[work.candidate]
        wire = [
            index,
            self._endpoint_index(endpoint),
            self._gate_index(work),
            evalgate_request_body(work),
            evalgate_identity_header(work),
            evalgate_estimate_tokens(work),
        ]
        self._outbox.append(json.dumps({"w": wire, "u": urgent}).encode() + b"\n")

    def _endpoint_index(self, endpoint: EvalgateEndpoint) -> int:
        index = self._endpoints.get(endpoint)
        if index is None:
            index = self._endpoints[endpoint] = len(self._endpoints)
            message = {"endpoint": [index, dataclasses.asdict(endpoint)]}
            self._outbox.append(json.dumps(message).encode() + b"\n")
        return index

    def _gate_index(self, work: EvalgateWork) -> int:
        return self._gates.setdefault((id(work.suite), work.candidate), len(self._gates))

    def _flush(self) -> None:
        child = self._child
        if not self._outbox or child is None or child.stdin is None or child.stdin.closed:
            return
        data = b"".join(self._outbox)
        self._outbox.clear()
        try:
            child.stdin.write(data)
            child.stdin.flush()
        except (BrokenPipeError, ValueError):
            self._eof = True  # the child is gone; _check_alive reports why

    def _setup_line(self) -> bytes:
        setup = {"concurrency": self._concurrency, "limits": dataclasses.asdict(self._limits)}
        return json.dumps({"setup": setup}).encode() + b"\n"

    # -- receiving --------------------------------------------------------------------------

    def _pump(self, timeout: float) -> None:
        """Read what the child reported (waiting up to ``timeout`` for the first byte)."""
        child = self._child
        if child is None or child.stdout is None or self._eof:
            return
        fd = child.stdout.fileno()
        if timeout > 0 and not select.select([fd], [], [], timeout)[0]:
            self._commit_due()
            return
        self._read(fd)
        self._commit_due()

    def _read(self, fd: int) -> None:
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 1 << 18)
            except BlockingIOError:
                break
            if not chunk:
                self._eof = True
                break
            chunks.append(chunk)
        if not chunks:
            return
        data = self._inbox + b"".join(chunks)
        lines = data.split(b"\n")
        self._inbox = lines.pop()
        for line in lines:
            self._receive(json.loads(line))

    def _receive(self, message: dict[str, Any]) -> None:
        if "i" in message:
            self._result(message)
        elif "log" in message:
            if self._log is not None:
                self._log(str(message["log"]))
        elif "fail" in message:
            self._failure = str(message["fail"])

    def _result(self, message: dict[str, Any]) -> None:
        work = self._wire[message["i"]]
        self.progress.in_flight = int(message["n"])
        if "stop" in message:
            record = _not_requested(work, str(message["stop"]))
        else:
            record = self._seal(work, message)
        self._count(record)
        self._done[work.key] = record

    def _seal(self, work: EvalgateWork, message: dict[str, Any]) -> dict[str, Any]:
        result = message["r"]
        error = result["error"]
        if error is not None and error.pop("fatal"):
            gate = (id(work.suite), work.candidate)
            self._stopped.setdefault(gate, f"{error['category']}: {error['message']}")
        record = evalgate_record(work, result, self._writer.writer, message["s"], message["f"])
        self._writer.evalgate_add(work.suite.prefixes[work.candidate], record)
        return record

    def _commit_due(self) -> None:
        if self._writer.evalgate_due():
            self._committer.evalgate_put(self._writer.evalgate_take())

    def _count(self, record: dict[str, Any]) -> None:
        self.progress.done += 1
        error = record.get("error")
        if error is not None:
            self.progress.errors[error["category"]] += 1
        tokens = (record.get("usage") or {}).get("completion_tokens")
        if isinstance(tokens, int):
            self.progress.output_tokens += tokens


class _EvalgateCommitter(threading.Thread):
    """Writes and fsyncs segments off the item loop, in the order they were taken.

    A failed commit is kept and raised to the item loop at the next hand-over or at the stop.
    """

    def __init__(self, writer: EvalgateSegmentWriter) -> None:
        super().__init__(name="evalgate-committer", daemon=True)
        self._writer = writer
        self._queue: queue.SimpleQueue[list[tuple[str, bytes, int]] | None] = queue.SimpleQueue()
        self._error: BaseException | None = None

    def run(self) -> None:
        while (segments := self._queue.get()) is not None:
            try:
                self._writer.evalgate_write(segments)
            except BaseException as exc:  # handed to the item loop by _raise
                self._error = exc
                return

    def evalgate_put(self, segments: list[tuple[str, bytes, int]]) -> None:
        """Queue ``segments`` for writing (raises a commit failure seen earlier)."""
        self._raise()
        if segments:
            self._queue.put(segments)

    def evalgate_stop(self) -> None:
        """Write what is queued plus the writer's tail, stop the thread, raise any failure."""
        if self.is_alive():
            self._queue.put(self._writer.evalgate_take())
            self._queue.put(None)
            self.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise EvalgateError(f"evalgate commit failed: {self._error}") from self._error


def _child_env() -> dict[str, str]:
    # The child imports the very package this process runs, wherever it was imported from.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return env


def _close_quietly(handle: IO[bytes] | None) -> None:
    if handle is None:
        return
    with contextlib.suppress(OSError):  # a broken pipe on close: the child is gone
        handle.close()


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


def evalgate_result_dict(result: EvalgateCallResult) -> dict[str, Any]:
    """The builtins form of a call result that crosses from the child (ITL as its p95 only)."""
    error = result.error
    return {
        "output": result.output,
        "finish_reason": result.finish_reason,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "ttft_s": result.ttft_s,
        "tpot_s": result.tpot_s,
        "itl_p95_s": _p95(result.itl_s),
        "e2e_s": result.e2e_s,
        "queued_s": result.queued_s,
        "attempts": result.attempts,
        "error": None if error is None else dataclasses.asdict(error),
    }


def evalgate_record(
    work: EvalgateWork, result: dict[str, Any], writer: str, started: str, finished: str
) -> dict[str, Any]:
    """Score ``result`` (an ``evalgate_result_dict``, error without ``fatal``) and seal the
    record of SPEC section 5."""
    revision, case_id, candidate, repetition = work.key
    score: float | None = None
    passed: bool | None = None
    if result["error"] is None:
        score = float(work.suite.scorer(result["output"] or "", work.case.target))
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
            "output": result["output"],
            "score": score,
            "passed": passed,
            "attempts": result["attempts"],
            "error": result["error"],
            "timing": {
                "queued_s": result["queued_s"],
                "ttft_s": result["ttft_s"],
                "tpot_s": result["tpot_s"],
                "e2e_s": result["e2e_s"],
                "itl_p95_s": result["itl_p95_s"],
            },
            "usage": {
                "prompt_tokens": result["prompt_tokens"],
                "completion_tokens": result["completion_tokens"],
            },
            "finish_reason": result["finish_reason"],
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


# -- the child process --------------------------------------------------------------------------

_ChildWork = tuple[int, int, int, dict[str, Any], str, int]  # index, endpoint, gate, body, id, est


class _EvalgateChild:
    """The child's loop: works from stdin, requests under the limiter, results to stdout."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._out = writer
        self._lines: list[bytes] = []
        self._endpoints: dict[int, EvalgateEndpoint] = {}
        self._works: dict[int, _ChildWork] = {}  # sent, not yet dispatched
        self._queue: deque[int] = deque()
        self._urgent: deque[int] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        self._closing = False
        self._stopped: dict[int, str] = {}
        self._probes: dict[int, asyncio.Future[None]] = {}
        self._in_flight = 0

    async def evalgate_run(self, reader: asyncio.StreamReader) -> None:
        """Serve until stdin ends: after ``close`` finish every work; without it, exit now."""
        setup = json.loads(await reader.readline())["setup"]
        limiter = EvalgateLimiter(**setup["limits"], log=self._log)
        client = EvalgateClient(limiter)
        workers = [asyncio.create_task(self._worker(client)) for _ in range(setup["concurrency"])]
        while line := await reader.readline():
            self._take_message(json.loads(line))
        if not self._closing:
            os._exit(_ORPHANED_EXIT)  # the pytest process is gone: not one more request
        self._wake(len(self._idle))
        await asyncio.gather(*workers)
        await client.aclose()
        self._flush()
        await self._out.drain()

    def _take_message(self, message: dict[str, Any]) -> None:
        if "w" in message:
            work: _ChildWork = tuple(message["w"])
            self._works[work[0]] = work
            (self._urgent if message["u"] else self._queue).append(work[0])
            self._wake(1)
        elif "u" in message:
            self._urgent.append(int(message["u"]))
            self._wake(1)
        elif "endpoint" in message:
            index, fields = message["endpoint"]
            self._endpoints[int(index)] = EvalgateEndpoint(**fields)
        elif "close" in message:
            self._closing = True

    def _wake(self, count: int) -> None:
        # One idle worker per new work, not all 64 on every message.
        while self._idle and count > 0:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    def _log(self, line: str) -> None:
        self._emit({"log": line})

    def _emit(self, message: dict[str, Any]) -> None:
        # Batched: one pipe write per loop iteration, however many results it finished.
        if not self._lines:
            asyncio.get_running_loop().call_soon(self._flush)
        self._lines.append(json.dumps(message).encode() + b"\n")

    def _flush(self) -> None:
        if self._lines:
            self._out.write(b"".join(self._lines))
            self._lines.clear()

    async def evalgate_die(self, exc: BaseException) -> None:
        """Report ``exc`` after every result already finished, then exit with status 1.

        A bug must not leave the item loop waiting for a record that will never come.
        """
        self._emit({"fail": f"{type(exc).__name__}: {exc}"})
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

    async def _next(self) -> _ChildWork | None:
        while True:
            work = self._take()
            if work is not None:
                return work
            if self._closing:
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            await waiter

    def _take(self) -> _ChildWork | None:
        for source in (self._urgent, self._queue):
            while source:
                work = self._works.pop(source.popleft(), None)
                if work is not None:  # None: already dispatched through the other queue
                    return work
        return None

    async def _execute(self, client: EvalgateClient, work: _ChildWork) -> None:
        index, endpoint, gate, body, identity, est_tokens = work
        probe = await self._enter_probe(gate)
        try:
            if gate in self._stopped:
                self._emit({"i": index, "n": self._in_flight, "stop": self._stopped[gate]})
                return
            started = _now()
            self._in_flight += 1
            try:
                result = await client.call(self._endpoints[endpoint], body, identity, est_tokens)
            finally:
                self._in_flight -= 1
            if result.error is not None and result.error.fatal:
                self._stopped.setdefault(gate, f"{result.error.category}: {result.error.message}")
            wire = evalgate_result_dict(result)
            self._emit({"i": index, "n": self._in_flight, "s": started, "f": _now(), "r": wire})
        finally:
            if probe is not None:
                probe.set_result(None)

    async def _enter_probe(self, gate: int) -> asyncio.Future[None] | None:
        existing = self._probes.get(gate)
        if existing is None:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._probes[gate] = future
            return future
        if not existing.done():
            await asyncio.shield(existing)
        return None


async def _evalgate_child_main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout.buffer
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    child = _EvalgateChild(writer)
    try:
        await child.evalgate_run(reader)
    except Exception as exc:
        await child.evalgate_die(exc)


def evalgate_child_main() -> None:
    """Entry point of ``python -m pytest_evalgate.runner`` (the runner's child process)."""
    asyncio.run(_evalgate_child_main())


if __name__ == "__main__":
    evalgate_child_main()
