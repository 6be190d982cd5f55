"""The child's side of the resume journal (``store.journal``): group-committed appends.

``evalgate_append`` returns once the outcome's line is published in the store. Lines that
arrive while a publish is under way go into the next object together (one object per journal
folder and batch), so a slow store costs throughput only per batch, not per response. The
child answers the pytest process only after that, and a worker takes its next work only after
that, so what a SIGKILL can lose is bounded by the workers: the requests in flight.

The store is written from a thread (the backends are blocking). A failing journal write never
fails a run: the outcome still goes to the pytest process, which commits it as usual; the
failure is logged once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pytest_evalgate.store.backend import EvalgateStoreBackend
from pytest_evalgate.store.journal import evalgate_journal_name

_NAME_TRIES = 16


class EvalgateJournalWriter:
    """This child's journal: ``writer`` names its objects (unique to the process)."""

    def __init__(
        self, backend: EvalgateStoreBackend, writer: str, log: Callable[[str], None]
    ) -> None:
        self.backend = backend
        self.writer = writer
        self._log = log
        self._seq = 0
        self._pending: dict[str, list[bytes]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self._failed = False
        self.published = 0  # lines
        self.objects = 0  # journal objects published

    async def evalgate_append(self, folder: str, line: bytes) -> None:
        """Journal ``line`` in ``folder``; returns when it is published (or failed, logged)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(folder, []).append(line)
        self._waiters.append(waiter)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        await waiter

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
                    evalgate_journal_name(folder, self.writer, self._seq), data
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
