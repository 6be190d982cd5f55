"""The resource limits (rlimits) of one execution, as builtins the in-sandbox driver applies.

The driver (``driver.py``) sets them on itself before it runs a line of the answer's code, so
they bind the code and everything it starts (rlimits are inherited by children), and never the
trusted supervisors around it. Hard limits equal soft ones, except CPU: the soft limit sends
SIGXCPU (reported as ``timeout``), the hard limit one second later is SIGKILL.

``RLIMIT_NPROC`` counts per real uid, and root is exempt from it: a sandbox therefore never
runs the code as host root (``commands.py`` drops to an unprivileged uid), or a fork bomb would
not be stopped by this limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_evalgate.sandbox.spec import EvalgateSandboxSpec

_MB = 1024 * 1024


@dataclass(frozen=True)
class EvalgateRlimit:
    """One limit: the ``resource`` module's constant name, soft and hard values."""

    name: str
    soft: int
    hard: int

    def as_builtins(self) -> list[object]:
        """``[name, soft, hard]``: the form the driver reads from its job."""
        return [self.name, self.soft, self.hard]


def evalgate_rlimits(spec: EvalgateSandboxSpec) -> tuple[EvalgateRlimit, ...]:
    """The limits ``spec`` asks for, plus no core dumps (a dump would be written into /work)."""
    return (
        EvalgateRlimit("RLIMIT_AS", spec.memory_mb * _MB, spec.memory_mb * _MB),
        EvalgateRlimit("RLIMIT_CPU", spec.cpu_s, spec.cpu_s + 1),
        EvalgateRlimit("RLIMIT_NPROC", spec.processes, spec.processes),
        EvalgateRlimit("RLIMIT_NOFILE", spec.open_files, spec.open_files),
        EvalgateRlimit("RLIMIT_FSIZE", spec.file_size_mb * _MB, spec.file_size_mb * _MB),
        EvalgateRlimit("RLIMIT_CORE", 0, 0),
    )
