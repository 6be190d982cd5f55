"""The simulator as a subprocess on its own core: spawn, wait for its ready line, stop.

The child is ``python -m pytest_evalgate.simulated SPEC`` with one JSON argument
(``spec.py``); it is told this process's pid and stops by itself when this process is gone.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from types import TracebackType
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.simulated.knobs import EvalgateSimConfig, evalgate_sim_base_url
from pytest_evalgate.simulated.spec import (
    EvalgateSimSpec,
    evalgate_sim_ready_port,
    evalgate_sim_spec_json,
)

EVALGATE_SIM_MODULE = "pytest_evalgate.simulated"


class EvalgateSimProcess:
    """A simulator subprocess (``python -m pytest_evalgate.simulated``), on its own core."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port

    @property
    def pid(self) -> int:
        """The subprocess id (for ``/proc/PID/stat``)."""
        return self.process.pid

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return evalgate_sim_base_url(self.port)

    def stats(self) -> dict[str, Any]:
        """``GET /evalgate/stats`` over loopback."""
        return _sim_http_json(self.port, "GET", "/evalgate/stats")

    def reset(self) -> None:
        """``POST /evalgate/reset`` over loopback."""
        _sim_http_json(self.port, "POST", "/evalgate/reset")

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout_s``; waits and returns the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        status = self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return status

    def __enter__(self) -> EvalgateSimProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _sim_http_json(port: int, method: str, path: str) -> dict[str, Any]:
    import http.client  # only the subprocess handle needs a blocking client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10.0)
    try:
        connection.request(method, path, body=b"" if method == "POST" else None)
        result: dict[str, Any] = json.loads(connection.getresponse().read())
        return result
    finally:
        connection.close()


def _sim_wait_ready(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    assert process.stdout is not None
    deadline, seen = time.monotonic() + timeout_s, b""
    fd = process.stdout.fileno()
    while b"\n" not in seen and time.monotonic() < deadline:
        readable, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))
        chunk = os.read(fd, 4096) if readable else b""
        if readable and not chunk:
            break  # EOF: the process exited before it was ready
        seen += chunk
    port = evalgate_sim_ready_port(seen.decode(errors="replace"))
    if port is None:
        raise EvalgateConfigError("evalgate serve", "startup", f"no ready line: {seen[:300]!r}")
    return port


def evalgate_sim_child_argv(spec: EvalgateSimSpec) -> list[str]:
    """The command line of a simulator child serving ``spec``."""
    return [sys.executable, "-m", EVALGATE_SIM_MODULE, evalgate_sim_spec_json(spec)]


def evalgate_spawn_simulator(
    config: EvalgateSimConfig,
    answers_path: str | os.PathLike[str] | None,
    request_log: str | os.PathLike[str] | None = None,
    *,
    port: int = 0,
    startup_timeout_s: float = 30.0,
) -> EvalgateSimProcess:
    """Start the simulator as a subprocess and return once it listens (its ready line).

    Raises ``EvalgateConfigError`` (after killing it) if it does not become ready in time;
    the child's own complaint (a bad answer key...) goes to this process's standard error.
    """
    answers = None if answers_path is None else os.fspath(answers_path)
    log = None if request_log is None else os.fspath(request_log)
    spec = EvalgateSimSpec(config, answers, log, port, os.getpid())
    argv = evalgate_sim_child_argv(spec)
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        return EvalgateSimProcess(process, _sim_wait_ready(process, startup_timeout_s))
    except BaseException:
        EvalgateSimProcess(process, 0).stop(timeout_s=2.0)
        raise
