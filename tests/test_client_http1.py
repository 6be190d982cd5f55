"""``client.http1`` against real loopback servers that send scripted bytes, on both event loops
the package runs on (asyncio's in the pytest process, uvloop's in the runner's child).

Every server here is a real TCP (or TLS) listener on 127.0.0.1; the tests read what it received
(request bytes, connection count) and what the pool made of its answers.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from pytest_evalgate.client.http1 import EvalgateHttpPool, EvalgateHttpTarget
from pytest_evalgate.errors import EvalgateConfigError, EvalgateHttpError, EvalgateHttpTruncated
from tests.admissionkit import make_tls

Reply = bytes | Callable[[asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class Scripted:
    """A loopback server answering the n-th request (over all connections) with ``replies[n]``
    (the last one repeats): raw bytes written at once, or a coroutine given the writer. It
    records each request's raw bytes and counts connections."""

    def __init__(self, *replies: Reply, tls: ssl.SSLContext | None = None) -> None:
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.connections = 0
        self.tls = tls
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Scripted:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/v1/chat/completions"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = _content_length(head)
                self.requests.append(head + await reader.readexactly(length))
                reply = self.replies[min(len(self.requests) - 1, len(self.replies) - 1)]
                if isinstance(reply, bytes):
                    writer.write(reply)
                    await writer.drain()
                else:
                    await reply(writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Awaitable[None]], None]:
    """Run a test's coroutine on asyncio's loop or on uvloop's."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return lambda main: uvloop.run(main)
    return lambda main: asyncio.run(main)


def target(server: Scripted, scheme: str = "http") -> EvalgateHttpTarget:
    return EvalgateHttpTarget(server.url(scheme), {"Content-Type": "application/json"})


async def post(pool: EvalgateHttpPool, server: Scripted, body: bytes = b"{}") -> tuple[int, bytes]:
    response = await pool.evalgate_post(target(server), {"x-evalgate-identity": "s/c/1"}, body)
    try:
        return response.status, await response.evalgate_read()
    finally:
        response.evalgate_release()


def test_the_request_carries_host_headers_length_and_body_and_the_connection_is_reused(
    run: Callable[[Awaitable[None]], None],
) -> None:
    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(OK) as server:
            assert await post(pool, server, b'{"a": 1}') == (200, b"{}")
            assert await post(pool, server, b'{"b": 22}') == (200, b"{}")
            assert server.connections == 1  # kept alive
            first = server.requests[0]
            assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
            assert f"Host: 127.0.0.1:{server.port}\r\n".encode() in first
            assert b"Content-Type: application/json\r\n" in first
            assert b"x-evalgate-identity: s/c/1\r\n" in first
            assert first.endswith(b"Content-Length: 8\r\n\r\n" + b'{"a": 1}')
            assert server.requests[1].endswith(b'Content-Length: 9\r\n\r\n{"b": 22}')
        await pool.evalgate_close()

    run(main())


def test_a_chunked_body_arrives_whole_and_piece_by_piece(
    run: Callable[[Awaitable[None]], None],
) -> None:
    async def chunked(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"6\r\n world\r\n0\r\n\r\n")

    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(chunked) as server:
            response = await pool.evalgate_post(target(server), {}, b"{}")
            assert response.content_length is None
            pieces = [piece async for piece in response.evalgate_chunks()]
            response.evalgate_release()
            assert b"".join(pieces) == b"hello world" and len(pieces) == 2
            assert await post(pool, server) == (200, b"hello world")
            assert server.connections == 1  # a chunked message ends cleanly: reused
        await pool.evalgate_close()

    run(main())


def test_a_body_without_length_ends_with_its_connection_which_is_not_reused(
    run: Callable[[Awaitable[None]], None],
) -> None:
    async def until_close(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        await writer.drain()
        writer.close()

    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(until_close) as server:
            assert await post(pool, server) == (200, b"all of it")
            assert await post(pool, server) == (200, b"all of it")
            assert server.connections == 2
        await pool.evalgate_close()

    run(main())


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    ],
    ids=["content-length", "chunked"],
)
def test_a_body_cut_short_by_the_connection_is_truncated(
    run: Callable[[Awaitable[None]], None], reply: bytes
) -> None:
    async def short(writer: asyncio.StreamWriter) -> None:
        writer.write(reply)
        await writer.drain()
        writer.close()

    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(short) as server:
            with pytest.raises(EvalgateHttpTruncated, match="closed mid-body"):
                await post(pool, server)
        await pool.evalgate_close()

    run(main())


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (b"SMTP ready\r\n\r\n", "not an HTTP/1.1 response"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "not an HTTP/1.1 response"),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", "exceed 65536 bytes"),
    ],
    ids=["not-http", "bad-length", "huge-headers"],
)
def test_bytes_that_are_no_response_are_a_connection_error(
    run: Callable[[Awaitable[None]], None], reply: bytes, match: str
) -> None:
    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(reply, OK) as server:
            with pytest.raises(EvalgateHttpError, match=match) as caught:
                await post(pool, server)
            assert not isinstance(caught.value, EvalgateHttpTruncated)
            assert await post(pool, server) == (200, b"{}")  # a new connection works
            assert server.connections == 2
        await pool.evalgate_close()

    run(main())


def test_a_connection_closed_before_the_head_and_a_refused_one_are_connection_errors(
    run: Callable[[Awaitable[None]], None],
) -> None:
    async def drop(writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(drop) as server:
            with pytest.raises(EvalgateHttpError, match="closed the connection"):
                await post(pool, server)
            port = server.port
        gone = EvalgateHttpTarget(f"http://127.0.0.1:{port}/v1", {})
        with pytest.raises(EvalgateHttpError, match=f"cannot connect to 127.0.0.1:{port}"):
            await pool.evalgate_post(gone, {}, b"{}")
        await pool.evalgate_close()

    run(main())


def test_an_interim_response_is_skipped_for_the_final_one(
    run: Callable[[Awaitable[None]], None],
) -> None:
    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(b"HTTP/1.1 100 Continue\r\n\r\n" + OK) as server:
            assert await post(pool, server) == (200, b"{}")
        await pool.evalgate_close()

    run(main())


def test_bytes_after_the_message_and_an_abandoned_body_close_the_connection(
    run: Callable[[Awaitable[None]], None],
) -> None:
    async def slow(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234")
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(b"56789")

    async def main() -> None:
        pool = EvalgateHttpPool()
        trailing = OK + b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfake"
        big: Reply = slow
        async with Scripted(trailing, big, OK) as server:
            assert await post(pool, server) == (200, b"{}")
            await asyncio.sleep(0.05)  # the second message arrives on the idle connection
            response = await pool.evalgate_post(target(server), {}, b"{}")
            assert (response.status, server.connections) == (200, 2)  # not the polluted one
            assert await response.evalgate_read_up_to(4) == b"0123"
            response.evalgate_release()  # read short of its end: closed, never reused
            assert await post(pool, server) == (200, b"{}")
            assert server.connections == 3
        await pool.evalgate_close()

    run(main())


def test_a_large_body_pauses_reading_and_arrives_whole(
    run: Callable[[Awaitable[None]], None],
) -> None:
    body = bytes(range(256)) * (6 * 4096)  # 6 MiB: past the pause mark several times

    async def large(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()

    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(large) as server:
            response = await pool.evalgate_post(target(server), {}, b"{}")
            await asyncio.sleep(0.2)  # let the sender run ahead of the reader
            got = await asyncio.wait_for(response.evalgate_read(), 30)  # a lost resume fails
            response.evalgate_release()
            assert response.content_length == len(body) and got == body
        await pool.evalgate_close()

    run(main())


def test_idle_connections_past_keepalive_and_ones_the_server_closed_are_not_reused(
    run: Callable[[Awaitable[None]], None],
) -> None:
    async def then_close(writer: asyncio.StreamWriter) -> None:
        writer.write(OK)
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()  # after the response, while the connection idles in the pool

    async def main() -> None:
        pool = EvalgateHttpPool(keepalive_s=0.1)
        async with Scripted(OK) as server:
            assert await post(pool, server) == (200, b"{}")
            await asyncio.sleep(0.2)
            assert await post(pool, server) == (200, b"{}")
            assert server.connections == 2
        async with Scripted(then_close, OK) as server:
            assert await post(pool, server) == (200, b"{}")
            await asyncio.sleep(0.2)
            assert await post(pool, server) == (200, b"{}")  # no error from the closed one
            assert server.connections == 2
        await pool.evalgate_close()

    run(main())


def test_response_headers_are_case_insensitive_and_the_first_of_repeats_wins(
    run: Callable[[Awaitable[None]], None],
) -> None:
    reply = (
        b"HTTP/1.1 429 Too Many\r\nRetry-After: 3\r\nretry-after: 9\r\n"
        b"X-RateLimit-Reset-Tokens: 6m0s\r\nContent-Length: 0\r\n\r\n"
    )

    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(reply) as server:
            response = await pool.evalgate_post(target(server), {}, b"{}")
            assert await response.evalgate_read() == b""
            response.evalgate_release()
            assert response.status == 429
            assert response.headers.get("retry-after") == "3"
            assert response.headers["RETRY-AFTER"] == "3"
            assert response.headers.get("x-ratelimit-reset-tokens") == "6m0s"
            assert response.headers.get("Location") is None
        await pool.evalgate_close()

    run(main())


def test_tls_verifies_the_certificate_and_trusts_ssl_cert_file(
    run: Callable[[Awaitable[None]], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls = make_tls(tmp_path / "tls")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)

    async def main() -> None:
        async with Scripted(OK, tls=context) as server:
            untrusted = EvalgateHttpPool()
            with pytest.raises(EvalgateHttpError, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusted.evalgate_post(target(server, "https"), {}, b"{}")
            await untrusted.evalgate_close()
            monkeypatch.setenv("SSL_CERT_FILE", tls.cert)
            trusted = EvalgateHttpPool()
            assert await post_https(trusted, server) == (200, b"{}")
            await trusted.evalgate_close()
            assert server.requests and b"Host: 127.0.0.1:" in server.requests[-1]

    run(main())


async def post_https(pool: EvalgateHttpPool, server: Scripted) -> tuple[int, bytes]:
    response = await pool.evalgate_post(target(server, "https"), {}, b"{}")
    try:
        return response.status, await response.evalgate_read()
    finally:
        response.evalgate_release()


@pytest.mark.parametrize(
    ("url", "headers"),
    [
        ("ftp://127.0.0.1/v1", {}),
        ("http:///v1", {}),
        ("http://127.0.0.1:99999/v1", {}),
        ("http://127.0.0.1/v1", {"x-evalgate-identity": "a\r\nInjected: 1"}),
        ("http://127.0.0.1/v1", {"Bad Name": "1"}),
    ],
)
def test_bad_urls_and_headers_are_refused_before_any_byte(
    url: str, headers: dict[str, str]
) -> None:
    with pytest.raises(EvalgateConfigError):
        EvalgateHttpTarget(url, headers)


def test_default_ports_are_left_out_of_host_and_ipv6_hosts_are_bracketed() -> None:
    plain = EvalgateHttpTarget("http://example.test/v1/chat/completions?x=1", {})
    assert plain.evalgate_request({}, b"").startswith(
        b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: example.test\r\n"
    )
    assert plain.origin == (False, "example.test", 80)
    secure = EvalgateHttpTarget("https://[::1]:8443/v1", {})
    assert b"Host: [::1]:8443\r\n" in secure.evalgate_request({}, b"")
    assert secure.origin == (True, "::1", 8443)
    with pytest.raises(EvalgateConfigError, match="a header may not hold"):
        plain.evalgate_request({"x": "\n"}, b"")


def test_bytes_arriving_on_an_idle_connection_retire_it(
    run: Callable[[Awaitable[None]], None],
) -> None:
    async def then_noise(writer: asyncio.StreamWriter) -> None:
        writer.write(OK)
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfake")  # nobody asked

    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(then_noise, OK) as server:
            assert await post(pool, server) == (200, b"{}")
            await asyncio.sleep(0.15)
            assert await post(pool, server) == (200, b"{}")  # the real answer, not "fake"
            assert server.connections == 2
        await pool.evalgate_close()

    run(main())


def test_warming_opens_idle_connections_that_the_next_requests_use(
    run: Callable[[Awaitable[None]], None],
) -> None:
    async def main() -> None:
        pool = EvalgateHttpPool()
        async with Scripted(OK) as server:
            assert await pool.evalgate_warm(target(server), 5) == 5
            await asyncio.sleep(0.05)
            assert (server.connections, server.requests) == (5, [])  # no request on them
            assert await pool.evalgate_warm(target(server), 5) == 0  # already there
            answers = await asyncio.gather(*(post(pool, server) for _ in range(5)))
            assert answers == [(200, b"{}")] * 5
            assert server.connections == 5  # every request found a warm connection
            port = server.port
        gone = EvalgateHttpTarget(f"http://127.0.0.1:{port}/v1", {})
        assert await pool.evalgate_warm(gone, 3) == 0  # refused: nothing opened, no error
        await pool.evalgate_close()

    run(main())
