"""Escape attempts against the real sandbox, one answer each, under bwrap and under unshare.

Every test checks three things: the outcome the attempt must be reported as; that it had no
effect on the host (the listener saw no connection, no secret reached the output, no file was
written, the harness lives); and, through ``contained``, that afterwards no process of the
sandbox is alive, no host folder of it is left, and the next execution still passes.

No program here ever names an address off this machine; the only addresses are loopback ones
opened by the test itself.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sandboxkit import ISOLATIONS, REPO, host_folders, never_within, prepared, run, sandbox_pids

from pytest_evalgate.sandbox import EvalgateExecution, EvalgateSandboxSpec

pytestmark = pytest.mark.slow

Check = Callable[[EvalgateExecution], None]


@pytest.fixture(params=ISOLATIONS)
def spec(request: pytest.FixtureRequest) -> EvalgateSandboxSpec:
    return prepared(request.param)


@pytest.fixture
def contained(spec: EvalgateSandboxSpec) -> Iterator[Check]:
    """A check for after an escape attempt: nothing of the sandbox is left, the run goes on."""
    before = host_folders()

    def check(execution: EvalgateExecution) -> None:
        assert execution.isolation == spec.isolation and execution.sandboxed
        assert sandbox_pids(execution.sandbox_uid) == []
        assert host_folders() - before == set()
        after = run("ANSWER = 42\n", "assert ANSWER == 42\n", spec)
        assert (after.outcome, after.exit_status) == ("passed", 0)

    yield check


def _listener() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    return listener


def _no_connection_arrived(listener: socket.socket) -> bool:
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return True
    connection.close()
    return False


def test_a_loopback_listener_of_the_harness_is_unreachable(
    spec: EvalgateSandboxSpec, contained: Check
) -> None:
    with _listener() as listener:
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        execution = run(code, "", spec)
        assert _no_connection_arrived(listener)
    assert execution.outcome == "crashed"
    assert "Network is unreachable" in execution.message
    contained(execution)


def test_an_abstract_unix_socket_of_the_harness_is_unreachable(
    spec: EvalgateSandboxSpec, contained: Check
) -> None:
    # Abstract UNIX sockets belong to the network namespace: a second way to the harness.
    name = f"\0evalgate-escape-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(name)
        listener.listen(8)
        listener.setblocking(False)
        code = f"import socket\nsocket.socket(socket.AF_UNIX).connect({name!r})\n"
        execution = run(code, "", spec)
        assert _no_connection_arrived(listener)
    assert execution.outcome == "crashed"
    assert "ConnectionRefusedError" in execution.message
    contained(execution)


_INTERFACES = """
import fcntl, json, socket, struct
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
def flags(name):
    with socket.socket() as s:
        raw = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack("256s", name.encode()))
    return struct.unpack("H", raw[16:18])[0]
INTERFACES = [[name, bool(flags(name) & IFF_UP)] for _, name in socket.if_nameindex()]
try:
    with socket.socket() as s:
        request = struct.pack("16sH", b"lo", flags("lo") | IFF_UP)
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, request)
    RAISE_LO = "raised"
except OSError as error:
    RAISE_LO = type(error).__name__
print(json.dumps({"interfaces": INTERFACES, "raise_lo": RAISE_LO}))
"""


def test_the_only_interface_is_a_downed_loopback_that_cannot_be_raised(
    spec: EvalgateSandboxSpec, contained: Check
) -> None:
    tests = "assert INTERFACES == [['lo', False]]\nassert RAISE_LO == 'PermissionError'\n"
    execution = run(_INTERFACES, tests, spec)
    assert (execution.outcome, execution.message) == ("passed", "")
    seen = json.loads(execution.stdout)
    assert seen == {"interfaces": [["lo", False]], "raise_lo": "PermissionError"}
    contained(execution)


def test_an_environment_secret_of_the_harness_is_absent(
    spec: EvalgateSandboxSpec, contained: Check, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"evalgate-secret-{time.monotonic_ns()}"
    monkeypatch.setenv("EVALGATE_ESCAPE_SECRET", secret)
    # Every process's initial environment, as the kernel keeps it, then the variable itself.
    code = (
        "import json, os\n"
        "ENVIRONS = {}\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['self']:\n"
        "    raw = open(f'/proc/{pid}/environ', 'rb').read().decode()\n"
        "    ENVIRONS[pid] = [entry for entry in raw.split('\\0') if entry]\n"
        "print(json.dumps(ENVIRONS))\n"
        "print(os.environ['EVALGATE_ESCAPE_SECRET'])\n"
    )
    execution = run(code, "", spec)
    assert execution.outcome == "crashed"
    assert "KeyError: 'EVALGATE_ESCAPE_SECRET'" in execution.message
    environs = json.loads(execution.stdout)
    assert "self" in environs and len(environs) >= 2
    # Nothing but the work folder bwrap names in PWD (the driver clears even that).
    assert all(set(entries) <= {"PWD=/work"} for entries in environs.values()), environs
    assert secret not in execution.stdout + execution.stderr + execution.message
    contained(execution)


def test_a_file_under_the_harness_home_is_invisible(
    spec: EvalgateSandboxSpec, contained: Check
) -> None:
    secret = f"evalgate-home-secret-{time.monotonic_ns()}"
    descriptor, name = tempfile.mkstemp(prefix=".evalgate-escape-", dir=Path.home())
    try:
        os.write(descriptor, secret.encode())
        os.close(descriptor)
        home = str(Path.home())
        code = f"import os\nprint(os.path.exists({home!r}))\nprint(open({name!r}).read())\n"
        execution = run(code, "", spec)
    finally:
        os.unlink(name)
    assert execution.outcome == "crashed"
    assert "FileNotFoundError" in execution.message
    assert execution.stdout.startswith("False")
    assert secret not in execution.stdout + execution.stderr + execution.message
    contained(execution)


def test_a_file_in_the_project_folder_is_invisible(
    spec: EvalgateSandboxSpec, contained: Check
) -> None:
    pyproject = REPO / "pyproject.toml"
    assert pyproject.is_file()
    code = f"print(open({str(pyproject)!r}).read())\n"
    execution = run(code, "", spec)
    assert execution.outcome == "crashed"
    assert "FileNotFoundError" in execution.message
    assert 'name = "pytest-evalgate"' not in execution.stdout + execution.stderr
    contained(execution)


def test_nothing_outside_the_work_folder_is_writable(
    spec: EvalgateSandboxSpec, contained: Check, tmp_path: Path
) -> None:
    outside = ["/escape", "/usr/escape", "/dev/escape", "/proc/escape", str(tmp_path / "escape")]
    code = (
        "WROTE = []\n"
        f"for path in {[*outside, '/work/inside', '/tmp/inside']!r}:\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('x')\n"
        "        WROTE.append(path)\n"
        "    except OSError as error:\n"
        "        print(path, type(error).__name__)\n"
    )
    execution = run(code, "assert WROTE == ['/work/inside', '/tmp/inside'], WROTE\n", spec)
    assert (execution.outcome, execution.message) == ("passed", "")
    for path in outside:
        assert not Path(path).exists(), path
    assert "/usr/escape OSError" in execution.stdout  # read-only file system (EROFS)
    contained(execution)


def test_a_fork_bomb_meets_the_process_limit(spec: EvalgateSandboxSpec, contained: Check) -> None:
    execution = run("import os\nwhile True:\n    os.fork()\n", "", spec, processes=32)
    assert execution.outcome == "crashed"
    # EAGAIN from fork(2): RLIMIT_NPROC bound, which it would not for a root-mapped uid.
    assert "BlockingIOError" in execution.message
    contained(execution)


def test_an_infinite_loop_times_out_within_timeout_plus_one_second(
    spec: EvalgateSandboxSpec, contained: Check
) -> None:
    started = time.monotonic()
    execution = run("while True:\n    pass\n", "", spec, timeout_s=2.0)
    elapsed = time.monotonic() - started
    assert execution.outcome == "timeout"
    assert execution.exit_status is None
    assert "wall-clock timeout of 2 s" in execution.message
    assert elapsed <= 2.0 + 1.0  # the contract, not a performance claim
    contained(execution)


def test_allocating_ten_gigabytes_is_a_memory_outcome(
    spec: EvalgateSandboxSpec, contained: Check
) -> None:
    execution = run("BLOCK = bytearray(10 * 1024**3)\n", "", spec)
    assert execution.outcome == "memory"
    assert "MemoryError" in execution.message
    contained(execution)


def test_a_background_process_dies_with_the_sandbox(
    spec: EvalgateSandboxSpec, contained: Check
) -> None:
    marker = f"EVALGATE-MARKER-{time.monotonic_ns()}"
    code = (
        "import subprocess, sys\n"
        'late = \'import time; time.sleep(2); open("/work/marker", "w").write("x"); '
        f'print("{marker}", flush=True)\'\n'
        "DAEMON = subprocess.Popen([sys.executable, '-c', late], start_new_session=True)\n"
        "print('daemon started', flush=True)\n"
    )
    started = time.monotonic()
    execution = run(code, "assert DAEMON.poll() is None, 'the daemon never ran'\n", spec)
    assert (execution.outcome, execution.stdout) == ("passed", "daemon started\n")
    # Past the daemon's 2 s: at no look was a process of the sandbox alive.
    assert never_within(lambda: bool(sandbox_pids(execution.sandbox_uid)), started + 2.5)
    assert marker not in execution.stdout
    contained(execution)


def test_killing_the_parent_process_reaches_nothing(
    spec: EvalgateSandboxSpec, contained: Check
) -> None:
    code = (
        "import os, signal\n"
        "RESULTS = {}\n"
        f"for name, pid in (('parent', os.getppid()), ('harness', {os.getpid()})):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "        RESULTS[name] = 'sent'\n"
        "    except OSError as error:\n"
        "        RESULTS[name] = type(error).__name__\n"
        "print(RESULTS)\n"
    )
    execution = run(code, "assert RESULTS['harness'] == 'ProcessLookupError'\n", spec)
    # The parent is the sandbox's process 1, which ignores SIGKILL from inside; the harness's
    # pid does not exist in the sandbox's PID namespace. The tests ran after both attempts.
    assert (execution.outcome, execution.exit_status) == ("passed", 0)
    assert "'parent': 'sent'" in execution.stdout
    contained(execution)
