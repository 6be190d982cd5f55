"""The judge's runner child, seen from the pytest process that spawns it.

``EvalgateJudgeChild`` starts ``python -m pytest_evalgate.runner`` (``runner.spawn``: the
generation child's program) set up with the judge's limits (``judge.budget``), queues
``runner.wire`` messages for it, writes them at each flush, and reads back what it reports. It
is the parent side of the pipe: the judging stage (``runner/judging.py``) holds one.
"""

from __future__ import annotations

import select
import subprocess

from pytest_evalgate.errors import EvalgateError
from pytest_evalgate.runner.spawn import (
    evalgate_close_quietly,
    evalgate_read_lines,
    evalgate_spawn_child,
    evalgate_stderr_tail,
)
from pytest_evalgate.runner.wire import (
    EvalgateLimits,
    EvalgateToChild,
    EvalgateToParent,
    EvalgateWireClose,
    EvalgateWireSetup,
    evalgate_decode_for_parent,
    evalgate_encode,
)


class EvalgateJudgeChild:
    """The judge's runner child: the generation child's program, with the judge's limits."""

    def __init__(self, concurrency: int, limits: EvalgateLimits) -> None:
        self._process, self._stderr = evalgate_spawn_child()
        self._outbox: list[bytes] = [evalgate_encode(EvalgateWireSetup(concurrency, limits))]
        self._inbox = b""
        self.eof = False

    def evalgate_send(self, message: EvalgateToChild) -> None:
        """Queue one message for the child (written at the next flush)."""
        self._outbox.append(evalgate_encode(message))

    def evalgate_flush(self) -> None:
        """Write what is queued."""
        stdin = self._process.stdin
        if not self._outbox or stdin is None or stdin.closed:
            return
        data = b"".join(self._outbox)
        self._outbox.clear()
        try:
            stdin.write(data)
            stdin.flush()
        except (BrokenPipeError, ValueError):
            self.eof = True

    def evalgate_pump(self, timeout: float) -> list[EvalgateToParent]:
        """What the child reported, waiting up to ``timeout`` for the first byte."""
        stdout = self._process.stdout
        assert stdout is not None
        if self.eof:
            raise EvalgateError(f"evalgate judge runner stopped: {self._tail()}")
        if not select.select([stdout.fileno()], [], [], timeout)[0]:
            return []
        lines, self._inbox, eof = evalgate_read_lines(stdout.fileno(), self._inbox)
        self.eof = self.eof or eof
        return [evalgate_decode_for_parent(line) for line in lines if line.strip()]

    def _tail(self) -> str:
        return evalgate_stderr_tail(self._stderr)

    def evalgate_close(self) -> None:
        """Ask the child to finish, then wait for it (killed after 30 s)."""
        self.evalgate_send(EvalgateWireClose())
        self.evalgate_flush()
        evalgate_close_quietly(self._process.stdin)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        evalgate_close_quietly(self._process.stdout)
        evalgate_close_quietly(self._stderr)
