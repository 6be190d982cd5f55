"""Kill a sandbox's whole process tree and wait until it is gone.

The tree is found from ``/proc`` (parent links), since this kernel may lack
``/proc/PID/task/TID/children``. Killing the first process inside the sandbox's PID namespace
(its process 1) makes the kernel kill everything else in that namespace, including processes
forked after the scan, so a tree killed here leaves no survivor, however fast the code forks.
The sandbox's first host process is stopped before the scan, so that it cannot fork, during
the scan, a child the scan would miss (a sandbox killed mid-setup). Under ``isolation: none``
there is no such namespace: the process group is killed too, and a process that left the group
(``setsid``) is beyond reach, which is why ``none`` is never called a sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

_PROC = Path("/proc")
_POLL_S = 0.01


def evalgate_descendants(pid: int) -> list[int]:
    """Live descendants of ``pid``, parents before their children."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents():
        children.setdefault(parent, []).append(child)
    found, frontier = [], [pid]
    while frontier:
        frontier = [c for p in frontier for c in children.get(p, [])]
        found += frontier
    return found


def _parents() -> list[tuple[int, int]]:
    pairs = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            parent = _parent_of(entry)
            if parent is not None:
                pairs.append((int(entry.name), parent))
    return pairs


def _parent_of(entry: Path) -> int | None:
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _state(pid: int) -> str | None:
    """The process state letter (R, S, T, Z, ...), or None when ``pid`` is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def evalgate_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    return _state(pid) not in (None, "Z", "X")


async def evalgate_kill_tree(pid: int, stop_timeout_s: float = 1.0) -> list[int]:
    """SIGKILL ``pid``'s descendants, then ``pid``; returns the pids signalled.

    ``pid`` is stopped first (SIGSTOP) and scanned only once stopped: a stopped process forks
    no child after the scan, so a sandbox killed mid-setup (its first process forked a moment
    ago) cannot leave that child behind to run on.
    """
    _signal(pid, signal.SIGSTOP)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + stop_timeout_s
    while _state(pid) not in (None, "T", "t", "Z", "X") and loop.time() < deadline:
        await asyncio.sleep(_POLL_S / 10)
    doomed = [*evalgate_descendants(pid), pid]
    for target in doomed:
        _signal(target, signal.SIGKILL)
    return doomed


def evalgate_kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (gone already is fine)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _signal(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, number)


async def evalgate_wait_exit(pid: int, timeout_s: float) -> bool:
    """Wait until process ``pid`` (not necessarily a child) has exited; False on timeout.

    Uses a pidfd, readable once the process ended: for a PID namespace's process 1 that is
    after every other process of the namespace is gone. Call it while the pid cannot have been
    reused yet (pids are handed out in sequence, so within moments of the parent's exit).
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except OSError:  # no pidfd support: fall back to polling
        return await evalgate_wait_gone([pid], timeout_s)
    try:
        return await _readable(pidfd, timeout_s)
    finally:
        os.close(pidfd)


async def _readable(fd: int, timeout_s: float) -> bool:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _settle, ready)
    try:
        await asyncio.wait_for(ready, timeout_s)
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
    return True


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def evalgate_wait_gone(pids: list[int], timeout_s: float) -> bool:
    """Wait until none of ``pids`` is alive; False if some still are after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while any(evalgate_alive(pid) for pid in pids):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True
