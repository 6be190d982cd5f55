"""The shadow proxy's HTTP/1.1 wire: a request as parsed, and response bytes written by hand.

Response heads drop the hop-by-hop headers (``HOP``, also left out of what is forwarded) and
carry either the body's ``content-length`` or ``transfer-encoding: chunked``; the proxy's own
errors are OpenAI-shaped JSON bodies (``error_body``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
     "upgrade", "host", "content-length", "accept-encoding", "proxy-authorization"}
)  # fmt: skip


@dataclass
class Request:
    """One request as the connection parsed it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


def head(status: int, headers: Any, length: int | None, keep_alive: bool) -> bytes:
    """A response's status line and headers, the hop-by-hop ones left out."""
    lines = [f"HTTP/1.1 {status} {_reason(status)}"]
    lines += [f"{name}: {value}" for name, value in headers if name.lower() not in HOP]
    lines.append(
        f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    )
    lines.append("connection: keep-alive" if keep_alive else "connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def whole(status: int, content_type: str, body: bytes, keep_alive: bool) -> bytes:
    """A whole response: its head with the body's length, then the body."""
    return head(status, [("content-type", content_type)], len(body), keep_alive) + body


def error_body(message: str) -> bytes:
    """An OpenAI-shaped error body of the proxy's own."""
    error = {"message": message, "type": "shadow_proxy", "code": None}
    return json.dumps({"error": error}).encode()
