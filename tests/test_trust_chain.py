"""The trust chain end to end (SPEC section 20, issue 30): a real ``pytest --evalgate`` run of
the tiny example suite with a trust file, the console script (``policy approve``, ``verify``,
``registry promote``, ``weights sign|verify``) through its ``main`` in this process (the
environment the subprocesses had: no key password), and the real HTTPS admission webhook process
(``admission serve --trust``) fed real AdmissionReview JSON.

- approved policy -> the decision is signed, verifies with ``--trust``, is promoted and
  admitted (its weights verification record names a ``release`` key);
- the margin loosened -> ``attestable: false``, not signed, and a decision signed without the
  approval is denied by admission with "policy not approved";
- a decision signed by an ``override``-only key -> ``verify --trust`` exit 1, admission denies;
- ``--require-binding verified`` denies declared weights;
- a sign key without ``gate`` or a bad trust file: exit 4 before any request.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from admissionkit import Client, make_tls, model_image, pod, review, sign_raw, stop_process
from inprockit import run_cli_inprocess

from pytest_evalgate.attest.dsse import evalgate_statement, evalgate_write_envelope
from pytest_evalgate.attest.keys import EVALGATE_KEY_PASSWORD_ENV, evalgate_generate_key
from pytest_evalgate.cli.admission import EVALGATE_ADMISSION_HOST_ENV, EVALGATE_ADMISSION_READY
from pytest_evalgate.decision.weights import EVALGATE_WEIGHTS_VERIFIED_ENV
from pytest_evalgate.policy.load import evalgate_load_policy
from pytest_evalgate.policy.values import evalgate_policy_digest

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "suites" / "tiny"
HOLDERS = {
    "gate": ("system:serviceaccount:eval-llm:eval-gate", ["gate"]),
    "policy": ("alice@example.com", ["policy"]),
    "override": ("bob@example.com", ["override"]),
    "registry": ("system:serviceaccount:eval-llm:registry", ["registry"]),
    "release": ("system:serviceaccount:release:release-job", ["release"]),
}
pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != EVALGATE_KEY_PASSWORD_ENV}
    env[EVALGATE_ADMISSION_HOST_ENV] = "127.0.0.1"
    return {**env, **extra}


def _cli(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``evalgate ARGS`` in this process, with the environment ``_env`` gives the webhook."""
    env = {EVALGATE_KEY_PASSWORD_ENV: None, EVALGATE_ADMISSION_HOST_ENV: "127.0.0.1"}
    return run_cli_inprocess(*args, cwd=work, env=env)


@pytest.fixture()
def work(pytester: pytest.Pytester) -> Path:
    """The tiny suite, a key pair per holder, their trust file, an empty registry."""
    root = pytester.path
    shutil.copytree(TINY, root / "suite")
    for name in HOLDERS:
        evalgate_generate_key(str(root / "keys" / name))
    entries = [
        {"identity": identity, "public_key": f"keys/{name}/evalgate.pub", "roles": roles}
        for name, (identity, roles) in HOLDERS.items()
    ]
    (root / "trust.yaml").write_text(json.dumps({"keys": entries}))
    (root / "registry").mkdir()
    return root


def _weights_digest(work: Path) -> str:
    text = (work / "suite" / "evalgate.yaml").read_text()
    return "sha256:" + text.split('weights_digest: "sha256:', 1)[1].split('"', 1)[0]


def _verified_record(work: Path) -> Path:
    """What the serving sidecar's init container leaves: a weights folder signed by the release
    key with model-signing, verified by ``evalgate weights verify --record``."""
    weights = work / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(bytes(range(256)) * 16)
    signed = _cli(work, "weights", "sign", "weights", "--sign-key", "keys/release/evalgate.key")
    assert signed.returncode == 0, signed.stderr
    path = work / "run" / "weights-verified.json"
    verified = _cli(
        work, "weights", "verify", "weights", "--signature", "weights.sig.json", "--trust",
        "trust.yaml", "--digest", _weights_digest(work), "--record", str(path),
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    return path


def _approve(work: Path, key: str = "policy") -> subprocess.CompletedProcess[str]:
    return _cli(
        work, "policy", "approve", "suite/gate.yaml", "--sign-key", f"keys/{key}/evalgate.key",
        "--trust", "trust.yaml",
    )  # fmt: skip


def _gate_run(
    pytester: pytest.Pytester, work: Path, report: str, key: str = "gate", *args: str
) -> pytest.RunResult:
    return pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-store=store",
        f"--evalgate-report={report}", f"--evalgate-sign-key=keys/{key}/evalgate.key",
        "--evalgate-trust=trust.yaml", *args,
    )  # fmt: skip


def _decision(work: Path, report: str) -> dict[str, Any]:
    return json.loads((work / report / "decision.json").read_text())  # type: ignore[no-any-return]


@dataclass
class Webhook:
    port: int
    client: Client
    process: subprocess.Popen[str]


@contextlib.contextmanager
def _webhook(work: Path, *extra: str) -> Iterator[Webhook]:
    """``evalgate admission serve --trust`` as a process on a free loopback port."""
    tls = make_tls(work / "tls")
    command = [
        sys.executable, "-m", "pytest_evalgate.cli", "admission", "serve", "--trust",
        "trust.yaml", "--registry", "registry", "--tls-cert", tls.cert, "--tls-key", tls.key,
        "--port", "0", *extra,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=work, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # the READY line; a failed start closes stdout
        assert line.startswith(EVALGATE_ADMISSION_READY), process.stderr and process.stderr.read()
        port = int(line.strip().rsplit(":", 1)[1])
        client = Client(port, tls)
        yield Webhook(port, client, process)
        client.close()
    finally:
        stop_process(process)


def _admitted(hook: Webhook, digest: str) -> tuple[bool, str]:
    answer = hook.client.review(review(pod(volumes={"weights": model_image(digest)})))
    response = answer["response"]
    return bool(response["allowed"]), str(response.get("status", {}).get("message", ""))


def _promote(
    work: Path, digest: str, to: str, *attestation: str
) -> subprocess.CompletedProcess[str]:
    given = [part for path in attestation for part in ("--attestation", path)]
    return _cli(
        work, "registry", "promote", digest, "--to", to, *given, "--registry", "registry",
        "--sign-key", "keys/registry/evalgate.key", "--trust", "trust.yaml",
    )  # fmt: skip


# --- approved: signed, verified, promoted, admitted -------------------------------------------


def test_an_approved_policy_gives_a_signed_decision_that_is_admitted(
    pytester: pytest.Pytester, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    approved = _approve(work)
    assert approved.returncode == 0, approved.stderr
    assert "signer: alice@example.com" in approved.stdout
    assert (work / "suite/gate.approval.dsse.json").is_file()
    monkeypatch.setenv(EVALGATE_WEIGHTS_VERIFIED_ENV, str(_verified_record(work)))
    result = _gate_run(pytester, work, "rep")
    assert result.ret == 0
    decision = _decision(work, "rep")
    assert decision["attestable"] is True and decision["verdict"] == "pass"
    assert decision["policy_approval"]["identity"] == "alice@example.com"
    assert decision["weights"]["binding"] == "verified"
    assert decision["weights"]["model_check"] == "exact"
    signature = decision["weights"]["signature"]  # the signature's digest and its signer
    assert signature["identity"] == HOLDERS["release"][0]
    assert (
        signature["signature_sha256"]
        == hashlib.sha256((work / "weights.sig.json").read_bytes()).hexdigest()
    )
    verified = _cli(work, "verify", "rep/decision.dsse.json", "--trust", "trust.yaml")
    assert verified.returncode == 0, verified.stdout
    assert "signer: system:serviceaccount:eval-llm:eval-gate (role gate" in verified.stdout
    assert "checked: policy approved by alice@example.com (role policy)" in verified.stdout
    assert "release: weights signed by a release key" in verified.stdout
    digest = _weights_digest(work)
    assert _promote(work, digest, "candidate", "rep/decision.dsse.json").returncode == 0
    gated = _promote(work, digest, "gated")
    assert gated.returncode == 0, gated.stdout + gated.stderr
    with _webhook(work) as hook:
        assert _admitted(hook, digest) == (True, "")
    with _webhook(work, "--require-binding", "verified") as hook:
        assert _admitted(hook, digest)[0] is True


# --- a loosened policy -----------------------------------------------------------------------


def test_a_loosened_margin_breaks_the_approval_and_admission_denies(
    pytester: pytest.Pytester, work: Path
) -> None:
    assert _approve(work).returncode == 0
    policy = work / "suite/gate.yaml"
    policy.write_text(policy.read_text().replace("margin: 0.10", "margin: 0.50"))
    shown = _cli(work, "policy", "show", "suite/gate.yaml", "--trust", "trust.yaml")
    assert shown.returncode == 1 and "NOT APPROVED: policy tiny-gate-v1" in shown.stdout
    result = _gate_run(pytester, work, "rep")
    assert result.ret == 0  # the run decides as usual ...
    result.stdout.fnmatch_lines(
        ["decision not signed: not attestable: policy tiny-gate-v1 sha256:* is not approved: the*"]
    )
    decision = _decision(work, "rep")
    assert decision["verdict"] == "pass" and decision["attestable"] is False  # ... not a release
    assert decision["policy_approval"]["approved"] is False
    assert not (work / "rep/decision.dsse.json").exists()
    # A gate key holder who signs it anyway (attestable forced true) is still denied.
    statement = evalgate_statement({**decision, "attestable": True})
    evalgate_write_envelope(
        sign_raw(statement, "keys/gate/evalgate.key"), str(work / "forged.json")
    )
    digest = _weights_digest(work)
    assert _promote(work, digest, "candidate", "forged.json").returncode == 0
    refused = _promote(work, digest, "gated")
    assert refused.returncode == 1 and "policy not approved" in refused.stderr
    bypass = _cli(
        work,
        "registry",
        "promote",
        digest,
        "--to",
        "gated",
        "--registry",
        "registry",
        "--sign-key",
        "keys/registry/evalgate.key",
    )  # fmt: skip  (without --trust the registry needs gate.pub, which this registry lacks)
    assert bypass.returncode == 4
    with _webhook(work) as hook:
        allowed, message = _admitted(hook, digest)
    assert allowed is False and "registry state is candidate" in message


def test_admission_denies_a_gated_decision_whose_policy_was_not_approved(
    pytester: pytest.Pytester, work: Path
) -> None:
    """A registry promoted without the trust file (gate.pub only) still cannot admit a decision
    made without an approved policy: the webhook re-checks the approval."""
    result = pytester.runpytest(
        "--evalgate",
        "suite",
        "-p",
        "no:cacheprovider",
        "-q",
        "--evalgate-store=store",
        "--evalgate-report=rep",
        "--evalgate-sign-key=keys/gate/evalgate.key",
    )  # fmt: skip  (no trust file: signed, with no policy_approval)
    assert result.ret == 0 and (work / "rep/decision.dsse.json").is_file()
    shutil.copy(work / "keys/gate/evalgate.pub", work / "registry/gate.pub")
    digest = _weights_digest(work)
    for to, given in (("candidate", ["--attestation", "rep/decision.dsse.json"]), ("gated", [])):
        done = _cli(
            work, "registry", "promote", digest, "--to", to, *given, "--registry", "registry",
            "--sign-key", "keys/registry/evalgate.key",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    with _webhook(work) as hook:
        allowed, message = _admitted(hook, digest)
    assert allowed is False
    assert "policy not approved: the decision records no policy approval" in message


# --- wrong roles -----------------------------------------------------------------------------


def test_a_decision_signed_by_an_override_key_is_invalid_and_denied(
    pytester: pytest.Pytester, work: Path
) -> None:
    assert _approve(work).returncode == 0
    result = _gate_run(pytester, work, "rep", "override")
    assert result.ret == 4  # refused before any request
    result.stderr.fnmatch_lines(["*--evalgate-sign-key*(bob@example.com) lacks role gate*"])
    assert not (work / "store").exists() or not any((work / "store").rglob("*.jsonl"))
    # Signed outside the plugin with the override key: verify --trust and admission refuse it.
    assert _gate_run(pytester, work, "rep").ret == 0
    decision = _decision(work, "rep")
    envelope = sign_raw(evalgate_statement(decision), "keys/override/evalgate.key")
    evalgate_write_envelope(envelope, str(work / "by-override.json"))
    verified = _cli(work, "verify", "by-override.json", "--trust", "trust.yaml")
    assert verified.returncode == 1
    assert "INVALID: signed by key" in verified.stdout
    assert "(bob@example.com), which lacks role gate" in verified.stdout
    refused = _promote(work, _weights_digest(work), "candidate", "by-override.json")
    assert refused.returncode == 1 and "lacks role gate" in refused.stderr


def test_require_binding_verified_denies_declared_weights(
    pytester: pytest.Pytester, work: Path
) -> None:
    assert _approve(work).returncode == 0
    assert _gate_run(pytester, work, "rep").ret == 0  # no verification record: declared
    decision = _decision(work, "rep")
    assert decision["weights"]["binding"] == "declared"
    verified = _cli(work, "verify", "rep/decision.dsse.json", "--trust", "trust.yaml")
    assert verified.returncode == 0 and "release: no release signature" in verified.stdout
    digest = _weights_digest(work)
    assert _promote(work, digest, "candidate", "rep/decision.dsse.json").returncode == 0
    assert _promote(work, digest, "gated").returncode == 0
    with _webhook(work, "--require-binding", "verified") as hook:
        allowed, message = _admitted(hook, digest)
    assert allowed is False and "no release signature" in message


# --- bad input before any request ----------------------------------------------------------


@pytest.mark.parametrize(
    ("trust", "message"),
    [
        ({"keys": [{"identity": "x", "public_key": "keys/gate/evalgate.pub", "roles": ["root"]}]},
         "*trust.yaml: keys[[]0].roles: unknown role 'root'*"),
        ({"keys": [{"identity": "x", "public_key": "keys/gate/evalgate.pub", "roles": ["gate"]},
                   {"identity": "y", "public_key": "keys/gate/evalgate.pub", "roles": ["policy"]}]},
         "*trust.yaml: keys[[]1].public_key: key id * is listed twice*"),
    ],
)  # fmt: skip
def test_a_bad_trust_file_exits_4_before_any_request(
    pytester: pytest.Pytester, work: Path, trust: dict[str, Any], message: str
) -> None:
    (work / "trust.yaml").write_text(json.dumps(trust))
    result = _gate_run(pytester, work, "rep")
    assert result.ret == 4
    result.stderr.fnmatch_lines([message])
    assert not (work / "rep").exists()


def test_with_two_workers_the_unapproved_policy_is_reported_once(
    pytester: pytest.Pytester, work: Path
) -> None:
    result = _gate_run(pytester, work, "rep", "gate", "-n", "2")
    assert result.ret == 0
    lines = [line for line in result.outlines if "is not approved: no approval" in line]
    digest = evalgate_policy_digest(evalgate_load_policy(work / "suite/gate.yaml"))
    assert lines == [
        f"decision not signed: not attestable: policy tiny-gate-v1 sha256:{digest} is not "
        "approved: no approval: suite/gate.approval.dsse.json does not exist"
    ]
    assert _decision(work, "rep")["attestable"] is False
