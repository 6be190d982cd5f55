"""The shadow proxy: stable in front, the candidate called on a seeded sample, never waited on.

Contracts
---------
- Every ``POST`` is forwarded to stable (same path, same headers but the hop-by-hop ones,
  ``Host`` and ``Accept-Encoding``) over kept-alive connections, and stable's status, headers
  and body go back to the client as they arrive: the body's bytes unchanged, streamed or not.
  A body with a ``Content-Length`` keeps it; any other body is sent chunked, piece by piece.
  Stable unreachable: ``502`` with an OpenAI-shaped error. Other methods: ``405``, except
  ``GET /evalgate/shadow/stats`` (this proxy's counters, JSON).
- Sampling: a request is drawn with probability ``fraction`` from ``random.Random(seed)`` (the
  same arrival order draws the same sample). A drawn request is shadowed only when it is the
  first model turn (no ``tool`` message and no assistant ``tool_calls`` in it: later turns of a
  tool loop depend on stable's tool results, which the candidate never asked for) and fewer
  than ``max_in_flight`` candidate calls are out (otherwise it is counted ``dropped_busy``).
- The candidate call starts with stable's, on its own connection pool, under
  ``candidate_timeout_s``; its answer is read, kept in the pair and dropped: it is never
  returned, and nothing in it is executed (a tool call is only counted). The client's answer
  never waits on it: a hanging or failing candidate costs only its own task.
- A pair (``pairs.py``) is kept once both sides are done; pairs are flushed to the store in a
  worker thread, every batch and every ``flush_s`` seconds, and at ``close``.

The connections and the listener are ``shadow.server``'s; the response bytes ``shadow.wire``'s.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.client.http1 import EvalgateHttpPool
from pytest_evalgate.client.http1_conn import EvalgateHttpResponse
from pytest_evalgate.client.http1_head import EvalgateHttpTarget
from pytest_evalgate.errors import EvalgateConfigError, EvalgateHttpError
from pytest_evalgate.shadow.answer import (
    EvalgateShadowAnswer,
    evalgate_failed_answer,
    evalgate_read_answer,
)
from pytest_evalgate.shadow.pairs import (
    EvalgatePairWriter,
    evalgate_pair,
    evalgate_request_question,
    evalgate_side,
)
from pytest_evalgate.shadow.wire import HOP, Request, error_body, head, whole

EVALGATE_SHADOW_STATS_PATH = "/evalgate/shadow/stats"
_KEEP_MAX = 8 << 20  # bytes of one side's answer kept for its pair (the client gets them all)


@dataclass(frozen=True)
class EvalgateShadowConfig:
    """Where the proxy sends requests and how it samples (see the module)."""

    stable_url: str
    candidate_url: str
    fraction: float
    seed: int = 0
    candidate_timeout_s: float = 60.0
    max_in_flight: int = 64
    flush_s: float = 1.0
    keep_question: bool = False  # keep the request's question (redacted) for the online judge


def evalgate_check_shadow_config(config: EvalgateShadowConfig) -> None:
    """Refuse URLs that are not ``http(s)://host[:port]``, a fraction outside [0, 1], bounds."""
    for key in ("stable_url", "candidate_url"):
        EvalgateHttpTarget(getattr(config, key).rstrip("/") + "/", {})
    if not 0.0 <= config.fraction <= 1.0:
        raise EvalgateConfigError("shadow serve", "percent", "a share in 0..100 %")
    if not 0.0 < config.candidate_timeout_s <= 3600.0:
        raise EvalgateConfigError("shadow serve", "candidate_timeout", "seconds in (0, 3600]")
    if not 1 <= config.max_in_flight <= 100_000:
        raise EvalgateConfigError("shadow serve", "max_in_flight", "a count in 1..100000")


class _Side:
    """One side's answer as it arrives: first-byte and end times, and its bytes when kept."""

    def __init__(self, started: float, keep: bool) -> None:
        self.started = started
        self.first: float | None = None
        self.ended = started
        self.keep = keep
        self.parts: list[bytes] = []
        self.size = 0
        self.answer: EvalgateShadowAnswer | None = None

    def take(self, data: bytes) -> None:
        if self.first is None:
            self.first = time.monotonic()
        if self.keep and self.size < _KEEP_MAX:
            self.parts.append(data)
            self.size += len(data)

    def finish(self, status: int, content_type: str) -> None:
        self.ended = time.monotonic()
        self.answer = evalgate_read_answer(status, content_type, b"".join(self.parts))

    def fail(self, status: int, reason: str) -> None:
        self.ended = time.monotonic()
        self.answer = evalgate_failed_answer(status, reason)

    def record(self, token: str | None) -> dict[str, Any]:
        answer = self.answer or evalgate_failed_answer(0, "no answer")
        ttft = None if self.first is None else self.first - self.started
        return evalgate_side(answer, self.ended - self.started, ttft, token)


class EvalgateShadowProxy:
    """The proxy's state on one event loop: pools, sampler, counters, pending candidate tasks."""

    def __init__(self, config: EvalgateShadowConfig, writer: EvalgatePairWriter | None) -> None:
        evalgate_check_shadow_config(config)
        self.config = config
        self.writer = writer
        self.counts: Counter[str] = Counter()
        self._stable_pool = EvalgateHttpPool()
        self._candidate_pool = EvalgateHttpPool()
        self._targets: dict[tuple[str, str], EvalgateHttpTarget] = {}
        self._random = random.Random(config.seed)
        self._tasks: set[asyncio.Task[None]] = set()
        self._flushing: asyncio.Future[int] | None = None

    def stats(self) -> dict[str, Any]:
        """The counters and how many candidate calls are out, as builtins."""
        out = {key: self.counts[key] for key in sorted(self.counts)}
        out["candidate_in_flight"] = len(self._tasks)
        out["pairs_written"] = 0 if self.writer is None else self.writer.written
        return out

    def _target(self, base: str, path: str) -> EvalgateHttpTarget:
        key = (base, path)
        target = self._targets.get(key)
        if target is None:
            target = self._targets[key] = EvalgateHttpTarget(base.rstrip("/") + path, {})
        return target

    def _draw(self, request: Request) -> bool:
        if self._random.random() >= self.config.fraction:
            return False
        self.counts["drawn"] += 1
        if not evalgate_first_turn(request.body):
            self.counts["skipped_later_turn"] += 1
            return False
        if len(self._tasks) >= self.config.max_in_flight:
            self.counts["dropped_busy"] += 1
            return False
        return True

    async def handle(self, request: Request, out: Callable[[bytes], None]) -> None:
        """Answer one request through ``out`` (the client's transport write)."""
        self.counts["requests"] += 1
        if request.method == "GET" and request.path == EVALGATE_SHADOW_STATS_PATH:
            out(whole(200, "application/json", json.dumps(self.stats()).encode(), True))
            return
        if request.method != "POST":
            out(whole(405, "application/json", error_body("only POST is proxied"), True))
            return
        headers = {k: v for k, v in request.headers.items() if k not in HOP}
        sampled = self._draw(request)
        stable = _Side(time.monotonic(), keep=sampled)
        done: asyncio.Future[None] | None = None
        if sampled:
            done = asyncio.get_running_loop().create_future()
            self._spawn(request, headers, stable, done)
        try:
            await self._forward(request, headers, stable, out)
        finally:
            if done is not None and not done.done():
                done.set_result(None)

    async def _forward(
        self,
        request: Request,
        headers: Mapping[str, str],
        side: _Side,
        out: Callable[[bytes], None],
    ) -> None:
        target = self._target(self.config.stable_url, request.path)
        try:
            response = await self._stable_pool.evalgate_post(target, headers, request.body)
        except EvalgateHttpError as error:
            self.counts["stable_unreachable"] += 1
            side.fail(502, str(error))
            out(whole(502, "application/json", error_body("stable is unreachable"), False))
            return
        try:
            await _relay(response, side, out, request.keep_alive)
            self.counts["forwarded"] += 1
        finally:
            response.evalgate_release()

    def _spawn(
        self,
        request: Request,
        headers: Mapping[str, str],
        stable: _Side,
        done: asyncio.Future[None],
    ) -> None:
        self.counts["sampled"] += 1
        task = asyncio.get_running_loop().create_task(self._shadow(request, headers, stable, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _shadow(
        self,
        request: Request,
        headers: Mapping[str, str],
        stable: _Side,
        done: asyncio.Future[None],
    ) -> None:
        side = _Side(time.monotonic(), keep=True)
        try:
            async with asyncio.timeout(self.config.candidate_timeout_s):
                await self._candidate(request, headers, side)
        except TimeoutError:
            self.counts["candidate_timeouts"] += 1
            side.fail(0, f"no answer within {self.config.candidate_timeout_s:g} s")
        await done
        self._keep(request, stable, side)

    async def _candidate(self, request: Request, headers: Mapping[str, str], side: _Side) -> None:
        target = self._target(self.config.candidate_url, request.path)
        try:
            response = await self._candidate_pool.evalgate_post(target, headers, request.body)
        except EvalgateHttpError as error:
            self.counts["candidate_failed"] += 1
            side.fail(0, str(error))
            return
        try:
            async for data in response.evalgate_chunks():
                side.take(data)
            side.finish(response.status, response.headers.get("content-type", ""))
            self.counts["candidate_answered"] += 1
        except EvalgateHttpError as error:
            self.counts["candidate_failed"] += 1
            side.fail(response.status, str(error))
        finally:
            response.evalgate_release()

    def _keep(self, request: Request, stable: _Side, candidate: _Side) -> None:
        token = _bearer(request.headers.get("authorization"))
        question = None
        if self.config.keep_question:
            question = evalgate_request_question(request.body, token)
        pair = evalgate_pair(
            request.body, request.path, stable.record(token), candidate.record(token), question
        )
        self.counts["pairs"] += 1
        if self.writer is not None and self.writer.add(pair):
            self._flush_soon()

    def _flush_soon(self) -> None:
        if self.writer is None or (self._flushing is not None and not self._flushing.done()):
            return
        loop = asyncio.get_running_loop()
        self._flushing = loop.run_in_executor(None, self.writer.flush)

    async def flush_every(self, stop: asyncio.Event) -> None:
        """Flush queued pairs every ``flush_s`` until ``stop`` is set."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.config.flush_s)
            except TimeoutError:
                self._flush_soon()

    async def close(self, grace_s: float = 5.0) -> None:
        """Wait up to ``grace_s`` for candidate calls, cancel the rest, flush, close pools."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
            for task in pending:
                task.cancel()
        if self._flushing is not None:
            await self._flushing
        if self.writer is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.writer.flush)
        await self._stable_pool.evalgate_close()
        await self._candidate_pool.evalgate_close()


def evalgate_first_turn(body: bytes) -> bool:
    """Whether a request is a first model turn: no ``tool`` message, no assistant tool calls."""
    try:
        messages = json.loads(body).get("messages")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return True  # not a chat request the proxy can read: the candidate reads it the same
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and (
            message.get("role") == "tool" or message.get("tool_calls")
        ):
            return False
    return True


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else value


async def _relay(
    response: EvalgateHttpResponse, side: _Side, out: Callable[[bytes], None], keep_alive: bool
) -> None:
    length = response.content_length
    out(head(response.status, response.headers.items(), length, keep_alive))
    try:
        async for data in response.evalgate_chunks():
            side.take(data)
            out(data if length is not None else b"%x\r\n%b\r\n" % (len(data), data))
    except EvalgateHttpError as error:
        side.fail(response.status, str(error))
        raise
    if length is None:
        out(b"0\r\n\r\n")
    side.finish(response.status, response.headers.get("content-type", ""))
