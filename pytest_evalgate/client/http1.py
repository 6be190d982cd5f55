"""A lean HTTP/1.1 client for the endpoint calls: asyncio protocols and httptools' parser.

Why not aiohttp (which this client used until issue 18's sixth pass): in the runner's child,
every answer's handling runs on one event loop while answers arrive in bursts, so the client's
CPU per request is paid again as latency by the answers behind it. On this 2-core machine, 64
requests in flight against a 50 ms endpoint, a bare aiohttp loop costs ~0.20 ms of CPU per
request and reaches ~94 % of the endpoint bound; the same loop over asyncio protocols with a
prepared request head costs ~0.04 ms and reaches ~97 % (``bench/client_overhead.py``,
``bench/README.md``). The parsing is llhttp's (httptools, the parser uvloop's authors keep and
uvicorn uses): status line, headers, ``Content-Length``, chunked bodies and their errors are
not hand-written here.

Contracts
---------
- ``EvalgateHttpTarget(url, headers)`` (``client.http1_head``) is one URL and its fixed headers,
  encoded once; a URL that is not ``http(s)://host[:port]/path`` and a header with a line break
  are ``EvalgateConfigError``.
- ``EvalgateHttpPool.evalgate_post(target, headers, body)`` sends one ``POST`` on an idle
  kept-alive connection to the target's origin (the most recently used one) or on a new one,
  and returns an ``EvalgateHttpResponse`` once the status line and headers have arrived
  (``1xx`` interim responses are skipped).
- It raises ``EvalgateHttpError`` when no connection can be opened, the connection ends before
  the response's head, or the bytes are not an HTTP/1.1 response; the body's readers raise
  ``EvalgateHttpTruncated`` when the connection ends before the body's end (its
  ``Content-Length``, or the last chunk). A body with neither ends with the connection.
- The caller calls ``evalgate_release()`` when done with a response (in a ``finally``): a
  response read to its end gives its connection back to the pool when the server keeps it
  alive; any other response (cut short, abandoned, cancelled) closes its connection, so no
  connection is ever reused in the middle of a message.
- Proxies: a target made with a proxy (``client.proxy``, from the environment's proxy
  variables) is dialled at the proxy: ``http`` targets send their requests there in absolute
  form, ``https`` targets first open a ``CONNECT host:port`` tunnel (any answer but a 2xx is an
  ``EvalgateHttpError`` naming the proxy without its credentials) and then speak TLS to the
  target through it, verifying the target's certificate and host name. Kept-alive connections
  are shared by route, (origin, proxy), never across proxies.
- Not here, on purpose: redirects (the caller treats a 3xx as an error), cookies, compression
  (none is asked for: no ``Accept-Encoding``, so servers send identity), ``Expect: 100-continue``.
- TLS: ``https`` origins use ``ssl.create_default_context()`` (certificates and host names
  verified), made once per pool when the first one is dialled.
- Connections are not counted here: the caller's limiter bounds the attempts in flight and a
  connection serves one attempt at a time, so at most ``max_concurrency`` are busy. Idle ones
  older than ``keepalive_s`` are closed when next looked at, all of them by
  ``evalgate_close``. ``evalgate_warm(target, count)`` opens connections ahead of their
  requests (the runner's child does while a candidate's first request is out alone), so the
  requests that follow do not each pay a connect (and a TLS handshake) on the way.
- A body is buffered until read; past ``_PAUSE_BYTES`` unread the socket's reading pauses (a
  fast or hostile sender cannot fill memory ahead of the reader, whose caps then stop it).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import cast

import httptools

from pytest_evalgate.client.http1_head import EvalgateHeaders, EvalgateHttpTarget
from pytest_evalgate.client.proxy import EvalgateProxy
from pytest_evalgate.errors import EvalgateHttpError, EvalgateHttpTruncated

__all__ = ["EvalgateHeaders", "EvalgateHttpPool", "EvalgateHttpResponse", "EvalgateHttpTarget"]

_PAUSE_BYTES = 1 << 20  # unread body bytes at which the socket's reading pauses
_HEAD_MAX = 1 << 16  # bytes of header names and values one response may send

_Route = tuple[bool, str, int, EvalgateProxy | None]  # (TLS, host, port, proxy): one pool's key


class EvalgateHttpResponse:
    """One response: status and headers at once, the body as it arrives (see the module)."""

    def __init__(self, connection: _EvalgateConnection, pool: EvalgateHttpPool) -> None:
        self._connection = connection
        self._pool = pool
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
            self._pool.evalgate_give_back(self._connection)
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


class _EvalgateConnection(asyncio.Protocol):
    """One HTTP/1.1 connection: one response at a time, parsed by httptools' callbacks."""

    def __init__(self, route: _Route) -> None:
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
        if self._head_bytes <= _HEAD_MAX:
            self._pairs.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim response: its final one follows
            self._interim = True
            self._pairs = []
            return
        if self._head_bytes > _HEAD_MAX:
            raise EvalgateHttpError(f"the response's headers exceed {_HEAD_MAX} bytes")
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


class _EvalgateTunnel(asyncio.Protocol):
    """A connection to a proxy until its answer to ``CONNECT`` arrived (then TLS takes over)."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        if self.answer.done():
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end >= 0:
            self.answer.set_result(self._buffer[:end])  # a 2xx has no body: nothing follows
        elif len(self._buffer) > _HEAD_MAX:
            self.answer.set_exception(
                EvalgateHttpError("the proxy's answer to CONNECT is too long")
            )

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            why = f" ({type(exc).__name__}: {exc})" if exc else ""
            self.answer.set_exception(EvalgateHttpError(f"the proxy closed the tunnel{why}"))


def _connect_status(head: bytes) -> str:
    """The status line of a proxy's answer to ``CONNECT``, or raise when it is not a 2xx."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")[:200]
    fields = line.split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not fields[1].startswith("2"):
        raise EvalgateHttpError(f"answered {line!r}")
    return line


def _reason(exc: httptools.HttpParserError) -> str:
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, EvalgateHttpError):
        return str(cause)
    return str(exc) or type(exc).__name__


class EvalgateHttpPool:
    """Kept-alive connections per origin for one process's event loop (see the module)."""

    def __init__(self, keepalive_s: float = 30.0) -> None:
        self._keepalive_s = keepalive_s
        self._idle: dict[_Route, list[_EvalgateConnection]] = {}
        self._open: set[_EvalgateConnection] = set()
        self._tls: ssl.SSLContext | None = None

    async def evalgate_post(
        self, target: EvalgateHttpTarget, headers: Mapping[str, str], body: bytes
    ) -> EvalgateHttpResponse:
        """Send one request; returns once its response's head arrived (see the module)."""
        request = target.evalgate_request(headers, body)
        connection = self._take(target.route) or await self._dial(target)
        response = EvalgateHttpResponse(connection, self)
        try:
            await connection.evalgate_send(response, request)
        except BaseException:
            response.evalgate_release()
            raise
        return response

    async def evalgate_warm(self, target: EvalgateHttpTarget, count: int) -> int:
        """Open connections to the target's origin until ``count`` are idle there (at once, no
        request on them); returns how many opened. Connections that fail are left out: a real
        request reports its own connection error."""
        idle = self._idle.get(target.route, [])
        need = count - sum(not connection.closed for connection in idle)
        if need <= 0:
            return 0
        dials = (self._dial(target) for _ in range(need))
        dialled = await asyncio.gather(*dials, return_exceptions=True)
        opened = 0
        for connection in dialled:
            if isinstance(connection, _EvalgateConnection):
                self.evalgate_give_back(connection)
                opened += 1
            elif not isinstance(connection, EvalgateHttpError):
                raise connection  # cancellation or a bug, never a connection problem
        return opened

    def evalgate_give_back(self, connection: _EvalgateConnection) -> None:
        if connection.closed:
            return
        connection.idle_since = asyncio.get_running_loop().time()
        self._idle.setdefault(connection.route, []).append(connection)

    async def evalgate_close(self) -> None:
        """Close every connection this pool opened."""
        for connection in list(self._open):
            connection.evalgate_close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports' connection_lost run

    def _take(self, route: _Route) -> _EvalgateConnection | None:
        idle = self._idle.get(route)
        if not idle:
            return None
        oldest = asyncio.get_running_loop().time() - self._keepalive_s
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.idle_since >= oldest:
                return connection
            self._forget(connection)
        return None

    def _forget(self, connection: _EvalgateConnection) -> None:
        connection.evalgate_close()
        self._open.discard(connection)

    async def _dial(self, target: EvalgateHttpTarget) -> _EvalgateConnection:
        if target.proxy is not None:
            connection = await self._dial_proxy(target, target.proxy)
        else:
            connection = await self._dial_direct(target)
        self._open = {c for c in self._open if not c.closed}
        self._open.add(connection)
        return connection

    async def _dial_direct(self, target: EvalgateHttpTarget) -> _EvalgateConnection:
        loop = asyncio.get_running_loop()
        tls = self._context() if target.tls else None
        route = target.route
        try:
            _transport, connection = await loop.create_connection(
                lambda: _EvalgateConnection(route),
                target.host,
                target.port,
                ssl=tls,
                server_hostname=target.host if tls else None,
            )
        except (OSError, ssl.SSLError) as exc:
            where = f"{target.host}:{target.port}"
            reason = f"cannot connect to {where} ({type(exc).__name__}: {exc})"
            raise EvalgateHttpError(reason) from exc  # the cause tells a refusal (client.checks)
        return connection

    async def _dial_proxy(
        self, target: EvalgateHttpTarget, proxy: EvalgateProxy
    ) -> _EvalgateConnection:
        loop = asyncio.get_running_loop()
        route = target.route
        try:
            if not target.tls:
                _transport, connection = await loop.create_connection(
                    lambda: _EvalgateConnection(route), proxy.host, proxy.port
                )
                return connection
            transport, tunnel = await loop.create_connection(
                _EvalgateTunnel, proxy.host, proxy.port
            )
        except OSError as exc:
            reason = f"cannot connect to the proxy {proxy.shown} ({type(exc).__name__}: {exc})"
            raise EvalgateHttpError(reason) from exc
        try:
            return await self._tunnel(target, proxy, transport, tunnel)
        except BaseException:
            # abort, not close: a graceful close waits to flush what TLS left unsent (its alert),
            # which on uvloop outlives the loop when the peer has reset the connection
            transport.abort()
            raise

    async def _tunnel(
        self,
        target: EvalgateHttpTarget,
        proxy: EvalgateProxy,
        transport: asyncio.BaseTransport,
        tunnel: _EvalgateTunnel,
    ) -> _EvalgateConnection:
        """``CONNECT`` through ``transport`` (to the proxy), then TLS to the target over it."""
        loop = asyncio.get_running_loop()
        raw = cast("asyncio.Transport", transport)
        raw.write(target.evalgate_connect())
        where = f"the proxy {proxy.shown} (CONNECT {target.authority})"
        try:
            _connect_status(await tunnel.answer)
        except EvalgateHttpError as exc:
            raise EvalgateHttpError(f"{where}: {exc}") from exc
        try:
            secure = await loop.start_tls(raw, tunnel, self._context(), server_hostname=target.host)
        except (OSError, ssl.SSLError) as exc:
            reason = f"{where}: TLS to {target.authority} failed ({type(exc).__name__}: {exc})"
            raise EvalgateHttpError(reason) from exc
        if secure is None:
            raise EvalgateHttpError(f"{where}: the tunnel closed during TLS")
        connection = _EvalgateConnection(target.route)
        secure.set_protocol(connection)
        connection.connection_made(secure)
        return connection

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls
