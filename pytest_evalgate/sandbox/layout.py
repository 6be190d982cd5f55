"""What the sandbox's file system shows: the interpreter's files, read-only, and nothing else.

The view is a fresh, read-only root holding: ``/usr`` (the system's programs and libraries,
which any dynamically linked interpreter needs), the top-level ``/bin``, ``/lib*`` and
``/sbin`` entries as the host has them (symlinks into ``/usr`` on merged-usr systems), the
interpreter's own prefix when it lives outside ``/usr``, a private ``/proc``, a minimal
``/dev``, and the private work folder ``/work`` (``/tmp`` points into it). No ``/etc``, no home,
no project folder, no store, no keys: the interpreter needs none of them. Should one of them lie
inside a shown folder anyway (a project under ``/usr/src``, say), it is masked by an empty
read-only tmpfs: the home, the harness's working folder, and every folder the spec's ``hide``
names (the runner passes the store).

Which interpreter: the system's ``/usr/bin/python3`` when it exists, because it lives entirely
under ``/usr``, which the view holds anyway, and a root harness's unprivileged sandbox uid can
read it. Otherwise the harness's own base interpreter, whose prefix (for example a pyenv
version folder under the home) is shown read-only on its own, never the home around it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_SYSTEM_PYTHON = "/usr/bin/python3"
EVALGATE_WORKDIR = "/work"
_TOP_LEVEL = ("/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin")


@dataclass(frozen=True)
class EvalgateLayout:
    """The sandbox's view: read-only ``binds`` (host path shown at the same path),
    ``symlinks`` as (target, path) pairs, ``masks`` (folders inside a bind covered by an empty
    read-only tmpfs), and the ``interpreter`` to run (a path in the view)."""

    binds: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]
    masks: tuple[str, ...]
    interpreter: str


def evalgate_pick_interpreter() -> str:
    """The interpreter a sandbox runs when the spec names none (see the module docstring)."""
    if os.access(EVALGATE_SYSTEM_PYTHON, os.X_OK):
        return EVALGATE_SYSTEM_PYTHON
    return os.path.realpath(Path(sys.base_prefix) / "bin" / "python3")


def evalgate_layout(interpreter: str, hide: tuple[str, ...] = ()) -> EvalgateLayout:
    """The view for ``interpreter``, masking the home, the working folder and ``hide``.

    Refuses (``EvalgateConfigError``) an interpreter whose prefix is or holds a hidden folder,
    or lies inside the working (project) folder.
    """
    real = os.path.realpath(interpreter)
    hidden = _hidden(hide)
    binds, symlinks = _system_view()
    prefix = str(Path(real).parent.parent)
    if not any(_within(prefix, bind) for bind in binds):
        _refuse_exposure(prefix, hidden)
        binds.append(prefix)
    masks = sorted({h for h in hidden for b in binds if _within(h, b)})
    return EvalgateLayout(tuple(binds), tuple(symlinks), tuple(masks), real)


def _hidden(hide: tuple[str, ...]) -> list[str]:
    """Real paths of the folders no sandbox may show: home, working folder, ``hide``."""
    folders = [str(Path.home()), os.getcwd(), *hide]
    return [os.path.realpath(folder) for folder in folders]


def _system_view() -> tuple[list[str], list[tuple[str, str]]]:
    """``/usr`` plus the top-level system entries, as symlinks or binds like the host's."""
    binds = ["/usr"]
    symlinks: list[tuple[str, str]] = []
    for entry in _TOP_LEVEL:
        if os.path.islink(entry):
            symlinks.append((os.readlink(entry), entry))
        elif os.path.isdir(entry):
            binds.append(entry)
    return binds, symlinks


def _refuse_exposure(prefix: str, hidden: list[str]) -> None:
    """A prefix must not be or hold a hidden folder, nor lie inside the working folder."""
    project = hidden[1]
    if any(_within(folder, prefix) for folder in hidden) or _within(prefix, project):
        reason = (
            f"the interpreter's prefix {prefix} would show a folder the sandbox must hide "
            f"(home, project folder {project}, or a hidden folder); install a system python3 "
            "or name an interpreter outside them"
        )
        raise EvalgateConfigError("sandbox", "interpreter", reason)


def _within(path: str, folder: str) -> bool:
    """True when ``path`` is ``folder`` or lies below it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")
