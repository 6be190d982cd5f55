"""Choose the isolation for code scoring, and prove it works here before any answer runs.

``await evalgate_sandbox_prepare(spec)`` once per process: it picks the interpreter, resolves
``isolation: auto`` (bubblewrap where installed and working, else ``unshare`` namespaces, never
``none``), and probes the result by running a real sandbox whose tests check, from inside, the
guarantees an execution relies on: not root, no network interface up, its own PID namespace,
an empty environment, a read-only root, a writable work folder. A sandbox that does not pass
its probe is not used. When nothing works, ``EvalgateSandboxUnavailableError`` says how to get
a sandbox. ``isolation: none`` is probed only for a working interpreter.

Requirements: ``bwrap`` needs bubblewrap, util-linux ``unshare`` (and ``setpriv`` as root), and
user namespaces the harness's uid may create; ``unshare`` needs root (it mounts) and
util-linux's ``unshare`` and ``setpriv``.
"""

from __future__ import annotations

from pytest_evalgate.errors import EvalgateSandboxError, EvalgateSandboxUnavailableError
from pytest_evalgate.sandbox.execute import evalgate_sandbox_run
from pytest_evalgate.sandbox.layout import evalgate_pick_interpreter
from pytest_evalgate.sandbox.spec import EvalgateSandboxSpec
from pytest_evalgate.sandbox.tools import (
    EvalgateTools,
    evalgate_find_tools,
    evalgate_missing_requirements,
)

EVALGATE_HOW_TO_SANDBOX = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora/RHEL: dnf install "
    "bubblewrap) on a kernel that allows user namespaces, or run the harness as root so that "
    "unshare namespaces can be used; in Kubernetes, give the worker pod user namespaces "
    "(hostUsers: false) or a sandboxed runtime class such as gVisor (runtimeClassName). "
    "'isolation: none' runs code without a sandbox, and such a decision is never signed as a pass"
)
"""The refusal's advice when no isolation works."""

_PROBE_CODE = """
import fcntl, os, socket, struct
def _is_up(name):
    with socket.socket() as s:
        flags = fcntl.ioctl(s.fileno(), 0x8913, struct.pack("256s", name.encode()))
    return bool(struct.unpack("H", flags[16:18])[0] & 1)
UP = [name for _, name in socket.if_nameindex() if _is_up(name)]
def _writable(path):
    try:
        with open(path, "w") as f:
            f.write("probe")
        return True
    except OSError:
        return False
ROOT_WRITABLE = _writable("/evalgate-probe")
WORK_WRITABLE = _writable("probe.txt")
"""

_PROBE_TESTS = """
assert os.getuid() != 0 and os.geteuid() != 0, "runs as root"
assert UP == [], f"interfaces up: {UP}"
VISIBLE = [p for p in os.listdir("/proc") if p.isdigit()]
assert len(VISIBLE) <= 3 and os.getppid() == 1, f"no own PID namespace (sees {len(VISIBLE)})"
assert not os.environ, f"environment not empty: {sorted(os.environ)}"
assert not ROOT_WRITABLE, "the root is writable"
assert WORK_WRITABLE, "the work folder is not writable"
"""

# isolation: none runs on the host itself: its probe only proves the interpreter works.
_TRIVIAL_CODE = "ANSWER = 6 * 7\n"
_TRIVIAL_TESTS = "assert ANSWER == 42\n"


async def evalgate_sandbox_prepare(
    spec: EvalgateSandboxSpec, *, search_path: str | None = None
) -> EvalgateSandboxSpec:
    """``spec`` with a concrete, probed isolation and an interpreter.

    Raises ``EvalgateSandboxUnavailableError`` (a configuration error: exit 4) when the asked
    isolation, or for ``auto`` every candidate, cannot be used here. ``search_path`` replaces
    ``PATH`` when looking for the sandbox programs.
    """
    interpreter = spec.interpreter or evalgate_pick_interpreter()
    tools = evalgate_find_tools(search_path)
    wanted = ("bwrap", "unshare") if spec.isolation == "auto" else (spec.isolation,)
    reasons = []
    for isolation in wanted:
        candidate = spec.replace(isolation=isolation, interpreter=interpreter)
        reason = await _probe(candidate, tools)
        if reason is None:
            return candidate
        reasons.append(f"{isolation}: {reason}")
    raise EvalgateSandboxUnavailableError(
        "sandbox", "isolation", f"no working sandbox ({'; '.join(reasons)}); "
        f"{EVALGATE_HOW_TO_SANDBOX}"
    )  # fmt: skip


async def _probe(spec: EvalgateSandboxSpec, tools: EvalgateTools) -> str | None:
    """None when a real sandbox built as ``spec`` passes its probe, else the reason."""
    missing = evalgate_missing_requirements(spec.isolation, tools)
    if missing:
        return ", ".join(missing)
    none = spec.isolation == "none"
    code, tests = (_TRIVIAL_CODE, _TRIVIAL_TESTS) if none else (_PROBE_CODE, _PROBE_TESTS)
    try:
        execution = await evalgate_sandbox_run(code, tests, spec)
    except EvalgateSandboxError as error:
        return error.message
    if not execution.passed:
        return f"the probe sandbox failed its checks ({execution.outcome}: {execution.message})"
    return None
