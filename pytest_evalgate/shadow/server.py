"""The shadow proxy served: one asyncio protocol per client connection, and the listener.

Requests are parsed by llhttp (``httptools``) and answered one after another on their
connection; a body over 32 MiB gets ``413``, unparseable bytes ``400``, both closing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import httptools

from pytest_evalgate.errors import EvalgateHttpError
from pytest_evalgate.shadow.proxy import EvalgateShadowProxy
from pytest_evalgate.shadow.wire import Request, error_body, whole

_REQUEST_MAX = 32 << 20


class EvalgateShadowConnection(asyncio.Protocol):
    """One client connection: requests parsed by llhttp, answered one after another."""

    def __init__(self, proxy: EvalgateShadowProxy) -> None:
        self._proxy = proxy
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._queue: list[Request] = []
        self._busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self._close(whole(400, "application/json", error_body("bad request"), False))

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def on_message_begin(self) -> None:
        self._url, self._headers, self._body, self._size = b"", {}, [], 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > _REQUEST_MAX:
            self._close(whole(413, "application/json", error_body("request too large"), False))
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        method = self._parser.get_method().decode("ascii", errors="replace")
        path = self._url.decode("latin-1")
        keep = self._parser.should_keep_alive()
        self._queue.append(Request(method, path, self._headers, b"".join(self._body), keep))
        if not self._busy:
            self._busy = True
            asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        while self._queue and self._transport is not None:
            request = self._queue.pop(0)
            try:
                await self._proxy.handle(request, self._write)
            except EvalgateHttpError:
                self._close(b"")  # stable broke mid-answer: the client sees the cut, as direct
                break
            if not request.keep_alive:
                self._close(b"")
        self._busy = False

    def _write(self, data: bytes) -> None:
        if self._transport is not None:
            self._transport.write(data)

    def _close(self, data: bytes) -> None:
        if self._transport is not None:
            if data:
                self._transport.write(data)
            self._transport.close()
            self._transport = None


async def evalgate_shadow_listen(
    proxy: EvalgateShadowProxy,
    host: str,
    port: int,
    ready: Callable[[int], None],
    stop: asyncio.Event,
) -> None:
    """Serve ``proxy`` on ``host:port`` until ``stop`` is set, then close it (flushing pairs);
    ``ready(port)`` once bound."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: EvalgateShadowConnection(proxy), host, port)
    flusher = loop.create_task(proxy.flush_every(stop))
    try:
        ready(server.sockets[0].getsockname()[1])
        await stop.wait()
    finally:
        server.close()
        await flusher
        await proxy.close()
