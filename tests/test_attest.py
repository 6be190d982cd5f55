"""Signed decision records: real ECDSA P-256 keys, real DSSE envelopes, no mocks."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import stat
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils
from inprockit import run_cli_inprocess

from pytest_evalgate.attest.dsse import (
    EVALGATE_PAYLOAD_TYPE,
    EVALGATE_PREDICATE_TYPE,
    EVALGATE_STATEMENT_TYPE,
    evalgate_load_envelope,
    evalgate_pae,
    evalgate_payload_sha256,
    evalgate_refusal_reason,
    evalgate_sign,
    evalgate_statement,
    evalgate_verify,
    evalgate_write_envelope,
)
from pytest_evalgate.attest.keys import (
    EVALGATE_KEY_PASSWORD_ENV,
    evalgate_generate_key,
    evalgate_keyid,
    evalgate_load_private_key,
    evalgate_load_public_key,
)
from pytest_evalgate.attest.override import (
    EVALGATE_OVERRIDE_TYPE,
    evalgate_override,
    evalgate_verify_override,
)
from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError
from pytest_evalgate.formats.canonical import evalgate_canonical_json

WEIGHTS = "sha256:" + "3f" * 32
NOW = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)


def _decision(verdict: str = "pass", attestable: Any = True, **extra: Any) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "attestable": attestable,
        "suite": "support-eval",
        "definition_digest": "d" * 64,
        "candidate": {
            "name": "candidate",
            "model": "support-app-r17",
            "key": "candidate-0123abcd",
            "pins": {"weights_digest": WEIGHTS, "quantization": "fp8"},
        },
        "baseline": {"name": "baseline", "model": "support-app-r16", "pins": {}},
        "rules": [{"slice": "all", "rule": "non_inferior", "lower": -0.004, "pass": True}],
        "counts": {"completed": 400, "expected": 400},
        "note": "größer als 1 ✓",  # non-ASCII must survive canonical bytes and base64
        **extra,
    }


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two unencrypted key pairs, made by the code under test."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(EVALGATE_KEY_PASSWORD_ENV, raising=False)
        priv_a, pub_a = evalgate_generate_key(str(tmp_path_factory.mktemp("a")))
        priv_b, pub_b = evalgate_generate_key(str(tmp_path_factory.mktemp("b")))
    return {"priv": priv_a, "pub": pub_a, "other_priv": priv_b, "other_pub": pub_b}


@pytest.fixture()
def signed(keys: dict[str, str]) -> dict[str, Any]:
    return evalgate_sign(evalgate_statement(_decision("fail")), keys["priv"])


def _flip(text: str, index: int) -> str:
    return text[:index] + chr(ord(text[index]) ^ 0x01) + text[index + 1 :]


# --- PAE -------------------------------------------------------------------------------------


def test_pae_matches_the_dsse_spec_example_byte_for_byte() -> None:
    pae = evalgate_pae("http://example.com/HelloWorld", b"hello world")
    assert pae == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_pae_lengths_are_byte_lengths_without_leading_zeros() -> None:
    assert evalgate_pae("é", b"") == b"DSSEv1 2 \xc3\xa9 0 "
    assert evalgate_pae("t", "ü".encode()) == b"DSSEv1 1 t 2 \xc3\xbc"


def test_pae_verifies_the_dsse_spec_test_vector_signature() -> None:
    """The spec's published P-256 signature verifies over our PAE, so our bytes are its bytes."""
    x = 46950820868899156662930047687818585632848591499744589407958293238635476079160
    y = 5640078356564379163099075877009565129882514886557779369047442380624545832820
    public = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    raw = base64.b64decode(
        "A3JqsQGtVsJ2O2xqrI5IcnXip5GToJ3F+FnZ+O88SjtR6rDAajabZKciJTfUiHqJPcIAriEGAHTVeCUjW2JIZA=="
    )
    der = utils.encode_dss_signature(int.from_bytes(raw[:32]), int.from_bytes(raw[32:]))
    message = evalgate_pae("http://example.com/HelloWorld", b"hello world")
    public.verify(der, message, ec.ECDSA(hashes.SHA256()))
    with pytest.raises(InvalidSignature):
        public.verify(der, message + b"!", ec.ECDSA(hashes.SHA256()))


# --- statements ------------------------------------------------------------------------------


def test_statement_is_in_toto_v1_with_the_weights_as_subject() -> None:
    statement = evalgate_statement(_decision())
    assert statement["_type"] == EVALGATE_STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == EVALGATE_PREDICATE_TYPE
    assert statement["subject"] == [{"name": "support-app-r17", "digest": {"sha256": "3f" * 32}}]
    assert statement["predicate"] == _decision()


def test_statement_copies_the_decision() -> None:
    decision = _decision()
    statement = evalgate_statement(decision)
    decision["verdict"] = "fail"
    assert statement["predicate"]["verdict"] == "pass"


def test_subject_name_falls_back_to_the_candidate_key() -> None:
    decision = _decision()
    del decision["candidate"]["model"]
    assert evalgate_statement(decision)["subject"][0]["name"] == "candidate-0123abcd"


@pytest.mark.parametrize("verdict", ["partial", "incomplete", "invalid", "PASS", None])
def test_unattestable_verdicts_are_refused(verdict: Any) -> None:
    assert evalgate_refusal_reason(_decision(verdict)) is not None
    with pytest.raises(EvalgateSignatureError, match="refusing to attest: verdict"):
        evalgate_statement(_decision(verdict))


@pytest.mark.parametrize("attestable", [False, None, "true", 1])
def test_decisions_not_marked_attestable_are_refused(attestable: Any) -> None:
    with pytest.raises(EvalgateSignatureError, match="attestable"):
        evalgate_statement(_decision("pass", attestable))
    decision = _decision()
    del decision["attestable"]
    with pytest.raises(EvalgateSignatureError, match="attestable"):
        evalgate_statement(decision)


@pytest.mark.parametrize("verdict", ["pass", "fail"])
def test_pass_and_fail_are_attestable(verdict: str) -> None:
    assert evalgate_refusal_reason(_decision(verdict)) is None
    assert evalgate_statement(_decision(verdict))["predicate"]["verdict"] == verdict


@pytest.mark.parametrize(
    "digest", [None, "3f" * 32, "sha256:" + "3F" * 32, "sha256:abc", "sha512:" + "3f" * 32]
)
def test_malformed_weights_digests_are_refused(digest: Any) -> None:
    decision = _decision()
    decision["candidate"]["pins"]["weights_digest"] = digest
    with pytest.raises(EvalgateSignatureError, match="weights"):
        evalgate_statement(decision)


def test_nan_in_a_decision_is_refused() -> None:
    with pytest.raises(EvalgateSignatureError, match="canonical JSON"):
        evalgate_statement(_decision(lower=float("nan")))


def test_a_handmade_partial_statement_is_not_signed(keys: dict[str, str]) -> None:
    statement = evalgate_statement(_decision())
    statement["predicate"]["verdict"] = "partial"
    with pytest.raises(EvalgateSignatureError, match="not attestable"):
        evalgate_sign(statement, keys["priv"])


# --- sign and verify -------------------------------------------------------------------------


def test_round_trip_returns_the_statement(keys: dict[str, str]) -> None:
    statement = evalgate_statement(_decision())
    envelope = evalgate_sign(statement, keys["priv"])
    assert envelope["payloadType"] == EVALGATE_PAYLOAD_TYPE == "application/vnd.in-toto+json"
    assert base64.b64decode(envelope["payload"]) == evalgate_canonical_json(statement)
    assert evalgate_verify(envelope, keys["pub"]) == statement


def test_keyid_is_sha256_of_the_spki_der(keys: dict[str, str], signed: dict[str, Any]) -> None:
    der = evalgate_load_public_key(keys["pub"]).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert signed["signatures"][0]["keyid"] == hashlib.sha256(der).hexdigest()
    assert evalgate_keyid(evalgate_load_private_key(keys["priv"]).public_key()) == (
        hashlib.sha256(der).hexdigest()
    )


def test_every_single_byte_flip_of_the_envelope_file_fails(
    keys: dict[str, str], signed: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "decision.json"
    evalgate_write_envelope(signed, str(path))
    text = path.read_text()
    assert evalgate_verify(evalgate_load_envelope(str(path)), keys["pub"])["predicate"]
    survivors = []
    for index in range(len(text)):
        path.write_text(_flip(text, index))
        try:
            evalgate_verify(evalgate_load_envelope(str(path)), keys["pub"])
        except EvalgateSignatureError:
            continue
        survivors.append(index)
    assert survivors == []


def _replace_char(text: str, index: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    new = alphabet[(alphabet.index(text[index]) + 1) % 64]
    return text[:index] + new + text[index + 1 :]


@pytest.mark.parametrize("field", ["payload", "sig"])
def test_valid_base64_changes_fail_as_signature_mismatch(
    keys: dict[str, str], signed: dict[str, Any], field: str
) -> None:
    """A changed character that is still canonical base64 reaches the signature check."""
    holder = signed if field == "payload" else signed["signatures"][0]
    text = holder[field]
    positions = range(0, len(text.rstrip("=")) - 2, max(1, len(text) // 40))
    for index in positions:
        tampered = copy.deepcopy(signed)
        target = tampered if field == "payload" else tampered["signatures"][0]
        target[field] = _replace_char(text, index)
        with pytest.raises(EvalgateSignatureError, match="signature mismatch"):
            evalgate_verify(tampered, keys["pub"])


def test_a_changed_decoded_payload_byte_fails(keys: dict[str, str], signed: dict[str, Any]) -> None:
    body = bytearray(base64.b64decode(signed["payload"]))
    for index in range(0, len(body), 7):
        tampered = dict(signed, payload=base64.b64encode(_xor(body, index)).decode())
        with pytest.raises(EvalgateSignatureError, match="signature mismatch"):
            evalgate_verify(tampered, keys["pub"])


def _xor(body: bytearray, index: int) -> bytes:
    changed = bytearray(body)
    changed[index] ^= 0x20
    return bytes(changed)


def test_bad_base64_is_named(keys: dict[str, str], signed: dict[str, Any]) -> None:
    for bad in ("!!!!", signed["payload"] + "A", 17):
        with pytest.raises(EvalgateSignatureError, match="bad base64 in payload"):
            evalgate_verify(dict(signed, payload=bad), keys["pub"])


def test_non_canonical_trailing_bits_are_refused(keys: dict[str, str]) -> None:
    envelope = evalgate_sign(evalgate_statement(_decision()), keys["priv"])
    payload = envelope["payload"]
    assert payload.endswith("=")  # this statement's length leaves unused bits
    last = payload.rstrip("=")[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    sibling = alphabet[alphabet.index(last) | 1]
    if sibling == last:
        sibling = alphabet[alphabet.index(last) & ~1]
    pad = len(payload) - len(payload.rstrip("="))
    tampered = payload[: -pad - 1] + sibling + "=" * pad
    assert base64.b64decode(tampered) == base64.b64decode(payload)
    with pytest.raises(EvalgateSignatureError, match="not canonical"):
        evalgate_verify(dict(envelope, payload=tampered), keys["pub"])


def test_url_safe_unpadded_base64_verifies_as_dsse_requires(
    keys: dict[str, str], signed: dict[str, Any]
) -> None:
    body = base64.b64decode(signed["payload"])
    sig = base64.b64decode(signed["signatures"][0]["sig"])
    urlsafe = copy.deepcopy(signed)
    urlsafe["payload"] = base64.urlsafe_b64encode(body).decode().rstrip("=")
    urlsafe["signatures"][0]["sig"] = base64.urlsafe_b64encode(sig).decode()
    assert evalgate_verify(urlsafe, keys["pub"]) == evalgate_verify(signed, keys["pub"])


def test_mixed_base64_alphabets_are_refused(keys: dict[str, str]) -> None:
    body = b"\xfb\xff" * 40 + b"\xf8"  # encodes to both '+' and '/' in standard base64
    text = base64.b64encode(body).decode()
    mixed = text.replace("/", "_", 1)
    assert "+" in mixed and "_" in mixed
    envelope = {"payloadType": EVALGATE_PAYLOAD_TYPE, "payload": mixed, "signatures": [{}]}
    with pytest.raises(EvalgateSignatureError, match="not canonical"):
        evalgate_verify(envelope, keys["pub"])


def test_another_key_is_an_unknown_key_id(keys: dict[str, str], signed: dict[str, Any]) -> None:
    with pytest.raises(EvalgateSignatureError, match="unknown key id"):
        evalgate_verify(signed, keys["other_pub"])


def test_another_keys_signature_under_our_keyid_is_a_mismatch(
    keys: dict[str, str], signed: dict[str, Any]
) -> None:
    forged = evalgate_sign(evalgate_statement(_decision("fail")), keys["other_priv"])
    forged["signatures"][0]["keyid"] = signed["signatures"][0]["keyid"]
    with pytest.raises(EvalgateSignatureError, match="signature mismatch"):
        evalgate_verify(forged, keys["pub"])


def test_one_good_signature_among_several_is_enough(
    keys: dict[str, str], signed: dict[str, Any]
) -> None:
    other = evalgate_sign(evalgate_statement(_decision("fail")), keys["other_priv"])
    both = dict(signed, signatures=other["signatures"] + signed["signatures"])
    assert evalgate_verify(both, keys["pub"])["predicate"]["verdict"] == "fail"
    assert evalgate_verify(both, keys["other_pub"])["predicate"]["verdict"] == "fail"


def test_a_failing_signature_under_the_trusted_key_id_fails_beside_a_good_one(
    keys: dict[str, str], signed: dict[str, Any]
) -> None:
    # issue 19: verification fails when any signature claiming the trusted key id fails
    forged = evalgate_sign(evalgate_statement(_decision("fail")), keys["other_priv"])
    keyid = signed["signatures"][0]["keyid"]
    bad = {"keyid": keyid, "sig": forged["signatures"][0]["sig"]}
    for order in ([bad, *signed["signatures"]], [*signed["signatures"], bad]):
        envelope = dict(signed, signatures=order)
        with pytest.raises(EvalgateSignatureError) as caught:
            evalgate_verify(envelope, keys["pub"])
        assert str(caught.value) == (
            f"signature mismatch: signature {order.index(bad) + 1} of 2 claiming the trusted "
            f"key id {keyid} does not verify the payload"
        )
    assert evalgate_verify(signed, keys["pub"])["predicate"]["verdict"] == "fail"  # alone: fine


def test_cli_verify_says_invalid_for_a_spliced_bad_signature(
    tmp_path: Path, keys: dict[str, str], signed: dict[str, Any]
) -> None:
    forged = evalgate_sign(evalgate_statement(_decision("fail")), keys["other_priv"])
    keyid = signed["signatures"][0]["keyid"]
    spliced = dict(signed, signatures=[*signed["signatures"], {"keyid": keyid,
                   "sig": forged["signatures"][0]["sig"]}])  # fmt: skip
    evalgate_write_envelope(spliced, str(tmp_path / "d.dsse.json"))
    before = (tmp_path / "d.dsse.json").read_bytes()
    result = _cli("verify", "d.dsse.json", "--key", keys["pub"], cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.startswith("INVALID: signature mismatch: signature 2 of 2 claiming")
    assert (tmp_path / "d.dsse.json").read_bytes() == before


def test_a_foreign_payload_type_fails_even_when_signed(keys: dict[str, str]) -> None:
    key = evalgate_load_private_key(keys["priv"])
    body = evalgate_canonical_json(evalgate_statement(_decision()))
    foreign = "application/json"
    sig = key.sign(evalgate_pae(foreign, body), ec.ECDSA(hashes.SHA256()))
    envelope = {
        "payloadType": foreign,
        "payload": base64.b64encode(body).decode(),
        "signatures": [
            {"keyid": evalgate_keyid(key.public_key()), "sig": base64.b64encode(sig).decode()}
        ],
    }
    with pytest.raises(EvalgateSignatureError, match="wrong payloadType 'application/json'"):
        evalgate_verify(envelope, keys["pub"])


def _sign_raw(statement: dict[str, Any], private_path: str) -> dict[str, Any]:
    """Sign bytes the way another tool might, bypassing our statement checks."""
    key = evalgate_load_private_key(private_path)
    body = evalgate_canonical_json(statement)
    sig = key.sign(evalgate_pae(EVALGATE_PAYLOAD_TYPE, body), ec.ECDSA(hashes.SHA256()))
    signature = {"keyid": evalgate_keyid(key.public_key()), "sig": base64.b64encode(sig).decode()}
    return {
        "payloadType": EVALGATE_PAYLOAD_TYPE,
        "payload": base64.b64encode(body).decode(),
        "signatures": [signature],
    }


def test_a_validly_signed_partial_decision_does_not_verify(keys: dict[str, str]) -> None:
    statement = evalgate_statement(_decision())
    statement["predicate"]["verdict"] = "partial"
    with pytest.raises(EvalgateSignatureError, match="not attestable"):
        evalgate_verify(_sign_raw(statement, keys["priv"]), keys["pub"])


def test_a_subject_that_is_not_the_candidate_weights_fails(keys: dict[str, str]) -> None:
    statement = evalgate_statement(_decision())
    statement["subject"][0]["digest"]["sha256"] = "00" * 32
    with pytest.raises(EvalgateSignatureError, match="subject does not match"):
        evalgate_verify(_sign_raw(statement, keys["priv"]), keys["pub"])


def test_a_signed_non_statement_fails(keys: dict[str, str]) -> None:
    with pytest.raises(EvalgateSignatureError, match="not an in-toto"):
        evalgate_verify(_sign_raw({"hello": "world"}, keys["priv"]), keys["pub"])


@pytest.mark.parametrize(
    "envelope",
    [[], {"payloadType": EVALGATE_PAYLOAD_TYPE, "payload": "e30=", "signatures": []}],
)
def test_malformed_envelopes_fail(keys: dict[str, str], envelope: Any) -> None:
    with pytest.raises(EvalgateSignatureError):
        evalgate_verify(envelope, keys["pub"])


def test_duplicate_keys_in_an_envelope_file_fail(signed: dict[str, Any], tmp_path: Path) -> None:
    text = evalgate_canonical_json(signed).decode()
    path = tmp_path / "dup.json"
    path.write_text(text[:-1] + ',"payloadType":"application/vnd.in-toto+json"}')
    with pytest.raises(EvalgateSignatureError, match="duplicate key"):
        evalgate_load_envelope(str(path))


# --- keys ------------------------------------------------------------------------------------


def test_generated_keys_are_p256_and_private_is_0600(keys: dict[str, str]) -> None:
    assert stat.S_IMODE(os.stat(keys["priv"]).st_mode) == 0o600
    assert Path(keys["priv"]).name == "evalgate.key"
    assert Path(keys["pub"]).name == "evalgate.pub"
    assert isinstance(evalgate_load_public_key(keys["pub"]).curve, ec.SECP256R1)


def test_keygen_never_overwrites(keys: dict[str, str]) -> None:
    before = Path(keys["priv"]).read_bytes()
    with pytest.raises(EvalgateConfigError, match="refusing to overwrite"):
        evalgate_generate_key(str(Path(keys["priv"]).parent))
    assert Path(keys["priv"]).read_bytes() == before


def test_encrypted_keys_use_the_password_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EVALGATE_KEY_PASSWORD_ENV, "s3cret")
    priv, pub = evalgate_generate_key(str(tmp_path))
    assert b"ENCRYPTED PRIVATE KEY" in Path(priv).read_bytes()
    envelope = evalgate_sign(evalgate_statement(_decision()), priv)
    assert evalgate_verify(envelope, pub)["predicate"]["verdict"] == "pass"
    monkeypatch.setenv(EVALGATE_KEY_PASSWORD_ENV, "wrong")
    with pytest.raises(EvalgateConfigError, match="cannot decrypt"):
        evalgate_load_private_key(priv)
    monkeypatch.delenv(EVALGATE_KEY_PASSWORD_ENV)
    with pytest.raises(EvalgateConfigError, match=EVALGATE_KEY_PASSWORD_ENV):
        evalgate_load_private_key(priv)


def test_keys_that_are_not_p256_are_refused(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP384R1())
    path = tmp_path / "p384.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(EvalgateConfigError, match="P-256"):
        evalgate_load_private_key(str(path))
    with pytest.raises(EvalgateConfigError, match="not a PEM public key"):
        evalgate_load_public_key(str(path))
    with pytest.raises(EvalgateConfigError, match="cannot read"):
        evalgate_load_public_key(str(tmp_path / "missing.pub"))


# --- overrides -------------------------------------------------------------------------------


def _override(keys: dict[str, str], decision_env: dict[str, Any], **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "approver": "alice@example.com",
        "reason": "known judge flake on billing; re-run scheduled",
        "expires_at": "2030-01-08T12:00:00+00:00",
        "key": keys["priv"],
        "now": NOW,
    }
    args.update(kw)
    return evalgate_override(decision_env, **args)


def test_override_links_to_the_decision_payload(
    keys: dict[str, str], signed: dict[str, Any]
) -> None:
    override_env = _override(keys, signed)
    statement = evalgate_verify(override_env, keys["pub"])
    predicate = statement["predicate"]
    assert statement["predicateType"] == EVALGATE_OVERRIDE_TYPE
    assert predicate["decision"]["payload_sha256"] == evalgate_payload_sha256(signed)
    assert predicate["decision"]["verdict"] == "fail"
    assert predicate["approver"] == "alice@example.com"
    assert predicate["expires_at"] == "2030-01-08T12:00:00Z"
    assert predicate["issued_at"] == "2030-01-01T12:00:00Z"
    assert statement["subject"] == evalgate_verify(signed, keys["pub"])["subject"]
    later = NOW + timedelta(days=3)
    assert evalgate_verify_override(override_env, signed, keys["pub"], later) == statement


def test_override_of_another_decision_fails(keys: dict[str, str], signed: dict[str, Any]) -> None:
    override_env = _override(keys, signed)
    other = evalgate_sign(evalgate_statement(_decision("fail", run="second")), keys["priv"])
    with pytest.raises(EvalgateSignatureError, match="another decision"):
        evalgate_verify_override(override_env, other, keys["pub"], NOW)


def test_override_expiry_is_checked_at_verification(
    keys: dict[str, str], signed: dict[str, Any]
) -> None:
    override_env = _override(keys, signed)
    expiry = datetime(2030, 1, 8, 12, 0, 0, tzinfo=UTC)
    evalgate_verify_override(override_env, signed, keys["pub"], expiry - timedelta(seconds=1))
    with pytest.raises(EvalgateSignatureError, match="expired at 2030-01-08T12:00:00Z"):
        evalgate_verify_override(override_env, signed, keys["pub"], expiry)
    with pytest.raises(EvalgateSignatureError, match="issued in the future"):
        evalgate_verify_override(override_env, signed, keys["pub"], NOW - timedelta(hours=1))


@pytest.mark.parametrize(
    ("expires", "match"),
    [
        ("2029-12-31T00:00:00Z", "in the past"),
        ("2030-01-01T12:00:00Z", "in the past"),
        ("2030-04-02T12:00:01Z", "more than 90 days"),
        ("2030-01-08T12:00:00", "timezone"),
        ("next tuesday", "not an ISO 8601"),
    ],
)
def test_override_expiry_window_is_enforced_at_signing(
    keys: dict[str, str], signed: dict[str, Any], expires: str, match: str
) -> None:
    with pytest.raises(EvalgateConfigError, match=match):
        _override(keys, signed, expires_at=expires)


def test_override_window_edges_and_custom_maximum(
    keys: dict[str, str], signed: dict[str, Any]
) -> None:
    assert _override(keys, signed, expires_at="2030-04-01T12:00:00Z")
    with pytest.raises(EvalgateConfigError, match="more than 7 days"):
        _override(keys, signed, expires_at="2030-01-09T12:00:00Z", max_days=7)


@pytest.mark.parametrize("field", ["approver", "reason"])
def test_override_needs_approver_and_reason(
    keys: dict[str, str], signed: dict[str, Any], field: str
) -> None:
    with pytest.raises(EvalgateConfigError, match=field):
        _override(keys, signed, **{field: "   "})


def test_a_passing_decision_has_nothing_to_override(keys: dict[str, str]) -> None:
    passed = evalgate_sign(evalgate_statement(_decision("pass")), keys["priv"])
    with pytest.raises(EvalgateSignatureError, match="nothing to override"):
        _override(keys, passed)


def test_override_by_a_separate_approver_key(keys: dict[str, str], signed: dict[str, Any]) -> None:
    override_env = _override(keys, signed, key=keys["other_priv"])
    checked = evalgate_verify_override(
        override_env, signed, keys["other_pub"], NOW, decision_key_pem_path=keys["pub"]
    )
    assert checked["predicate"]["approver"] == "alice@example.com"
    with pytest.raises(EvalgateSignatureError, match="unknown key id"):
        evalgate_verify_override(override_env, signed, keys["pub"], NOW)


def test_a_decision_is_not_an_override(keys: dict[str, str], signed: dict[str, Any]) -> None:
    with pytest.raises(EvalgateSignatureError, match="predicateType"):
        evalgate_verify_override(signed, signed, keys["pub"], NOW)


def test_a_tampered_override_fails(keys: dict[str, str], signed: dict[str, Any]) -> None:
    override_env = _override(keys, signed)
    statement = json.loads(base64.b64decode(override_env["payload"]))
    statement["predicate"]["expires_at"] = "2031-01-01T00:00:00Z"
    tampered = dict(
        override_env, payload=base64.b64encode(evalgate_canonical_json(statement)).decode()
    )
    with pytest.raises(EvalgateSignatureError, match="signature mismatch"):
        evalgate_verify_override(tampered, signed, keys["pub"], NOW)


# --- CLI end to end --------------------------------------------------------------------------


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # one-shot commands, run through the console script's main here (tests/inprockit.py)
    return run_cli_inprocess(*args, cwd=cwd, env={EVALGATE_KEY_PASSWORD_ENV: None})


def test_cli_keygen_verify_override_end_to_end(tmp_path: Path) -> None:
    made = _cli("keygen", "--dir", "keys", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "keyid: " in made.stdout
    assert _cli("keygen", "--dir", "keys", cwd=tmp_path).returncode == 4

    decision = evalgate_statement(_decision("fail"))
    envelope = evalgate_sign(decision, str(tmp_path / "keys" / "evalgate.key"))
    evalgate_write_envelope(envelope, str(tmp_path / "decision.json"))

    ok = _cli("verify", "decision.json", "--key", "keys/evalgate.pub", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verdict: fail" in ok.stdout
    assert "subject: support-app-r17 sha256:" + "3f" * 32 in ok.stdout
    assert "checked: ECDSA P-256/SHA-256 signature over DSSE PAE" in ok.stdout

    gated = _cli(
        "verify", "decision.json", "--key", "keys/evalgate.pub", "--require-pass", cwd=tmp_path
    )
    assert gated.returncode == 1
    assert "--require-pass fails" in gated.stdout

    expires = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    override = _cli(
        "override", "decision.json", "--approver", "alice", "--reason", "judge flake",
        "--expires", expires, "--key", "keys/evalgate.key", "--output", "ovr.json", cwd=tmp_path,
    )  # fmt: skip
    assert override.returncode == 0, override.stderr
    shipped = _cli(
        "verify", "decision.json", "--key", "keys/evalgate.pub", "--override", "ovr.json",
        "--require-pass", cwd=tmp_path,
    )  # fmt: skip
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    assert "approved by alice" in shipped.stdout


def test_cli_reports_tampering_and_bad_options(tmp_path: Path, keys: dict[str, str]) -> None:
    envelope = evalgate_sign(evalgate_statement(_decision("fail")), keys["priv"])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["verdict"] = "pass"
    envelope["payload"] = base64.b64encode(evalgate_canonical_json(statement)).decode()
    evalgate_write_envelope(envelope, str(tmp_path / "decision.json"))

    bad = _cli("verify", "decision.json", "--key", keys["pub"], cwd=tmp_path)
    assert bad.returncode == 1
    assert "INVALID: signature mismatch" in bad.stdout
    missing = _cli("verify", "decision.json", "--key", "nope.pub", cwd=tmp_path)
    assert missing.returncode == 4
    assert "cannot read key file" in missing.stderr
    past = _cli(
        "override", "decision.json", "--approver", "a", "--reason", "r",
        "--expires", "2000-01-01T00:00:00Z", "--key", keys["priv"], cwd=tmp_path,
    )  # fmt: skip
    assert past.returncode == 4
    assert "in the past" in past.stderr
    assert not (tmp_path / "decision.override.json").exists()


def test_an_override_for_another_subject_fails(
    keys: dict[str, str], signed: dict[str, Any]
) -> None:
    """Hand-made override with the right payload link but another model's weights."""
    statement = json.loads(base64.b64decode(_override(keys, signed)["payload"]))
    other = [{"name": "support-app-r99", "digest": {"sha256": "00" * 32}}]
    statement["subject"] = statement["predicate"]["subject"] = other
    with pytest.raises(EvalgateSignatureError, match="not the decision's subject"):
        evalgate_verify_override(_sign_raw(statement, keys["priv"]), signed, keys["pub"], NOW)
