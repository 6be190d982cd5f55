"""The committer: writes and fsyncs taken segments off the item loop, in the order taken."""

from __future__ import annotations

import queue
import threading

from pytest_evalgate.errors import EvalgateError
from pytest_evalgate.store import EvalgateSegment, EvalgateSegmentWriter


class EvalgateCommitter(threading.Thread):
    """Writes and fsyncs segments off the item loop, in the order they were taken.

    A slow disk never stalls the item loop. A failed commit is kept and raised to the item loop
    at the next hand-over or at the stop.
    """

    def __init__(self, writer: EvalgateSegmentWriter) -> None:
        super().__init__(name="evalgate-committer", daemon=True)
        self._writer = writer
        self._queue: queue.SimpleQueue[list[EvalgateSegment] | None] = queue.SimpleQueue()
        self._error: BaseException | None = None

    def run(self) -> None:
        while (segments := self._queue.get()) is not None:
            try:
                self._writer.evalgate_write(segments)
            except BaseException as exc:  # handed to the item loop by _raise
                self._error = exc
                return

    def evalgate_put(self, segments: list[EvalgateSegment]) -> None:
        """Queue ``segments`` for writing (raises a commit failure seen earlier)."""
        self._raise()
        if segments:
            self._queue.put(segments)

    def evalgate_stop(self) -> None:
        """Write what is queued plus the writer's tail, stop the thread, raise any failure."""
        if self.is_alive():
            self._queue.put(self._writer.evalgate_take())
            self._queue.put(None)
            self.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise EvalgateError(f"evalgate commit failed: {self._error}") from self._error
