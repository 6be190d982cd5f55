"""Unit tests of the simulator's HTTP layer (``simulated/protocol.py``).

Head parsing and framing are pure functions, tested directly. The connection class is tested
over real loopback sockets with a small handler of the tests' own (no model behind it): the
HTTP layer must work for any application that implements ``EvalgateSimHandler``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pytest_evalgate.simulated.protocol import (
    EVALGATE_SIM_MAX_BODY,
    EVALGATE_SIM_MAX_HEAD,
    EvalgateSimHttpError,
    EvalgateSimProtocol,
    EvalgateSimRequest,
    evalgate_sim_chunk,
    evalgate_sim_head,
    evalgate_sim_parse,
)


def request(head: str, body: bytes = b"") -> bytearray:
    return bytearray(head.replace("\n", "\r\n").encode("latin-1") + b"\r\n" + body)


def parsed(data: bytearray) -> tuple[EvalgateSimRequest, int]:
    result = evalgate_sim_parse(data)
    assert result is not None
    return result


def refused(data: bytearray) -> EvalgateSimHttpError:
    with pytest.raises(EvalgateSimHttpError) as info:
        evalgate_sim_parse(data)
    return info.value


# --------------------------------------------------------------------------- parsing


def test_a_complete_request_parses_with_its_size() -> None:
    data = request("POST /v1/completions HTTP/1.1\nHost: x\nContent-Length: 5\n", b"hello")
    req, size = parsed(data)
    assert (req.method, req.path, req.body, req.keep_alive) == (
        "POST",
        "/v1/completions",
        b"hello",
        True,
    )
    assert size == len(data) and req.headers["host"] == "x"


def test_an_incomplete_head_or_body_waits_without_consuming() -> None:
    assert evalgate_sim_parse(bytearray(b"POST /v1/completions HTTP/1.1\r\nContent-Len")) is None
    data = request("POST / HTTP/1.1\nContent-Length: 10\n", b"12345")
    assert evalgate_sim_parse(data) is None
    assert data.endswith(b"12345")  # nothing was taken from the buffer
    data += b"67890"
    assert parsed(data)[0].body == b"1234567890"


def test_a_body_may_hold_a_blank_line() -> None:
    body = b"a\r\n\r\nb"
    req, size = parsed(request(f"POST / HTTP/1.1\nContent-Length: {len(body)}\n", body))
    assert req.body == body and size == len(body) + len(
        b"POST / HTTP/1.1\r\nContent-Length: 7\r\n\r\n"
    )


def test_pipelined_requests_come_out_one_at_a_time() -> None:
    first = request("POST /a HTTP/1.1\nContent-Length: 1\n", b"1")
    data = first + request("GET /b HTTP/1.1\n")
    req, size = parsed(data)
    assert (req.path, size) == ("/a", len(first))
    del data[:size]
    assert parsed(data)[0].path == "/b"


def test_no_content_length_means_an_empty_body() -> None:
    data = request("GET /v1/models HTTP/1.1\n") + b"GET /next"
    req, size = parsed(data)
    assert req.body == b"" and data[size:] == b"GET /next"


def test_the_query_is_dropped_from_the_path() -> None:
    assert parsed(request("GET /v1/models?limit=1&x=?y HTTP/1.1\n"))[0].path == "/v1/models"


def test_header_names_are_lowercased_and_values_stripped() -> None:
    head = "POST / HTTP/1.1\nContent-LENGTH:   2  \nX-Evalgate-Identity: rev/a:b/c/0\nOdd\n"
    req, _ = parsed(request(head, b"{}"))
    assert req.headers["content-length"] == "2"
    assert req.headers["x-evalgate-identity"] == "rev/a:b/c/0"  # only the first colon splits
    assert req.headers["odd"] == ""


@pytest.mark.parametrize(
    ("version", "connection", "keep"),
    [
        ("HTTP/1.1", None, True),
        ("HTTP/1.1", "keep-alive", True),
        ("HTTP/1.1", "close", False),
        ("HTTP/1.1", "Close", False),
        ("HTTP/1.0", None, False),
        ("HTTP/1.0", "Keep-Alive", True),
        ("HTTP/1.0", "close", False),
    ],
)
def test_keep_alive_follows_version_and_connection(
    version: str, connection: str | None, keep: bool
) -> None:
    head = f"GET / {version}\n" + ("" if connection is None else f"Connection: {connection}\n")
    assert parsed(request(head))[0].keep_alive is keep


def test_a_malformed_request_line_is_400() -> None:
    assert refused(bytearray(b"NONSENSE\r\n\r\n")).status == 400
    assert refused(bytearray(b"GET /\r\n\r\n")).status == 400


@pytest.mark.parametrize("encoding", ["chunked", "Chunked", "gzip, chunked"])
def test_chunked_request_bodies_are_411(encoding: str) -> None:
    error = refused(request(f"POST / HTTP/1.1\nTransfer-Encoding: {encoding}\n"))
    assert error.status == 411 and "Content-Length" in str(error)


@pytest.mark.parametrize(
    ("length", "status"),
    [("abc", 400), ("1.5", 400), ("-1", 413), (str(EVALGATE_SIM_MAX_BODY + 1), 413)],
)
def test_bad_content_lengths_are_refused(length: str, status: int) -> None:
    assert refused(request(f"POST / HTTP/1.1\nContent-Length: {length}\n")).status == status


def test_the_largest_body_allowed_is_awaited() -> None:
    assert (
        evalgate_sim_parse(request(f"POST / HTTP/1.1\nContent-Length: {EVALGATE_SIM_MAX_BODY}\n"))
        is None
    )


def test_a_head_over_the_limit_without_its_end_is_431() -> None:
    assert evalgate_sim_parse(bytearray(b"G" * EVALGATE_SIM_MAX_HEAD)) is None
    assert refused(bytearray(b"G" * (EVALGATE_SIM_MAX_HEAD + 1))).status == 431


# --------------------------------------------------------------------------- framing


def test_a_sized_head_carries_length_marker_and_extra_lines() -> None:
    head = evalgate_sim_head(429, "application/json", "Retry-After: 2\r\n", 17, close=False)
    assert head == (
        b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
        b"Content-Length: 17\r\nx-evalgate-simulator: 1\r\nRetry-After: 2\r\n\r\n"
    )


def test_a_streamed_head_is_chunked_and_may_close() -> None:
    head = evalgate_sim_head(200, "text/event-stream", "", None, close=True)
    assert b"Transfer-Encoding: chunked\r\n" in head and b"Content-Length" not in head
    assert head.endswith(b"x-evalgate-simulator: 1\r\nConnection: close\r\n\r\n")


def test_an_unknown_status_gets_a_generic_reason() -> None:
    assert evalgate_sim_head(418, "x/y", "", 0, False).startswith(b"HTTP/1.1 418 Status\r\n")


def test_chunks_carry_their_hex_length() -> None:
    assert evalgate_sim_chunk(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"
    assert evalgate_sim_chunk(b"data: {}\n\n") == b"a\r\ndata: {}\n\n\r\n"


# --------------------------------------------------------------------------- connections


class Handler:
    """A model-free application: the path picks how the connection answers."""

    def __init__(self) -> None:
        self.connections: set[EvalgateSimProtocol] = set()
        self.seen: list[EvalgateSimRequest] = []
        self.ended: list[tuple[int | None, bool]] = []

    def dispatch(self, request: EvalgateSimRequest, proto: EvalgateSimProtocol) -> None:
        self.seen.append(request)
        if request.path != "/uncounted":
            proto.begin_counted()
        if request.path == "/slow":
            proto.reply(200, b'{"slow": true}', delay=0.3)
        elif request.path == "/hang":
            proto.hang(0.2)
        elif request.path == "/stream":
            proto.stream(200, _two_events)
        else:
            proto.reply(201, json.dumps({"path": request.path, "n": len(self.seen)}).encode())

    def end(self, status: int | None, dropped: bool = False) -> None:
        self.ended.append((status, dropped))


async def _two_events(proto: EvalgateSimProtocol) -> None:
    proto.write_events(b"data: 1\n\n")
    await asyncio.sleep(0)
    proto.write_events(b"data: 2\n\n")


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


Scenario = Callable[[Handler, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[Any]]


def run(scenario: Scenario) -> tuple[Handler, Any]:
    """Serve a fresh handler on loopback, connect once, run ``scenario``; close everything."""
    handler = Handler()

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: EvalgateSimProtocol(handler), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await scenario(handler, reader, writer)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    return handler, asyncio.run(main())


async def _response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    return head, await asyncio.wait_for(reader.readexactly(length), 5)


def test_pipelined_requests_are_answered_in_order_on_one_connection() -> None:
    async def scenario(
        h: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Any:
        writer.write(request("GET /slow HTTP/1.1\n") + request("GET /b HTTP/1.1\n"))
        return [await _response(reader), await _response(reader)]

    handler, answers = run(scenario)
    assert [body for _, body in answers] == [b'{"slow": true}', b'{"path": "/b", "n": 2}']
    assert answers[1][0].startswith(b"HTTP/1.1 201 Status\r\n")
    assert handler.ended == [(200, False), (201, False)]


def test_a_request_written_byte_by_byte_is_answered_once() -> None:
    async def scenario(
        h: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Any:
        for byte in bytes(request("POST /a HTTP/1.1\nContent-Length: 2\n", b"{}")):
            writer.write(bytes([byte]))
            await writer.drain()
        return await _response(reader)

    handler, (_, body) = run(scenario)
    assert body == b'{"path": "/a", "n": 1}' and len(handler.seen) == 1


def test_a_refused_request_is_answered_then_the_connection_closes() -> None:
    async def scenario(
        h: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Any:
        writer.write(b"NONSENSE\r\n\r\nGET /never HTTP/1.1\r\n\r\n")
        return await asyncio.wait_for(reader.read(), 5)

    handler, raw = run(scenario)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request") and b"Connection: close" in head
    error = json.loads(body)["error"]
    assert error["message"] == "malformed request line (evalgate simulator)"
    assert error["type"] == "invalid_request_error"
    assert handler.seen == [] and handler.ended == []  # refused before any handler saw it


def test_connection_close_closes_after_the_answer() -> None:
    async def scenario(
        h: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Any:
        writer.write(request("GET /a HTTP/1.1\nConnection: close\n") + request("GET /b HTTP/1.1\n"))
        return await asyncio.wait_for(reader.read(), 5)

    handler, raw = run(scenario)
    assert raw.count(b"HTTP/1.1 ") == 1 and raw.endswith(b'{"path": "/a", "n": 1}')
    assert [r.path for r in handler.seen] == ["/a"]


def test_a_client_leaving_before_a_delayed_answer_counts_once_as_gone() -> None:
    async def scenario(
        h: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Any:
        writer.write(request("GET /slow HTTP/1.1\n"))
        await _until(lambda: len(h.seen) == 1)
        writer.close()
        await _until(lambda: len(h.ended) == 1)
        await asyncio.sleep(0.4)  # past the reply's timer: it must have been cancelled
        return list(h.ended)

    handler, ended = run(scenario)
    assert ended == [(None, False)] and handler.connections == set()


def test_a_hang_is_dropped_by_the_server_and_counted_as_dropped() -> None:
    async def scenario(
        h: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Any:
        writer.write(request("GET /hang HTTP/1.1\n"))
        return await asyncio.wait_for(reader.read(), 5)

    handler, raw = run(scenario)
    assert raw == b"" and handler.ended == [(None, True)]


def test_uncounted_requests_are_answered_but_never_ended() -> None:
    async def scenario(
        h: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Any:
        writer.write(request("GET /uncounted HTTP/1.1\n") + request("GET /b HTTP/1.1\n"))
        return [await _response(reader), await _response(reader)]

    handler, answers = run(scenario)
    assert len(answers) == 2 and handler.ended == [(201, False)]


def test_a_stream_is_chunked_and_ends_with_the_last_chunk() -> None:
    async def scenario(
        h: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Any:
        writer.write(request("GET /stream HTTP/1.1\n") + request("GET /after HTTP/1.1\n"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        chunks = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
        return head, chunks, await _response(reader)

    handler, (head, chunks, after) = run(scenario)
    assert b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n" in head
    assert chunks == b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"
    assert after[1] == b'{"path": "/after", "n": 2}'  # the connection stays usable
    assert handler.ended == [(200, False), (201, False)]


def test_abort_closes_a_connection_at_once() -> None:
    async def scenario(
        h: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Any:
        writer.write(request("GET /hang HTTP/1.1\n"))
        await _until(lambda: len(h.seen) == 1)
        for proto in list(h.connections):
            proto.abort()
        return await asyncio.wait_for(reader.read(), 1)

    handler, raw = run(scenario)
    assert raw == b"" and handler.ended == [(None, False)]
