"""The sandbox's parts on their own: spec, limits, view, command lines, outcome rules, reaper,
pipes, and the layering rule that keeps the package pure."""

from __future__ import annotations

import ast
import asyncio
import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sandboxkit import REPO, wait_until

from pytest_evalgate.errors import EvalgateConfigError, EvalgateSandboxError
from pytest_evalgate.sandbox import EvalgateSandboxSpec
from pytest_evalgate.sandbox.commands import EvalgatePlan, evalgate_command
from pytest_evalgate.sandbox.layout import EvalgateLayout, evalgate_layout
from pytest_evalgate.sandbox.limits import evalgate_rlimits
from pytest_evalgate.sandbox.outcome import EvalgateObservation, evalgate_classify
from pytest_evalgate.sandbox.pipes import EvalgatePipeReader
from pytest_evalgate.sandbox.reaper import (
    evalgate_alive,
    evalgate_descendants,
    evalgate_kill_tree,
    evalgate_wait_exit,
)
from pytest_evalgate.sandbox.tools import EvalgateTools

TOOLS = EvalgateTools(
    bwrap="/usr/bin/bwrap", unshare="/usr/bin/unshare", setpriv="/usr/bin/setpriv"
)
LAYOUT = EvalgateLayout(
    binds=("/usr", "/opt/python"), symlinks=(("usr/bin", "/bin"),), masks=("/usr/src/app",),
    interpreter="/opt/python/bin/python3",
)  # fmt: skip
PACKAGE = REPO / "pytest_evalgate" / "sandbox"


# --- spec and limits -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("isolation", "docker"), ("timeout_s", 0), ("memory_mb", 0), ("processes", 1.5),
     ("cpu_s", True), ("work_mb", -1)],
)  # fmt: skip
def test_a_bad_spec_is_refused_naming_the_key(field: str, value: object) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        EvalgateSandboxSpec(**{field: value})  # type: ignore[arg-type]
    assert (caught.value.source, caught.value.key) == ("sandbox", field)


def test_a_spec_is_prepared_only_with_a_concrete_isolation_and_an_interpreter() -> None:
    assert not EvalgateSandboxSpec().prepared
    assert not EvalgateSandboxSpec(isolation="bwrap").prepared
    assert not EvalgateSandboxSpec(interpreter="/usr/bin/python3").prepared
    assert EvalgateSandboxSpec(isolation="unshare", interpreter="/usr/bin/python3").prepared
    with pytest.raises(EvalgateConfigError):
        EvalgateSandboxSpec().replace(isolation="nothing")


def test_the_rlimits_are_the_spec_s() -> None:
    spec = EvalgateSandboxSpec(memory_mb=256, cpu_s=3, processes=20, open_files=40, file_size_mb=2)
    limits = {limit.name: (limit.soft, limit.hard) for limit in evalgate_rlimits(spec)}
    assert limits == {
        "RLIMIT_AS": (256 << 20, 256 << 20),
        "RLIMIT_CPU": (3, 4),
        "RLIMIT_NPROC": (20, 20),
        "RLIMIT_NOFILE": (40, 40),
        "RLIMIT_FSIZE": (2 << 20, 2 << 20),
        "RLIMIT_CORE": (0, 0),
    }
    assert evalgate_rlimits(spec)[0].as_builtins() == ["RLIMIT_AS", 256 << 20, 256 << 20]


# --- the view -------------------------------------------------------------------------------


def test_the_system_interpreter_needs_only_usr_and_the_top_level_entries() -> None:
    layout = evalgate_layout("/usr/bin/python3")
    assert layout.binds[0] == "/usr"
    assert all(not bind.startswith(str(Path.home())) for bind in layout.binds)
    shown = set(layout.binds) | {path for _, path in layout.symlinks}
    assert shown <= {"/usr", "/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin"}
    assert layout.interpreter == os.path.realpath("/usr/bin/python3")


def test_an_interpreter_under_the_home_shows_its_prefix_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    prefix = home / ".pyenv" / "versions" / "3.11.7"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3").write_text("")
    monkeypatch.setenv("HOME", str(home))
    layout = evalgate_layout(str(prefix / "bin" / "python3"))
    assert str(prefix) in layout.binds and str(home) not in layout.binds
    assert layout.masks == ()


def test_an_interpreter_whose_prefix_holds_the_home_or_sits_in_the_project_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(EvalgateConfigError, match="interpreter"):
        evalgate_layout(str(tmp_path / "bin" / "python3"))  # prefix = tmp_path holds the home
    monkeypatch.setenv("HOME", "/nonexistent-home")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EvalgateConfigError, match="project folder"):
        evalgate_layout(str(tmp_path / "bin" / "python3"))


def test_a_project_inside_a_shown_folder_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir("/usr/share")
    layout = evalgate_layout("/usr/bin/python3", hide=("/usr/lib/python3",))
    assert "/usr/share" in layout.masks
    assert os.path.realpath("/usr/lib/python3") in layout.masks


# --- command lines ----------------------------------------------------------------------------


def _plan(isolation: str, info_fd: int | None = None) -> EvalgatePlan:
    host = None if isolation == "bwrap" else "/tmp/evalgate-sandbox-x"
    return EvalgatePlan(isolation, 2_000_000_123, LAYOUT, 64, 9, host, info_fd)


def _pairs(argv: list[str]) -> list[tuple[str, str]]:
    return list(itertools.pairwise(argv))


def test_bwrap_unshares_everything_and_builds_its_network_namespace_beforehand() -> None:
    argv = evalgate_command(_plan("bwrap", info_fd=11), TOOLS)
    bwrap = argv.index("/usr/bin/bwrap")
    before, flags = argv[:bwrap], argv[bwrap:]
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                 "--new-session", "--clearenv", "--share-net"):  # fmt: skip
        assert flag in flags, flag
    assert ("--cap-drop", "ALL") in _pairs(flags)
    assert "--unshare-net" not in flags  # it would bring the loopback up
    assert before[before.index("/usr/bin/unshare") :][-2:] == ["--net", "--"]
    assert ("--uid", "2000000123") in _pairs(flags) and ("--info-fd", "11") in _pairs(flags)
    assert tuple(flags[flags.index("--") - 2 : flags.index("--")]) == ("--remount-ro", "/")


def test_bwrap_shows_exactly_the_layout_read_only() -> None:
    flags = evalgate_command(_plan("bwrap"), TOOLS)
    binds = [flags[i + 1] for i, flag in enumerate(flags) if flag in ("--ro-bind", "--bind")]
    assert binds == ["/usr", "/opt/python"]
    assert "--bind" not in flags and "--dev-bind" not in flags
    assert ("--tmpfs", "/usr/src/app") in _pairs(flags)
    assert ("--symlink", "/work") in _pairs(flags) and ("--chdir", "/work") in _pairs(flags)
    assert flags[-5:-1] == ["-I", "-B", "-c", flags[-2]] and flags[-1] == "9"


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop happens for a root harness")
def test_a_root_harness_drops_to_the_sandbox_uid_before_anything_else() -> None:
    argv = evalgate_command(_plan("bwrap"), TOOLS)
    assert argv[:3] == ["/usr/bin/setpriv", "--reuid=2000000123", "--regid=2000000123"]
    assert "--bounding-set=-all" in argv[: argv.index("/usr/bin/unshare")]


def test_unshare_makes_every_namespace_and_dies_with_the_harness() -> None:
    argv = evalgate_command(_plan("unshare"), TOOLS)
    assert argv[:3] == ["/usr/bin/setpriv", "--pdeathsig=KILL", "--"]
    flags = argv[argv.index("/usr/bin/unshare") : argv.index("/bin/sh")]
    for flag in ("--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child=SIGKILL"):
        assert flag in flags, flag
    script = argv[argv.index("-c") + 1]
    for step in ("--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--clear-groups",
                 "env -i", "mount -o remount,ro", "chroot"):  # fmt: skip
        assert step in script, step
    words = argv[argv.index("evalgate-setup") + 1 :]
    assert words[:3] == ["/tmp/evalgate-sandbox-x", "2000000123", str(64 * 1024)]
    assert words[3:12] == ["bind", "/usr", "bind", "/opt/python", "link", "usr/bin", "/bin",
                           "mask", "/usr/src/app"]  # fmt: skip


def test_none_is_the_driver_alone() -> None:
    argv = evalgate_command(_plan("none"), TOOLS)
    assert argv[0] == "/opt/python/bin/python3" and argv[1:4] == ["-I", "-B", "-c"]


# --- outcome rules ----------------------------------------------------------------------------

NONCE = "ab" * 16


def _seen(report: str, status: int | None, started: bool = True) -> EvalgateObservation:
    return EvalgateObservation(
        report=report, started=started, exit_status=status, stderr="last words\n", nonce=NONCE,
        timeout_s=10.0, cpu_s=5,
    )  # fmt: skip


def _line(outcome: str, nonce: str = NONCE, message: str = "") -> str:
    return f'{{"nonce": "{nonce}", "outcome": "{outcome}", "message": "{message}"}}\n'


def test_a_genuine_report_decides() -> None:
    assert evalgate_classify(_seen("started\n" + _line("passed"), 0)) == ("passed", "")
    failed = _line("tests_failed", message="tests line 2: x")
    assert evalgate_classify(_seen("started\n" + failed, 1)) == ("tests_failed", "tests line 2: x")
    assert evalgate_classify(_seen("started\n" + _line("memory"), 1))[0] == "memory"


def test_reports_without_the_nonce_or_with_a_foreign_outcome_are_ignored() -> None:
    forged = "started\n" + _line("passed", nonce="0" * 32) + _line("timeout") + "not json\n"
    assert evalgate_classify(_seen(forged, 0)) == (
        "crashed",
        "exited with status 0 before the tests finished: last words",
    )


def test_a_pass_needs_exit_status_zero() -> None:
    assert evalgate_classify(_seen("started\n" + _line("passed"), 1))[0] == "crashed"
    assert evalgate_classify(_seen("started\n" + _line("passed"), None))[0] == "timeout"


def test_signals_and_the_timeout_have_their_outcomes() -> None:
    assert evalgate_classify(_seen("started\n", 128 + signal.SIGXCPU)) == (
        "timeout",
        "CPU time limit of 5 s exceeded (SIGXCPU)",
    )
    assert evalgate_classify(_seen("started\n", 128 + signal.SIGSEGV))[1].startswith(
        "killed by SIGSEGV"
    )
    assert evalgate_classify(_seen("started\n", None)) == (
        "timeout",
        "wall-clock timeout of 10 s: the sandbox was killed",
    )


def test_a_driver_that_never_started_is_a_sandbox_error() -> None:
    with pytest.raises(EvalgateSandboxError, match=r"could not be set up .*last words"):
        evalgate_classify(_seen("", 1, started=False))
    with pytest.raises(EvalgateSandboxError, match="did not start within the 10 s timeout"):
        evalgate_classify(_seen("", None, started=False))


# --- reaper and pipes -------------------------------------------------------------------------

_TREE = (
    "import os, sys, time\n"
    "for _ in range(2):\n"
    "    if os.fork() == 0:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(60)\n"
    "        time.sleep(60)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_the_reaper_finds_and_kills_a_whole_tree() -> None:
    root = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE)
    try:
        assert root.stdout is not None and root.stdout.readline() == b"ready\n"
        assert wait_until(lambda: len(evalgate_descendants(root.pid)) == 4, 10)
        doomed = asyncio.run(evalgate_kill_tree(root.pid))
        assert len(doomed) == 5 and doomed[-1] == root.pid
        root.wait(10)
        assert wait_until(lambda: not any(evalgate_alive(pid) for pid in doomed), 10)
    finally:
        root.kill()
        root.wait()
        if root.stdout is not None:
            root.stdout.close()


def test_waiting_for_a_process_that_is_not_a_child_ends_when_it_exits() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    async def wait_for_it() -> tuple[bool, bool]:
        early = await evalgate_wait_exit(sleeper.pid, 0.2)
        os.kill(sleeper.pid, signal.SIGKILL)
        return early, await evalgate_wait_exit(sleeper.pid, 10)

    try:
        assert asyncio.run(wait_for_it()) == (False, True)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_pipe_reader_keeps_the_head_and_counts_everything() -> None:
    async def read() -> tuple[bytes, int, bool]:
        read_end, write_end = os.pipe()
        seen: list[str] = []
        reader = EvalgatePipeReader(read_end, 10, lambda: seen.append("line"))
        os.write(write_end, b"started\n" + b"x" * 1000)
        os.close(write_end)
        ended = await reader.wait(5)
        return reader.data, reader.total, ended and seen == ["line"]

    assert asyncio.run(read()) == (b"started\nxx", 1008, True)


def test_a_pipe_reader_gives_up_on_a_writer_that_never_closes() -> None:
    async def read() -> bool:
        read_end, write_end = os.pipe()
        try:
            return await EvalgatePipeReader(read_end, 10).wait(0.1)
        finally:
            os.close(write_end)

    assert asyncio.run(read()) is False


# --- layering ---------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_sandbox_package_is_pure_and_its_driver_stands_alone() -> None:
    for path in PACKAGE.glob("*.py"):
        imported = _imports(path)
        assert not any(name.split(".")[0] == "pytest" for name in imported), path.name
        assert all(
            not name.startswith("pytest_evalgate.")
            or name.startswith(("pytest_evalgate.errors", "pytest_evalgate.sandbox"))
            for name in imported
        ), path.name
    driver = _imports(PACKAGE / "driver.py")
    assert not any(name.startswith("pytest_evalgate") for name in driver)
    assert driver <= set(sys.stdlib_module_names) | {"__future__"}
