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

This module is the pool; one connection and the response it reads are ``client.http1_conn``'s,
opening a connection (directly, or through a proxy's ``CONNECT`` tunnel) ``client.http1_dial``'s
and a request's fixed head ``client.http1_head``'s.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping

from pytest_evalgate.client.http1_conn import (
    EvalgateHttpConnection,
    EvalgateHttpResponse,
    EvalgateRoute,
)
from pytest_evalgate.client.http1_dial import evalgate_dial
from pytest_evalgate.client.http1_head import EvalgateHeaders, EvalgateHttpTarget
from pytest_evalgate.errors import EvalgateHttpError

__all__ = ["EvalgateHeaders", "EvalgateHttpPool", "EvalgateHttpTarget"]


class EvalgateHttpPool:
    """Kept-alive connections per origin for one process's event loop (see the module)."""

    def __init__(self, keepalive_s: float = 30.0) -> None:
        self._keepalive_s = keepalive_s
        self._idle: dict[EvalgateRoute, list[EvalgateHttpConnection]] = {}
        self._open: set[EvalgateHttpConnection] = set()
        self._tls: ssl.SSLContext | None = None

    async def evalgate_post(
        self, target: EvalgateHttpTarget, headers: Mapping[str, str], body: bytes
    ) -> EvalgateHttpResponse:
        """Send one request; returns once its response's head arrived (see the module)."""
        request = target.evalgate_request(headers, body)
        connection = self._take(target.route) or await self._dial(target)
        response = EvalgateHttpResponse(connection, self.evalgate_give_back)
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
            if isinstance(connection, EvalgateHttpConnection):
                self.evalgate_give_back(connection)
                opened += 1
            elif not isinstance(connection, EvalgateHttpError):
                raise connection  # cancellation or a bug, never a connection problem
        return opened

    def evalgate_give_back(self, connection: EvalgateHttpConnection) -> None:
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

    def _take(self, route: EvalgateRoute) -> EvalgateHttpConnection | None:
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

    def _forget(self, connection: EvalgateHttpConnection) -> None:
        connection.evalgate_close()
        self._open.discard(connection)

    async def _dial(self, target: EvalgateHttpTarget) -> EvalgateHttpConnection:
        connection = await evalgate_dial(target, self._context)
        self._open = {c for c in self._open if not c.closed}
        self._open.add(connection)
        return connection

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls
