"""The child's side of the resume journal (``store.journal``): appends before each report.

``evalgate_append`` returns once the outcome's line is in the store. The child answers the
pytest process only after that, and a worker takes its next work only after that, so what a
SIGKILL can lose is bounded by the workers: the requests in flight.

Two ways in, by backend, both without fsync (``store.journal`` says why that is safe):

- a folder store gives an appender (``evalgate_appender``): one file per journal folder and
  process, one ``write`` per line, in the event loop: a few microseconds, no thread;
- an object store cannot append, so lines are group-committed: those that arrive while an
  object is being put go into the next object together (one object per folder and batch),
  written from a thread (the client blocks), so a slow store costs throughput per batch.

Measured with ``bench/throughput.py`` (10,000 answers, 64 in flight, 50 ms): objects published
with fsync (~12 ms each) held every worker's next request, and the request phase ran at ~78 %
of the endpoint bound; objects without fsync were ~2,400 small publishes costing ~0.8 ms of
the child's CPU each; the appender costs the child about what no journal costs.

A failing journal write never fails a run: the outcome still goes to the pytest process, which
commits it as usual; the failure is logged once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pytest_evalgate.store.backend import EvalgateAppender, EvalgateStoreBackend
from pytest_evalgate.store.journal import evalgate_journal_name

_NAME_TRIES = 16


class EvalgateJournalWriter:
    """This child's journal: ``writer`` names its files or objects (unique to the process)."""

    def __init__(
        self, backend: EvalgateStoreBackend, writer: str, log: Callable[[str], None]
    ) -> None:
        self.backend = backend
        self.writer = writer
        self._log = log
        self._seq = 0
        self._appenders: dict[str, EvalgateAppender | None] = {}  # None: publish objects
        self._pending: dict[str, list[bytes]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self._failed = False
        self.published = 0  # lines
        self.objects = 0  # journal files or objects published

    async def evalgate_append(self, folder: str, line: bytes) -> None:
        """Journal ``line`` in ``folder``; returns when it is in the store (or failed, logged)."""
        if self._append(folder, line):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(folder, []).append(line)
        self._waiters.append(waiter)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        await waiter

    def evalgate_close(self) -> None:
        """Close the appended files (the child's last step)."""
        for appender in self._appenders.values():
            if appender is not None:
                appender.evalgate_close()
        self._appenders.clear()

    def _append(self, folder: str, line: bytes) -> bool:
        """Write ``line`` through ``folder``'s appender; False when it has none (objects)."""
        if folder not in self._appenders:
            self._appenders[folder] = self._open(folder)
        appender = self._appenders[folder]
        if appender is None:
            return False
        try:
            appender.evalgate_append(line)
            self.published += 1
        except OSError as exc:
            self._failure(exc)
        return True

    def _open(self, folder: str) -> EvalgateAppender | None:
        try:
            for _ in range(_NAME_TRIES):
                self._seq += 1
                try:
                    name = evalgate_journal_name(folder, self.writer, self._seq)
                    appender = self.backend.evalgate_appender(name)
                except FileExistsError:
                    continue  # a name taken by another process with this writer id
                if appender is not None:
                    self.objects += 1
                return appender
            raise OSError(f"{folder}: every journal name was taken")
        except Exception as exc:  # the store failing is not the run failing: objects instead
            self._failure(exc)
            return None

    async def _drain(self) -> None:
        while self._pending:
            pending, waiters = self._pending, self._waiters
            self._pending, self._waiters = {}, []
            try:
                await asyncio.to_thread(self._publish_all, pending)
            except Exception as exc:  # the store failing is not the run failing
                self._failure(exc)
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _publish_all(self, pending: dict[str, list[bytes]]) -> None:
        for folder, lines in pending.items():
            self._publish(folder, b"".join(lines))
            self.published += len(lines)

    def _publish(self, folder: str, data: bytes) -> None:
        for _ in range(_NAME_TRIES):
            self._seq += 1
            try:
                self.backend.evalgate_write_atomic(
                    evalgate_journal_name(folder, self.writer, self._seq), data, durable=False
                )
                self.objects += 1
                return
            except FileExistsError:
                continue  # a name taken by another process with this writer id: the next one
        raise OSError(f"{folder}: every journal name was taken")

    def _failure(self, exc: Exception) -> None:
        if not self._failed:
            self._failed = True
            self._log(f"evalgate journal: cannot write ({type(exc).__name__}: {exc}); "
                      "answers are still committed, a SIGKILL now loses more")  # fmt: skip
