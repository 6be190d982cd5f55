"""Helpers for the sandbox tests: real prepared sandboxes, runs, and a look at what is left.

A sandbox test runs against the real thing. An isolation is skipped, with the reason, only
where this machine lacks what it needs (the bwrap binary; root for unshare); where the
programs exist, preparing must succeed or the test fails.
"""

from __future__ import annotations

import asyncio
import functools
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_evalgate.sandbox import (
    EvalgateExecution,
    EvalgateSandboxSpec,
    evalgate_sandbox_prepare,
    evalgate_sandbox_run,
)
from pytest_evalgate.sandbox.execute import EVALGATE_SANDBOX_UID_BASE
from pytest_evalgate.sandbox.tools import evalgate_find_tools, evalgate_missing_requirements

ISOLATIONS = ("bwrap", "unshare")
REPO = Path(__file__).resolve().parent.parent
UID_SPAN = 2**24


def missing_reason(isolation: str) -> str | None:
    """Why ``isolation`` cannot run on this machine, or None."""
    missing = evalgate_missing_requirements(isolation, evalgate_find_tools())
    if not missing:
        return None
    hint = " (apt-get install bubblewrap; scripts/_venv.sh does it as root)"
    return f"isolation {isolation}: {', '.join(missing)}" + (hint if "bwrap" in missing[0] else "")


@functools.cache
def _prepared(isolation: str) -> EvalgateSandboxSpec:
    return asyncio.run(evalgate_sandbox_prepare(EvalgateSandboxSpec(isolation=isolation)))


def prepared(isolation: str) -> EvalgateSandboxSpec:
    """The prepared spec of ``isolation`` (default limits), or skip with the reason."""
    reason = missing_reason(isolation)
    if reason is not None:
        pytest.skip(reason)
    return _prepared(isolation)


def run(code: str, tests: str, spec: EvalgateSandboxSpec, **changes: object) -> EvalgateExecution:
    """One real execution with ``spec`` (fields in ``changes`` replaced)."""
    return asyncio.run(evalgate_sandbox_run(code, tests, spec.replace(**changes)))


def _status(pid: str) -> dict[str, str]:
    fields = {}
    try:
        text = Path("/proc", pid, "status").read_text()
    except OSError:
        return {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def live_pids(accept: Callable[[int], bool]) -> list[int]:
    """Live (not zombie) processes whose real uid ``accept`` accepts."""
    found = []
    for entry in os.listdir("/proc"):
        status = _status(entry) if entry.isdigit() else {}
        if status and not status["State"].startswith("Z") and accept(_real_uid(status)):
            found.append(int(entry))
    return found


def _real_uid(status: dict[str, str]) -> int:
    return int(status["Uid"].split()[0])


def sandbox_pids(uid: int) -> list[int]:
    """Live processes of the execution that ran as ``uid``."""
    return live_pids(lambda real: real == uid)


def any_sandbox_pids() -> list[int]:
    """Live processes with a uid from the range a root harness gives sandboxes."""
    base = EVALGATE_SANDBOX_UID_BASE
    return live_pids(lambda real: base <= real < base + UID_SPAN)


def host_folders() -> set[str]:
    """The sandbox's host folders (unshare's mount points, none's work folders) now present."""
    return {
        name for name in os.listdir(tempfile.gettempdir()) if name.startswith("evalgate-sandbox-")
    }


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passed; its last value."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def never_within(condition: Callable[[], bool], until: float) -> bool:
    """True when ``condition`` stayed false at every look until monotonic time ``until``."""
    while time.monotonic() < until:
        if condition():
            return False
        time.sleep(0.05)
    return not condition()
