"""A small forwarding HTTP proxy on 127.0.0.1 for the client's proxy tests, run in a thread.

It speaks what an HTTP/1.1 proxy speaks to a client: ``CONNECT host:port`` opens a tunnel
(``200``, then bytes both ways); a request in absolute form (``POST http://host:port/path``)
is forwarded to that origin in origin form, and the origin's bytes are relayed back. On one
client connection the requests are read one after another (each needs a ``Content-Length``, as
the client always sends) over one upstream connection, so keep-alive works end to end.

``aliases`` maps host names to the addresses the proxy dials for them (a name only the proxy
can resolve, as behind a corporate proxy). With ``credentials`` (``user:password``) every
request and tunnel must carry the matching ``Proxy-Authorization: Basic``, else it is answered
``407``. It counts what it forwarded
(``requests``: absolute-form requests, ``tunnels``: CONNECTs) and keeps each request line and
each ``Proxy-Authorization`` it saw.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from urllib.parse import urlsplit


class Proxy:
    """Start with ``with Proxy() as proxy:``; ``proxy.url`` is ``http://127.0.0.1:<port>``."""

    def __init__(
        self, credentials: str | None = None, aliases: dict[str, str] | None = None
    ) -> None:
        self.credentials = credentials
        self.aliases = aliases or {}  # host names the proxy resolves itself (to loopback)
        self.requests = 0
        self.tunnels = 0
        self.refused = 0
        self.lines: list[str] = []
        self.authorizations: list[str] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Proxy:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        started.result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        stopped = asyncio.run_coroutine_threadsafe(self._stop(), self._loop)
        stopped.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        """Close the listener, then end the connections still served: a handler left pending
        when the loop closes is collected later, in another test, as an unraisable error."""
        if self._server is not None:
            self._server.close()
        handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def _authorized(self, head: bytes) -> bool:
        if self.credentials is None:
            return True
        wanted = "Basic " + base64.b64encode(self.credentials.encode()).decode()
        return _header(head, "proxy-authorization") == wanted

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self._saw(head)
            if not self._authorized(head):
                self.refused += 1
                writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n")
                writer.write(b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
                return
            method, target = head.split(b" ", 2)[:2]
            if method == b"CONNECT":
                await self._tunnel(target.decode(), reader, writer)
            else:
                await self._forward(head, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    def _saw(self, head: bytes) -> None:
        self.lines.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
        authorization = _header(head, "proxy-authorization")
        if authorization is not None:
            self.authorizations.append(authorization)

    async def _tunnel(
        self, authority: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        host, _, port = authority.rpartition(":")
        host = self.aliases.get(host, host.strip("[]"))
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        self.tunnels += 1
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await _both_ways(reader, writer, up_reader, up_writer)

    async def _forward(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        url = urlsplit(head.split(b" ", 2)[1].decode())
        up_reader, up_writer = await asyncio.open_connection(url.hostname, url.port or 80)
        relay = asyncio.ensure_future(_pipe(up_reader, writer))
        try:
            while True:
                up_writer.write(_origin_form(head) + await reader.readexactly(_length(head)))
                self.requests += 1
                await up_writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                self._saw(head)
        finally:
            relay.cancel()
            up_writer.close()


def _origin_form(head: bytes) -> bytes:
    """The request's head with its absolute URL made a path and its proxy header dropped."""
    first, rest = head.split(b"\r\n", 1)
    method, target, version = first.split(b" ", 2)
    url = urlsplit(target.decode())
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [line for line in rest.split(b"\r\n") if not line.lower().startswith(b"proxy-")]
    return b"\r\n".join([b" ".join([method, path.encode(), version]), *kept])


def _length(head: bytes) -> int:
    value = _header(head, "content-length")
    return int(value) if value else 0


def _header(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.encode():
            return value.strip().decode("latin-1")
    return None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def _both_ways(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    done = [
        asyncio.ensure_future(_pipe(reader, up_writer)),
        asyncio.ensure_future(_pipe(up_reader, writer)),
    ]
    await asyncio.wait(done, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        task.cancel()
