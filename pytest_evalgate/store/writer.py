"""The segment writer: this process's sealed records, committed as atomic segment files.

A writer (one per process) writes only its own segments, named
``<prefix>/<shard_dir>/seg-<writer>-<seq>.jsonl``. A segment is JSON Lines of canonical records,
made visible whole or not at all by the backend, so a SIGKILL loses at most the records not yet
committed. Nothing is ever overwritten or deleted.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from typing import NamedTuple

from pytest_evalgate.errors import EvalgateStoreError
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.store.backend import EvalgateStoreBackend

_PUBLISH_TRIES = 16


class EvalgateSegment(NamedTuple):
    """A taken, not yet written segment: where it goes, its bytes, how many records it holds."""

    relpath: str
    data: bytes
    records: int


def evalgate_writer_id() -> str:
    """A writer id unique to this process: host, pid and a random suffix."""
    host = socket.gethostname().replace("/", "_")[:40]
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class EvalgateSegmentWriter:
    """Buffers this process's records and commits them as atomic segments.

    ``add`` never writes; ``evalgate_commit`` writes one segment per candidate folder with
    pending records; ``evalgate_maybe_commit`` does so when enough records or time piled up.
    """

    def __init__(
        self,
        backend: EvalgateStoreBackend,
        shard_dir: str,
        *,
        writer: str | None = None,
        max_records: int = 512,
        max_age_s: float = 0.5,
        on_commit: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.backend = backend
        self.on_commit = on_commit  # (relpath, bytes) of each segment once it is visible
        self.shard_dir = shard_dir
        self.writer = writer or evalgate_writer_id()
        self.max_records = max_records
        self.max_age_s = max_age_s
        self._pending: dict[str, list[bytes]] = {}
        self._count = 0
        self._oldest = 0.0
        self._seq = 0
        self.sealed = 0  # records added
        self.committed = 0

    def evalgate_add(
        self, prefix: str, record: Mapping[str, object], line: bytes | None = None
    ) -> None:
        """Queue one sealed record (an ``EvalgateRecord``) for the candidate folder ``prefix``;
        ``line``: its canonical JSON line when the caller has it (``evalgate_seal_line``)."""
        if not self._count:
            self._oldest = time.monotonic()
        data = line if line is not None else evalgate_canonical_json(record) + b"\n"
        self._pending.setdefault(prefix, []).append(data)
        self._count += 1
        self.sealed += 1

    def evalgate_due(self) -> bool:
        """Whether ``max_records`` are pending or the oldest is ``max_age_s`` old."""
        return self._count >= self.max_records or bool(
            self._count and time.monotonic() - self._oldest >= self.max_age_s
        )

    def evalgate_maybe_commit(self) -> None:
        """Commit when ``evalgate_due``."""
        if self.evalgate_due():
            self.evalgate_commit()

    def evalgate_commit(self) -> None:
        """Write every pending record; each candidate folder gets one new segment."""
        self.evalgate_write(self.evalgate_take())

    def evalgate_take(self) -> list[EvalgateSegment]:
        """Empty the buffer into named segments, not yet written.

        Cheap, so the caller can take on its busy thread and ``evalgate_write`` (write + fsync)
        on another; segments must be written in the order they were taken.
        """
        segments = []
        for prefix, lines in self._pending.items():
            self._seq += 1
            relpath = f"{prefix}/{self.shard_dir}/seg-{self.writer}-{self._seq:06d}.jsonl"
            segments.append(EvalgateSegment(relpath, b"".join(lines), len(lines)))
        self._pending.clear()
        self._count = 0
        return segments

    def evalgate_write(self, segments: list[EvalgateSegment]) -> None:
        """Make taken segments visible atomically, one by one; counts them in ``committed``."""
        for relpath, data, records in segments:
            published = self._publish(relpath, data)
            self.committed += records
            if self.on_commit is not None:
                self.on_commit(published, data)

    def _publish(self, relpath: str, data: bytes) -> str:
        # A taken name (another writer won the race for it) is not an error: the records go
        # under this writer's next sequence number instead; what was published stays as it is.
        for _ in range(_PUBLISH_TRIES):
            try:
                self.backend.evalgate_write_atomic(relpath, data)
                return relpath
            except FileExistsError:
                relpath = self._renamed(relpath)
            except OSError as exc:
                raise EvalgateStoreError(f"{relpath}: cannot commit segment: {exc}") from exc
        raise EvalgateStoreError(f"{relpath}: cannot commit segment: every name was taken")

    def _renamed(self, relpath: str) -> str:
        self._seq += 1
        folder = relpath.rsplit("/", 1)[0]
        return f"{folder}/seg-{self.writer}-{self._seq:06d}.jsonl"
