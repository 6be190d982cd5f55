"""Serving the simulator on 127.0.0.1: in a thread of this process (:class:`EvalgateSimServer`)
or in the calling thread until a signal (:func:`evalgate_sim_serve`, a process's main loop).

Both load the answer key before binding, open the request log (append, one flushed JSON line per
request) and close it when they stop; stopping closes every connection at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.simulated.answers import (
    evalgate_load_answer_key,
    evalgate_load_choice_plans,
    evalgate_load_tool_plans,
)
from pytest_evalgate.simulated.app import EvalgateSimApp
from pytest_evalgate.simulated.knobs import EvalgateSimConfig, evalgate_sim_base_url
from pytest_evalgate.simulated.protocol import EvalgateSimProtocol
from pytest_evalgate.simulated.styles import evalgate_sim_answerer
from pytest_evalgate.simulated.tool_style import EvalgateSimPlans, evalgate_sim_tool_answerer

_PARENT_POLL_S = 0.5


async def _sim_listen(
    app: EvalgateSimApp, port: int, ready: Callable[[int], None], stop: asyncio.Event
) -> None:
    """Serve ``app`` on 127.0.0.1:``port`` until ``stop`` is set; ``ready(port)`` once bound."""
    loop = asyncio.get_running_loop()

    def accept() -> EvalgateSimProtocol:
        app.accepted += 1  # GET /evalgate/stats: connections_accepted
        return EvalgateSimProtocol(app)

    server = await loop.create_server(accept, "127.0.0.1", port, backlog=1024)
    try:
        ready(server.sockets[0].getsockname()[1])
        await stop.wait()
    finally:
        server.close()
        for proto in list(app.connections):
            proto.abort()
        await asyncio.sleep(0)  # let connection_lost callbacks cancel pending work


def _sim_open_log(path: str | os.PathLike[str] | None) -> TextIO | None:
    if path is None:
        return None
    return open(path, "a", encoding="utf-8", buffering=1)  # closed by the server


def _sim_load_key(answers: str | os.PathLike[str] | None) -> dict[str, tuple[str, str]]:
    return {} if answers is None else evalgate_load_answer_key(answers)


def _sim_app(
    config: EvalgateSimConfig,
    key: dict[str, tuple[str, str]],
    log: TextIO | None,
    plans: EvalgateSimPlans | None = None,
    answers: str | os.PathLike[str] | None = None,
) -> EvalgateSimApp:
    tooler = evalgate_sim_tool_answerer(config, key, plans or {})
    app = EvalgateSimApp(config, evalgate_sim_answerer(config, key), log, tooler)
    app.choice_plans = {} if answers is None else evalgate_load_choice_plans(answers)
    return app


# --------------------------------------------------------------------------- in a thread


class EvalgateSimServer:
    """The simulator in this process: its own event loop in a daemon thread.

    ``start()`` binds 127.0.0.1:``port`` (0 = ephemeral) and returns once listening;
    ``base_url`` is ``http://127.0.0.1:PORT/v1``; ``stats()``/``reset()`` read and zero the
    counters; ``stop()`` closes every connection and joins the thread. A context manager.
    """

    def __init__(
        self,
        config: EvalgateSimConfig | None = None,
        answers: str | os.PathLike[str] | None = None,
        request_log: str | os.PathLike[str] | None = None,
        port: int = 0,
    ) -> None:
        self.config = config or EvalgateSimConfig()
        self._answers, self._log_path, self._want_port = answers, request_log, port
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._app: EvalgateSimApp | None = None
        self._failure: BaseException | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return evalgate_sim_base_url(self.port)

    def start(self) -> EvalgateSimServer:
        """Bind and serve in the background; raises what binding or loading raised."""
        key = _sim_load_key(self._answers)
        self._thread = threading.Thread(target=self._main, args=(key,), daemon=True)
        self._thread.start()
        self._ready.wait(30.0)
        if self._failure is not None or not self.port:
            self._thread.join(5.0)
            raise self._failure or EvalgateConfigError("simulator", "start", "did not start")
        return self

    def _main(self, key: dict[str, tuple[str, str]]) -> None:
        try:
            asyncio.run(self._serve(key))
        except BaseException as exc:  # handed to start() in the caller's thread
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self, key: dict[str, tuple[str, str]]) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        log = _sim_open_log(self._log_path)
        plans = {} if self._answers is None else evalgate_load_tool_plans(self._answers)
        self._app = _sim_app(self.config, key, log, plans, self._answers)
        try:
            await _sim_listen(self._app, self._want_port, self._on_ready, self._stop)
        finally:
            if log is not None:
                log.close()

    def _on_ready(self, port: int) -> None:
        self.port = port
        self._ready.set()

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def call() -> Any:
            return fn()

        assert self._loop is not None, "start() the server first"
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(10.0)

    def stats(self) -> dict[str, Any]:
        """The counters, as ``GET /evalgate/stats`` returns them."""
        assert self._app is not None, "start() the server first"
        return dict(self._call(self._app.stats))

    def reset(self) -> None:
        """Zero the counters, as ``POST /evalgate/reset`` does."""
        assert self._app is not None, "start() the server first"
        self._call(self._app.reset)

    def stop(self) -> None:
        """Close every connection, stop the loop, join the thread; idempotent."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop may have just finished
                loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(10.0)
        self._loop = self._thread = None

    def __enter__(self) -> EvalgateSimServer:
        return self.start() if self._thread is None else self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------- a process's loop


def _sim_key_for_serving(answers: str | None) -> dict[str, tuple[str, str]]:
    try:
        return _sim_load_key(answers)
    except OSError as exc:
        raise EvalgateConfigError(str(answers), "answers", f"cannot read: {exc}") from None


def _sim_log_for_serving(request_log: str | None) -> TextIO | None:
    try:
        return _sim_open_log(request_log)
    except OSError as exc:
        raise EvalgateConfigError(str(request_log), "request_log", f"cannot open: {exc}") from None


def evalgate_sim_serve(
    config: EvalgateSimConfig,
    answers: str | None,
    request_log: str | None,
    port: int,
    parent_pid: int | None,
    on_ready: Callable[[str], None],
) -> None:
    """Serve on 127.0.0.1:``port`` (0: any free) in the calling thread, which must be the main
    thread (signal handlers), until SIGTERM or SIGINT, or until ``parent_pid`` is no longer this
    process's parent (polled twice a second). Calls ``on_ready(base_url)`` once listening.

    Raises ``EvalgateConfigError`` before binding for an answer key that is bad or cannot be read,
    or a request log that cannot be opened; an ``OSError`` from binding the port propagates.
    """
    key = _sim_key_for_serving(answers)
    log = _sim_log_for_serving(request_log)
    try:
        plans = {} if answers is None else evalgate_load_tool_plans(answers)
        app = _sim_app(config, key, log, plans, answers)
        asyncio.run(_sim_main(app, port, parent_pid, on_ready))
    finally:
        if log is not None:
            log.close()


async def _sim_main(
    app: EvalgateSimApp, port: int, parent_pid: int | None, on_ready: Callable[[str], None]
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watch = None if parent_pid is None else loop.create_task(_sim_watch_parent(parent_pid, stop))
    try:
        await _sim_listen(app, port, lambda bound: on_ready(evalgate_sim_base_url(bound)), stop)
    finally:
        if watch is not None:
            watch.cancel()


async def _sim_watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    # A spawned simulator must not outlive a SIGKILLed harness: once the parent is gone the
    # process is re-parented, and the simulator stops itself.
    while not stop.is_set():
        if os.getppid() != parent_pid:
            stop.set()
            return
        await asyncio.sleep(_PARENT_POLL_S)
