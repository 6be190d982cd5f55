"""Assertions that can fail, for tests of whole runs whose verdict is not what they are about.

- ``evalgate_decided_exit(output)``: the exit status a run's own terminal output implies. It
  asserts that the run reached a decided verdict (``PASS`` or ``FAIL``; an ``INCOMPLETE`` or
  ``INVALID`` run is a failure of a resume or shard test, never an acceptable outcome) and
  returns 0 for ``PASS``, 1 for ``FAIL``, so ``assert code == evalgate_decided_exit(out)``
  checks the exit status against the verdict the run printed.
- ``evalgate_decision_exit(decision)``: the same from a ``decision.json`` mapping.
- ``evalgate_wait_idle(server)``: wait, with a deadline, until the simulator has no request in
  progress (instead of sleeping "long enough" after killing a client).
- ``evalgate_descendants(pid)`` and ``evalgate_wait_gone(pids)``: the processes below a run
  (read from /proc before killing it), and a wait with a deadline until they have all exited
  (an in-process simulator flushes its request log when its process ends).
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

EVALGATE_DECIDED_EXIT = {"PASS": 0, "FAIL": 1}
_VERDICT = re.compile(r"verdict ([A-Z]+)")


def evalgate_decided_exit(output: str) -> int:
    """0 or 1 for the last ``verdict X`` line of ``output``; fails unless X is PASS or FAIL."""
    found = _VERDICT.findall(output)
    assert found, "no verdict line in the run's output:\n" + output[-3000:]
    verdict = found[-1]
    assert verdict in EVALGATE_DECIDED_EXIT, f"undecided run: verdict {verdict}\n{output[-3000:]}"
    return EVALGATE_DECIDED_EXIT[verdict]


def evalgate_decision_exit(decision: Mapping[str, Any]) -> int:
    """0 or 1 for a decision record's verdict; fails unless it is ``pass`` or ``fail``."""
    return evalgate_decided_exit(f"verdict {str(decision['verdict']).upper()}")


def evalgate_wait_idle(server: Any, timeout_s: float = 30.0) -> None:
    """Poll ``server.stats()["in_flight"]`` until 0 (every request that arrived is logged and
    has ended); fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while server.stats()["in_flight"]:
        assert time.monotonic() < deadline, f"requests still in flight: {server.stats()}"
        time.sleep(0.01)


def evalgate_descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, their children, ...), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return sorted(found)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def evalgate_wait_gone(pids: Collection[int], timeout_s: float = 30.0) -> None:
    """Poll until none of ``pids`` runs (gone or a zombie); fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while alive := [pid for pid in pids if _running(pid)]:
        assert time.monotonic() < deadline, f"still running: {alive}"
        time.sleep(0.01)
