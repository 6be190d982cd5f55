"""Real executions: each outcome, the limits, the timeout contract, setup errors, preparing and
refusing an isolation, cancellation, a killed harness, concurrency, a non-root harness."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from sandboxkit import (
    ISOLATIONS,
    REPO,
    any_sandbox_pids,
    host_folders,
    missing_reason,
    prepared,
    run,
    sandbox_pids,
    wait_until,
)

from pytest_evalgate.errors import (
    EvalgateConfigError,
    EvalgateSandboxError,
    EvalgateSandboxUnavailableError,
)
from pytest_evalgate.sandbox import (
    EvalgateExecution,
    EvalgateSandboxSpec,
    evalgate_sandbox_prepare,
    evalgate_sandbox_run,
)
from pytest_evalgate.sandbox.layout import EVALGATE_SYSTEM_PYTHON

pytestmark = pytest.mark.slow

ADD = "def add(a, b):\n    return a + b\n"


@pytest.fixture(params=ISOLATIONS)
def spec(request: pytest.FixtureRequest) -> EvalgateSandboxSpec:
    return prepared(request.param)


def test_right_code_passes_and_its_output_is_kept(spec: EvalgateSandboxSpec) -> None:
    execution = run(ADD + "print('hello from the sandbox')\n", "assert add(2, 3) == 5\n", spec)
    assert (execution.outcome, execution.message, execution.exit_status) == ("passed", "", 0)
    assert execution.stdout == "hello from the sandbox\n"
    assert execution.start_s > 0 and execution.run_s > 0
    record = json.loads(json.dumps(execution.as_builtins()))  # builtins cross processes
    assert record["outcome"] == "passed" and record["isolation"] == spec.isolation
    assert record["start_s"] == execution.start_s and record["exit_status"] == 0


def test_a_failing_assertion_names_the_tests_line_and_text_not_the_code(
    spec: EvalgateSandboxSpec,
) -> None:
    code = "def add(a, b):\n    return a - b  # WRONG-ANSWER-TEXT\n"
    tests = "assert add(0, 0) == 0\nassert add(2, 3) == 5, 'two plus three'\nassert False\n"
    execution = run(code, tests, spec)
    assert execution.outcome == "tests_failed"
    assert execution.message.startswith("tests line 2: assert add(2, 3) == 5, 'two plus three'")
    assert "AssertionError: two plus three" in execution.message
    assert "WRONG-ANSWER-TEXT" not in execution.message and "a - b" not in execution.message
    assert execution.exit_status == 1


def test_a_failure_inside_the_answer_is_reported_at_the_tests_line_that_called_it(
    spec: EvalgateSandboxSpec,
) -> None:
    code = "def div(a, b):\n    return a / b  # ANSWER-LINE\n"
    tests = "def check(x):\n    assert div(x, 0) == 0\n\ncheck(1)\n"
    execution = run(code, tests, spec)
    assert execution.outcome == "tests_failed"
    assert execution.message.startswith("tests line 2: assert div(x, 0) == 0")
    assert "ZeroDivisionError" in execution.message and "ANSWER-LINE" not in execution.message


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        ("def broken(:\n", "the code does not compile: SyntaxError"),
        ("raise RuntimeError('boom')\n", "the code raised RuntimeError: boom"),
        ("import sys\nsys.exit(0)\n", "the code exited before the tests ran"),
        ("import os\nos._exit(0)\n", "exited with status 0 before the tests finished"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "killed by SIGSEGV"),
    ],
    ids=["syntax", "raises", "sys-exit", "os-exit", "segfault"],
)
def test_code_that_dies_before_its_tests_finish_crashed(
    spec: EvalgateSandboxSpec, code: str, needle: str
) -> None:
    execution = run(code + ADD, "assert add(1, 1) == 2\n", spec)
    assert execution.outcome == "crashed"
    assert needle in execution.message


def test_a_forged_report_without_the_nonce_is_not_a_pass(spec: EvalgateSandboxSpec) -> None:
    # The report pipe is the driver's last descriptor; the code writes a fake "passed" on every
    # descriptor it can, then leaves before the tests run.
    code = (
        "import json, os\n"
        "fake = json.dumps({'nonce': '0' * 32, 'outcome': 'passed', 'message': ''}) + '\\n'\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.write(fd, fake.encode())\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"
    )
    execution = run(code, "assert False\n", spec)
    assert execution.outcome == "crashed"
    assert execution.exit_status == 0


def test_the_cpu_limit_ends_a_busy_loop_as_a_timeout(spec: EvalgateSandboxSpec) -> None:
    execution = run("while True:\n    pass\n", "", spec, cpu_s=1, timeout_s=20.0)
    assert execution.outcome == "timeout"
    assert execution.message == "CPU time limit of 1 s exceeded (SIGXCPU)"
    assert execution.exit_status == 128 + signal.SIGXCPU


def test_the_memory_limit_is_the_spec_s(spec: EvalgateSandboxSpec) -> None:
    tests = "BLOCK = bytearray(200 * 1024 * 1024)\n"
    assert run("", tests, spec, memory_mb=512).outcome == "passed"
    small = run("", tests, spec, memory_mb=128)
    assert (small.outcome, small.message) == (
        "memory",
        "the tests ran out of memory (MemoryError)",
    )


def test_file_size_and_open_file_limits_bind(spec: EvalgateSandboxSpec) -> None:
    big = run("open('big', 'wb').write(b'x' * (3 * 1024 * 1024))\n", "", spec, file_size_mb=2)
    assert big.outcome == "crashed" and "File too large" in big.message
    code = "FILES = [open('/dev/null') for _ in range(100)]\n"
    assert run(code, "", spec, open_files=200).outcome == "passed"
    many = run(code, "", spec, open_files=32)
    assert many.outcome == "crashed" and "Too many open files" in many.message


def test_the_work_folder_is_the_size_the_spec_says(spec: EvalgateSandboxSpec) -> None:
    code = "open('/work/fill', 'wb').write(b'x' * (6 * 1024 * 1024))\n"
    assert run(code, "", spec, work_mb=8).outcome == "passed"
    full = run(code, "", spec, work_mb=4)
    assert full.outcome == "crashed" and "No space left on device" in full.message


def test_output_is_drained_but_only_its_head_is_kept(spec: EvalgateSandboxSpec) -> None:
    code = "import sys\nfor _ in range(200):\n    sys.stdout.write('y' * 65536)\n"
    execution = run(code, "", spec)
    assert execution.outcome == "passed"
    assert execution.stdout == "y" * 8192


def test_each_execution_gets_a_fresh_work_folder(spec: EvalgateSandboxSpec) -> None:
    writes = "import os\nopen('/work/left-behind', 'w').write('x')\n"
    assert run(writes, "", spec).outcome == "passed"
    execution = run("import os\nLISTED = os.listdir('/work')\n", "assert LISTED == []\n", spec)
    assert execution.outcome == "passed"


def test_a_hidden_folder_inside_the_view_is_masked(spec: EvalgateSandboxSpec) -> None:
    hidden = "/usr/share"
    assert os.listdir(hidden)
    code = f"import os\nLISTED = os.listdir({hidden!r})\n"
    execution = run(code, "assert LISTED == []\n", spec, hide=(hidden,))
    assert execution.outcome == "passed"


def test_a_sandbox_that_cannot_start_is_a_sandbox_error(spec: EvalgateSandboxSpec) -> None:
    broken = spec.replace(interpreter="/usr/bin/evalgate-no-such-python")
    with pytest.raises(EvalgateSandboxError) as caught:
        asyncio.run(evalgate_sandbox_run(ADD, "", broken))
    assert caught.value.category == "sandbox"
    assert "could not be set up" in caught.value.message
    assert any_sandbox_pids() == []


def test_a_sandbox_that_cannot_start_in_time_is_a_sandbox_error(
    spec: EvalgateSandboxSpec,
) -> None:
    started = time.monotonic()
    with pytest.raises(
        EvalgateSandboxError, match=re.escape("did not start within the 0.001 s timeout")
    ):
        asyncio.run(evalgate_sandbox_run(ADD, "", spec.replace(timeout_s=0.001)))
    assert time.monotonic() - started <= 0.001 + 1.0
    # Killed mid-setup, a half-built sandbox may still be receiving its parent-death signal.
    assert wait_until(lambda: not any_sandbox_pids(), 5), any_sandbox_pids()


def test_a_sandbox_program_that_went_missing_is_a_sandbox_error(
    spec: EvalgateSandboxSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EvalgateSandboxError, match=f"isolation {spec.isolation}: .*not found"):
        asyncio.run(evalgate_sandbox_run(ADD, "", spec))


def test_an_unprepared_spec_is_refused() -> None:
    with pytest.raises(EvalgateConfigError, match="evalgate_sandbox_prepare"):
        asyncio.run(evalgate_sandbox_run(ADD, "", EvalgateSandboxSpec()))


def test_executions_run_concurrently_each_with_its_own_uid(spec: EvalgateSandboxSpec) -> None:
    async def four() -> list[EvalgateExecution]:
        codes = [ADD + f"N = {n}\n" for n in range(4)]
        runs = [evalgate_sandbox_run(code, "assert add(N, 1) == N + 1\n", spec) for code in codes]
        return list(await asyncio.gather(*runs))

    executions = asyncio.run(four())
    assert [e.outcome for e in executions] == ["passed"] * 4
    assert len({e.sandbox_uid for e in executions}) == (4 if os.geteuid() == 0 else 1)


def test_cancelling_a_run_kills_its_sandbox(spec: EvalgateSandboxSpec) -> None:
    async def cancel_midway() -> None:
        task = asyncio.ensure_future(evalgate_sandbox_run("while True:\n    pass\n", "", spec))
        deadline = time.monotonic() + 10
        while not any_sandbox_pids() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert any_sandbox_pids(), "the sandbox never started"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    if os.geteuid() != 0:
        pytest.skip("finding the sandbox by uid needs a root harness")
    before = host_folders()
    asyncio.run(cancel_midway())
    assert any_sandbox_pids() == []
    assert host_folders() - before == set()


_HARNESS = """
import asyncio, sys
sys.path.insert(0, {repo!r})
from pytest_evalgate.sandbox import EvalgateSandboxSpec, evalgate_sandbox_run
spec = EvalgateSandboxSpec(isolation={isolation!r}, interpreter={python!r}, timeout_s=60)
asyncio.run(evalgate_sandbox_run("while True:\\n    pass\\n", "", spec))
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_sigkilled_harness_leaves_no_sandbox_process(isolation: str) -> None:
    spec = prepared(isolation)
    if os.geteuid() != 0:
        pytest.skip("finding the sandbox by uid needs a root harness")
    before = host_folders()
    source = _HARNESS.format(repo=str(REPO), isolation=isolation, python=spec.interpreter)
    harness = subprocess.Popen([sys.executable, "-c", source])
    try:
        assert wait_until(lambda: bool(any_sandbox_pids()), 20), "the sandbox never started"
    finally:
        harness.kill()
        harness.wait()
    assert wait_until(lambda: not any_sandbox_pids(), 5), any_sandbox_pids()
    # A killed harness cannot remove unshare's mount point; it is empty: the work folder
    # was a tmpfs of the sandbox's own mount namespace and went with it.
    for name in host_folders() - before:
        folder = Path(tempfile.gettempdir(), name)
        assert list(folder.iterdir()) == []
        folder.rmdir()


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_prepare_proves_the_isolation_and_picks_an_interpreter(isolation: str) -> None:
    reason = missing_reason(isolation)
    if reason is not None:
        pytest.skip(reason)
    spec = asyncio.run(evalgate_sandbox_prepare(EvalgateSandboxSpec(isolation=isolation)))
    assert (spec.isolation, spec.prepared) == (isolation, True)
    assert spec.interpreter is not None and os.access(spec.interpreter, os.X_OK)


def test_auto_prefers_bubblewrap_and_never_chooses_none() -> None:
    if missing_reason("bwrap") is not None and missing_reason("unshare") is not None:
        pytest.skip("neither bwrap nor unshare can run here")
    spec = asyncio.run(evalgate_sandbox_prepare(EvalgateSandboxSpec(isolation="auto")))
    expected = "bwrap" if missing_reason("bwrap") is None else "unshare"
    assert spec.isolation == expected


def test_without_any_sandbox_program_code_scoring_is_refused_with_how_to(tmp_path: Path) -> None:
    with pytest.raises(EvalgateSandboxUnavailableError) as caught:
        asyncio.run(
            evalgate_sandbox_prepare(EvalgateSandboxSpec(), search_path=str(tmp_path))
        )  # fmt: skip
    message = str(caught.value)
    assert "bwrap: bwrap not found" in message and "unshare:" in message
    assert "apt-get install bubblewrap" in message and "runtimeClassName" in message
    assert "isolation: none" in message
    assert isinstance(caught.value, EvalgateConfigError)


def test_isolation_none_runs_unsandboxed_and_says_so(tmp_path: Path) -> None:
    spec = asyncio.run(evalgate_sandbox_prepare(EvalgateSandboxSpec(isolation="none")))
    before = host_folders()
    execution = run(ADD, "assert add(2, 2) == 4\n", spec)
    assert (execution.outcome, execution.isolation, execution.sandboxed) == (
        "passed",
        "none",
        False,
    )
    assert host_folders() - before == set()


def test_under_none_a_daemon_survives_which_is_why_none_is_no_sandbox(tmp_path: Path) -> None:
    # The positive control of the escape tests' "no process left" check.
    spec = asyncio.run(evalgate_sandbox_prepare(EvalgateSandboxSpec(isolation="none")))
    marker = tmp_path / "marker"
    late = f"import time; time.sleep(0.5); open({str(marker)!r}, 'w').write('x')"
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {late!r}], start_new_session=True)\n"
    )
    execution = run(code, "", spec)
    assert execution.outcome == "passed"
    assert wait_until(marker.exists, 10), "the daemon escaped nothing: none should let it run"


def test_a_home_interpreter_shows_only_its_own_prefix() -> None:
    # The harness's own interpreter (a pyenv prefix under the home here): bwrap's unprivileged
    # uid cannot reach into a private home, so auto falls back to unshare, which binds the
    # prefix alone; the rest of the home stays invisible.
    home_python = os.path.realpath(Path(sys.base_prefix) / "bin" / "python3")
    home = os.path.realpath(Path.home())
    if not home_python.startswith(home + "/"):
        pytest.skip(f"the harness interpreter {home_python} is not under the home")
    if missing_reason("unshare") is not None:
        pytest.skip(missing_reason("unshare") or "")
    base = EvalgateSandboxSpec(isolation="auto", interpreter=home_python)
    spec = asyncio.run(evalgate_sandbox_prepare(base))
    if os.stat(home).st_mode & 0o001 == 0:  # the home is closed to other uids
        assert spec.isolation == "unshare"
    code = textwrap.dedent(f"""
        import os, sys
        PREFIX = sys.base_prefix
        SEEN = sorted(os.listdir({home!r}))
    """)
    top = Path(home_python).relative_to(home).parts[0]
    tests = f"assert PREFIX.startswith({home!r})\nassert SEEN == [{top!r}]\n"
    execution = run(code, tests, spec)
    assert (execution.outcome, execution.message) == ("passed", "")


def test_a_non_root_harness_gets_a_bwrap_sandbox() -> None:
    if os.geteuid() != 0:
        pytest.skip("this test drops from root to nobody")
    reason = missing_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    if not os.access(EVALGATE_SYSTEM_PYTHON, os.X_OK):
        pytest.skip("needs the system python3 to run the harness as nobody")
    setpriv = shutil.which("setpriv")
    assert setpriv is not None
    source = textwrap.dedent(f"""
        import asyncio, json, sys
        sys.path.insert(0, {str(REPO)!r})
        from pytest_evalgate.sandbox import *
        async def main():
            spec = await evalgate_sandbox_prepare(EvalgateSandboxSpec(isolation="auto"))
            uid = "import os\\nUID = os.getuid()\\n"
            ok = await evalgate_sandbox_run(uid, "assert UID == 65534\\n", spec)
            bomb_code = "import os\\nwhile True:\\n    os.fork()\\n"
            bomb = await evalgate_sandbox_run(bomb_code, "", spec.replace(processes=16))
            print(json.dumps([spec.isolation, ok.outcome, bomb.outcome, bomb.message]))
        asyncio.run(main())
    """)
    nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    command = [*nobody, EVALGATE_SYSTEM_PYTHON, "-B", "-c", source]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=60, cwd="/",
        env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    isolation, ok, bomb, message = json.loads(done.stdout)
    assert (isolation, ok, bomb) == ("bwrap", "passed", "crashed")
    assert "BlockingIOError" in message
    assert sandbox_pids(65534) == []
