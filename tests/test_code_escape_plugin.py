"""Escape attempts through the whole plugin: ``pytest --evalgate`` on a code suite, the real
sandbox, one answer per case, under bwrap and under unshare.

The "model" is the simulator's code style with ``code_echo=1``: it answers each case with the
case's own input, so every case's answer is exactly the attempt written here. One pytest run
(a real subprocess) holds every attempt plus a control case that passes; each attempt must be
reported with the right outcome in its record and its item, the run must reach the end (every
item reported, the control passed), and afterwards no sandbox process is alive, no host folder
of a sandbox is left, no marker or escaped file exists, and the listener saw no connection.

No program here names an address off this machine; the only address is the loopback listener
the test opened itself.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandboxkit import (
    ISOLATIONS,
    any_sandbox_pids,
    host_folders,
    missing_reason,
    never_within,
    wait_until,
)
from suitekit import write_suite

pytestmark = pytest.mark.slow

SECRET = f"evalgate-secret-{os.getpid()}-{time.monotonic_ns()}"
TIMEOUT_S = 2.0
ECHO = "simulated://?code=1&code_echo=1&ttft_ms=1&tpot_ms=0.1&seed=3"


def _fenced(code: str) -> str:
    return f"```python\n{code}```\n"


def _attempts(port: int, paths: dict[str, Path], harness: int) -> dict[str, tuple[str, str]]:
    """case id -> (the answer's code, the hidden tests)."""
    home_file, project_file = paths["home"], paths["project"]
    outside, marker = paths["outside"], paths["marker"]
    return {
        "loopback": (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\n",
            "assert True\n",
        ),
        "interfaces": (
            "import fcntl, socket, struct\n"
            "def up(name):\n"
            "    with socket.socket() as s:\n"
            "        raw = fcntl.ioctl(s.fileno(), 0x8913, struct.pack('256s', name.encode()))\n"
            "    return bool(struct.unpack('H', raw[16:18])[0] & 1)\n"
            "INTERFACES = [[name, up(name)] for _, name in socket.if_nameindex()]\n",
            "assert INTERFACES == [['lo', False]], INTERFACES\n",
        ),
        "secret": (
            "import os\nSEEN = [k for k, v in os.environ.items() if 'evalgate-secret' in v]\n"
            "VALUE = os.environ.get('EVALGATE_ESCAPE_SECRET')\n",
            "assert VALUE is None and SEEN == [], SEEN\n",
        ),
        "home_file": (
            _read(home_file),
            "assert READ in ('FileNotFoundError', 'PermissionError')\n",
        ),
        "project_file": (
            _read(project_file),
            "assert READ in ('FileNotFoundError', 'PermissionError')\n",
        ),
        "write_outside": (
            "WROTE = []\n"
            f"for path in ({str(outside)!r}, '/usr/evalgate-escape', '/evalgate-escape'):\n"
            "    try:\n"
            "        with open(path, 'w') as handle:\n"
            "            handle.write('escaped')\n"
            "        WROTE.append(path)\n"
            "    except OSError:\n"
            "        pass\n",
            "assert WROTE == [], WROTE\n",
        ),
        "fork_bomb": ("import os\nwhile True:\n    os.fork()\n", "assert True\n"),
        "infinite_loop": ("while True:\n    pass\n", "assert True\n"),
        "ten_gigabytes": ("BLOCK = bytearray(10 * 1024**3)\n", "assert True\n"),
        "background": (
            "import subprocess, sys\n"
            f"late = {_late(marker)!r}\n"
            "DAEMON = subprocess.Popen([sys.executable, '-c', late], start_new_session=True)\n",
            "assert DAEMON.poll() is None, 'the daemon never ran'\n",
        ),
        "kill_parent": (
            "import os, signal\nRESULTS = {}\n"
            f"for name, pid in (('parent', os.getppid()), ('harness', {harness})):\n"
            "    try:\n"
            "        os.kill(pid, signal.SIGKILL)\n"
            "        RESULTS[name] = 'sent'\n"
            "    except OSError as error:\n"
            "        RESULTS[name] = type(error).__name__\n",
            "assert RESULTS == {'parent': 'sent', 'harness': 'ProcessLookupError'}, RESULTS\n",
        ),
        "store_folder": (
            "import os\ntry:\n"
            f"    LISTED = os.listdir({str(paths['store'])!r})\n"
            "except OSError as error:\n    LISTED = type(error).__name__\n",
            "assert LISTED in ('FileNotFoundError', 'PermissionError'), LISTED\n",
        ),
        "control": ("def double(x):\n    return 2 * x\n", "assert double(21) == 42\n"),
    }


def _late(marker: Path) -> str:
    """A program that writes ``marker`` 2 s after it starts (if it still lives)."""
    return f"import time\ntime.sleep(2)\nopen({str(marker)!r}, 'w').write('x')\n"


def _read(path: Path) -> str:
    return (
        "try:\n"
        f"    open({str(path)!r}).read()\n"
        "    READ = 'read'\n"
        "except OSError as error:\n"
        "    READ = type(error).__name__\n"
    )


# case id -> the outcome its record must carry
EXPECTED = {
    "loopback": "crashed",
    "interfaces": "passed",
    "secret": "passed",
    "home_file": "passed",
    "project_file": "passed",
    "write_outside": "passed",
    "fork_bomb": "crashed",
    "infinite_loop": "timeout",
    "ten_gigabytes": "memory",
    "background": "passed",
    "kill_parent": "passed",
    "store_folder": "passed",
    "control": "passed",
}


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


@pytest.fixture
def home_file() -> Iterator[Path]:
    path = Path.home() / f".evalgate-escape-{os.getpid()}-{time.monotonic_ns()}"
    path.write_text(SECRET)
    yield path
    path.unlink(missing_ok=True)


def _suite(tmp_path: Path, isolation: str, attempts: dict[str, tuple[str, str]]) -> Path:
    cases = [
        {"id": case_id, "input": _fenced(code), "target": tests, "category": "escape"}
        for case_id, (code, tests) in attempts.items()
    ]
    sandbox = {"isolation": isolation, "max_concurrency": 4, "timeout_s": TIMEOUT_S,
               "memory_mb": 512, "cpu_s": 5, "processes": 32}  # fmt: skip
    return write_suite(
        tmp_path / "suite",
        {"candidate": ECHO, "baseline": ECHO},
        cases=cases,
        models={"candidate": "echo-a", "baseline": "echo-b"},
        extra={
            "evaluator": {"revision": "t1", "scorer": "code", "language": "python"},
            "sandbox": sandbox,
            "generation": {"temperature": 0.0, "max_tokens": 512},
        },
    )


def _records(store: Path) -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for segment in store.rglob("*.jsonl"):
        for line in segment.read_text().splitlines():
            record = json.loads(line)
            identity = record["identity"]
            found[(identity["candidate"], identity["case_id"])] = record
    return found


def _run(tmp_path: Path, manifest: Path, store: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALGATE_ESCAPE_SECRET": SECRET}
    command = [sys.executable, "-m", "pytest", "--evalgate", str(manifest.parent),
               "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-rA", "--tb=line",
               f"--evalgate-store={store}"]  # fmt: skip
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_every_escape_attempt_is_contained_through_the_plugin(
    isolation: str, tmp_path: Path, listener: socket.socket, home_file: Path
) -> None:
    reason = missing_reason(isolation)
    if reason is not None:
        pytest.skip(reason)
    paths = {
        "home": home_file,
        "project": tmp_path / "project-secret.txt",
        "outside": tmp_path / "escaped.txt",
        "marker": tmp_path / "marker.txt",
        "store": tmp_path / "store",
    }
    paths["project"].write_text(SECRET)
    attempts = _attempts(listener.getsockname()[1], paths, os.getpid())
    before = host_folders()
    started = time.monotonic()
    result = _run(tmp_path, _suite(tmp_path, isolation, attempts), paths["store"])
    records = _records(tmp_path / "store")

    # The run went on: every item reported, the gate ran, the control case passed.
    assert "evalgate" in result.stdout and "verdict" in result.stdout, result.stdout[-3000:]
    assert len(records) == 2 * len(attempts), sorted(records)
    for (_candidate, case_id), record in records.items():
        facts = record["sandbox"]
        assert record["error"] is None, (case_id, record["error"])
        assert facts["outcome"] == EXPECTED[case_id], (case_id, facts)
        assert facts["isolation"] == isolation and facts["sandboxed"] is True
        assert record["passed"] is (EXPECTED[case_id] == "passed")
        assert SECRET not in facts["message"]
    _check_messages(records, result.stdout)

    # Nothing escaped, nothing is left.
    assert _no_connection(listener)
    assert not paths["outside"].exists()
    assert never_within(lambda: paths["marker"].exists(), started + 2.5 + TIMEOUT_S)
    assert wait_until(lambda: any_sandbox_pids() == [], 5.0), any_sandbox_pids()
    assert host_folders() - before == set()
    assert home_file.read_text() == SECRET and paths["project"].read_text() == SECRET


def _check_messages(records: dict[tuple[str, str], dict[str, Any]], stdout: str) -> None:
    loop = records[("candidate", "infinite_loop")]["sandbox"]
    assert loop["exit_status"] is None
    assert loop["start_s"] + loop["run_s"] <= TIMEOUT_S + 1.0  # the contract: timeout + 1 s
    assert "Network is unreachable" in records[("candidate", "loopback")]["sandbox"]["message"]
    assert "BlockingIOError" in records[("candidate", "fork_bomb")]["sandbox"]["message"]
    assert "MemoryError" in records[("candidate", "ten_gigabytes")]["sandbox"]["message"]
    # Items: a wrong answer names the outcome; the control and contained reads pass.
    assert "wrong answer [escape]: timeout: wall-clock timeout" in stdout
    assert "wrong answer [escape]: memory" in stdout
    assert "PASSED suite/evalgate.yaml::candidate::control[r0]" in stdout


def _no_connection(listener: socket.socket) -> bool:
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return True
    connection.close()
    return False
