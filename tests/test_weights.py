"""Weights provenance (SPEC section 20, issue 30): a small weights folder signed with the real
``model-signing`` package and P-256 keys from ``evalgate keygen``, verified by ``evalgate
weights verify`` (the console script's ``main``, run in this process with the key password
variable removed, as the subprocess it replaced had it): one flipped byte, a missing and an
extra file are named; a wrong key, or a trusted key without ``release``, is refused; the record
feeds the decision."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from inprockit import run_cli_inprocess

from pytest_evalgate.attest.keys import EVALGATE_KEY_PASSWORD_ENV, evalgate_generate_key
from pytest_evalgate.decision.weights import EVALGATE_WEIGHTS_VERIFIED_ENV, evalgate_weights_record
from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError
from pytest_evalgate.weights import evalgate_sign_weights, evalgate_verify_weights

pytest.importorskip("model_signing", reason="model-signing is in the test extras")
D = "sha256:" + "1" * 64


def _cli(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli_inprocess("weights", *args, cwd=work, env={EVALGATE_KEY_PASSWORD_ENV: None})


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    """weights/ (three files, one nested), release and gate keys, a trust file."""
    weights = tmp_path / "weights"
    (weights / "tokenizer").mkdir(parents=True)
    (weights / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (weights / "config.json").write_text('{"hidden_size": 64}')
    (weights / "tokenizer" / "vocab.txt").write_text("a\nb\nc\n")
    for name in ("release", "gate", "stranger"):
        evalgate_generate_key(str(tmp_path / name))
    entries = [
        {"identity": "release-job", "public_key": "release/evalgate.pub", "roles": ["release"]},
        {"identity": "eval-gate", "public_key": "gate/evalgate.pub", "roles": ["gate"]},
    ]
    (tmp_path / "trust.yaml").write_text(json.dumps({"keys": entries}))
    return tmp_path


def _sign(work: Path, key: str = "release") -> subprocess.CompletedProcess[str]:
    return _cli(work, "sign", "weights", "--sign-key", f"{key}/evalgate.key")


def _verify(work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _cli(work, "verify", "weights", "--signature", "weights.sig.json", *extra)


def test_signed_weights_verify_with_the_release_key_and_leave_a_record(work: Path) -> None:
    signed = _sign(work)
    assert signed.returncode == 0, signed.stderr
    assert signed.stdout == "signature written: weights.sig.json\n"
    done = _verify(work, "--trust", "trust.yaml", "--digest", D, "--record", "run/verified.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "signer: release-job (key " in done.stdout and done.stdout.endswith("result: VALID\n")
    record = json.loads((work / "run/verified.json").read_text())
    assert record["weights_digest"] == D and record["identity"] == "release-job"
    # the decision reads it: verified binding with the signature's digest and signer
    from pytest_evalgate.attest.trust import evalgate_load_trust

    trust = evalgate_load_trust(str(work / "trust.yaml"))
    env = {EVALGATE_WEIGHTS_VERIFIED_ENV: str(work / "run/verified.json")}
    weights = evalgate_weights_record(D, trust, env=env)
    assert weights["binding"] == "verified"
    assert weights["signature"]["signature_sha256"] == record["signature_sha256"]
    assert len(record["signature_sha256"]) == 64


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("flip", "first file that differs: model.safetensors (its content differs"),
        ("delete", "first file that differs: tokenizer/vocab.txt (is missing"),
        ("add", "first file that differs: extra.bin (is not in the signature"),
    ],
)
def test_a_changed_missing_or_extra_file_is_named(work: Path, change: str, named: str) -> None:
    assert _sign(work).returncode == 0
    if change == "flip":
        data = bytearray((work / "weights/model.safetensors").read_bytes())
        data[1000] ^= 0x01
        (work / "weights/model.safetensors").write_bytes(bytes(data))
    elif change == "delete":
        (work / "weights/tokenizer/vocab.txt").unlink()
    else:
        (work / "weights/extra.bin").write_bytes(b"x")
    done = _verify(work, "--key", "release/evalgate.pub")
    assert done.returncode == 1
    assert done.stdout.startswith("INVALID: weights: ") and named in done.stdout


def test_a_signature_by_another_key_is_not_a_release_signature(work: Path) -> None:
    assert _sign(work, "stranger").returncode == 0
    done = _verify(work, "--trust", "trust.yaml")
    assert done.returncode == 1
    assert "not signed by a release key (tried " in done.stdout and "(release-job)" in done.stdout


def test_a_trusted_key_without_the_release_role_is_refused_naming_it(work: Path) -> None:
    assert _sign(work, "gate").returncode == 0
    done = _verify(work, "--trust", "trust.yaml")
    assert done.returncode == 1
    assert "(eval-gate), which lacks role release" in done.stdout
    assert _verify(work, "--key", "gate/evalgate.pub").returncode == 0  # the key itself is fine


def test_bad_inputs_exit_4_naming_the_file(work: Path) -> None:
    missing = _cli(
        work, "verify", "nowhere", "--signature", "x.json", "--key", "release/evalgate.pub"
    )
    assert missing.returncode == 4 and "nowhere: weights: no such folder" in missing.stderr
    assert _sign(work).returncode == 0
    again = _sign(work)
    assert again.returncode == 4 and "refusing to overwrite a signature" in again.stderr
    (work / "trust.yaml").write_text("keys: []\n")
    bad = _verify(work, "--trust", "trust.yaml")
    assert bad.returncode == 4 and "trust.yaml: keys: must be a non-empty list" in bad.stderr
    lone = _verify(work, "--key", "release/evalgate.pub", "--record", "r.json")
    assert lone.returncode == 4 and "give --record with --digest" in lone.stderr


def test_a_signature_inside_the_folder_is_left_out_of_what_it_signs(work: Path) -> None:
    inside = str(work / "weights" / "weights.sig.json")
    evalgate_sign_weights(str(work / "weights"), str(work / "release/evalgate.key"), inside)
    keys = [("release-job", str(work / "release/evalgate.pub"))]
    verified = evalgate_verify_weights(str(work / "weights"), inside, keys)
    assert verified.identity == "release-job"
    with pytest.raises(EvalgateConfigError, match="refusing to overwrite"):
        evalgate_sign_weights(str(work / "weights"), str(work / "release/evalgate.key"), inside)


def test_a_garbage_signature_file_is_refused(work: Path) -> None:
    (work / "garbage.json").write_text('{"mediaType": "nope"}')
    keys = [("release-job", str(work / "release/evalgate.pub"))]
    with pytest.raises(EvalgateSignatureError, match="not a model-signing signature"):
        evalgate_verify_weights(str(work / "weights"), str(work / "garbage.json"), keys)
