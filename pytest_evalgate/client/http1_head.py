"""The fixed parts of ``client.http1``'s messages: a request's target and head, encoded once,
and a response's headers, looked up without regard to case.

Kept apart from the connections and the pool (``client.http1``): this is pure string and byte
work, with the refusals of what a header line may not hold, and no event loop.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

from pytest_evalgate.client.proxy import EvalgateProxy
from pytest_evalgate.errors import EvalgateConfigError

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class EvalgateHttpTarget:
    """One URL and its fixed headers (``Host`` is added), encoded once for every request.

    With a ``proxy``, an ``http`` URL's requests go to the proxy in absolute form
    (``POST http://host:port/path``, with ``Proxy-Authorization`` when the proxy has
    credentials); an ``https`` URL's go through a ``CONNECT`` tunnel (``evalgate_connect``), so
    its requests are the same as without a proxy and the proxy's credentials never enter them.
    """

    def __init__(
        self, url: str, headers: Mapping[str, str], proxy: EvalgateProxy | None = None
    ) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        try:
            port = parts.port
        except ValueError:
            port = -1
        if scheme not in _DEFAULT_PORTS or not parts.hostname or port == -1:
            raise EvalgateConfigError(url, "base_url", "must be http(s)://host[:port]/path")
        self.url = url
        self.host = parts.hostname
        self.port = port or _DEFAULT_PORTS[scheme]
        self.tls = scheme == "https"
        self.proxy = proxy
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        if port and port != _DEFAULT_PORTS[scheme]:
            host += f":{port}"
        if proxy is not None and not self.tls:
            path = f"http://{host}{path}"  # absolute form: the proxy forwards it
        lines = [f"POST {path} HTTP/1.1".encode("ascii"), _line("Host", host)]
        if proxy is not None and not self.tls and proxy.authorization:
            lines.append(_line("Proxy-Authorization", proxy.authorization))
        lines += [_line(name, value) for name, value in headers.items()]
        self._head = b"\r\n".join(lines) + b"\r\n"
        authority = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        self.authority = authority

    @property
    def origin(self) -> tuple[bool, str, int]:
        """The target's (TLS, host, port)."""
        return self.tls, self.host, self.port

    @property
    def route(self) -> tuple[bool, str, int, EvalgateProxy | None]:
        """What a connection can be shared by: the origin and the proxy it goes through."""
        return self.tls, self.host, self.port, self.proxy

    def evalgate_connect(self) -> bytes:
        """The ``CONNECT`` request that opens a tunnel to this target through its proxy."""
        lines = [f"CONNECT {self.authority} HTTP/1.1".encode("ascii")]
        lines.append(_line("Host", self.authority))
        if self.proxy is not None and self.proxy.authorization:
            lines.append(_line("Proxy-Authorization", self.proxy.authorization))
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def evalgate_request(self, headers: Mapping[str, str], body: bytes) -> bytes:
        """The whole request: the fixed head, ``headers``, ``Content-Length`` and ``body``."""
        extra = b"".join(_line(name, value) + b"\r\n" for name, value in headers.items())
        length = b"Content-Length: %d\r\n\r\n" % len(body)
        return self._head + extra + length + body


def evalgate_header_value_ok(value: str) -> bool:
    """Whether ``value`` may stand in a header line (no line break, no NUL)."""
    return not any(c in value for c in "\r\n\0")


def _line(name: str, value: str) -> bytes:
    if not _TOKEN.fullmatch(name) or not evalgate_header_value_ok(value):
        raise EvalgateConfigError(name, "header", "has a character a header may not hold")
    return f"{name}: {value}".encode()


class EvalgateHeaders(Mapping[str, str]):
    """A response's headers, looked up without regard to case (the first of repeated ones)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._map: dict[str, str] = {}
        for name, value in pairs:
            self._map.setdefault(name.lower(), value)

    def __getitem__(self, name: str) -> str:
        return self._map[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)
