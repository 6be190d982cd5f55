"""Read a sandbox's pipes on the running event loop, keeping a bounded head of each.

A pipe is drained to its end whatever the sandbox writes (so a chatty program never blocks on
a full pipe), but only the first ``limit`` bytes are kept: an answer that prints gigabytes costs
the harness no memory.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

_CHUNK = 65536


class EvalgatePipeReader:
    """Collects what arrives on the read end ``fd`` of a pipe until every writer closed it.

    ``on_line`` (optional) is called once, when the first newline arrives: the driver's
    ``started`` line on the report pipe. The reader owns ``fd`` and closes it.
    """

    def __init__(self, fd: int, limit: int, on_line: Callable[[], None] | None = None) -> None:
        self._fd, self._limit, self._on_line = fd, limit, on_line
        self._kept = bytearray()
        self.total = 0
        self._loop = asyncio.get_running_loop()
        self._eof: asyncio.Future[None] = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._readable)

    @property
    def data(self) -> bytes:
        """The first ``limit`` bytes received."""
        return bytes(self._kept)

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        self._keep(chunk)

    def _keep(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._limit - len(self._kept)
        if room > 0:
            self._kept += chunk[:room]
        if self._on_line is not None and b"\n" in self._kept:
            self._on_line()
            self._on_line = None

    async def wait(self, timeout_s: float) -> bool:
        """Wait for the end of the pipe; False (and closed) if it is still open after
        ``timeout_s`` (a writer escaped the teardown; only possible under ``none``)."""
        try:
            await asyncio.wait_for(asyncio.shield(self._eof), timeout_s)
        except TimeoutError:
            self.close()
            return False
        return True

    def close(self) -> None:
        """Stop reading and close the fd (idempotent)."""
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
        if not self._eof.done():
            self._eof.set_result(None)
