"""Trust files, signer roles, policy approvals and the decision's weights binding (SPEC section
20), as plain unit tests of ``attest.trust``, ``attest.approval`` and ``decision.weights``.
Keys are real P-256 keys, envelopes are really signed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from admissionkit import decision, digest_of, override_of, sign_raw, signed_decision
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from pytest_evalgate.attest.approval import (
    evalgate_approval_path,
    evalgate_approval_statement,
    evalgate_check_approval,
    evalgate_decision_approval_refusal,
    evalgate_read_approval,
)
from pytest_evalgate.attest.dsse import (
    evalgate_sign,
    evalgate_statement,
    evalgate_write_envelope,
)
from pytest_evalgate.attest.keys import evalgate_generate_key, evalgate_keyid
from pytest_evalgate.attest.trust import (
    EvalgateTrust,
    evalgate_load_trust,
    evalgate_release_refusal,
    evalgate_role_for,
    evalgate_trust_for_signing,
)
from pytest_evalgate.decision.weights import EVALGATE_WEIGHTS_VERIFIED_ENV, evalgate_weights_record
from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError

D = digest_of("weights-r17")
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
ROLES = {"gate": ["gate"], "policy": ["policy"], "override": ["override"], "ops": ["registry"]}
IDENTITIES = {
    "gate": "system:serviceaccount:eval-llm:eval-gate",
    "policy": "alice@example.com",
    "override": "bob@example.com",
    "ops": "release-bot",
}


def _trust_text(entries: list[dict[str, Any]]) -> str:
    return json.dumps({"keys": entries})  # JSON is YAML


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A key pair per holder and a trust file giving each its roles."""
    root = tmp_path_factory.mktemp("trust")
    for name in ROLES:
        evalgate_generate_key(str(root / name))
    entries = [
        {"identity": IDENTITIES[name], "public_key": f"{name}/evalgate.pub", "roles": roles}
        for name, roles in ROLES.items()
    ]
    (root / "trust.yaml").write_text(_trust_text(entries))
    return root


@pytest.fixture(scope="module")
def trust(folder: Path) -> EvalgateTrust:
    return evalgate_load_trust(str(folder / "trust.yaml"))


def _key(folder: Path, name: str) -> str:
    return str(folder / name / "evalgate.key")


# --- loading -----------------------------------------------------------------------------------


def test_a_trust_file_names_each_key_with_its_identity_roles_and_key_id(
    folder: Path, trust: EvalgateTrust
) -> None:
    assert [key.identity for key in trust.keys] == list(IDENTITIES.values())
    gate = trust.evalgate_with_role("gate")
    assert [key.identity for key in gate] == [IDENTITIES["gate"]]
    assert gate[0].roles == frozenset({"gate"})
    assert trust.evalgate_key(gate[0].keyid) is gate[0]
    assert trust.evalgate_with_role("release") == ()


def _p384_pem() -> bytes:
    return (
        ec.generate_private_key(ec.SECP384R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _rsa_pem() -> bytes:
    return (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


GOOD = {"identity": "alice", "public_key": "policy/evalgate.pub", "roles": ["policy"]}


@pytest.mark.parametrize(
    ("entries", "key", "reason"),
    [
        ([{**GOOD, "roles": ["policy", "admin"]}], "keys[0].roles", "unknown role 'admin'"),
        ([{**GOOD, "roles": ["gate", "gate"]}], "keys[0].roles", "a role is listed twice"),
        ([{**GOOD, "roles": []}], "keys[0].roles", "a non-empty list of roles"),
        ([GOOD, {**GOOD, "identity": "bob"}], "keys[1].public_key", "is listed twice"),
        ([{**GOOD, "public_key": "p384.pub"}], "keys[0].public_key", "not an ECDSA P-256 key"),
        ([{**GOOD, "public_key": "rsa.pub"}], "keys[0].public_key", "not an ECDSA P-256 key"),
        ([{**GOOD, "public_key": "nowhere.pub"}], "keys[0].public_key", "cannot read key file"),
        ([{**GOOD, "identity": " "}], "keys[0].identity", "non-empty string"),
        ([{**GOOD, "role": ["gate"]}], "keys[0]", "unknown keys ['role']"),
        ([{"identity": "x", "roles": ["gate"]}], "keys[0]", "missing ['public_key']"),
        ([], "keys", "non-empty list"),
    ],
)
def test_a_bad_trust_file_names_the_file_the_key_and_the_reason(
    folder: Path, entries: list[dict[str, Any]], key: str, reason: str
) -> None:
    (folder / "p384.pub").write_bytes(_p384_pem())
    (folder / "rsa.pub").write_bytes(_rsa_pem())
    path = folder / "bad-trust.yaml"
    path.write_text(_trust_text(entries))
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_trust(str(path))
    assert (caught.value.source, caught.value.key) == (str(path), key)
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("signers: []\n", "a mapping with 'keys'"),
        ("- a\n", "a mapping with 'keys'"),
        ("keys: [\n", "not a YAML trust file"),
    ],
)
def test_a_trust_file_of_the_wrong_shape_is_refused(folder: Path, text: str, reason: str) -> None:
    path = folder / "shape.yaml"
    path.write_text(text)
    with pytest.raises(EvalgateConfigError, match=reason):
        evalgate_load_trust(str(path))


def test_a_missing_trust_file_names_the_option(folder: Path) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_trust(str(folder / "none.yaml"), "--trust")
    assert caught.value.key == "--trust" and "cannot read the trust file" in caught.value.reason


# --- roles -------------------------------------------------------------------------------------


def test_a_decision_signed_by_the_gate_key_verifies_with_its_signer(
    folder: Path, trust: EvalgateTrust
) -> None:
    signed = trust.evalgate_verify(signed_decision(D, _key(folder, "gate")), "gate")
    assert signed.signer.identity == IDENTITIES["gate"]
    assert signed.statement["predicate"]["verdict"] == "pass"


def test_a_key_without_the_role_is_refused_naming_its_id_identity_and_the_role(
    folder: Path, trust: EvalgateTrust
) -> None:
    envelope = signed_decision(D, _key(folder, "override"))
    keyid = envelope["signatures"][0]["keyid"]
    with pytest.raises(EvalgateSignatureError) as caught:
        trust.evalgate_verify(envelope, "gate")
    assert str(caught.value) == (
        f"signed by key {keyid[:16]} ({IDENTITIES['override']}), which lacks role gate"
    )


def test_a_key_outside_the_trust_file_is_refused(tmp_path: Path, trust: EvalgateTrust) -> None:
    private, _ = evalgate_generate_key(str(tmp_path / "stranger"))
    with pytest.raises(EvalgateSignatureError, match="no signature by a key of the trust file"):
        trust.evalgate_verify(signed_decision(D, private), "gate")


def test_a_tampered_envelope_by_a_trusted_key_does_not_verify(
    folder: Path, trust: EvalgateTrust
) -> None:
    envelope = signed_decision(D, _key(folder, "override"))
    other = signed_decision(digest_of("other"), _key(folder, "override"))
    spliced = {**envelope, "payload": other["payload"]}
    # the key lacks the role, but the signature is checked first: a forgery reads as one
    with pytest.raises(EvalgateSignatureError, match="signature mismatch"):
        trust.evalgate_verify(spliced, "gate")


def test_each_statement_type_needs_its_own_role() -> None:
    assert evalgate_role_for("https://pytest-evalgate.dev/decision/v1") == "gate"
    assert evalgate_role_for("https://pytest-evalgate.dev/override/v1") == "override"
    assert evalgate_role_for("https://pytest-evalgate.dev/policy-approval/v1") == "policy"
    assert evalgate_role_for("https://pytest-evalgate.dev/registry-entry/v1") == "registry"
    with pytest.raises(EvalgateSignatureError, match="no role signs"):
        evalgate_role_for("https://example.com/other/v1")


def test_an_override_needs_an_override_key_whose_identity_is_the_approver(
    folder: Path, trust: EvalgateTrust
) -> None:
    verify = trust.evalgate_verifier()
    failing = signed_decision(D, _key(folder, "gate"), "fail")
    assert verify(failing)["predicate"]["verdict"] == "fail"
    by_gate = override_of(failing, _key(folder, "gate"))
    with pytest.raises(EvalgateSignatureError, match="lacks role override"):
        verify(by_gate)
    named_alice = override_of(failing, _key(folder, "override"))  # approver alice@example.com
    with pytest.raises(EvalgateSignatureError, match=r"names approver 'alice@example\.com'"):
        verify(named_alice)


def test_the_sign_key_must_hold_gate_when_a_trust_file_is_given(folder: Path) -> None:
    path = str(folder / "trust.yaml")
    assert evalgate_trust_for_signing(path, _key(folder, "gate"), "--t", "--k") is not None
    assert evalgate_trust_for_signing(None, _key(folder, "policy"), "--t", "--k") is None
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_trust_for_signing(path, _key(folder, "policy"), "--t", "--k")
    assert caught.value.key == "--k"
    assert f"({IDENTITIES['policy']}) lacks role gate" in caught.value.reason


# --- policy approvals --------------------------------------------------------------------------


def _approval(folder: Path, name: str = "policy", **times: datetime | None) -> dict[str, Any]:
    approved = times.get("approved", NOW - timedelta(days=1))
    assert approved is not None
    statement = evalgate_approval_statement(
        "gate-v4", "a" * 64, approved, times.get("expires", NOW + timedelta(days=30))
    )
    return evalgate_sign(statement, _key(folder, name))


def test_an_approval_by_a_policy_key_names_who_approved_which_policy(
    folder: Path, trust: EvalgateTrust
) -> None:
    approval = evalgate_check_approval(_approval(folder), trust, "gate-v4", "a" * 64, NOW)
    assert approval.identity == IDENTITIES["policy"]
    assert approval.describe().startswith(
        f"policy gate-v4 sha256:{'a' * 16} approved by {IDENTITIES['policy']}"
    )


@pytest.mark.parametrize(
    ("version", "digest", "times", "reason"),
    [
        ("gate-v4", "b" * 64, {}, f"is for policy gate-v4 sha256:{'a' * 64}, not gate-v4 sha256:"),
        ("gate-v5", "a" * 64, {}, "is for policy gate-v4"),
        ("gate-v4", "a" * 64, {"expires": NOW - timedelta(hours=1)}, "the approval expired at"),
        ("gate-v4", "a" * 64, {"approved": NOW + timedelta(hours=1), "expires": None}, "future"),
    ],
)
def test_an_approval_for_another_policy_or_outside_its_window_is_refused(
    folder: Path,
    trust: EvalgateTrust,
    version: str,
    digest: str,
    times: dict[str, datetime | None],
    reason: str,
) -> None:
    approved = times.get("approved", NOW - timedelta(days=2))
    assert approved is not None
    statement = evalgate_approval_statement(
        "gate-v4", "a" * 64, approved, times.get("expires", NOW + timedelta(days=30))
    )
    envelope = evalgate_sign(statement, _key(folder, "policy"))
    with pytest.raises(EvalgateSignatureError, match=reason):
        evalgate_check_approval(envelope, trust, version, digest, NOW)


def test_an_approval_signed_by_a_gate_key_is_refused(folder: Path, trust: EvalgateTrust) -> None:
    with pytest.raises(EvalgateSignatureError, match="lacks role policy"):
        evalgate_check_approval(_approval(folder, "gate"), trust, "gate-v4", "a" * 64, NOW)


def test_an_expiry_before_the_approval_is_a_usage_error() -> None:
    with pytest.raises(EvalgateConfigError, match="must be after now"):
        evalgate_approval_statement("v", "a" * 64, NOW, NOW - timedelta(seconds=1))


def test_the_approval_lies_beside_the_policy(folder: Path, trust: EvalgateTrust) -> None:
    assert evalgate_approval_path("suites/x/gate.yaml") == "suites/x/gate.approval.dsse.json"
    assert evalgate_approval_path("policy.json") == "policy.json.approval.dsse.json"
    policy = folder / "gate.yaml"
    with pytest.raises(EvalgateSignatureError, match=r"no approval: .* does not exist"):
        evalgate_read_approval(str(policy), trust, "gate-v4", "a" * 64, NOW)
    evalgate_write_envelope(_approval(folder), evalgate_approval_path(str(policy)))
    found = evalgate_read_approval(str(policy), trust, "gate-v4", "a" * 64, NOW)
    assert found.keyid == evalgate_keyid(trust.evalgate_with_role("policy")[0].public_key)


# --- what admission asks of a decision ---------------------------------------------------------


def _approved_decision(folder: Path, envelope: dict[str, Any] | None = None) -> dict[str, Any]:
    record = decision(D)
    record["policy"] = {"version": "gate-v4", "digest": "a" * 64}
    record["created_at"] = NOW.isoformat()
    record["policy_approval"] = {"approved": True, "envelope": envelope or _approval(folder)}
    return record


def test_a_decision_with_a_valid_approval_envelope_rests_on_an_approved_policy(
    folder: Path, trust: EvalgateTrust
) -> None:
    assert evalgate_decision_approval_refusal(_approved_decision(folder), trust) is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"policy_approval": None}, "the decision records no policy approval"),
        ({"policy_approval": {"approved": False, "reason": "policy x is not approved"}}, "x is"),
        ({"policy": {"version": "gate-v4", "digest": "c" * 64}}, "is for policy gate-v4"),
        ({"created_at": (NOW + timedelta(days=90)).isoformat()}, "expired"),
    ],
)
def test_a_decision_without_a_valid_approval_is_refused_as_not_approved(
    folder: Path, trust: EvalgateTrust, change: dict[str, Any], reason: str
) -> None:
    record = {**_approved_decision(folder), **change}
    refusal = evalgate_decision_approval_refusal(record, trust)
    assert refusal is not None and refusal.startswith("policy not approved: ")
    assert reason in refusal


def test_an_approval_forged_with_the_gate_key_is_refused(
    folder: Path, trust: EvalgateTrust
) -> None:
    record = _approved_decision(folder, _approval(folder, "gate"))
    refusal = evalgate_decision_approval_refusal(record, trust)
    assert refusal is not None and "lacks role policy" in refusal


# --- release signature and binding --------------------------------------------------------------


def _verified_record(tmp_path: Path, keyid: str, digest: str = D) -> str:
    path = tmp_path / "weights-verified.json"
    record = {
        "weights_digest": digest,
        "signature_sha256": "e" * 64,
        "identity": "release-job",
        "keyid": keyid,
    }
    path.write_text(json.dumps(record))
    return str(path)


def test_without_a_verification_record_the_weights_are_declared(trust: EvalgateTrust) -> None:
    record = evalgate_weights_record(D, trust, env={})
    assert record["binding"] == "declared" and record["digest"] == D
    assert "pins.weights_digest" in record["why"]
    assert evalgate_release_refusal({"weights": record}, trust) is not None


def test_a_verification_record_for_these_weights_by_a_release_key_binds_them(
    tmp_path: Path,
) -> None:
    private, public = evalgate_generate_key(str(tmp_path / "release"))
    (tmp_path / "trust.yaml").write_text(
        _trust_text([{"identity": "release-job", "public_key": public, "roles": ["release"]}])
    )
    trust = evalgate_load_trust(str(tmp_path / "trust.yaml"))
    keyid = trust.keys[0].keyid
    env = {EVALGATE_WEIGHTS_VERIFIED_ENV: _verified_record(tmp_path, keyid)}
    record = evalgate_weights_record(D, trust, env=env)
    assert record == {
        "digest": D,
        "binding": "verified",
        "signature": {"signature_sha256": "e" * 64, "identity": "release-job", "keyid": keyid},
    }
    assert evalgate_release_refusal({"weights": record}, trust) is None
    other = evalgate_weights_record(digest_of("other"), trust, env=env)
    assert other["binding"] == "declared" and "not the candidate's" in other["why"]
    assert private  # the private half exists; nothing here signs with it


def test_a_verification_record_by_a_key_without_release_stays_declared(
    tmp_path: Path, trust: EvalgateTrust
) -> None:
    gate_keyid = trust.evalgate_with_role("gate")[0].keyid
    env = {EVALGATE_WEIGHTS_VERIFIED_ENV: _verified_record(tmp_path, gate_keyid)}
    record = evalgate_weights_record(D, trust, env=env)
    assert record["binding"] == "declared" and "holds no release role" in record["why"]
    forged = {"weights": {**record, "signature": {"keyid": gate_keyid}}}
    refusal = evalgate_release_refusal(forged, trust)
    assert refusal is not None and "lacks role release" in refusal


def test_an_unreadable_verification_record_is_declared_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{")
    env = {EVALGATE_WEIGHTS_VERIFIED_ENV: str(tmp_path / "bad.json")}
    record = evalgate_weights_record(D, None, env=env)
    assert record["binding"] == "declared" and "unreadable record" in record["why"]


def test_a_statement_signed_raw_with_a_policy_key_is_still_not_a_gate_decision(
    folder: Path, trust: EvalgateTrust
) -> None:
    envelope = sign_raw(evalgate_statement(decision(D)), _key(folder, "policy"))
    with pytest.raises(EvalgateSignatureError, match="lacks role gate"):
        trust.evalgate_verifier()(envelope)
