"""The webhook's HTTPS server (aiohttp): ``POST /validate`` and ``GET /healthz``.

Contracts:

- TLS only (TLS 1.2 or newer), with the certificate and key given; both files are re-read when
  either changes (checked every ``reload_s`` seconds), so a rotated certificate needs no
  restart. New connections get the newest pair that loaded completely (a half-written pair
  is skipped until both files match).
- ``POST /validate`` answers an AdmissionReview (HTTP 200); an unreadable review gets HTTP
  400, a body over ``max_body`` bytes 413: both count as webhook failures to the API server,
  which with ``failurePolicy: Fail`` denies the Pod.
- ``GET /healthz`` is 200 ``ok`` while the registry folder is readable, else 503 and why.
- :class:`EvalgateAdmissionServer` runs the server on its own thread and event loop
  (``start``/``stop``, or a ``with`` block); the caller owns signals and the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import socket
import ssl
import threading
from types import TracebackType

from aiohttp import web

from pytest_evalgate.admission.checker import EvalgateAdmission
from pytest_evalgate.errors import EvalgateAdmissionError, EvalgateConfigError

EVALGATE_ADMISSION_MAX_BODY = 8 * 1024 * 1024
_log = logging.getLogger("pytest_evalgate.admission")


def evalgate_tls_context(cert_path: str, key_path: str) -> ssl.SSLContext:
    """A server TLS context (TLS >= 1.2) with the PEM certificate chain and key; unreadable or
    mismatched files raise :class:`EvalgateConfigError`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert_path, key_path)
    return context


def _load_chain(context: ssl.SSLContext, cert_path: str, key_path: str) -> None:
    try:
        context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise EvalgateConfigError(cert_path, "--tls-cert/--tls-key", str(exc)) from None


def _finish_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left (handlers of connections that outlived the shutdown) and let it end."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def evalgate_admission_app(
    admission: EvalgateAdmission, max_body: int = EVALGATE_ADMISSION_MAX_BODY
) -> web.Application:
    """The aiohttp application: ``POST /validate``, ``GET /healthz``."""

    async def validate(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            answer = admission.review(body)
        except EvalgateAdmissionError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.Response(body=json.dumps(answer).encode(), content_type="application/json")

    async def healthz(request: web.Request) -> web.Response:
        problem = admission.health()
        return web.Response(text=problem or "ok", status=503 if problem else 200)

    app = web.Application(client_max_size=max_body)
    app.router.add_post("/validate", validate)
    app.router.add_get("/healthz", healthz)
    return app


class EvalgateAdmissionServer:
    """The webhook on ``host:port`` (port 0: any free port, see :attr:`port`), serving on a
    background thread until :meth:`stop`. ``reloads`` / ``reload_errors`` count certificate
    reloads that took effect / were skipped."""

    def __init__(
        self,
        admission: EvalgateAdmission,
        tls_cert: str,
        tls_key: str,
        *,
        host: str = "127.0.0.1",
        port: int = 8443,
        reload_s: float = 30.0,
    ) -> None:
        self.admission = admission
        self._cert, self._key = tls_cert, tls_key
        self._loaded = self._stamp()  # before loading: a change while loading is seen later
        self._context = evalgate_tls_context(tls_cert, tls_key)
        self._current = self._context
        self._context.sni_callback = self._choose_context
        self._host, self._requested_port, self._reload_s = host, port, reload_s
        self._socket: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._failure: Exception | None = None
        self.reloads = 0
        self.reload_errors = 0

    @property
    def port(self) -> int:
        """The port listened on (after :meth:`start`)."""
        if self._socket is None:
            raise RuntimeError("the server is not started")
        return int(self._socket.getsockname()[1])

    @property
    def url(self) -> str:
        """``https://host:port`` of the running server."""
        return f"https://{self._host}:{self.port}"

    def start(self) -> None:
        """Bind, start serving on a new thread, return once the server accepts connections.
        A port in use raises :class:`EvalgateConfigError`."""
        try:
            self._socket = socket.create_server((self._host, self._requested_port), backlog=512)
        except OSError as exc:
            where = f"{self._host}:{self._requested_port}"
            raise EvalgateConfigError(where, "--port", f"cannot listen: {exc.strerror}") from None
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name="evalgate-admission", daemon=True
        )
        self._thread.start()
        ready.wait()
        if self._failure is not None:
            self._thread.join()
            self._socket.close()
            raise self._failure

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._open())
        except Exception as exc:  # handed to start(), which raises it in the caller's thread
            self._failure = exc
            loop.close()
            ready.set()
            return
        self._loop = loop
        reload_task = loop.create_task(self._reload_forever())
        ready.set()
        loop.run_forever()
        reload_task.cancel()
        _finish_tasks(loop)
        loop.close()

    async def _open(self) -> None:
        assert self._socket is not None
        # A short shutdown: the API server retries elsewhere, and stop() must not hang on a
        # client that keeps its connection open.
        runner = web.AppRunner(
            evalgate_admission_app(self.admission), access_log=None, shutdown_timeout=2.0
        )
        await runner.setup()
        site = web.SockSite(runner, self._socket, ssl_context=self._context)
        await site.start()
        self._runner = runner

    async def _reload_forever(self) -> None:
        while True:
            await asyncio.sleep(self._reload_s)
            latest = self._stamp()
            if latest != self._loaded:
                self._loaded = latest
                self._reload()

    def _stamp(self) -> str:
        """A digest of both files' bytes (a few KB, read every ``reload_s``): unlike stat
        fields it cannot miss an in-place rewrite of the same size within one clock tick."""
        digest = hashlib.sha256()
        for path in (self._cert, self._key):
            try:
                with open(path, "rb") as handle:
                    digest.update(handle.read())
            except OSError:
                return ""
        return digest.hexdigest()

    def _choose_context(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: object
    ) -> None:
        # Called for every ClientHello (server_name is None without SNI): the handshake
        # continues with the newest certificate that loaded completely.
        connection.context = self._current

    def _reload(self) -> None:
        try:
            fresh = evalgate_tls_context(self._cert, self._key)
        except EvalgateConfigError as exc:  # a half-written pair: keep serving the old one
            _log.error("keeping the old TLS certificate: %s", exc)
            self.reload_errors += 1
            return
        self._current = fresh
        self.reloads += 1
        _log.info("reloaded the TLS certificate from %s", self._cert)

    def stop(self) -> None:
        """Stop serving and join the thread; safe to call twice."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._loop = self._thread = self._runner = None

    def __enter__(self) -> EvalgateAdmissionServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
