"""Which proxy a request goes through: the environment's proxy variables, read as the ecosystem
reads them (urllib's ``getproxies_environment`` / ``proxy_bypass_environment``, httpx, curl).

Contracts
---------
- ``evalgate_proxy_for(url, environ)`` is the proxy an ``http(s)://`` URL goes through, or None.
  ``https`` URLs use ``https_proxy``, ``http`` URLs ``http_proxy``, both fall back to
  ``all_proxy``; each name is looked up in lower case first, then in upper case (the lower-case
  one wins where both are set, as in urllib and curl). An empty value is no proxy.
- ``no_proxy`` (then ``NO_PROXY``) is a comma- or space-separated list: ``*`` bypasses every
  host; an entry ``example.com`` (or ``.example.com``, or ``*.example.com``) bypasses that host
  and every host under it, never ``badexample.com``; an entry with a port (``host:8080``)
  bypasses that host only on that port; an IP address or a CIDR block (``10.0.0.0/8``) bypasses
  the addresses in it. Host names compare without regard to case. There is no implicit bypass
  of ``localhost``: as with urllib, httpx and curl, list it in ``no_proxy`` when it must not go
  through the proxy.
- A proxy value is ``http://[user[:password]@]host[:port]`` (a value without a scheme is read as
  ``http://``, as curl does; the port defaults to 80). Credentials become a
  ``Proxy-Authorization: Basic`` header (percent-decoded first). Any other scheme (``https://``,
  ``socks5://``) is an ``EvalgateConfigError``: this client speaks plain HTTP to its proxy.
- ``EvalgateProxy.shown`` is the proxy's URL with its credentials replaced by ``***``: the only
  form of a proxy URL that goes into a message. The password (and the header's token) are
  registered with ``client.redact`` by the client, so an echo of them is redacted too.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

from pytest_evalgate.errors import EvalgateConfigError

_SCHEMES = {"http": ("http_proxy", "all_proxy"), "https": ("https_proxy", "all_proxy")}


@dataclass(frozen=True)
class EvalgateProxy:
    """One HTTP proxy: where to connect, the ``Proxy-Authorization`` value (or None), and the
    URL as messages may show it (credentials hidden)."""

    host: str
    port: int
    authorization: str | None
    shown: str
    password: str | None = None


def evalgate_proxy_for(url: str, environ: Mapping[str, str]) -> EvalgateProxy | None:
    """The proxy ``url`` goes through by ``environ``'s proxy variables (see the module)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    names = _SCHEMES.get(scheme)
    if names is None or not parts.hostname:
        return None
    found = next(((n, v) for n, v in (_variable(environ, n) for n in names) if v), None)
    if found is None:
        return None
    default_port = 443 if scheme == "https" else 80
    if evalgate_bypassed(
        parts.hostname, parts.port or default_port, _variable(environ, "no_proxy")[1]
    ):
        return None
    try:
        return evalgate_parse_proxy(found[1])
    except EvalgateConfigError as exc:  # say which variable, and the way out
        reason = f"{exc.source}: {exc.reason} (unset it, or list {parts.hostname} in NO_PROXY)"
        raise EvalgateConfigError("environment", found[0], reason) from None


def evalgate_parse_proxy(value: str) -> EvalgateProxy:
    """The proxy a proxy variable's ``value`` names (see the module)."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    shown = _shown(parts)
    if parts.scheme.lower() != "http":
        raise EvalgateConfigError(shown, "proxy", "only http:// proxies are supported")
    if not parts.hostname or not _port_ok(parts):
        raise EvalgateConfigError(shown, "proxy", "must be http://[user:password@]host[:port]")
    authorization = None
    password = None
    if parts.username is not None:
        password = unquote(parts.password or "") or None
        pair = f"{unquote(parts.username)}:{password or ''}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode("ascii")
    return EvalgateProxy(parts.hostname, parts.port or 80, authorization, shown, password)


def evalgate_bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``host:port`` bypasses the proxy by a ``no_proxy`` value (see the module)."""
    host = host.lower().strip("[]").rstrip(".")
    for entry in no_proxy.replace(" ", ",").split(","):
        entry = entry.strip().lower()
        if entry and _matches(host, port, entry):
            return True
    return False


def _matches(host: str, port: int, entry: str) -> bool:
    if entry == "*":
        return True
    name, wanted = _split_port(entry)
    if wanted is not None and wanted != port:
        return False
    if "/" in name or _is_ip(name):
        return _in_network(host, name)
    name = name.removeprefix("*").lstrip(".").rstrip(".")
    return bool(name) and (host == name or host.endswith("." + name))


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [::1]:8080 or [::1]
        inner, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return inner, int(port) if port.isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, int(port) if port.isdigit() else None
    return entry, None  # a bare IPv6 address (or no port)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _in_network(host: str, network: str) -> bool:
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(network, strict=False)
    except ValueError:
        return False


def _variable(environ: Mapping[str, str], name: str) -> tuple[str, str]:
    """(the name found, its value): the lower-case name first, then the upper-case one."""
    value = environ.get(name)
    if value is None:
        name = name.upper()
        value = environ.get(name)
    return name, (value or "").strip()


def _port_ok(parts: SplitResult) -> bool:
    try:
        parts.port  # noqa: B018  (urlsplit raises on a bad port only when asked)
    except ValueError:
        return False
    return True


def _shown(parts: SplitResult) -> str:
    """The proxy's URL without credentials (``***@`` where it had some) and without a path."""
    host = parts.hostname or "?"
    where = f"[{host}]" if ":" in host else host
    if _port_ok(parts) and parts.port:
        where += f":{parts.port}"
    secret = "***@" if parts.username is not None or "@" in parts.netloc else ""
    return f"{parts.scheme or 'http'}://{secret}{where}"
