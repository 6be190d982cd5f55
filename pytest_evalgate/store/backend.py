"""Where segments live: the ``EvalgateStoreBackend`` seam and the local folder backend.

Every other store module reaches storage only through ``EvalgateStoreBackend``, so an object
store is one more module implementing it (publish-never-replace becomes a conditional put),
without touching the writer, the reader or their callers.

The folder backend resolves every path through ``store.paths``: a symlink (or ``..``) that
leads out of the root is refused for reading, listing and writing with an
``EvalgateStorePathError`` naming the path and where it leads; nothing is read or written there.
"""

from __future__ import annotations

import errno
import os
import time
import uuid
from typing import Protocol

from pytest_evalgate.errors import EvalgateConfigError, EvalgateStorePathError
from pytest_evalgate.store.paths import (
    evalgate_check_inside,
    evalgate_is_inside,
    evalgate_open_nofollow,
    evalgate_store_path,
)

EVALGATE_FAULT_COMMIT_PAUSE_ENV = "PYTEST_EVALGATE_FAULT_COMMIT_PAUSE_S"


class EvalgateAppender(Protocol):
    """A file that grows by appends (``EvalgateStoreBackend.evalgate_appender``)."""

    def evalgate_append(self, data: bytes) -> None:
        """Add ``data`` at the end; readers see it once this returns (no fsync)."""

    def evalgate_close(self) -> None:
        """Close the file (appending after this is an error)."""


class EvalgateStoreBackend(Protocol):
    """Where segments live. Paths are '/'-separated and relative to the store root."""

    def evalgate_write_atomic(self, relpath: str, data: bytes, *, durable: bool = True) -> None:
        """Make ``data`` visible at ``relpath`` all at once; refuse to replace an existing file.

        ``durable=False`` (the resume journal): visible to every later reader once this
        returns, and so safe from a killed process, but not forced to the disk: a lost machine
        may lose it. Only data that is checked on reading and may be missing is written so.
        """

    def evalgate_appender(self, relpath: str) -> EvalgateAppender | None:
        """A new file at ``relpath`` that grows by appends (``FileExistsError`` when the name is
        taken: nothing is replaced), or None: this backend publishes whole objects only."""

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

    def evalgate_write_atomic(self, relpath: str, data: bytes, *, durable: bool = True) -> None:
        """Write to a hidden temp file, fsync, rename (no replace), fsync the folder (no fsync
        when not ``durable``).

        The target's folder is resolved inside the root before and after it is created, and
        the temp file is opened with ``O_EXCL | O_NOFOLLOW``: no byte lands outside the store.
        """
        target = evalgate_store_path(self.root, relpath)
        folder = os.path.dirname(target)
        os.makedirs(folder, exist_ok=True)
        # again: a component swapped for a symlink while the folders were being made
        target = evalgate_store_path(self.root, relpath)
        folder = os.path.dirname(target)
        temp = os.path.join(folder, f".tmp-{uuid.uuid4().hex}")
        fd = evalgate_open_nofollow(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        _fault_pause()
        try:
            _publish(temp, target)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
        if durable:
            _fsync_dir(folder)

    def evalgate_appender(self, relpath: str) -> EvalgateAppender:
        """Create ``relpath`` (``O_EXCL | O_NOFOLLOW``, its folder resolved inside the root) for
        appends: the resume journal's file on a folder store (one ``write`` per line, no
        thread, no fsync)."""
        target = evalgate_store_path(self.root, relpath)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        target = evalgate_store_path(self.root, relpath)  # again, as in evalgate_write_atomic
        fd = evalgate_open_nofollow(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        return _EvalgateFileAppender(fd)

    def evalgate_list(self, prefix: str) -> list[str]:
        """Committed segments (``*.jsonl``, not hidden) under ``prefix``.

        Symlinked folders are not descended (``os.walk``'s default); a symlinked segment is
        listed, and reading it is refused when it leads out of the store. A symlinked folder
        that leads out of the store is listed too (under its own name, which is no segment
        name), so every reader names it as a refused path instead of missing what it hides.
        """
        base = evalgate_store_path(self.root, prefix)
        inside = os.path.realpath(self.root)
        found: list[str] = []
        for folder, dirs, files in os.walk(base):
            rel = os.path.relpath(folder, base)
            lead = prefix if rel == "." else f"{prefix}/{rel}" if prefix else rel
            found.extend(f"{lead}/{name}" if lead else name for name in files if _is_segment(name))
            found.extend(
                f"{lead}/{name}" if lead else name
                for name in dirs
                if _leads_out(os.path.join(folder, name), inside)
            )
        return sorted(found)

    def evalgate_read(self, relpath: str) -> bytes:
        """Read one segment's bytes (refused when its path leads out of the store)."""
        fd = evalgate_open_nofollow(evalgate_store_path(self.root, relpath), os.O_RDONLY)
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def evalgate_children(self, prefix: str) -> list[str]:
        """Names directly under ``prefix``, hidden temp files left out."""
        try:
            names = os.listdir(evalgate_store_path(self.root, prefix))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(name for name in names if not name.startswith("."))


class _EvalgateFileAppender:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    def evalgate_append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def evalgate_close(self) -> None:
        os.close(self._fd)


def evalgate_check_store_folder(backend: EvalgateStoreBackend, path: str, key: str) -> None:
    """Refuse an output folder (``key`` names its option) that lies inside a folder store but
    resolves outside it through a symlink (``EvalgateConfigError``, exit 4)."""
    if not isinstance(backend, EvalgateLocalStore):
        return
    try:
        evalgate_check_inside(backend.root, path)
    except EvalgateStorePathError as exc:
        raise EvalgateConfigError(path, key, exc.reason) from None


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


def _leads_out(path: str, inside: str) -> bool:
    return os.path.islink(path) and not evalgate_is_inside(inside, os.path.realpath(path))


def _is_segment(name: str) -> bool:
    return name.endswith(".jsonl") and not name.startswith(".")


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
