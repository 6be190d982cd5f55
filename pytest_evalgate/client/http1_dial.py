"""Opening one connection for ``client.http1``'s pool: directly, or through the proxy.

A direct target is dialled over TCP (TLS for ``https``, certificate and host name verified). A
target behind a proxy (``client.proxy``) is dialled at the proxy: ``http`` targets are sent
there in absolute form over a plain connection; ``https`` targets first open a
``CONNECT host:port`` tunnel (any answer but a 2xx is an ``EvalgateHttpError`` naming the proxy
without its credentials), then speak TLS to the target through it. Every failure to connect is
an ``EvalgateHttpError`` whose cause is the ``OSError`` or ``ssl.SSLError`` (``client.checks``
tells a refusal by it). ``tls`` gives the pool's one TLS context, made when first needed.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import cast

from pytest_evalgate.client.http1_conn import EVALGATE_HEAD_MAX, EvalgateHttpConnection
from pytest_evalgate.client.http1_head import EvalgateHttpTarget
from pytest_evalgate.client.proxy import EvalgateProxy
from pytest_evalgate.errors import EvalgateHttpError

__all__ = ["evalgate_dial"]

_Tls = Callable[[], ssl.SSLContext]


async def evalgate_dial(target: EvalgateHttpTarget, tls: _Tls) -> EvalgateHttpConnection:
    """A new connection to ``target`` (through its proxy, if it has one), ready for a request."""
    if target.proxy is not None:
        return await _dial_proxy(target, target.proxy, tls)
    return await _dial_direct(target, tls)


async def _dial_direct(target: EvalgateHttpTarget, tls: _Tls) -> EvalgateHttpConnection:
    loop = asyncio.get_running_loop()
    context = tls() if target.tls else None
    route = target.route
    try:
        _transport, connection = await loop.create_connection(
            lambda: EvalgateHttpConnection(route),
            target.host,
            target.port,
            ssl=context,
            server_hostname=target.host if context else None,
        )
    except (OSError, ssl.SSLError) as exc:
        where = f"{target.host}:{target.port}"
        reason = f"cannot connect to {where} ({type(exc).__name__}: {exc})"
        raise EvalgateHttpError(reason) from exc  # the cause tells a refusal (client.checks)
    return connection


async def _dial_proxy(
    target: EvalgateHttpTarget, proxy: EvalgateProxy, tls: _Tls
) -> EvalgateHttpConnection:
    loop = asyncio.get_running_loop()
    route = target.route
    try:
        if not target.tls:
            _transport, connection = await loop.create_connection(
                lambda: EvalgateHttpConnection(route), proxy.host, proxy.port
            )
            return connection
        transport, tunnel = await loop.create_connection(_EvalgateTunnel, proxy.host, proxy.port)
    except OSError as exc:
        reason = f"cannot connect to the proxy {proxy.shown} ({type(exc).__name__}: {exc})"
        raise EvalgateHttpError(reason) from exc
    try:
        return await _tunnel(target, proxy, transport, tunnel, tls)
    except BaseException:
        # abort, not close: a graceful close waits to flush what TLS left unsent (its alert),
        # which on uvloop outlives the loop when the peer has reset the connection
        transport.abort()
        raise


async def _tunnel(
    target: EvalgateHttpTarget,
    proxy: EvalgateProxy,
    transport: asyncio.BaseTransport,
    tunnel: _EvalgateTunnel,
    tls: _Tls,
) -> EvalgateHttpConnection:
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
        secure = await loop.start_tls(raw, tunnel, tls(), server_hostname=target.host)
    except (OSError, ssl.SSLError) as exc:
        reason = f"{where}: TLS to {target.authority} failed ({type(exc).__name__}: {exc})"
        raise EvalgateHttpError(reason) from exc
    if secure is None:
        raise EvalgateHttpError(f"{where}: the tunnel closed during TLS")
    connection = EvalgateHttpConnection(target.route)
    secure.set_protocol(connection)
    connection.connection_made(secure)
    return connection


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
        elif len(self._buffer) > EVALGATE_HEAD_MAX:
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
