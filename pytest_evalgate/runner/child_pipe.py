"""The generation runner's child as the pytest process drives it: one process, two pipes.

``EvalgateChildPipe`` starts the child (``runner.spawn``: the prespawned one if any), queues
``runner.wire`` messages and writes them at each flush (one pipe write per flush), reads the
child's non-blocking stdout as it arrives, and reaps the child, quoting its stderr's tail when
it failed. It holds no state of the run: ``runner.parent``'s ``EvalgateRunner`` decides what to
send and what the lines it reads mean. (The judge's child has its own, ``runner.judge_child``.)
"""

from __future__ import annotations

import select
import subprocess
from typing import IO

from pytest_evalgate.runner.spawn import (
    evalgate_close_quietly,
    evalgate_read_lines,
    evalgate_spawn_child,
    evalgate_stderr_tail,
)
from pytest_evalgate.runner.wire import EvalgateToChild, EvalgateWireClose, evalgate_encode

__all__ = ["EvalgateChildPipe"]


class EvalgateChildPipe:
    """The generation runner's child and its pipes, from the pytest process: wire messages
    queued and written at each flush, the child's stdout read as it arrives, the child reaped.

    ``eof`` is True once nothing more can come: the child's stdout ended, its stdin broke, or
    the runner killed it (``evalgate_kill``). All methods are for one thread.
    """

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._outbox: list[bytes] = []
        self._inbox = b""
        self.eof = False

    def evalgate_start(self) -> None:
        """Start (or take the prespawned) child; its stderr stays open for the child's life
        (closed in ``evalgate_reap``), so a crash is read back."""
        self.process, self._stderr = evalgate_spawn_child()

    def evalgate_send(self, message: EvalgateToChild) -> None:
        """Queue one message for the child (written at the next flush)."""
        self._outbox.append(evalgate_encode(message))

    def evalgate_flush(self) -> None:
        """Write what is queued; a broken pipe means the child is gone (the runner says why)."""
        child = self.process
        if not self._outbox or child is None or child.stdin is None or child.stdin.closed:
            return
        data = b"".join(self._outbox)
        self._outbox.clear()
        try:
            child.stdin.write(data)
            child.stdin.flush()
        except (BrokenPipeError, ValueError):
            self.eof = True

    def evalgate_readable(self) -> bool:
        """Whether the child was started and its stdout may still bring something."""
        child = self.process
        return child is not None and child.stdout is not None and not self.eof

    def evalgate_wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the child's stdout to hold something; whether it does."""
        assert self.process is not None and self.process.stdout is not None
        return bool(select.select([self.process.stdout.fileno()], [], [], timeout)[0])

    def evalgate_read(self) -> list[bytes]:
        """The complete lines the child's stdout holds now (``eof`` set when it ended)."""
        assert self.process is not None and self.process.stdout is not None
        lines, self._inbox, eof = evalgate_read_lines(self.process.stdout.fileno(), self._inbox)
        self.eof = self.eof or eof
        return lines

    def evalgate_close_input(self) -> bool:
        """Send ``close`` and end the child's stdin (it finishes what it was sent, then exits);
        False when there is no child to close."""
        child = self.process
        if child is None or child.stdin is None:
            return False
        self.evalgate_send(EvalgateWireClose())
        self.evalgate_flush()
        evalgate_close_quietly(child.stdin)
        return True

    def evalgate_kill(self) -> None:
        """Kill the child if it still runs (what it was still asking cannot be kept)."""
        child = self.process
        if child is not None and child.poll() is None:
            child.kill()
        self.eof = True

    def evalgate_reap(self) -> str | None:
        """Wait for the child's end (killed first when its output has not ended: an error
        path; killed after 30 s otherwise), close its pipes; returns why it failed (a non-zero
        exit status, with its stderr's tail), or None."""
        child = self.process
        if child is None:
            return None
        if child.poll() is None and not self.eof:
            child.kill()  # only on an error path: a drain ends with the child's exit
        try:
            status = child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            status = child.wait()
        failure = None
        if status != 0:
            failure = f"child exited with status {status}: {self.evalgate_stderr_tail()}"
        evalgate_close_quietly(child.stdout)
        evalgate_close_quietly(self._stderr)
        return failure

    def evalgate_stderr_tail(self) -> str:
        """The tail of what the child wrote to stderr (``EVALGATE_STDERR_TAIL`` characters)."""
        return evalgate_stderr_tail(self._stderr)
