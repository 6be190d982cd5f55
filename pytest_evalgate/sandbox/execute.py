"""One execution of an answer's code and a case's tests in a fresh sandbox.

``await evalgate_sandbox_run(code, tests, spec)`` is the whole API the runner needs: call it from
the runner's own event loop, once per (case, candidate, repetition) as soon as the answer
exists, inside the run-wide ``sandbox.max_concurrency`` budget (an ``asyncio.Semaphore`` share,
like the endpoint's). ``spec`` must come from ``evalgate_sandbox_prepare`` (``isolation.py``),
called once per process. Nothing here blocks the loop for more than a ``/proc`` scan.

What one execution guarantees, for ``bwrap`` and ``unshare`` alike (``docs/sandbox.md``):

- a new network namespace with no interface up, its own PID, IPC, UTS, mount (and cgroup)
  namespaces, an unprivileged uid with no capabilities, an empty environment;
- a read-only view of the interpreter's files only (``layout.py``);
- a private work folder: a tmpfs that lives in the sandbox's own mount namespace, so it is gone
  with the sandbox's last process whatever happens to the harness (the only host folder, the
  unshare root's empty mount point, is removed here);
- the rlimits of ``limits.py``, and a wall-clock timeout from spawn after which the whole tree
  is killed; on return no process of the sandbox is alive (the sandbox's PID namespace is torn
  down when its process 1 ends, and at the timeout it is killed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from pytest_evalgate.errors import EvalgateConfigError, EvalgateSandboxError
from pytest_evalgate.sandbox.commands import EvalgatePlan, evalgate_command
from pytest_evalgate.sandbox.layout import EvalgateLayout, evalgate_layout
from pytest_evalgate.sandbox.limits import evalgate_rlimits
from pytest_evalgate.sandbox.outcome import (
    EvalgateExecution,
    EvalgateObservation,
    evalgate_classify,
)
from pytest_evalgate.sandbox.pipes import EvalgatePipeReader
from pytest_evalgate.sandbox.reaper import (
    evalgate_kill_group,
    evalgate_kill_tree,
    evalgate_wait_exit,
    evalgate_wait_gone,
)
from pytest_evalgate.sandbox.spec import EvalgateSandboxSpec
from pytest_evalgate.sandbox.tools import evalgate_find_tools, evalgate_missing_requirements

EVALGATE_SANDBOX_UID_BASE = 2_000_000_000
"""A root harness runs each execution as a random uid in [base, base + 2**24): unique, so no
two sandboxes share an RLIMIT_NPROC count, and owned by no user of the host."""

_UID_SPAN = 2**24
_OUTPUT_BYTES = 8192
_REPORT_BYTES = 65536
_TEARDOWN_S = 5.0


@dataclass
class _Pipes:
    report: EvalgatePipeReader
    stdout: EvalgatePipeReader
    stderr: EvalgatePipeReader
    info: EvalgatePipeReader | None

    def all(self) -> tuple[EvalgatePipeReader, ...]:
        readers = (self.report, self.stdout, self.stderr)
        return readers if self.info is None else (*readers, self.info)

    def sandbox_init(self) -> int | None:
        """The host pid of the sandbox's process 1, from bwrap's ``--info-fd`` JSON."""
        if self.info is None:
            return None
        try:
            pid = json.loads(self.info.data).get("child-pid")
        except (ValueError, AttributeError):
            return None
        return pid if isinstance(pid, int) else None


@dataclass
class _Clock:
    spawned: float
    started: float | None = None
    ended: float | None = None


async def evalgate_sandbox_run(
    code: str, tests: str, spec: EvalgateSandboxSpec
) -> EvalgateExecution:
    """Run ``code`` then ``tests`` in a fresh sandbox built as ``spec`` says.

    Returns the execution (any outcome of the answer). Raises ``EvalgateSandboxError`` when the
    sandbox cannot be set up or does not start in time, and ``EvalgateConfigError`` for a spec
    that was not prepared. Cancelling the call kills the sandbox.
    """
    if not spec.prepared:
        raise EvalgateConfigError(
            "sandbox", "isolation", "prepare the spec with evalgate_sandbox_prepare first"
        )
    assert spec.interpreter is not None
    layout = evalgate_layout(spec.interpreter, spec.hide)
    with _host_dir(spec.isolation) as host_dir:
        return await _execute(layout, host_dir, code, tests, spec)


def _uid(isolation: str) -> int:
    if os.geteuid() != 0 or isolation == "none":
        return os.geteuid()
    return EVALGATE_SANDBOX_UID_BASE + secrets.randbelow(_UID_SPAN)


@contextlib.contextmanager
def _host_dir(isolation: str) -> Iterator[str | None]:
    """The host folder the isolation needs (see ``EvalgatePlan``), removed afterwards."""
    if isolation == "bwrap":
        yield None
        return
    folder = tempfile.mkdtemp(prefix="evalgate-sandbox-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _execute(
    layout: EvalgateLayout, host_dir: str | None, code: str, tests: str, spec: EvalgateSandboxSpec
) -> EvalgateExecution:
    loop = asyncio.get_running_loop()
    clock = _Clock(spawned=loop.time())
    plan, pipes, process = await _spawn(layout, host_dir, spec, clock)
    nonce = secrets.token_hex(16)
    feeder: asyncio.Future[None] | None = None
    try:
        feeder = asyncio.ensure_future(_feed(process, _job(plan, code, tests, spec, nonce)))
        timed_out = await _await_end(process, clock.spawned + spec.timeout_s)
        clock.ended = loop.time()
    finally:
        if feeder is not None:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
        await _teardown(process, plan, pipes)
    return _result(plan, pipes, clock, timed_out, nonce, spec, process.returncode)


async def _spawn(
    layout: EvalgateLayout, host_dir: str | None, spec: EvalgateSandboxSpec, clock: _Clock
) -> tuple[EvalgatePlan, _Pipes, asyncio.subprocess.Process]:
    """Start the sandbox with its report, stdout, stderr (and bwrap info) pipes read on the
    loop.

    The write ends are closed here once the child holds them, so each pipe ends when the
    last sandbox process holding it is gone."""
    ends = [os.pipe() for _ in range(4 if spec.isolation == "bwrap" else 3)]
    info_fd = ends[3][1] if len(ends) == 4 else None
    plan = EvalgatePlan(spec.isolation, _uid(spec.isolation), layout, spec.work_mb,
                        ends[0][1], host_dir, info_fd)  # fmt: skip
    loop = asyncio.get_running_loop()
    pipes = _Pipes(
        report=EvalgatePipeReader(ends[0][0], _REPORT_BYTES, lambda: _started(clock, loop)),
        stdout=EvalgatePipeReader(ends[1][0], _OUTPUT_BYTES),
        stderr=EvalgatePipeReader(ends[2][0], _OUTPUT_BYTES),
        info=EvalgatePipeReader(ends[3][0], _REPORT_BYTES) if info_fd is not None else None,
    )
    try:
        process = await _create(plan, ends[1][1], ends[2][1])
    except BaseException:
        for reader in pipes.all():
            reader.close()
        raise
    finally:
        for _, write_end in ends:
            os.close(write_end)
    return plan, pipes, process


def _started(clock: _Clock, loop: asyncio.AbstractEventLoop) -> None:
    clock.started = loop.time()


async def _create(plan: EvalgatePlan, out_w: int, err_w: int) -> asyncio.subprocess.Process:
    tools = evalgate_find_tools()
    missing = evalgate_missing_requirements(plan.isolation, tools)
    if missing:
        raise EvalgateSandboxError(f"isolation {plan.isolation}: {', '.join(missing)}")
    argv = evalgate_command(plan, tools)
    try:
        return await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=out_w, stderr=err_w,
            pass_fds=plan.pass_fds, env={}, cwd=plan.host_dir or "/",
            start_new_session=True,
        )  # fmt: skip
    except OSError as error:
        raise EvalgateSandboxError(f"cannot start {argv[0]}: {error}") from error


def _job(plan: EvalgatePlan, code: str, tests: str, spec: EvalgateSandboxSpec, nonce: str) -> bytes:
    limits = [limit.as_builtins() for limit in evalgate_rlimits(spec)]
    job = {"nonce": nonce, "code": code, "tests": tests, "limits": limits,
           "workdir": plan.workdir}  # fmt: skip
    return json.dumps(job).encode()


async def _feed(process: asyncio.subprocess.Process, job: bytes) -> None:
    """Write the job to the driver's stdin and close it (a sandbox that died early is fine)."""
    assert process.stdin is not None
    with contextlib.suppress(ConnectionError, BrokenPipeError):
        process.stdin.write(job)
        await process.stdin.drain()
    process.stdin.close()


async def _await_end(process: asyncio.subprocess.Process, deadline: float) -> bool:
    """Wait for the sandbox to end by ``deadline`` (loop time); True if it had to be killed."""
    remaining = deadline - asyncio.get_running_loop().time()
    try:
        await asyncio.wait_for(process.wait(), max(remaining, 0.0))
    except TimeoutError:
        return True
    return False


async def _teardown(process: asyncio.subprocess.Process, plan: EvalgatePlan, pipes: _Pipes) -> None:
    """Make sure nothing of the sandbox is left: processes, then pipes.

    Runs on every path, including cancellation and the timeout."""
    if process.returncode is None:
        doomed = await evalgate_kill_tree(process.pid)
        await evalgate_wait_gone(doomed, _TEARDOWN_S)
    if plan.isolation == "none":
        evalgate_kill_group(process.pid)
    await process.wait()
    for reader in pipes.all():
        await reader.wait(_TEARDOWN_S)
    init = pipes.sandbox_init()
    if init is not None:
        await evalgate_wait_exit(init, _TEARDOWN_S)


def _result(
    plan: EvalgatePlan, pipes: _Pipes, clock: _Clock, timed_out: bool, nonce: str,
    spec: EvalgateSandboxSpec, returncode: int | None,
) -> EvalgateExecution:  # fmt: skip
    stderr = pipes.stderr.data.decode("utf-8", "replace")
    status = None if timed_out else _status(returncode)
    seen = EvalgateObservation(
        report=pipes.report.data.decode("utf-8", "replace"), started=clock.started is not None,
        exit_status=status, stderr=stderr, nonce=nonce, timeout_s=spec.timeout_s,
        cpu_s=spec.cpu_s,
    )  # fmt: skip
    outcome, message = evalgate_classify(seen)
    start = (clock.started or clock.spawned) - clock.spawned
    run = (clock.ended or clock.spawned) - (clock.started or clock.spawned)
    return EvalgateExecution(
        outcome=outcome, message=message, exit_status=status, start_s=start, run_s=run,
        isolation=plan.isolation, sandbox_uid=plan.uid,
        stdout=pipes.stdout.data.decode("utf-8", "replace"), stderr=stderr,
    )  # fmt: skip


def _status(returncode: int | None) -> int:
    """The shell convention: 128 + N for a process ended by signal N."""
    assert returncode is not None
    return 128 - returncode if returncode < 0 else returncode
