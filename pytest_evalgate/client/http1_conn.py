"""One HTTP/1.1 connection of ``client.http1``'s pool and the response it is reading.

``EvalgateHttpConnection`` is an asyncio protocol that parses one response at a time with
httptools' callbacks (``1xx`` interim responses skipped, headers capped at
``EVALGATE_HEAD_MAX`` bytes, reading paused past ``_PAUSE_BYTES`` unread).
``EvalgateHttpResponse`` is that response: status and headers at once, the body as it arrives.
A response read to its end is given back through the ``give_back`` its pool passed
(``EvalgateHttpPool.evalgate_give_back``) when the server keeps the connection alive; any other
closes its connection. The contracts are ``client.http1``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import cast

import httptools

from pytest_evalgate.client.http1_head import EvalgateHeaders
from pytest_evalgate.client.proxy import EvalgateProxy
from pytest_evalgate.errors import EvalgateHttpError, EvalgateHttpTruncated

__all__ = [
    "EVALGATE_HEAD_MAX",
    "EvalgateHttpConnection",
    "EvalgateHttpResponse",
    "EvalgateRoute",
]

_PAUSE_BYTES = 1 << 20  # unread body bytes at which the socket's reading pauses
EVALGATE_HEAD_MAX = 1 << 16
"""Bytes of header names and values one response (or a proxy's answer to CONNECT) may send."""

EvalgateRoute = tuple[bool, str, int, EvalgateProxy | None]
"""(TLS, host, port, proxy): the key of one pool's kept-alive connections."""


class EvalgateHttpResponse:
    """One response: status and headers at once, the body as it arrives (see the module)."""

    def __init__(
        self,
        connection: EvalgateHttpConnection,
        give_back: Callable[[EvalgateHttpConnection], None],
    ) -> None:
        self._connection = connection
        self._give_back = give_back
        self.status = 0
        self.headers = EvalgateHeaders([])
        self.content_length: int | None = None
        self.close_delimited = False  # no length, no chunks: the body ends with its connection
        self._chunks: list[bytes] = []
        self._unread = 0
        self._complete = False
        self._keep_alive = False
        self._error: EvalgateHttpError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._released = False

    async def evalgate_read(self) -> bytes:
        """The whole body."""
        parts = [part async for part in self.evalgate_chunks()]
        return b"".join(parts)

    async def evalgate_read_up_to(self, limit: int) -> bytes:
        """The body's first ``limit`` bytes at most (the rest is left unread)."""
        parts: list[bytes] = []
        size = 0
        async for part in self.evalgate_chunks():
            parts.append(part)
            size += len(part)
            if size >= limit:
                break
        return b"".join(parts)[:limit]

    async def evalgate_chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive: each piece is everything that arrived since the
        previous one (so the pieces of one network read come together, at one time)."""
        while True:
            if self._chunks:
                chunks = self._chunks
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._unread = 0
                self._connection.evalgate_consumed(0)
                yield data
                continue
            if self._error is not None:
                raise self._error
            if self._complete:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def evalgate_release(self) -> None:
        """Give the connection back when this response was read to its end and may be reused;
        close it otherwise. Safe to call more than once."""
        if self._released:
            return
        self._released = True
        reusable = self._complete and self._keep_alive and self._error is None
        if reusable and not self._chunks:
            self._give_back(self._connection)
        else:
            self._connection.evalgate_close()

    # the connection's side --------------------------------------------------------------------

    def evalgate_head(self, status: int, headers: EvalgateHeaders) -> None:
        self.status = status
        self.headers = headers
        length = headers.get("content-length")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self.content_length = int(length) if length and length.isdigit() and not chunked else None
        self.close_delimited = self.content_length is None and not chunked

    def evalgate_feed(self, data: bytes) -> int:
        """Buffer body bytes; returns how many are unread now."""
        self._chunks.append(data)
        self._unread += len(data)
        self._wake()
        return self._unread

    def evalgate_complete(self, keep_alive: bool) -> None:
        self._complete = True
        self._keep_alive = keep_alive
        self._wake()

    def evalgate_fail(self, error: EvalgateHttpError) -> None:
        if not self._complete and self._error is None:
            self._error = error
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class EvalgateHttpConnection(asyncio.Protocol):
    """One HTTP/1.1 connection: one response at a time, parsed by httptools' callbacks."""

    def __init__(self, route: EvalgateRoute) -> None:
        self.route = route
        self.idle_since = 0.0
        self.closed = False
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._response: EvalgateHttpResponse | None = None
        self._head: asyncio.Future[None] | None = None
        self._pairs: list[tuple[str, str]] = []
        self._head_bytes = 0
        self._interim = False
        self._paused = False

    def evalgate_send(self, response: EvalgateHttpResponse, request: bytes) -> asyncio.Future[None]:
        """Write ``request``; the returned future is done when the response's head arrived."""
        if self.closed or self._transport is None or self._transport.is_closing():
            raise EvalgateHttpError("the connection closed before the request was sent")
        self._response = response
        self._head = asyncio.get_running_loop().create_future()
        self._pairs = []
        self._head_bytes = 0
        self._transport.write(request)
        return self._head

    def evalgate_consumed(self, unread: int) -> None:
        if self._paused and unread < _PAUSE_BYTES // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    def evalgate_close(self) -> None:
        self.closed = True
        self._response = None
        if self._transport is not None:
            self._transport.close()

    # asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transports are not asyncio.Transport subclasses, but have its methods.
        self._transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        if self._response is None:  # bytes nobody asked for: never reuse this connection
            self.evalgate_close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._broken(EvalgateHttpError(f"not an HTTP/1.1 response ({_reason(exc)})"))

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost says what the end means

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self._response
        self._response = None
        if response is None:
            return
        if self._head is not None and not self._head.done():
            why = f" ({type(exc).__name__}: {exc})" if exc else ""
            self._fail_head(EvalgateHttpError(f"the server closed the connection{why}"))
        elif response.close_delimited:
            response.evalgate_complete(keep_alive=False)  # a body that ends with its connection
        else:
            got = "" if response.content_length is None else f" of {response.content_length}"
            response.evalgate_fail(EvalgateHttpTruncated(f"the connection closed mid-body{got}"))

    # httptools' callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._response is None:  # a second message after the one asked for: never reuse
            self.closed = True
            if self._transport is not None:
                self._transport.close()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if self._head_bytes <= EVALGATE_HEAD_MAX:
            self._pairs.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim response: its final one follows
            self._interim = True
            self._pairs = []
            return
        if self._head_bytes > EVALGATE_HEAD_MAX:
            raise EvalgateHttpError(f"the response's headers exceed {EVALGATE_HEAD_MAX} bytes")
        headers = EvalgateHeaders(self._pairs)
        response = self._response
        if response is None:
            return
        response.evalgate_head(status, headers)
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        response = self._response
        if response is None or response.evalgate_feed(body) <= _PAUSE_BYTES:
            return
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        response = self._response
        self._response = None
        if response is not None:
            response.evalgate_complete(keep_alive=self._parser.should_keep_alive())

    # failures ---------------------------------------------------------------------------------

    def _broken(self, error: EvalgateHttpError) -> None:
        response = self._response
        self.evalgate_close()
        if self._head is not None and not self._head.done():
            self._fail_head(error)
        elif response is not None:
            response.evalgate_fail(error)

    def _fail_head(self, error: EvalgateHttpError) -> None:
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)


def _reason(exc: httptools.HttpParserError) -> str:
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, EvalgateHttpError):
        return str(cause)
    return str(exc) or type(exc).__name__
