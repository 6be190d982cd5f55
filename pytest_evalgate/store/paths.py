"""Paths under a folder store's root that stay under it.

Every path the folder backend reads, lists or writes is resolved here first: a relative path
with an absolute, empty or ``..`` component is refused, and so is one whose resolved location
(every symlink followed, ``os.path.realpath``) is not under the resolved root. A symlink that
stays inside the store is followed; one that leaves it is refused with an
``EvalgateStorePathError`` naming the path, where it leads and why.

The check is resolve + commonpath, then the final open uses ``O_NOFOLLOW`` on the resolved
path, so a last component swapped for a symlink after the check is refused too. A component
further up swapped between the check and the open is not caught: whoever can do that can
already write records into the store (see docs/security.md).
"""

from __future__ import annotations

import errno
import os

from pytest_evalgate.errors import EvalgateStorePathError

_LEAVES = "refusing to follow a symlink that leaves the store"


def evalgate_store_path(root: str, relpath: str) -> str:
    """The resolved absolute path of ``relpath`` under ``root``; refused when it leaves it."""
    shown = os.path.join(root, relpath)
    if not _plain_relative(relpath):
        reason = "not a plain relative path in the store (absolute, or an empty or '..' component)"
        raise EvalgateStorePathError(shown, reason)
    base = os.path.realpath(root)
    resolved = os.path.realpath(os.path.join(base, relpath))
    if not evalgate_is_inside(base, resolved):
        raise EvalgateStorePathError(shown, f"{_LEAVES} {base}: it leads to {resolved}")
    return resolved


def evalgate_check_inside(root: str, path: str) -> str:
    """``path`` (a folder the store holds, given as a file-system path) resolved; refused when
    it lies lexically under ``root`` but resolves outside it. Paths not under ``root`` pass."""
    lexical_root = os.path.abspath(root)
    lexical = os.path.abspath(path)
    resolved = os.path.realpath(lexical)
    if evalgate_is_inside(lexical_root, lexical) and not evalgate_is_inside(
        os.path.realpath(lexical_root), resolved
    ):
        base = os.path.realpath(lexical_root)
        raise EvalgateStorePathError(path, f"{_LEAVES} {base}: it leads to {resolved}")
    return resolved


def evalgate_is_inside(base: str, path: str) -> bool:
    """Whether absolute ``path`` is ``base`` or lies under it (no file-system access)."""
    return os.path.commonpath([base, path]) == base


def evalgate_open_nofollow(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a resolved path that refuses a symlink in its last component."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise EvalgateStorePathError(path, f"{_LEAVES}: it became a symlink") from None
        raise


def _plain_relative(relpath: str) -> bool:
    # "" names the root itself (a listing of the whole store)
    if relpath == "":
        return True
    parts = relpath.split("/")
    return not os.path.isabs(relpath) and ".." not in parts and "" not in parts
