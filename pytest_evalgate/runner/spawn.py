"""Starting a runner child process, and reading its output, for both parents that run one
(generation and judging).

The child is ``python -m pytest_evalgate.runner`` with this process's package first on
``PYTHONPATH``, stdin and stdout pipes (stdout non-blocking: the parent reads with ``select``),
and stderr in a temporary file kept open for the child's life, so a crash's traceback can be
read back into the error the parent raises.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from typing import IO

EVALGATE_STDERR_TAIL = 2000
"""How many characters of the child's stderr an error message quotes."""


_Child = tuple[subprocess.Popen[bytes], IO[bytes]]
_PRESPAWNED: list[_Child] = []
_DISCARD_WAIT_S = 5.0


def evalgate_prespawn_child() -> None:
    """Start one runner child ahead of need, so its start-up (interpreter, imports) overlaps
    the caller's collection; the next ``evalgate_spawn_child`` takes it. At most one waits."""
    if not _PRESPAWNED:
        _PRESPAWNED.append(_start_child())


def evalgate_discard_prespawned() -> None:
    """Stop a prespawned child nobody took (nothing to request): its stdin closes before any
    setup, so it exits at once (the orphan path); it is reaped here."""
    while _PRESPAWNED:
        process, stderr = _PRESPAWNED.pop()
        evalgate_close_quietly(process.stdin)
        try:
            process.wait(timeout=_DISCARD_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        evalgate_close_quietly(process.stdout)
        evalgate_close_quietly(stderr)


def evalgate_spawn_child() -> _Child:
    """A runner child (the prespawned one if any); returns the process and its stderr file
    (the caller closes it)."""
    if _PRESPAWNED:
        return _PRESPAWNED.pop()
    return _start_child()


def _start_child() -> _Child:
    stderr = tempfile.TemporaryFile()  # noqa: SIM115  (kept open for the child's life)
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_evalgate.runner"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=evalgate_child_env(),
    )
    assert process.stdout is not None
    os.set_blocking(process.stdout.fileno(), False)
    return process, stderr


def evalgate_child_env() -> dict[str, str]:
    """This environment, with the package this process runs first on ``PYTHONPATH``: the child
    imports the very package this process runs, wherever it was imported from."""
    here = os.path.abspath(__file__)  # <root>/pytest_evalgate/runner/spawn.py
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return env


def evalgate_stderr_tail(stderr: IO[bytes] | None) -> str:
    """The last ``EVALGATE_STDERR_TAIL`` characters the child wrote to ``stderr``."""
    if stderr is None or stderr.closed:
        return ""
    stderr.seek(0)
    return stderr.read().decode(errors="replace")[-EVALGATE_STDERR_TAIL:].strip()


def evalgate_close_quietly(handle: IO[bytes] | None) -> None:
    """Close a pipe or file; a broken pipe on close means the child is gone, not an error."""
    if handle is None:
        return
    with contextlib.suppress(OSError):
        handle.close()


def evalgate_read_lines(fd: int, pending: bytes) -> tuple[list[bytes], bytes, bool]:
    """Read what the child's non-blocking stdout ``fd`` holds now: its complete lines, the
    incomplete rest (``pending`` is the previous call's), and whether the pipe reached
    end-of-file."""
    chunks = []
    eof = False
    while True:
        try:
            chunk = os.read(fd, 1 << 18)
        except BlockingIOError:
            break
        if not chunk:
            eof = True
            break
        chunks.append(chunk)
    if not chunks:
        return [], pending, eof
    lines = (pending + b"".join(chunks)).split(b"\n")
    rest = lines.pop()
    return lines, rest, eof
