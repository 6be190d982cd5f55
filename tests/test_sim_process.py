"""The spawned simulator's contract (``simulated/spec.py``, ``process.py``, ``__main__.py``,
``server.evalgate_sim_serve``) and ``evalgate serve`` on top of it: real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.simulated import (
    EVALGATE_SIM_READY,
    EvalgateSimConfig,
    evalgate_parse_simulated_url,
    evalgate_sim_knob_names,
    evalgate_spawn_simulator,
    evalgate_write_answer_key,
)
from pytest_evalgate.simulated.process import evalgate_sim_child_argv
from pytest_evalgate.simulated.server import evalgate_sim_serve
from pytest_evalgate.simulated.spec import (
    EVALGATE_SIM_SPEC_SOURCE,
    EvalgateSimSpec,
    evalgate_sim_ready_line,
    evalgate_sim_ready_port,
    evalgate_sim_spec_decode,
    evalgate_sim_spec_json,
)

CONFIG = evalgate_parse_simulated_url("simulated://?accuracy=0.25&seed=9&accuracy.hard=1&quota=1")
SPEC = EvalgateSimSpec(CONFIG, "key.jsonl", "log.jsonl", 8123, 4242)
GOOD: dict[str, Any] = json.loads(evalgate_sim_spec_json(SPEC))


def child(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest_evalgate.simulated", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def answers(tmp_path: Path) -> Path:
    path = tmp_path / "answers.jsonl"
    evalgate_write_answer_key(path, [("q", "a", "k")])
    return path


# --------------------------------------------------------------------------- the spec


def test_the_spec_is_one_json_object_of_builtins() -> None:
    assert GOOD == {
        "url": "simulated://?accuracy=0.25&seed=9&quota=1&accuracy.hard=1.0",
        "port": 8123,
        "answers": "key.jsonl",
        "request_log": "log.jsonl",
        "parent_pid": 4242,
    }


@pytest.mark.parametrize(
    "spec",
    [
        SPEC,
        EvalgateSimSpec(EvalgateSimConfig(), None, None, 0, None),
        EvalgateSimSpec(
            EvalgateSimConfig(ttft_ms=1.5, fail_rate=0.1), "a b/ä.jsonl", None, 65535, 1
        ),
    ],
)
def test_the_spec_round_trips(spec: EvalgateSimSpec) -> None:
    assert evalgate_sim_spec_decode(evalgate_sim_spec_json(spec)) == spec


def test_the_child_argv_is_the_module_and_the_spec() -> None:
    argv = evalgate_sim_child_argv(SPEC)
    assert argv[:3] == [sys.executable, "-m", "pytest_evalgate.simulated"] and len(argv) == 4
    assert evalgate_sim_spec_decode(argv[3]) == SPEC


def _with(**changes: Any) -> str:
    document = {**GOOD, **changes}
    return json.dumps({k: v for k, v in document.items() if v != "<drop>"})


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("", "json", "not JSON"),
        ("{'url': 1}", "json", "not JSON"),
        ("[1, 2]", "json", "JSON object, got list"),
        ("null", "json", "got NoneType"),
        (_with(url="<drop>"), "url", "missing"),
        (_with(parent_pid="<drop>"), "parent_pid", "missing"),
        (_with(extra=1), "extra", "unknown key"),
        (_with(url=5), "url", "simulated:// URL"),
        (_with(port="8000"), "port", "integer in [0, 65535]"),
        (_with(port=True), "port", "integer"),
        (_with(port=-1), "port", "integer"),
        (_with(port=65536), "port", "integer"),
        (_with(port=80.0), "port", "integer"),
        (_with(parent_pid=0), "parent_pid", "integer"),
        (_with(parent_pid="1"), "parent_pid", "integer"),
        (_with(answers=""), "answers", "a path or null"),
        (_with(answers=3), "answers", "a path or null"),
        (_with(request_log=["x"]), "request_log", "a path or null"),
    ],
)
def test_a_malformed_spec_names_its_key(text: str, key: str, reason: str) -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_sim_spec_decode(text)
    assert (info.value.source, info.value.key) == (EVALGATE_SIM_SPEC_SOURCE, key)
    assert reason in info.value.reason


def test_a_bad_knob_in_the_spec_names_the_url_and_the_knob() -> None:
    url = "simulated://?speed=9"
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_sim_spec_decode(_with(url=url))
    assert (info.value.source, info.value.key) == (url, "speed")


def test_the_ready_line_carries_the_base_url_and_parses_back() -> None:
    line = evalgate_sim_ready_line("http://127.0.0.1:4321/v1")
    assert line == EVALGATE_SIM_READY + " http://127.0.0.1:4321/v1"
    assert evalgate_sim_ready_port("noise\n" + line + "\n") == 4321
    assert evalgate_sim_ready_port(EVALGATE_SIM_READY + " http://10.0.0.1:80/v1") is None
    assert evalgate_sim_ready_port("listening on http://127.0.0.1:80/v1") is None


# --------------------------------------------------------------------------- the child


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "simulator spec: argv: expected one JSON argument, got 0"),
        (("{}", "{}"), "simulator spec: argv: expected one JSON argument, got 2"),
        (("--port", "0"), "simulator spec: argv: expected one JSON argument, got 2"),
        (("not json",), "simulator spec: json: not JSON"),
        ((_with(port="x"),), "simulator spec: port: must be an integer"),
    ],
)
def test_the_child_refuses_a_malformed_spec_with_exit_4(
    args: tuple[str, ...], message: str
) -> None:
    done = child(*args)
    assert done.returncode == 4 and done.stdout == ""
    assert done.stderr.startswith("evalgate simulator: " + message), done.stderr
    assert done.stderr.count("\n") == 1  # one line, no traceback


def test_the_child_refuses_a_missing_answer_key_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    spec = EvalgateSimSpec(EvalgateSimConfig(), str(missing), None, 0, None)
    done = child(evalgate_sim_spec_json(spec))
    assert done.returncode == 4 and done.stdout == ""
    assert f"{missing}: answers: cannot read" in done.stderr


def test_the_child_refuses_a_bad_answer_key_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_sha256": "ab", "target": "x"}\n{"target": "y"}\n')
    spec = EvalgateSimSpec(EvalgateSimConfig(), str(bad), None, 0, None)
    done = child(evalgate_sim_spec_json(spec))
    assert done.returncode == 4 and f"{bad}: line 2: not an answer row" in done.stderr


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().decode().split("\0")[:-1]


def test_spawn_hands_the_child_its_spec(tmp_path: Path, answers: Path) -> None:
    log = tmp_path / "log.jsonl"
    with evalgate_spawn_simulator(CONFIG, answers, log) as process:
        argv = _cmdline(process.pid)
        spec = evalgate_sim_spec_decode(argv[-1])
        assert process.stats()["simulator"] is True
    assert argv[-2] == "pytest_evalgate.simulated" and len(argv) == 4
    assert spec == EvalgateSimSpec(CONFIG, str(answers), str(log), 0, os.getpid())


def test_spawn_on_a_taken_port_is_a_startup_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(EvalgateConfigError) as info:
            evalgate_spawn_simulator(EvalgateSimConfig(), None, port=taken.getsockname()[1])
    assert info.value.key == "startup" and "no ready line" in info.value.reason


def test_spawn_on_a_chosen_port_listens_there() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with evalgate_spawn_simulator(EvalgateSimConfig(), None, port=port) as process:
        assert process.port == port and process.base_url == f"http://127.0.0.1:{port}/v1"
        assert process.stats()["requests_total"] == 0


# --------------------------------------------------------------------------- evalgate_sim_serve


def _never_ready(base_url: str) -> None:
    raise AssertionError(f"on_ready called with {base_url}")


def test_serve_refuses_a_missing_answer_key_before_binding(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.jsonl")
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_sim_serve(EvalgateSimConfig(), missing, None, 0, None, _never_ready)
    assert (info.value.source, info.value.key) == (missing, "answers")


def test_serve_refuses_a_conflicting_answer_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"prompt_sha256": "ab", "target": "x"}\n{"prompt_sha256": "ab", "target": "y"}\n'
    )
    with pytest.raises(EvalgateConfigError, match="conflicting row"):
        evalgate_sim_serve(EvalgateSimConfig(), str(bad), None, 0, None, _never_ready)


def test_serve_refuses_a_request_log_it_cannot_open(tmp_path: Path, answers: Path) -> None:
    log = str(tmp_path / "no-such-folder" / "log.jsonl")
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_sim_serve(EvalgateSimConfig(), str(answers), log, 0, None, _never_ready)
    assert (info.value.source, info.value.key) == (log, "request_log")


SERVE = """
import sys
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.server import evalgate_sim_serve
def ready(url):
    sys.stdout.write("READY " + url + "\\n")
    sys.stdout.flush()
parent = None if sys.argv[1] == "none" else int(sys.argv[1])
evalgate_sim_serve(EvalgateSimConfig(), None, sys.argv[2], 0, parent, ready)
sys.stdout.write("RETURNED\\n")
"""


def _serving(parent: str, log: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", SERVE, parent, str(log)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def test_serve_calls_on_ready_once_and_returns_on_sigterm(tmp_path: Path) -> None:
    process = _serving("none", tmp_path / "log.jsonl")
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("READY http://127.0.0.1:") and line.endswith("/v1\n")
    port = int(line.rsplit(":", 1)[1].split("/")[0])
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=20)
    assert process.returncode == 0 and out == "RETURNED\n"
    assert (tmp_path / "log.jsonl").exists()


def test_serve_returns_by_itself_when_its_parent_is_not_the_one_named(tmp_path: Path) -> None:
    process = _serving(str(os.getpid() + 1_000_000), tmp_path / "log.jsonl")
    out, _ = process.communicate(timeout=20)  # no signal: the parent watch stops it
    assert process.returncode == 0 and out.startswith("READY ") and out.endswith("RETURNED\n")


# --------------------------------------------------------------------------- evalgate serve


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest_evalgate.cli", "serve", "--port", "0", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_serve_help_lists_a_flag_per_knob() -> None:
    done = serve("--help")
    assert done.returncode == 0
    for name in evalgate_sim_knob_names():
        assert "--" + name.replace("_", "-") + " X" in done.stdout, name
    for flag in ("--answers", "--request-log", "--parent-pid", "--url", "--knob K=V"):
        assert flag in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--knob", "accuracy"),
            "evalgate serve: evalgate serve: accuracy: expected --knob NAME=VALUE",
        ),
        (("--accuracy", "2"), "evalgate serve: evalgate serve: accuracy: must be within [0, 1]"),
        (("--knob", "accuracy.x=9"), "evalgate serve: evalgate serve: accuracy.x: must be within"),
        (
            ("--url", "simulated://?seed=1&seed=2"),
            "evalgate serve: simulated://?seed=1&seed=2: seed",
        ),
        (("--answers", "{tmp}/key.jsonl"), "evalgate serve: {tmp}/key.jsonl: answers: cannot"),
        (("--request-log", "{tmp}/no/log"), "evalgate serve: {tmp}/no/log: request_log: cannot"),
    ],
)
def test_serve_refuses_bad_options_with_exit_4(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    done = serve(*(arg.format(tmp=tmp_path) for arg in args))
    message = message.format(tmp=tmp_path)
    assert done.returncode == 4 and done.stdout == ""
    assert done.stderr.startswith(message), done.stderr
