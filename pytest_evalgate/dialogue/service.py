"""The mock HTTP services of a tool fixture, started on loopback for the run (SPEC 17).

``EvalgateToolServices(fixture, state_dir).evalgate_start()`` starts each distinct service
``command`` once (cwd: the fixture's folder), with ``PYTEST_EVALGATE_TOOL_PORT`` (a free
loopback port, also substituted for ``{port}`` in the command; ``{python}`` is this
interpreter) and ``PYTEST_EVALGATE_TOOL_STATE``
(a folder that outlives the run: the mock keeps what it must remember there, such as the
idempotency keys it applied, so a resumed run never applies an effect twice). It waits until
``GET http://127.0.0.1:PORT<ready_path>`` answers 200 within the tool's ``timeout_s``; a
service that exits or does not answer in time is stopped and refused with
``EvalgateConfigError`` naming the fixture, the tool and its output's tail, before any request.
It returns tool name -> base URL. ``evalgate_stop()`` ends every process it started (by PID:
SIGTERM, then SIGKILL after 5 s); on Linux a service also gets SIGTERM when the process that
started it dies (``PR_SET_PDEATHSIG``), so a SIGKILLed run leaves none behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from pytest_evalgate.dialogue.fixture import EvalgateTool, EvalgateToolFixture
from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_TOOL_PORT_ENV = "PYTEST_EVALGATE_TOOL_PORT"
EVALGATE_TOOL_STATE_ENV = "PYTEST_EVALGATE_TOOL_STATE"
_POLL_S = 0.05
_PR_SET_PDEATHSIG = 1


class EvalgateToolServices:
    """The running mock services of one fixture (see the module docstring)."""

    def __init__(self, fixture: EvalgateToolFixture, state_dir: str) -> None:
        self._fixture = fixture
        self._state_dir = os.path.abspath(state_dir)  # the service runs in the fixture's folder
        self._processes: list[subprocess.Popen[bytes]] = []

    def evalgate_start(self) -> dict[str, str]:
        """Start the services; tool name -> base URL."""
        started: dict[tuple[str, ...], str] = {}
        urls: dict[str, str] = {}
        try:
            for index, tool in enumerate(self._fixture.tools):
                if tool.service is None:
                    continue
                if tool.service.command not in started:
                    started[tool.service.command] = self._start(index, tool)
                urls[tool.name] = started[tool.service.command]
        except BaseException:
            self.evalgate_stop()
            raise
        return urls

    def _start(self, index: int, tool: EvalgateTool) -> str:
        assert tool.service is not None
        port = _free_port()
        os.makedirs(self._state_dir, exist_ok=True)
        env = {**os.environ, EVALGATE_TOOL_PORT_ENV: str(port)}
        env[EVALGATE_TOOL_STATE_ENV] = self._state_dir
        command = [
            part.replace("{port}", str(port)).replace("{python}", sys.executable)
            for part in tool.service.command
        ]
        cwd = os.path.dirname(os.path.abspath(self._fixture.path))
        log = os.path.join(self._state_dir, f"{tool.name}.service.log")
        with open(log, "ab") as out:
            try:
                process = subprocess.Popen(
                    command, cwd=cwd, env=env, stdout=out, stderr=out, preexec_fn=_die_with_parent
                )
            except OSError as exc:
                self._refuse(index, tool, f"cannot start {command[0]!r}: {exc.strerror}")
        self._processes.append(process)
        base = f"http://127.0.0.1:{port}"
        self._wait_ready(index, tool, process, base + tool.service.ready_path, log)
        return base

    def _wait_ready(
        self, index: int, tool: EvalgateTool, process: subprocess.Popen[bytes], url: str, log: str
    ) -> None:
        assert tool.service is not None
        deadline = time.monotonic() + tool.service.timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._refuse(index, tool, f"exited with status {process.returncode}{_tail(log)}")
            try:
                with urllib.request.urlopen(url, timeout=1.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(_POLL_S)
        reason = f"did not answer {tool.service.ready_path} within {tool.service.timeout_s:g} s"
        self._refuse(index, tool, reason + _tail(log))

    def _refuse(self, index: int, tool: EvalgateTool, reason: str) -> None:
        key = f"tools[{index}] {tool.name}: service"
        raise EvalgateConfigError(self._fixture.path, key, reason)

    def evalgate_stop(self) -> None:
        """End every service this object started (SIGTERM, then SIGKILL after 5 s)."""
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
        for process in self._processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes.clear()


def _die_with_parent() -> None:
    # Linux: the service gets SIGTERM when the process that started it dies (a SIGKILLed pytest
    # must not leave mock services behind); elsewhere a no-op, and evalgate_stop ends them.
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(log: str) -> str:
    try:
        with open(log, "rb") as handle:
            text = handle.read()[-300:].decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f"; its output ends: {text}" if text else ""
