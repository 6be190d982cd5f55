"""A report folder holds one run's story: it is replaced whole, never written over.

A run writes its reports (and its envelope, when signed) into a new hidden folder beside the
report folder, then swaps it in: an atomic exchange of the two folders where the system has one
(Linux ``renameat2(RENAME_EXCHANGE)``), else two renames (the folder is absent for an instant,
never a mix of two runs). The earlier run's folder is then deleted, so no file of an earlier
run (a signed pass beside a later unsigned, incomplete decision) is left behind.

An existing folder is replaced only when every entry in it is a name a report writes; a folder
holding anything else (a source tree given by mistake) is refused, and nothing in it is touched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import uuid
from collections.abc import Callable

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_REPORT_FILES = frozenset(
    {
        "decision.json",
        "report.md",
        "report.html",
        "forest.png",
        "decision.dsse.json",
        "decision.dsse.override.json",
        # pytest writes --junitxml=DIR/junit.xml after the gate swapped DIR in (scripts/demo)
        "junit.xml",
    }
)
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def evalgate_check_report_folder(directory: str, key: str = "--evalgate-report") -> None:
    """Refuse a report folder that exists and holds entries no report writes (or is a file)."""
    if not os.path.lexists(directory):
        return
    if not os.path.isdir(directory):
        raise EvalgateConfigError(directory, key, "exists and is not a folder")
    foreign = sorted(set(os.listdir(directory)) - EVALGATE_REPORT_FILES)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        reason = (
            f"holds entries no evalgate report writes ({shown}); the folder is replaced whole "
            "by each run, so give an empty folder or one an earlier report wrote"
        )
        raise EvalgateConfigError(directory, key, reason)


def evalgate_replace_folder(directory: str, fill: Callable[[str], list[str]]) -> list[str]:
    """Replace ``directory`` by a new folder that ``fill`` writes; returns the final paths.

    ``fill`` gets the new (hidden) folder and returns the paths it wrote there. When ``fill``
    raises, the new folder is removed and ``directory`` is left as it was.
    """
    evalgate_check_report_folder(directory)
    # a report folder that is a symlink is followed: the folder it names is replaced
    target = os.path.realpath(directory)
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{name}.new-{uuid.uuid4().hex[:12]}")
    os.mkdir(staging)
    try:
        written = fill(staging)
        _fsync_tree(staging)
        _swap(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # the earlier run's files, or the unused new
    return [os.path.join(directory, os.path.relpath(path, staging)) for path in written]


def _swap(staging: str, target: str) -> None:
    """Put ``staging`` at ``target``; afterwards ``staging`` holds what was there (or nothing)."""
    if not os.path.lexists(target):
        os.rename(staging, target)
        return
    if _exchange(staging, target):
        return
    aside = f"{staging}.old"
    os.rename(target, aside)
    os.rename(staging, target)
    os.rename(aside, staging)


def _exchange(first: str, second: str) -> bool:
    # Python's os module has no renameat2; glibc exports it since 2.28. Any failure (another
    # libc, a file system without RENAME_EXCHANGE) falls back to two renames.
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    result = renameat2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    return bool(result == 0)


def _fsync_tree(folder: str) -> None:
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as handle:
                os.fsync(handle.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
