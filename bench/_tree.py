"""Bench helper: run a command and measure its whole process tree (wall, CPU, peak RSS).

Peak RSS is sampled (every 20 ms) as the sum over the process and all its descendants, so a
runner child or a simulator the command spawns counts; CPU is the reaped child's rusage, which
includes the descendants it waited for.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            out += [int(word) for word in text.split()]
    except OSError:
        pass
    return out


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_mb(pid: int) -> float:
    """The summed RSS of ``pid`` and its descendants, in MB."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += _rss_kb(current)
        todo += _children(current)
    return total / 1024


def run_tree(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None, cpus: set[int] | None = None
) -> dict[str, object]:
    """Run ``argv`` (on ``cpus`` only, if given: its children inherit the affinity); returns
    wall s, CPU s (user+sys, reaped descendants included), peak tree RSS MB, exit status and
    output."""

    def pin() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    peak = [0.0]
    done = threading.Event()
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        process = subprocess.Popen(
            argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=pin
        )

        def sample() -> None:
            while not done.wait(0.02):
                peak[0] = max(peak[0], tree_rss_mb(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    peak_rss = max(peak[0], usage.ru_maxrss / 1024)
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": peak_rss,
            "status": process.returncode, "output": text}  # fmt: skip
