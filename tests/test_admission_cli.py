"""``evalgate registry promote|revoke|show`` and ``evalgate admission serve``: the console
script end to end, exit statuses, and a revocation reaching a running webhook process.

The one-shot commands (``keygen``, ``override``, ``registry ...``) run through the console
script's ``main`` in this process (:func:`inprockit.run_cli_inprocess`, with the environment the
subprocesses had: no key password, the webhook host); ``admission serve`` stays a real process
(:func:`_cli_process`): it configures logging and signal handlers, and the webhook test signals
it and reads its log."""

from __future__ import annotations

import argparse
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from admissionkit import (
    Client,
    Tls,
    digest_of,
    make_tls,
    model_image,
    pod,
    review,
    signed_decision,
    stop_process,
)
from inprockit import run_cli_inprocess

from pytest_evalgate.attest.dsse import evalgate_write_envelope
from pytest_evalgate.attest.keys import EVALGATE_KEY_PASSWORD_ENV
from pytest_evalgate.cli import evalgate_build_parser
from pytest_evalgate.cli.admission import EVALGATE_ADMISSION_HOST_ENV, EVALGATE_ADMISSION_READY

D = digest_of("weights-r17")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != EVALGATE_KEY_PASSWORD_ENV}
    env[EVALGATE_ADMISSION_HOST_ENV] = "127.0.0.1"
    return env


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``evalgate ARGS`` in this process, with the environment ``_env`` gives a subprocess."""
    env = {EVALGATE_KEY_PASSWORD_ENV: None, EVALGATE_ADMISSION_HOST_ENV: "127.0.0.1"}
    return run_cli_inprocess(*args, cwd=cwd, env=env)


def _cli_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``evalgate ARGS`` as a process (``admission serve``: logging and signal handlers)."""
    command = [sys.executable, "-m", "pytest_evalgate.cli", *args]
    return subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=60)


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    """keys/gate and keys/registry made by `evalgate keygen`, a registry with gate.pub."""
    for name in ("gate", "registry"):
        made = _cli("keygen", "--dir", f"keys/{name}", cwd=tmp_path)
        assert made.returncode == 0, made.stderr
    (tmp_path / "registry").mkdir()
    shutil.copy(tmp_path / "keys/gate/evalgate.pub", tmp_path / "registry/gate.pub")
    return tmp_path


def _registry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    verb, *rest = args
    keys = (
        ["--registry-key", "keys/registry/evalgate.pub"]
        if verb == "show"
        else ["--sign-key", "keys/registry/evalgate.key"]
    )
    return _cli("registry", verb, *rest, "--registry", "registry", *keys, cwd=cwd)


def _failing_decision_and_override(work: Path) -> None:
    envelope = signed_decision(D, str(work / "keys/gate/evalgate.key"), "fail")
    evalgate_write_envelope(envelope, str(work / "decision.json"))
    expires = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    made = _cli(
        "override", "decision.json", "--approver", "alice", "--reason", "judge flake INC-9",
        "--expires", expires, "--key", "keys/gate/evalgate.key", cwd=work,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr


def test_promote_revoke_and_show_end_to_end(work: Path) -> None:
    _failing_decision_and_override(work)
    first = _registry("promote", D, "--to", "candidate", "--attestation", "decision.json", cwd=work)
    assert first.returncode == 0, first.stderr
    assert f"entry 1 of {D}" in first.stdout and "- -> candidate by " in first.stdout
    refused = _registry("promote", D, "--to", "gated", cwd=work)
    assert refused.returncode == 1
    assert refused.stderr.startswith("evalgate registry: ")
    assert "verdict 'fail' and no override" in refused.stderr
    gated = _registry(
        "promote", D, "--to", "gated", "--attestation", "decision.override.json", cwd=work
    )
    assert gated.returncode == 0, gated.stderr
    assert "override approved by alice" in gated.stdout
    shown = _registry("show", D, cwd=work)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[:2] == [f"digest: {D}", "state: gated"]
    assert shown.stdout.rstrip().endswith("result: VALID")
    revoked = _registry("revoke", D, "--reason", "eval set leaked", cwd=work)
    assert revoked.returncode == 0 and "gated -> revoked" in revoked.stdout
    assert "state: revoked" in _registry("show", D, cwd=work).stdout
    after = _registry("promote", D, "--to", "canary", cwd=work)
    assert after.returncode == 1 and "nothing follows a revocation" in after.stderr


def test_show_exits_1_for_a_tampered_chain(work: Path) -> None:
    _gate(work)
    entry = work / "registry" / ("sha256-" + D[7:]) / "000001.json"
    entry.write_bytes(entry.read_bytes().replace(b'"payloadType"', b'"payloadtype"'))
    shown = _registry("show", D, cwd=work)
    assert shown.returncode == 1
    assert shown.stdout.startswith("INVALID: ") and "entry 1" in shown.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("promote", "sha256:latest", "--to", "candidate"), "not a weights digest"),
        (("promote", D, "--to", "shipped"), "unknown state 'shipped'"),
        (("promote", D, "--to", "revoked"), "registry revoke"),
        (("promote", D, "--to", "candidate", "--attestation", "missing.json"), "no such file"),
        (("revoke", D, "--reason", " "), "non-empty reason"),
    ],
)
def test_usage_errors_exit_4(work: Path, args: tuple[str, ...], message: str) -> None:
    done = _registry(*args, cwd=work)
    assert done.returncode == 4, done.stdout + done.stderr
    assert message in done.stderr


def test_a_missing_gate_key_and_a_wrong_registry_key_exit_4(work: Path) -> None:
    envelope = signed_decision(D, str(work / "keys/gate/evalgate.key"))
    evalgate_write_envelope(envelope, str(work / "decision.json"))
    (work / "registry" / "gate.pub").unlink()
    done = _registry("promote", D, "--to", "candidate", "--attestation", "decision.json", cwd=work)
    assert done.returncode == 4 and "gate.pub: gate key: missing" in done.stderr
    wrong = _cli(
        "registry", "show", D, "--registry", "registry", "--registry-key", "decision.json", cwd=work
    )
    assert wrong.returncode == 4 and "not a PEM public key" in wrong.stderr


def _options(parser: argparse.ArgumentParser, *path: str) -> set[str]:
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return {o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")}


def test_the_commands_have_exactly_the_options_of_the_spec() -> None:
    parser = evalgate_build_parser()
    assert _options(parser, "registry", "promote") == {
        "--to", "--attestation", "--registry", "--sign-key", "--trust"
    }  # fmt: skip
    assert _options(parser, "registry", "revoke") == {
        "--reason", "--registry", "--sign-key", "--trust"
    }  # fmt: skip
    assert _options(parser, "registry", "show") == {"--registry", "--registry-key", "--trust"}
    assert _options(parser, "admission", "serve") == {
        "--key", "--registry", "--registry-key", "--tls-cert", "--tls-key", "--port", "--trust",
        "--require-binding",
    }  # fmt: skip
    args = parser.parse_args(
        ["admission", "serve", "--key", "k", "--registry", "r", "--registry-key", "rk",
         "--tls-cert", "c", "--tls-key", "ck"]
    )  # fmt: skip
    assert args.port == 8443


# --- the webhook as a process ------------------------------------------------------------------


def _ready_line(process: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The READY line, read with a deadline; fails with the process's stderr if it exits."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if selector.select(timeout=deadline - time.monotonic()):
                line = process.stdout.readline()
                if line.startswith(EVALGATE_ADMISSION_READY):
                    return line.split()[1]
                assert line, f"the webhook exited: {process.stderr and process.stderr.read()}"
    raise AssertionError("the webhook never said it was ready")


@dataclass(frozen=True)
class Served:
    """A running ``evalgate admission serve`` process, its folder, port and certificate."""

    work: Path
    port: int
    tls: Tls
    process: subprocess.Popen[str]


@pytest.fixture()
def served(work: Path) -> Iterator[Served]:
    tls = make_tls(work / "tls")
    command = [
        sys.executable, "-m", "pytest_evalgate.cli", "admission", "serve",
        "--key", "keys/gate/evalgate.pub", "--registry", "registry",
        "--registry-key", "keys/registry/evalgate.pub",
        "--tls-cert", tls.cert, "--tls-key", tls.key, "--port", "0",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=work, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        url = _ready_line(process)
        yield Served(work, int(url.rsplit(":", 1)[1]), tls, process)
    finally:
        stop_process(process)


def _gate(work: Path) -> None:
    envelope = signed_decision(D, str(work / "keys/gate/evalgate.key"))
    evalgate_write_envelope(envelope, str(work / "decision.json"))
    first = _registry("promote", D, "--to", "candidate", "--attestation", "decision.json", cwd=work)
    assert first.returncode == 0, first.stderr
    assert _registry("promote", D, "--to", "gated", cwd=work).returncode == 0


def test_a_revocation_reaches_the_webhook_process(served: Served) -> None:
    client = Client(served.port, served.tls)
    obj = pod(volumes={"weights": model_image(D)})
    assert client.review(review(obj))["response"]["allowed"] is False  # not in the registry
    _gate(served.work)
    assert client.review(review(obj))["response"]["allowed"] is True
    assert _registry("revoke", D, "--reason", "jailbreak", cwd=served.work).returncode == 0
    answer = client.review(review(obj))["response"]
    assert answer["allowed"] is False and D in answer["status"]["message"]
    assert client.request("GET", "/healthz") == (200, b"ok")
    client.close()
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(timeout=30) == 0
    assert served.process.stderr is not None
    log = served.process.stderr.read()
    assert f"weights {D}" in log and "revoked at" in log  # denials are logged


def test_an_unusable_certificate_exits_4_before_listening(work: Path) -> None:
    (work / "bad.crt").write_text("not a certificate")
    done = _cli_process(
        "admission", "serve", "--key", "keys/gate/evalgate.pub", "--registry", "registry",
        "--registry-key", "keys/registry/evalgate.pub", "--tls-cert", "bad.crt",
        "--tls-key", "bad.crt", "--port", "0", cwd=work,
    )  # fmt: skip
    assert done.returncode == 4 and "--tls-cert" in done.stderr
    assert EVALGATE_ADMISSION_READY not in done.stdout
    missing = _cli_process(
        "admission", "serve", "--key", "keys/gate/evalgate.pub", "--registry", "nowhere",
        "--registry-key", "keys/registry/evalgate.pub", "--tls-cert", "bad.crt",
        "--tls-key", "bad.crt", cwd=work,
    )  # fmt: skip
    assert missing.returncode == 4 and "nowhere: --registry: not a folder" in missing.stderr
