"""Find the programs a sandbox is built from: bubblewrap and util-linux's unshare and setpriv.

Found on ``PATH`` (or a ``search_path`` in the same format), never downloaded or bundled.
Debian's ``bubblewrap`` package provides ``bwrap``; ``unshare`` and ``setpriv`` come with
util-linux, which every Debian and Ubuntu system has.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass


@dataclass(frozen=True)
class EvalgateTools:
    """Absolute paths of the sandbox programs; ``None`` where a program is missing."""

    bwrap: str | None
    unshare: str | None
    setpriv: str | None

    def missing(self, *names: str) -> list[str]:
        """The names among ``names`` (``"bwrap"``, ``"unshare"``, ``"setpriv"``) not found."""
        return [name for name in names if getattr(self, name) is None]


def evalgate_find_tools(search_path: str | None = None) -> EvalgateTools:
    """Look the programs up on ``search_path`` (default: this process's ``PATH``)."""
    return EvalgateTools(
        bwrap=shutil.which("bwrap", path=search_path),
        unshare=shutil.which("unshare", path=search_path),
        setpriv=shutil.which("setpriv", path=search_path),
    )


def evalgate_missing_requirements(isolation: str, tools: EvalgateTools) -> list[str]:
    """Why ``isolation`` cannot even be tried here (empty when it can)."""
    root = os.geteuid() == 0
    if isolation == "bwrap":
        return _absent(tools, "bwrap", "unshare", *(["setpriv"] if root else []))
    if isolation == "unshare":
        needs_root = [] if root else ["it needs root (it mounts)"]
        return needs_root + _absent(tools, "unshare", "setpriv")
    return []


def _absent(tools: EvalgateTools, *names: str) -> list[str]:
    return [f"{name} not found" for name in tools.missing(*names)]
