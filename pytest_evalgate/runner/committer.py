"""The committer: writes and fsyncs taken segments off the item loop, in the order taken."""

from __future__ import annotations

import queue
import threading

from pytest_evalgate.errors import EvalgateError
from pytest_evalgate.store import EvalgateSegment, EvalgateSegmentWriter


class EvalgateCommitter(threading.Thread):
    """Writes and fsyncs segments off the item loop, in the order they were taken.

    A slow disk never stalls the item loop. Each hand-over is a numbered batch; ``written`` is
    the number of the last batch made visible whole, so the item loop can tell whether a
    record is committed. A failed commit stops the thread (nothing after it is written): it is
    ``failure``, and it is raised at the stop unless the caller handled it.
    """

    def __init__(self, writer: EvalgateSegmentWriter) -> None:
        super().__init__(name="evalgate-committer", daemon=True)
        self._writer = writer
        self._queue: queue.SimpleQueue[tuple[int, list[EvalgateSegment]] | None] = (
            queue.SimpleQueue()
        )
        self._error: BaseException | None = None
        self._batches = 0
        self._done = threading.Condition()
        self.written = 0  # the last batch written whole (batches are written in order)

    @property
    def failure(self) -> BaseException | None:
        """The commit failure that stopped the thread, or None."""
        return self._error

    def run(self) -> None:
        while (batch := self._queue.get()) is not None:
            number, segments = batch
            try:
                self._writer.evalgate_write(segments)
            except BaseException as exc:  # read by the item loop (failure, _raise)
                self._error = exc
                self._notify(self.written)
                return
            self._notify(number)

    def _notify(self, number: int) -> None:
        with self._done:
            self.written = number
            self._done.notify_all()

    def evalgate_put(self, segments: list[EvalgateSegment]) -> int:
        """Queue ``segments`` for writing; returns the batch's number (a batch without
        segments is written at once). Raises a commit failure seen earlier."""
        self._raise()
        self._batches += 1
        self._queue.put((self._batches, segments))
        return self._batches

    def evalgate_wait(self, number: int, timeout: float) -> bool:
        """Wait up to ``timeout`` for batch ``number``; whether it is written."""
        with self._done:
            if self.written < number and self._error is None:
                self._done.wait(timeout)
            return self.written >= number

    def evalgate_stop(self, *, raise_failure: bool = True) -> None:
        """Write what is queued plus the writer's tail, stop the thread, raise any failure
        (unless ``raise_failure`` is False: the caller reported it already)."""
        if self.is_alive():
            self._queue.put((self._batches + 1, self._writer.evalgate_take()))
            self._queue.put(None)
            self.join()
        if raise_failure:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise EvalgateError(f"evalgate commit failed: {self._error}") from self._error
