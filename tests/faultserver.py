"""A fault-injecting OpenAI-compatible server on 127.0.0.1 for client and budget tests.

Each request is answered by a scripted ``FaultStep`` chosen by the request's
``x-evalgate-identity`` header: the n-th request of an identity gets the n-th step of its script,
and the server's ``default`` step once the script is used up. Steps can send any status, headers
and body, stream SSE chunks with delays, hang, or drop the connection (before the response or in
the middle of a stream). The server records every arrival (identity, attempt header, monotonic
time, parsed body, headers) and the peak number of requests it held at once.

Run it inside the test's event loop::

    async with FaultServer() as server:
        server.script("case-1", FaultStep(status=429, headers={"Retry-After": "2"}), FaultStep())
        ... server.base_url ...
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class FaultStep:
    """One scripted answer.

    ``body`` (bytes or a JSON-able object) replaces the generated answer; with ``status != 200``
    and no body an OpenAI-style error body is sent. ``hang_s`` sleeps before anything is sent;
    ``drop`` closes the connection without an answer; ``drop_after_chunks`` closes it after that
    many stream chunks. ``chunks`` are the content pieces, the first after ``first_delay_s``, the
    rest each after ``chunk_delay_s``. ``usage`` adds a final usage chunk (streaming) or a usage
    object (non-streaming) with ``completion_tokens = usage_tokens or len(chunks)``.
    """

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    chunks: tuple[str, ...] = ("Hello", ",", " world")
    first_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    usage: bool = True
    usage_tokens: int | None = None
    finish_reason: str = "stop"
    hang_s: float = 0.0
    drop: bool = False
    drop_after_chunks: int | None = None


@dataclass(frozen=True)
class Arrival:
    """One request as the server saw it."""

    identity: str
    attempt: int
    at: float  # time.monotonic() when the handler started
    wall: float  # time.time() at the same moment
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


class FaultServer:
    """The scripted server; see the module docstring."""

    def __init__(self, default: FaultStep | None = None) -> None:
        self.default = default or FaultStep()
        self.arrivals: list[Arrival] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._scripts: dict[str, list[FaultStep]] = {}
        self._served: dict[str, int] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, identity: str, *steps: FaultStep) -> None:
        """Answer the requests of ``identity`` with ``steps`` in order, then with the default."""
        self._scripts[identity] = list(steps)

    def arrivals_of(self, identity: str) -> list[Arrival]:
        return [a for a in self.arrivals if a.identity == identity]

    async def __aenter__(self) -> FaultServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/completions", self._handle)
        # handler_cancellation: a client that gives up on a hang frees the handler at once.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def _next_step(self, identity: str) -> FaultStep:
        served = self._served.get(identity, 0)
        self._served[identity] = served + 1
        script = self._scripts.get(identity, [])
        return script[served] if served < len(script) else self.default

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await self._answer(request)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        identity = request.headers.get("x-evalgate-identity", "")
        self.arrivals.append(
            Arrival(
                identity=identity,
                attempt=int(request.headers.get("x-evalgate-attempt", "0")),
                at=time.monotonic(),
                wall=time.time(),
                path=request.path,
                body=body,
                headers=dict(request.headers),
            )
        )
        step = self._next_step(identity)
        if step.hang_s:
            await asyncio.sleep(step.hang_s)
        if step.drop:
            return _drop(request)
        if step.status != 200 or step.body is not None:
            return _fixed(step)
        chat = request.path.endswith("/chat/completions")
        if body.get("stream"):
            return await _stream(request, step, chat)
        await asyncio.sleep(step.first_delay_s)
        return web.json_response(_whole(step, chat), headers=dict(step.headers))


def _drop(request: web.Request) -> web.StreamResponse:
    assert request.transport is not None
    request.transport.close()
    return web.Response()


def _fixed(step: FaultStep) -> web.Response:
    body = step.body
    if body is None:
        body = {"error": {"message": f"scripted {step.status}", "type": "scripted", "code": None}}
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **step.headers}
    return web.Response(status=step.status, body=raw, headers=headers)


def _usage(step: FaultStep) -> dict[str, int]:
    tokens = step.usage_tokens if step.usage_tokens is not None else len(step.chunks)
    return {"prompt_tokens": 7, "completion_tokens": tokens, "total_tokens": 7 + tokens}


def _whole(step: FaultStep, chat: bool) -> dict[str, Any]:
    text = "".join(step.chunks)
    choice: dict[str, Any] = {"index": 0, "finish_reason": step.finish_reason}
    choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
    answer: dict[str, Any] = {"id": "x", "object": "chat.completion", "choices": [choice]}
    if step.usage:
        answer["usage"] = _usage(step)
    return answer


def _chunk(piece: str, chat: bool, finish: str | None) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    choice.update({"delta": {"content": piece}} if chat else {"text": piece})
    return b"data: " + json.dumps({"id": "x", "choices": [choice]}).encode() + b"\n\n"


async def _stream(request: web.Request, step: FaultStep, chat: bool) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **step.headers})
    await response.prepare(request)
    if chat:  # vLLM and OpenAI open with a role-only delta: no content, so no TTFT
        await response.write(b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n')
    for n, piece in enumerate(step.chunks):
        if n == step.drop_after_chunks:
            return _drop(request)
        await asyncio.sleep(step.first_delay_s if n == 0 else step.chunk_delay_s)
        last = n == len(step.chunks) - 1
        await response.write(_chunk(piece, chat, step.finish_reason if last else None))
    if step.usage:
        usage = {"id": "x", "choices": [], "usage": _usage(step)}
        await response.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
