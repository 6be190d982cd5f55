"""What the candidate and judge endpoint pools share: the simulators they start, and the API key
an endpoint reads from the environment.

``EvalgateSimulatorPool`` starts one simulator per (suite file, ``simulated://`` URL), with the
data file its caller writes (an answer key, a judge's truth) in one temporary folder, and stops
them all on ``evalgate_close``. ``evalgate_env_key`` reads a key variable, refuses an unset one
naming the file and key, and registers the value for redaction. ``evalgate_check_proxy``
reads the proxy the environment names for an endpoint's URL, so a bad proxy variable is a
configuration error before any request, and registers its password for redaction.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from pytest_evalgate.client.http1_head import evalgate_header_value_ok
from pytest_evalgate.client.proxy import evalgate_proxy_for
from pytest_evalgate.client.redact import evalgate_add_secret
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.simulated import EvalgateSimConfig, evalgate_spawn_simulator


class EvalgateSimulatorPool:
    """Owns the simulators it started and their data files (``prefix`` names the folder)."""

    def __init__(self, request_log: str | None, prefix: str) -> None:
        self._request_log = request_log
        self._prefix = prefix
        self._simulators: dict[tuple[str, str], Any] = {}
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None

    def evalgate_base_url(
        self,
        key: tuple[str, str],
        config: EvalgateSimConfig,
        stem: str,
        write: Callable[[str], None],
    ) -> str:
        """The base URL of the simulator for ``key``, started once: ``write`` fills its data
        file (``<stem>-<n>.jsonl``) first."""
        if key not in self._simulators:
            if self._tempdir is None:
                self._tempdir = tempfile.TemporaryDirectory(prefix=self._prefix)
            path = os.path.join(self._tempdir.name, f"{stem}-{len(self._simulators)}.jsonl")
            write(path)
            self._simulators[key] = evalgate_spawn_simulator(
                config, path, request_log=self._request_log
            )
        return str(self._simulators[key].base_url)

    def evalgate_close(self) -> None:
        """Stop every simulator this pool started and remove their data files."""
        for simulator in self._simulators.values():
            simulator.stop()
        self._simulators.clear()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None


def evalgate_env_key(source: str, key: str, name: str | None) -> str | None:
    """The value of the key variable ``name`` (None when no variable is named); an unset or
    empty one, or one holding a line break (it could not be sent as a header), is an
    ``EvalgateConfigError`` of ``source`` at ``key`` that never quotes the value. The value is
    registered for redaction from everything this process writes."""
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise EvalgateConfigError(source, key, f"environment variable {name} is not set")
    evalgate_add_secret(value)
    if not evalgate_header_value_ok(value):  # it goes into the Authorization header
        reason = f"environment variable {name} holds a line break or NUL (a key read from a file"
        raise EvalgateConfigError(source, key, reason + " keeps its newline: strip it)")
    return value


def evalgate_check_proxy(url: str) -> None:
    """Refuse a proxy variable that cannot be used for ``url`` (``EvalgateConfigError``, the
    proxy shown without credentials); register a usable proxy's password for redaction."""
    proxy = evalgate_proxy_for(url, os.environ)
    if proxy is not None:
        evalgate_add_secret(proxy.password)
