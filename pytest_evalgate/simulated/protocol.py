"""HTTP/1.1 for the simulator: request parsing, response framing, one asyncio Protocol per
connection. It knows nothing about models; a handler (``app.py``) answers each request.

Contracts
---------
- A request is a head (request line, ``Name: value`` lines, ``\\r\\n\\r\\n``) and a body of
  ``Content-Length`` bytes (default 0). The target loses its query; header names are lowercased,
  values stripped. A head over 64 KiB is 431, a malformed request line 400, a chunked body 411,
  a bad ``Content-Length`` 400 and a body over 16 MiB 413; each is answered, then the
  connection closes.
- Keep-alive: HTTP/1.1 unless ``Connection: close``; HTTP/1.0 only with ``Connection:
  keep-alive``. Pipelined requests are answered one at a time, in order.
- Every response carries ``x-evalgate-simulator: 1``; streamed ones are chunked.
- Counting: the handler marks a request counted (``begin_counted``); the connection then calls
  ``handler.end(status)`` once it is answered, ``end(None)`` when the client left first, or
  ``end(None, dropped=True)`` when a hang gave up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# EvalgateSimHttpError lives in the one tree; re-exported as this module's refusal.
from pytest_evalgate.errors import EvalgateSimHttpError as EvalgateSimHttpError
from pytest_evalgate.simulated.responses import evalgate_sim_error_body

EVALGATE_SIM_MAX_BODY = 16 * 1024 * 1024
EVALGATE_SIM_MAX_HEAD = 64 * 1024
_REASONS = {
    200: "OK", 307: "Temporary Redirect", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
    405: "Method Not Allowed", 411: "Length Required", 413: "Payload Too Large",
    429: "Too Many Requests", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 503: "Service Unavailable",
}  # fmt: skip


@dataclass(frozen=True)
class EvalgateSimRequest:
    """One parsed request: method, path (no query), lowercased headers, body, keep-alive."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    keep_alive: bool


def _sim_parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise EvalgateSimHttpError(400, "malformed request line") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return method, target.partition("?")[0], version, headers


def _sim_body_length(headers: Mapping[str, str]) -> int:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise EvalgateSimHttpError(
            411, "chunked request bodies are not supported; send Content-Length"
        )
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise EvalgateSimHttpError(400, "bad Content-Length") from None
    if not 0 <= length <= EVALGATE_SIM_MAX_BODY:
        raise EvalgateSimHttpError(413, "request body too large")
    return length


def evalgate_sim_parse(buffer: bytearray) -> tuple[EvalgateSimRequest, int] | None:
    """One complete request from the front of ``buffer`` and its size, or None if incomplete;
    raises :class:`EvalgateSimHttpError` for a request it refuses (module contract)."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > EVALGATE_SIM_MAX_HEAD:
            raise EvalgateSimHttpError(431, "request head too large")
        return None
    method, path, version, headers = _sim_parse_head(bytes(buffer[:end]))
    total = end + 4 + _sim_body_length(headers)
    if len(buffer) < total:
        return None
    connection = headers.get("connection", "").lower()
    keep = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
    request = EvalgateSimRequest(method, path, headers, bytes(buffer[end + 4 : total]), keep)
    return request, total


def evalgate_sim_head(
    status: int, content_type: str, extra: str, length: int | None, close: bool
) -> bytes:
    """A response head: ``Content-Length`` framing, or chunked when ``length`` is None;
    ``extra`` holds more header lines, each ending in CRLF."""
    framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\nContent-Type: {content_type}\r\n"
        f"{framing}\r\nx-evalgate-simulator: 1\r\n{extra}"
    )
    return (head + ("Connection: close\r\n\r\n" if close else "\r\n")).encode("latin-1")


def evalgate_sim_chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk holding ``data``."""
    return b"%x\r\n%b\r\n" % (len(data), data)


class EvalgateSimHandler(Protocol):
    """What a connection needs from the application that answers it."""

    connections: set[EvalgateSimProtocol]

    def dispatch(self, request: EvalgateSimRequest, proto: EvalgateSimProtocol) -> None:
        """Answer ``request`` through ``proto`` (``reply``, ``stream`` or ``hang``)."""

    def end(self, status: int | None, dropped: bool = False) -> None:
        """A counted request finished (see the module contract)."""


EvalgateSimWriter = Callable[["EvalgateSimProtocol"], Coroutine[Any, Any, None]]
"""A coroutine function writing a streamed response's events through the connection."""


class EvalgateSimProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection: requests are answered one at a time, in order.

    Written against asyncio directly rather than aiohttp.web: it gives exact control of
    pipelining, hangs, drops and disconnect counting, and in ``bench/simulator.py`` the whole
    simulator costs about what a bare aiohttp.web sleep-and-reply handler costs per request.
    """

    def __init__(self, app: EvalgateSimHandler) -> None:
        self.app = app
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._busy = False
        self._counted = False
        self._close = False
        self._pending: asyncio.TimerHandle | asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.app.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self._busy:
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.app.connections.discard(self)
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if self._busy and self._counted:
            self.app.end(None)
        self._busy = self._counted = False
        self.transport = None

    def _next(self) -> None:
        try:
            parsed = evalgate_sim_parse(self._buffer)
        except EvalgateSimHttpError as exc:
            self._busy, self._close = True, True
            self.reply(exc.status, evalgate_sim_error_body(str(exc), "invalid_request_error", None))
            return
        if parsed is not None:
            request, size = parsed
            del self._buffer[:size]
            self._busy, self._close = True, not request.keep_alive
            self.app.dispatch(request, self)

    def begin_counted(self) -> None:
        """Mark the current request as one the stats count until it ends."""
        self._counted = True

    def reply(self, status: int, body: bytes, extra: str = "", delay: float = 0.0) -> None:
        """Send one JSON response, after ``delay`` seconds if positive."""
        data = evalgate_sim_head(status, "application/json", extra, len(body), self._close) + body
        if delay > 0:
            loop = asyncio.get_running_loop()
            self._pending = loop.call_later(delay, self._send, status, data)
        else:
            self._send(status, data)

    def stream(self, status: int, chunks: EvalgateSimWriter) -> None:
        """Run ``chunks(self)`` (a coroutine function writing SSE) as this request's response."""
        assert self.transport is not None
        self.transport.write(evalgate_sim_head(status, "text/event-stream", "", None, self._close))
        self._pending = asyncio.get_running_loop().create_task(self._stream(status, chunks))

    async def _stream(self, status: int, chunks: EvalgateSimWriter) -> None:
        await chunks(self)
        self._send(status, b"0\r\n\r\n")

    def send_short(self, status: int, content_type: str, data: bytes, claimed: int) -> None:
        """Send ``data`` under a ``Content-Length`` of ``claimed`` bytes, then close: a body
        shorter than its head promised (the ``content_length_lie`` fault)."""
        self._close = True
        self._send(status, evalgate_sim_head(status, content_type, "", claimed, True) + data)

    def write_events(self, data: bytes) -> None:
        """Write already SSE-framed bytes as one HTTP chunk."""
        if self.transport is not None:
            self.transport.write(evalgate_sim_chunk(data))

    def hang(self, seconds: float) -> None:
        """Never answer; drop the connection after ``seconds`` (the client usually leaves first)."""
        self._pending = asyncio.get_running_loop().call_later(seconds, self._drop)

    def _drop(self) -> None:
        self._pending = None
        if self._counted:
            self.app.end(None, dropped=True)
        self._busy = self._counted = False  # connection_lost must not count it again
        if self.transport is not None:
            self.transport.close()

    def _send(self, status: int, data: bytes) -> None:
        self._pending = None
        if self.transport is None:
            return
        self.transport.write(data)
        if self._counted:
            self.app.end(status)
        self._busy = self._counted = False
        if self._close:
            self.transport.close()
        elif self._buffer:
            self._next()

    def abort(self) -> None:
        """Close at once (server shutdown)."""
        if self.transport is not None:
            self.transport.abort()
