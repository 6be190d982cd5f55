"""What one code execution may use: the value the manifest's ``sandbox:`` block becomes.

The field names are the manifest's (SPEC section 11: ``isolation``, ``timeout_s``, ``memory_mb``,
``cpu_s``, ``processes``) plus three limits the SPEC leaves to us. ``max_concurrency`` is not
here: it is a run-wide budget that the runner splits over shards and workers, like the
endpoint's, and it never changes what one execution means.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_ISOLATIONS = ("auto", "bwrap", "unshare", "none")
"""Accepted ``isolation`` values; ``auto`` picks bwrap, else unshare, and never ``none``."""

_POSITIVE_INTS = ("memory_mb", "cpu_s", "processes", "open_files", "file_size_mb", "work_mb")


@dataclass(frozen=True)
class EvalgateSandboxSpec:
    """Limits and isolation of one execution; validated on construction.

    - ``isolation``: ``auto`` | ``bwrap`` | ``unshare`` | ``none`` (none must be written out).
    - ``timeout_s``: wall clock from spawn to the end, after which the whole tree is killed.
    - ``memory_mb``: address space (RLIMIT_AS) of every process in the sandbox.
    - ``cpu_s``: CPU seconds (RLIMIT_CPU) of every process in the sandbox.
    - ``processes``: processes and threads the sandbox's uid may hold (RLIMIT_NPROC).
    - ``open_files``: file descriptors per process (RLIMIT_NOFILE).
    - ``file_size_mb``: largest file a process may write (RLIMIT_FSIZE).
    - ``work_mb``: size of the private work folder (a tmpfs; ``/tmp`` points into it).
    - ``interpreter``: the Python that runs the code; ``None`` until
      ``evalgate_sandbox_prepare`` chose one (see ``layout.evalgate_pick_interpreter``).
    - ``hide``: host folders that must never show inside (the store, key folders), on top of
      the home and the working folder, which are always hidden. Transport, not meaning: like
      ``max_concurrency`` it stays out of the definition digest.

    ``evalgate_sandbox_run`` needs a prepared spec: a concrete isolation and an interpreter.
    """

    isolation: str = "auto"
    timeout_s: float = 10.0
    memory_mb: int = 512
    cpu_s: int = 10
    processes: int = 64
    open_files: int = 64
    file_size_mb: int = 16
    work_mb: int = 64
    interpreter: str | None = None
    hide: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.isolation not in EVALGATE_ISOLATIONS:
            _refuse("isolation", f"must be one of {', '.join(EVALGATE_ISOLATIONS)}")
        if not self.timeout_s > 0:
            _refuse("timeout_s", "must be > 0")
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                _refuse(name, "must be an integer >= 1")

    @property
    def prepared(self) -> bool:
        """True when the isolation is concrete and the interpreter is chosen."""
        return self.isolation != "auto" and self.interpreter is not None

    def replace(self, **changes: object) -> EvalgateSandboxSpec:
        """A copy with ``changes`` applied (and validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _refuse(key: str, reason: str) -> None:
    raise EvalgateConfigError("sandbox", key, reason)
