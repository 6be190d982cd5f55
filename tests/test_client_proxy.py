"""Proxies (issue 37): the client honours ``HTTP(S)_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` as
urllib, httpx and curl do, tested against a real forwarding proxy on loopback
(``tests/proxykit.py``): absolute-form requests for ``http`` targets, ``CONNECT`` and TLS to
the target's host name for ``https`` ones, ``Proxy-Authorization`` from the proxy URL's
credentials, which no message shows."""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from proxykit import Proxy
from suitekit import make_cases, write_suite

from pytest_evalgate.client.http1 import EvalgateHttpPool, EvalgateHttpTarget
from pytest_evalgate.client.proxy import evalgate_bypassed, evalgate_parse_proxy, evalgate_proxy_for
from pytest_evalgate.errors import EvalgateConfigError, EvalgateHttpError
from tests.admissionkit import make_tls
from tests.test_client_http1 import OK, Scripted

PROXY_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


async def _settle() -> None:
    """Let the loopback TLS server (same loop) take in the client's close or reset before the
    test's loop shuts down: on uvloop a server-side TLS transport that learns of the reset only
    while the loop closes logs a fatal error and is left unclosed (a ResourceWarning)."""
    for _ in range(20):
        await asyncio.sleep(0.01)


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Awaitable[None]], None]:
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return lambda main: uvloop.run(main)
    return lambda main: asyncio.run(main)


# --------------------------------------------------------------------------- which proxy


@pytest.mark.parametrize(
    ("url", "environ", "expected"),
    [
        ("http://api.test/v1", {"HTTP_PROXY": "http://p:3128"}, ("p", 3128)),
        ("http://api.test/v1", {"http_proxy": "p2:8080", "HTTP_PROXY": "http://p:1"}, ("p2", 8080)),
        ("https://api.test/v1", {"HTTP_PROXY": "http://p:3128"}, None),
        ("https://api.test/v1", {"https_proxy": "http://s"}, ("s", 80)),
        ("https://api.test/v1", {"ALL_PROXY": "http://a:9"}, ("a", 9)),
        ("https://api.test/v1", {"HTTPS_PROXY": "", "ALL_PROXY": "http://a:9"}, ("a", 9)),
        ("http://api.test/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "*"}, None),
        ("http://api.test/v1", {"HTTP_PROXY": "http://p", "no_proxy": "other, api.test"}, None),
        ("http://x.api.test/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": ".api.test"}, None),
        ("http://x.api.test/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "api.test"}, None),
        ("http://badapi.test/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "api.test"}, ("p", 80)),
        ("http://API.Test:8000/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "api.test:8000"}, None),
        (
            "http://api.test:9/v1",
            {"HTTP_PROXY": "http://p", "NO_PROXY": "api.test:8000"},
            ("p", 80),
        ),
        ("http://127.0.0.1:5/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "127.0.0.1"}, None),
        ("http://10.1.2.3/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "10.0.0.0/8"}, None),
        ("http://11.1.2.3/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "10.0.0.0/8"}, ("p", 80)),
        ("http://[::1]:8/v1", {"HTTP_PROXY": "http://p", "NO_PROXY": "::1"}, None),
        ("http://localhost/v1", {"HTTP_PROXY": "http://p"}, ("p", 80)),
    ],
)
def test_the_proxy_is_chosen_as_urllib_and_curl_choose_it(
    url: str, environ: dict[str, str], expected: tuple[str, int] | None
) -> None:
    proxy = evalgate_proxy_for(url, environ)
    assert (proxy and (proxy.host, proxy.port)) == expected


def test_no_proxy_entries_match_whole_labels_and_ports() -> None:
    assert evalgate_bypassed("a.b.example.com", 443, "*.example.com")
    assert not evalgate_bypassed("example.com.evil", 443, "example.com")
    assert not evalgate_bypassed("api.test", 443, "api.test:80")
    assert evalgate_bypassed("api.test", 443, "api.test:443")
    assert not evalgate_bypassed("api.test", 80, "")


def test_credentials_become_basic_auth_and_never_a_message() -> None:
    proxy = evalgate_parse_proxy("http://us%40er:s3cr%2Ft@proxy.test:3128")
    assert proxy.authorization == "Basic dXNAZXI6czNjci90"  # base64("us@er:s3cr/t")
    assert proxy.password == "s3cr/t"
    assert proxy.shown == "http://***@proxy.test:3128"
    assert evalgate_parse_proxy("proxy.test").shown == "http://proxy.test"
    for bad in (
        "socks5://user:hunter22@p:1080",
        "https://user:hunter22@p",
        "http://u:hunter22@p:x",
    ):
        with pytest.raises(EvalgateConfigError) as raised:
            evalgate_parse_proxy(bad)
        assert "hunter22" not in str(raised.value) and "***@p" in str(raised.value)


# --------------------------------------------------------------------------- through a proxy


async def _post(pool: EvalgateHttpPool, target: EvalgateHttpTarget) -> tuple[int, bytes]:
    response = await pool.evalgate_post(target, {"x-evalgate-identity": "s/c/1"}, b"{}")
    try:
        return response.status, await response.evalgate_read()
    finally:
        response.evalgate_release()


def test_http_targets_go_to_the_proxy_in_absolute_form_on_kept_alive_connections(
    run: Callable[[Awaitable[None]], None],
) -> None:
    with Proxy(credentials="user:pa55word") as proxy:
        chosen = evalgate_parse_proxy(f"http://user:pa55word@127.0.0.1:{proxy.port}")

        async def main() -> None:
            async with Scripted(OK) as server:
                target = EvalgateHttpTarget(server.url(), {}, chosen)
                pool = EvalgateHttpPool()
                for _ in range(3):
                    assert await _post(pool, target) == (200, b"{}")
                await pool.evalgate_close()
                assert server.connections == 1  # one upstream connection, kept alive
                assert len(server.requests) == 3
                assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
                assert b"Proxy-Authorization" not in server.requests[0]

        run(main())
        assert proxy.requests == 3 and proxy.tunnels == 0
        assert proxy.lines[0].startswith("POST http://127.0.0.1:")
        assert proxy.lines[0].endswith("/v1/chat/completions HTTP/1.1")
        assert proxy.authorizations == ["Basic dXNlcjpwYTU1d29yZA=="] * 3


def test_https_targets_go_through_connect_and_verify_the_target_name(
    run: Callable[[Awaitable[None]], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls = make_tls(tmp_path / "tls")  # a private CA: valid for localhost and 127.0.0.1
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    monkeypatch.setenv("SSL_CERT_FILE", tls.cert)
    with Proxy(credentials="user:pa55word") as proxy:
        chosen = evalgate_parse_proxy(f"http://user:pa55word@127.0.0.1:{proxy.port}")

        async def main() -> None:
            async with Scripted(OK, tls=context) as server:
                url = f"https://localhost:{server.port}/v1/chat/completions"
                target = EvalgateHttpTarget(url, {}, chosen)
                pool = EvalgateHttpPool()
                assert await _post(pool, target) == (200, b"{}")
                assert await _post(pool, target) == (200, b"{}")
                await pool.evalgate_close()
                await _settle()
                assert len(server.requests) == 2 and server.connections == 1
                assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
                assert f"Host: localhost:{server.port}\r\n".encode() in server.requests[0]
                assert b"Proxy-Authorization" not in server.requests[0]

        run(main())
        assert proxy.tunnels == 1 and proxy.requests == 0
        assert proxy.lines[0].startswith("CONNECT localhost:") and proxy.authorizations


def test_a_tunnel_to_a_name_the_certificate_does_not_hold_fails_verification(
    run: Callable[[Awaitable[None]], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls = make_tls(tmp_path / "tls")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    monkeypatch.setenv("SSL_CERT_FILE", tls.cert)
    with Proxy(aliases={"api.test": "127.0.0.1"}) as proxy:
        chosen = evalgate_parse_proxy(proxy.url)

        async def main() -> None:
            async with Scripted(OK, tls=context) as server:
                # the proxy reaches the loopback server as api.test, which the certificate lacks
                url = f"https://api.test:{server.port}/v1/chat/completions"
                pool = EvalgateHttpPool()
                with pytest.raises(EvalgateHttpError, match="CERTIFICATE_VERIFY_FAILED"):
                    await _post(pool, EvalgateHttpTarget(url, {}, chosen))
                await pool.evalgate_close()
                await _settle()
                assert server.requests == []

        run(main())
        assert proxy.tunnels == 1


def test_a_proxy_that_refuses_names_itself_without_its_credentials(
    run: Callable[[Awaitable[None]], None],
) -> None:
    with Proxy(credentials="user:right-one") as proxy:
        wrong = evalgate_parse_proxy(f"http://user:wrong-one@127.0.0.1:{proxy.port}")

        async def main() -> None:
            pool = EvalgateHttpPool()
            target = EvalgateHttpTarget("https://localhost:9/v1/chat/completions", {}, wrong)
            with pytest.raises(EvalgateHttpError) as raised:
                await _post(pool, target)
            text = str(raised.value)
            assert "407" in text and f"http://***@127.0.0.1:{proxy.port}" in text
            assert "wrong-one" not in text
            await pool.evalgate_close()
            gone = evalgate_parse_proxy("http://user:wrong-one@127.0.0.1:9")
            with pytest.raises(EvalgateHttpError) as refused:
                await _post(pool, EvalgateHttpTarget("http://api.test/v1", {}, gone))
            assert "cannot connect to the proxy http://***@127.0.0.1:9" in str(refused.value)
            assert "wrong-one" not in str(refused.value)

        run(main())
        assert proxy.refused == 1


# --------------------------------------------------------------------------- a whole run


def _gated_run(
    tmp_path: Path, environ: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], int]:
    cases = make_cases(["math"], 6)
    urls = {
        "candidate": "simulated://?accuracy=1&seed=3",
        "baseline": "simulated://?accuracy=1&seed=4",
    }
    suite = write_suite(tmp_path / "suite", urls, cases=cases).parent
    env = {k: v for k, v in os.environ.items() if k.upper() not in PROXY_NAMES}
    command = [sys.executable, "-m", "pytest", "--evalgate", str(suite), "-p", "no:cacheprovider",
               "-q", f"--evalgate-store={tmp_path / 'store'}"]  # fmt: skip
    done = subprocess.run(
        command, cwd=tmp_path, env={**env, **environ}, capture_output=True, text=True, timeout=300
    )
    return done, len(cases) * len(urls)


def test_a_run_reaches_its_endpoints_only_through_http_proxy(tmp_path: Path) -> None:
    with Proxy() as proxy:
        done, wanted = _gated_run(tmp_path, {"http_proxy": proxy.url})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert proxy.requests == wanted
        assert all(line.startswith("POST http://127.0.0.1:") for line in proxy.lines)


def test_no_proxy_bypasses_the_proxy_for_a_whole_run(tmp_path: Path) -> None:
    with Proxy() as proxy:
        environ = {"HTTP_PROXY": proxy.url, "NO_PROXY": "example.test,127.0.0.1"}
        done, _ = _gated_run(tmp_path, environ)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert proxy.requests == 0 and proxy.lines == []


def test_the_test_session_starts_without_proxy_variables() -> None:
    leaked = {k: v for k, v in os.environ.items() if k.upper() in PROXY_NAMES}
    assert leaked == {}, json.dumps(sorted(leaked))


def test_an_unusable_proxy_variable_stops_the_run_before_any_request(tmp_path: Path) -> None:
    done, _ = _gated_run(tmp_path, {"HTTPS_PROXY": "x", "HTTP_PROXY": "socks5://u:hunter22@p:1"})
    output = done.stdout + done.stderr
    assert done.returncode not in (0, 1), output[-3000:]  # as an unset key variable: not run
    assert (
        "environment: HTTP_PROXY: socks5://***@p:1: only http:// proxies are supported"
        " (unset it, or list 127.0.0.1 in NO_PROXY)"
    ) in output
    assert "hunter22" not in output and "INTERNALERROR" not in output


class _HttpsChat:
    """A non-streaming chat endpoint over TLS on loopback (a private CA's certificate for
    localhost) that answers the suitekit sums right and counts its requests."""

    def __init__(self, cert: str, key: str) -> None:
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests += 1
                found = re.search(r"what is (\d+) \+ (\d+)\?", json.dumps(body["messages"]))
                answer = str(2 * int(found.group(1))) if found else "?"
                message = {"role": "assistant", "content": answer}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                data = json.dumps({"model": body["model"], "choices": [choice]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.base_url = f"https://localhost:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)


def test_a_run_reaches_an_https_endpoint_through_connect(tmp_path: Path) -> None:
    tls = make_tls(tmp_path / "tls")
    chat = _HttpsChat(tls.cert, tls.key)
    chat.thread.start()
    try:
        with Proxy(credentials="ci:s3cret-proxy-pass") as proxy:
            cases = make_cases(["math"], 6)
            urls = {"candidate": chat.base_url, "baseline": chat.base_url}
            extra = {"stream": False}
            suite = write_suite(tmp_path / "suite", urls, cases=cases, extra=extra).parent
            env = {k: v for k, v in os.environ.items() if k.upper() not in PROXY_NAMES}
            env |= {
                "SSL_CERT_FILE": tls.cert,
                "HTTPS_PROXY": proxy.url.replace("://", "://ci:s3cret-proxy-pass@"),
            }
            command = [sys.executable, "-m", "pytest", "--evalgate", str(suite), "-q", "-p",
                       "no:cacheprovider", f"--evalgate-store={tmp_path / 'store'}"]  # fmt: skip
            done = subprocess.run(
                command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
            )
    finally:
        chat.server.shutdown()
        chat.server.server_close()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert chat.requests == 12 and proxy.requests == 0
    assert proxy.tunnels >= 1 and proxy.refused == 0  # (warmed connections are tunnels too)
    assert all(line.startswith("CONNECT localhost:") for line in proxy.lines)
    assert "s3cret-proxy-pass" not in output
