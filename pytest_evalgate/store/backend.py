"""Where segments live: the ``EvalgateStoreBackend`` seam and the local folder backend.

Every other store module reaches storage only through ``EvalgateStoreBackend``, so an object
store is one more module implementing it (publish-never-replace becomes a conditional put),
without touching the writer, the reader or their callers.
"""

from __future__ import annotations

import errno
import os
import time
import uuid
from typing import Protocol

EVALGATE_FAULT_COMMIT_PAUSE_ENV = "PYTEST_EVALGATE_FAULT_COMMIT_PAUSE_S"


class EvalgateStoreBackend(Protocol):
    """Where segments live. Paths are '/'-separated and relative to the store root."""

    def evalgate_write_atomic(self, relpath: str, data: bytes) -> None:
        """Make ``data`` visible at ``relpath`` all at once; refuse to replace an existing file."""

    def evalgate_list(self, prefix: str) -> list[str]:
        """Every committed segment path under ``prefix`` (recursively), sorted."""

    def evalgate_read(self, relpath: str) -> bytes:
        """The bytes of one committed segment."""

    def evalgate_children(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` (folders and files), sorted; [] when it is absent."""


class EvalgateLocalStore:
    """A store on a local or mounted shared folder (NFS, a PVC, ...)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def evalgate_write_atomic(self, relpath: str, data: bytes) -> None:
        """Write to a hidden temp file, fsync, rename (no replace), fsync the folder."""
        target = os.path.join(self.root, relpath)
        folder = os.path.dirname(target)
        os.makedirs(folder, exist_ok=True)
        temp = os.path.join(folder, f".tmp-{uuid.uuid4().hex}")
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _fault_pause()
        try:
            _publish(temp, target)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
        _fsync_dir(folder)

    def evalgate_list(self, prefix: str) -> list[str]:
        """Committed segments (``*.jsonl``, not hidden) under ``prefix``."""
        base = os.path.join(self.root, prefix)
        found: list[str] = []
        for folder, _dirs, files in os.walk(base):
            rel = os.path.relpath(folder, self.root)
            found.extend(f"{rel}/{name}" for name in files if _is_segment(name))
        return sorted(found)

    def evalgate_read(self, relpath: str) -> bytes:
        """Read one segment's bytes."""
        with open(os.path.join(self.root, relpath), "rb") as handle:
            return handle.read()

    def evalgate_children(self, prefix: str) -> list[str]:
        """Names directly under ``prefix``, hidden temp files left out."""
        try:
            names = os.listdir(os.path.join(self.root, prefix))
        except FileNotFoundError:
            return []
        return sorted(name for name in names if not name.startswith("."))


def _fault_pause() -> None:
    # Fault injection for tests: hold a written, unpublished temp file for this many seconds,
    # so a test can SIGKILL a writer in the middle of a commit (otherwise a ~0.3 ms window).
    pause = os.environ.get(EVALGATE_FAULT_COMMIT_PAUSE_ENV)
    if pause:
        time.sleep(float(pause))


def _publish(temp: str, target: str) -> None:
    # A hard link fails when the target exists, so a committed segment is never replaced.
    # Filesystems without hard links fall back to a checked rename (names are unique per writer).
    try:
        os.link(temp, target)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV) or os.path.exists(target):
            raise
        os.rename(temp, target)


def _is_segment(name: str) -> bool:
    return name.endswith(".jsonl") and not name.startswith(".")


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
