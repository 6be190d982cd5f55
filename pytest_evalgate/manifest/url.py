"""Endpoint URLs, checked before any request: scheme, host, port, no credentials.

A candidate's or judge's ``base_url`` is refused at load time (exit 4, naming the key) unless it
is ``http://HOST[:PORT][/path]``, ``https://...`` or ``simulated://?knobs``. Refused: another
scheme (``file:``, ``ftp:``, a bare ``localhost:8000`` that parses as scheme ``localhost``), no
host, a port that is not a number in 1..65535, credentials in the URL (keys come from
``api_key_env``, never from files), a query or fragment on an HTTP URL (request paths are
appended to the base URL), and whitespace or control characters anywhere.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_URL_SCHEMES = ("http", "https", "simulated")


def evalgate_base_url_problem(url: str) -> str | None:
    """Why ``url`` is no usable base URL, or None when it is one."""
    if not url or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return "empty, or holds whitespace or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in EVALGATE_URL_SCHEMES:
        return f"scheme {parts.scheme!r} is not one of http, https, simulated ({_shown(url)!r})"
    if parts.scheme == "simulated":
        return None  # its knobs are checked where the simulator is started (endpoints.py)
    if not parts.hostname:
        return f"no host in {_shown(url)!r}"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL: name an environment variable in api_key_env instead"
    if port == 0:
        return f"port 0 in {_shown(url)!r}"
    if parts.query or parts.fragment:
        shown = _shown(url)
        return (
            f"a base URL takes no query or fragment ({shown!r} followed by {len(url) - len(shown)}"
            " characters not shown: a key belongs in api_key_env)"
        )
    return None


def _shown(url: str) -> str:
    # What a message may show of a URL: never its query, fragment or credentials, which is
    # where keys are put by mistake (a message printed the whole key of "?api_key=...").
    head = url.split("?", 1)[0].split("#", 1)[0]
    scheme, sep, rest = head.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        rest = rest.split("@", 1)[1]
    return scheme + sep + rest


def evalgate_check_base_url(source: str, key: str, url: str) -> None:
    """Raise ``EvalgateConfigError(source, key, reason)`` when ``url`` is no usable base URL."""
    problem = evalgate_base_url_problem(url)
    if problem is not None:
        raise EvalgateConfigError(source, key, problem)
