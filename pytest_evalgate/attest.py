"""Signed decision records and overrides (SPEC section 7).

A decision record (a builtins dict from the gate/report stage) becomes an in-toto Statement v1
whose subject is the candidate's weights digest; the statement's canonical JSON bytes are signed
in a DSSE envelope (PAE signing) with an ECDSA P-256 / SHA-256 key, cosign's default key type.

Contracts:

- Only ``pass`` and ``fail`` verdicts of a decision with ``attestable: true`` are signed.
  ``partial``, ``incomplete``, ``invalid``, unknown verdicts and ``attestable`` other than
  ``True`` are refused with :class:`EvalgateSignatureError`, so they can never be signed as
  passing; :func:`evalgate_refusal_reason` tells a caller beforehand.
- Verification failures raise :class:`EvalgateSignatureError` naming the reason. Unusable key
  files, bad override options and existing key files raise :class:`EvalgateConfigError`.
- Any change to a byte of the signed content (payload, payloadType, signature, key id) fails
  verification, and so does any signature claiming the trusted key id that does not verify
  (not only an envelope where none verifies). Base64 may be standard or URL-safe, padded or
  not (DSSE requires verifiers to accept either), but must be the one canonical text of its
  bytes in one alphabet.
- An override is a separate signed statement (predicateType :data:`EVALGATE_OVERRIDE_TYPE`) that
  names the decision by the sha256 of the decision envelope's decoded payload bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pytest_evalgate.canonical import evalgate_canonical_json
from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError

EVALGATE_STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
EVALGATE_PAYLOAD_TYPE = "application/vnd.in-toto+json"
EVALGATE_PREDICATE_TYPE = "https://pytest-evalgate.dev/decision/v1"
EVALGATE_OVERRIDE_TYPE = "https://pytest-evalgate.dev/override/v1"
EVALGATE_KEY_PASSWORD_ENV = "PYTEST_EVALGATE_SIGN_KEY_PASSWORD"
EVALGATE_ATTESTABLE_VERDICTS = frozenset({"pass", "fail"})
EVALGATE_OVERRIDE_MAX_DAYS = 90
EVALGATE_PRIVATE_KEY_NAME = "evalgate.key"
EVALGATE_PUBLIC_KEY_NAME = "evalgate.pub"

_HEX64 = re.compile(r"[0-9a-f]{64}")


# --- DSSE pre-authentication encoding and base64 -------------------------------------------


def evalgate_pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 PAE: ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` (byte lengths)."""
    type_bytes = payload_type.encode("utf-8")
    header = b"DSSEv1 %d %s %d " % (len(type_bytes), type_bytes, len(body))
    return header + body


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: object, what: str) -> bytes:
    """Decode standard or URL-safe base64, refusing any text that is not canonical."""
    if not isinstance(text, str) or not text.isascii():
        raise EvalgateSignatureError(f"bad base64 in {what}: not an ASCII string")
    urlsafe = "-" in text or "_" in text
    padded = text + "=" * (-len(text) % 4)
    try:
        data = (base64.urlsafe_b64decode if urlsafe else base64.b64decode)(padded)
    except (binascii.Error, ValueError) as exc:
        raise EvalgateSignatureError(f"bad base64 in {what}: {exc}") from None
    # Non-canonical text (stray characters, unused low bits, mixed alphabets) decodes to the same
    # bytes as a different text; refusing it keeps every byte of the envelope meaningful.
    if text not in _b64_forms(data, urlsafe):
        raise EvalgateSignatureError(f"bad base64 in {what}: not canonical base64")
    return data


def _b64_forms(data: bytes, urlsafe: bool) -> tuple[str, str]:
    encoded = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode("ascii")
    return encoded, encoded.rstrip("=")


# --- keys ------------------------------------------------------------------------------------


def evalgate_keyid(public_key: ec.EllipticCurvePublicKey) -> str:
    """Key id: hex sha256 of the public key's DER SubjectPublicKeyInfo."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def _read_key_file(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise EvalgateConfigError(path, "key", f"cannot read key file: {exc.strerror}") from None


def _require_p256(key: object, path: str) -> None:
    curve = getattr(key, "curve", None)
    if not isinstance(curve, ec.SECP256R1):
        raise EvalgateConfigError(path, "key", "not an ECDSA P-256 key (cosign's default type)")


def _key_password() -> bytes | None:
    password = os.environ.get(EVALGATE_KEY_PASSWORD_ENV)
    return None if password is None else password.encode("utf-8")


def evalgate_load_private_key(path: str) -> ec.EllipticCurvePrivateKey:
    """Load a PEM ECDSA P-256 private key; an encrypted PEM takes its password from the
    environment variable ``PYTEST_EVALGATE_SIGN_KEY_PASSWORD``."""
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # encrypted: cryptography asks for a password
        key = _load_encrypted(data, path)
    except ValueError as exc:
        raise EvalgateConfigError(path, "key", f"not a PEM private key: {exc}") from None
    _require_p256(key, path)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def _load_encrypted(data: bytes, path: str) -> Any:
    password = _key_password()
    if password is None:
        reason = f"the key is encrypted; set {EVALGATE_KEY_PASSWORD_ENV} to its password"
        raise EvalgateConfigError(path, "key", reason)
    try:
        return serialization.load_pem_private_key(data, password=password)
    except ValueError:
        reason = f"cannot decrypt the key with {EVALGATE_KEY_PASSWORD_ENV}"
        raise EvalgateConfigError(path, "key", reason) from None


def evalgate_load_public_key(path: str) -> ec.EllipticCurvePublicKey:
    """Load a PEM SubjectPublicKeyInfo ECDSA P-256 public key (the format of ``cosign.pub``)."""
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise EvalgateConfigError(path, "key", f"not a PEM public key: {exc}") from None
    _require_p256(key, path)
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return key


def evalgate_generate_key(directory: str) -> tuple[str, str]:
    """Write a new P-256 key pair as ``evalgate.key`` (PKCS#8 PEM, mode 0600) and
    ``evalgate.pub`` (SPKI PEM) in ``directory``; return their paths. The private key is
    encrypted when ``PYTEST_EVALGATE_SIGN_KEY_PASSWORD`` is set. Existing files are never
    overwritten (:class:`EvalgateConfigError`)."""
    os.makedirs(directory, exist_ok=True)
    private_path = os.path.join(directory, EVALGATE_PRIVATE_KEY_NAME)
    public_path = os.path.join(directory, EVALGATE_PUBLIC_KEY_NAME)
    for path in (private_path, public_path):
        if os.path.exists(path):
            raise EvalgateConfigError(path, "--dir", "refusing to overwrite an existing key file")
    key = ec.generate_private_key(ec.SECP256R1())
    _write_new(private_path, _private_pem(key), 0o600)
    _write_new(public_path, _public_pem(key.public_key()), 0o644)
    return private_path, public_path


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    password = _key_password()
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password)
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def _public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _write_new(path: str, data: bytes, mode: int) -> None:
    # O_EXCL and the mode at creation: the private key is never readable by others, not even
    # for the instant between writing and a later chmod.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


# --- statements ------------------------------------------------------------------------------


def evalgate_refusal_reason(decision: Mapping[str, Any]) -> str | None:
    """Why ``decision`` must not be signed, or None when it may be (pass/fail, attestable)."""
    verdict = decision.get("verdict")
    if verdict not in EVALGATE_ATTESTABLE_VERDICTS:
        return (
            f"verdict {verdict!r} is never signed: only 'pass' and 'fail' decisions are "
            "attestable (partial, incomplete and invalid runs are not)"
        )
    if decision.get("attestable") is not True:
        return f"the decision says attestable: {decision.get('attestable')!r}; it is not signed"
    return None


def _weights_hex(decision: Mapping[str, Any]) -> str:
    pins = _candidate(decision).get("pins")
    digest = pins.get("weights_digest") if isinstance(pins, Mapping) else None
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise EvalgateSignatureError(
            "the decision has no candidate.pins.weights_digest of the form 'sha256:<hex>'"
        )
    hex_part = digest.removeprefix("sha256:")
    if not _HEX64.fullmatch(hex_part):
        raise EvalgateSignatureError(f"weights digest {digest!r} is not 64 lowercase hex digits")
    return hex_part


def _candidate(decision: Mapping[str, Any]) -> Mapping[str, Any]:
    candidate = decision.get("candidate")
    if not isinstance(candidate, Mapping):
        raise EvalgateSignatureError("the decision has no 'candidate' object")
    return candidate


def _subject_name(decision: Mapping[str, Any]) -> str:
    candidate = _candidate(decision)
    for field in ("model", "key", "name"):
        value = candidate.get(field)
        if isinstance(value, str) and value:
            return value
    raise EvalgateSignatureError("the decision's candidate has no model, key or name")


def _plain_copy(value: Any, what: str) -> Any:
    """A builtins deep copy through canonical JSON: what is signed is exactly what verifies."""
    try:
        return json.loads(evalgate_canonical_json(value))
    except (TypeError, ValueError) as exc:
        raise EvalgateSignatureError(f"{what} is not canonical JSON: {exc}") from None


def evalgate_statement(
    decision: Mapping[str, Any], predicate_type: str = EVALGATE_PREDICATE_TYPE
) -> dict[str, Any]:
    """The in-toto Statement v1 for ``decision``: subject = the candidate (model, else key,
    else name) with the sha256 of its weights digest; predicate = a copy of the decision.
    Raises :class:`EvalgateSignatureError` for a decision that must not be signed."""
    reason = evalgate_refusal_reason(decision)
    if reason is not None:
        raise EvalgateSignatureError(f"refusing to attest: {reason}")
    subject = {"name": _subject_name(decision), "digest": {"sha256": _weights_hex(decision)}}
    return {
        "_type": EVALGATE_STATEMENT_TYPE,
        "subject": [subject],
        "predicateType": predicate_type,
        "predicate": _plain_copy(decision, "the decision"),
    }


def _check_statement(statement: Any) -> dict[str, Any]:
    """Shape checks shared by signing and verifying; returns the statement."""
    if not isinstance(statement, dict) or statement.get("_type") != EVALGATE_STATEMENT_TYPE:
        raise EvalgateSignatureError(f"the payload is not an in-toto {EVALGATE_STATEMENT_TYPE}")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise EvalgateSignatureError("the statement has no subject")
    if not isinstance(statement.get("predicate"), dict):
        raise EvalgateSignatureError("the statement has no predicate object")
    if statement.get("predicateType") == EVALGATE_PREDICATE_TYPE:
        _check_decision_statement(statement)
    return statement


def _check_decision_statement(statement: dict[str, Any]) -> None:
    decision = statement["predicate"]
    reason = evalgate_refusal_reason(decision)
    if reason is not None:
        raise EvalgateSignatureError(f"the signed decision is not attestable: {reason}")
    expected = {"name": _subject_name(decision), "digest": {"sha256": _weights_hex(decision)}}
    if statement["subject"] != [expected]:
        raise EvalgateSignatureError("the subject does not match the decision's candidate weights")


# --- sign and verify -------------------------------------------------------------------------


def evalgate_sign(statement: Mapping[str, Any], private_key_pem_path: str) -> dict[str, Any]:
    """A DSSE envelope over the canonical JSON of ``statement``, signed with ECDSA P-256 /
    SHA-256 (DER signature, standard base64). Decision statements are re-checked first."""
    plain = _check_statement(_plain_copy(statement, "the statement"))
    key = evalgate_load_private_key(private_key_pem_path)
    body = evalgate_canonical_json(plain)
    signature = key.sign(evalgate_pae(EVALGATE_PAYLOAD_TYPE, body), ec.ECDSA(hashes.SHA256()))
    return {
        "payloadType": EVALGATE_PAYLOAD_TYPE,
        "payload": _b64encode(body),
        "signatures": [{"keyid": evalgate_keyid(key.public_key()), "sig": _b64encode(signature)}],
    }


def _envelope_parts(envelope: Any) -> tuple[bytes, list[dict[str, Any]]]:
    """The decoded payload and signature list of a DSSE envelope with our payloadType."""
    if not isinstance(envelope, dict):
        raise EvalgateSignatureError("the envelope is not a JSON object")
    payload_type = envelope.get("payloadType")
    if payload_type != EVALGATE_PAYLOAD_TYPE:
        raise EvalgateSignatureError(
            f"wrong payloadType {payload_type!r}: expected {EVALGATE_PAYLOAD_TYPE!r}"
        )
    body = _b64decode(envelope.get("payload"), "payload")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise EvalgateSignatureError("the envelope has no signatures")
    if not all(isinstance(entry, dict) for entry in signatures):
        raise EvalgateSignatureError("a signature entry is not a JSON object")
    return body, signatures


def _verify_body(envelope: Any, public_key: ec.EllipticCurvePublicKey) -> bytes:
    """The payload bytes when every signature claiming ``public_key``'s key id verifies.

    One failing signature under the trusted key id fails the envelope, even beside one that
    verifies: an envelope that carries a bad signature in the trusted signer's name is not
    what that signer wrote (a spliced or damaged file), so it is never accepted."""
    body, signatures = _envelope_parts(envelope)
    keyid = evalgate_keyid(public_key)
    # DSSE key ids are hints; we still require ours so a wrong key reads as "unknown key id",
    # and check every signature that carries it.
    mine = [entry for entry in signatures if entry.get("keyid") == keyid]
    if not mine:
        found = sorted(str(entry.get("keyid")) for entry in signatures)
        raise EvalgateSignatureError(f"unknown key id: the envelope has {found}, key is {keyid}")
    message = evalgate_pae(EVALGATE_PAYLOAD_TYPE, body)
    for number, entry in enumerate(mine, start=1):
        signature = _b64decode(entry.get("sig"), "signature")
        try:
            public_key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise EvalgateSignatureError(
                f"signature mismatch: signature {number} of {len(mine)} claiming the trusted "
                f"key id {keyid} does not verify the payload"
            ) from None
    return body


def _parse_statement(body: bytes) -> dict[str, Any]:
    try:
        statement = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise EvalgateSignatureError(f"the payload is not JSON: {exc}") from None
    return _check_statement(statement)


def evalgate_verify(envelope: Mapping[str, Any], public_key_pem_path: str) -> dict[str, Any]:
    """Verify a DSSE envelope against a PEM public key and return its in-toto statement.

    Raises :class:`EvalgateSignatureError` naming the reason (bad base64, wrong payloadType,
    unknown key id, signature mismatch, not a statement, unattestable decision)."""
    return evalgate_verify_with_key(envelope, evalgate_load_public_key(public_key_pem_path))


def evalgate_verify_with_key(
    envelope: Mapping[str, Any], public_key: ec.EllipticCurvePublicKey
) -> dict[str, Any]:
    """:func:`evalgate_verify` with a loaded key (callers that verify many envelopes load the
    key once); same checks, same errors."""
    return _parse_statement(_verify_body(envelope, public_key))


def evalgate_payload_sha256(envelope: Mapping[str, Any]) -> str:
    """Hex sha256 of an envelope's decoded payload bytes: the id an override links to."""
    body, _ = _envelope_parts(envelope)
    return hashlib.sha256(body).hexdigest()


def evalgate_load_envelope(path: str) -> dict[str, Any]:
    """Read a DSSE envelope JSON file; unreadable, non-JSON or duplicate-key files raise
    :class:`EvalgateSignatureError`."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        envelope = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except OSError as exc:
        raise EvalgateSignatureError(f"{path}: cannot read: {exc.strerror}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise EvalgateSignatureError(f"{path}: not a JSON envelope: {exc}") from None
    if not isinstance(envelope, dict):
        raise EvalgateSignatureError(f"{path}: the envelope is not a JSON object")
    return envelope


def evalgate_check_beside(statement: Mapping[str, Any], envelope_path: str) -> str | None:
    """The ``decision.json`` lying beside an envelope (a report folder) must be the signed
    decision; returns its path when there is one (and it is), None when there is none.

    Raises :class:`EvalgateSignatureError` when it differs: the folder mixes two runs' files
    (a signature of one decision beside another decision), so neither tells the story."""
    beside = os.path.join(os.path.dirname(envelope_path), "decision.json")
    if not os.path.exists(beside) or os.path.samefile(beside, envelope_path):
        return None
    try:
        with open(beside, encoding="utf-8") as handle:
            decision = json.load(handle)
    except (OSError, ValueError) as exc:
        raise EvalgateSignatureError(f"{beside}: cannot read the decision beside: {exc}") from None
    if decision != statement.get("predicate"):
        reason = "is not the signed decision: the folder mixes the files of two runs"
        raise EvalgateSignatureError(f"{beside}: {reason}")
    return beside


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return result


def evalgate_write_envelope(envelope: Mapping[str, Any], path: str) -> None:
    """Write an envelope as canonical JSON plus a newline (every byte of the file matters)."""
    with open(path, "wb") as handle:
        handle.write(evalgate_canonical_json(envelope) + b"\n")


# --- overrides -------------------------------------------------------------------------------


def _utc_now(now: datetime | None) -> datetime:
    return datetime.now(UTC) if now is None else _aware(now, "now")


def _aware(moment: datetime, what: str) -> datetime:
    if moment.tzinfo is None:
        raise EvalgateConfigError("override", what, "a time needs a timezone (e.g. 'Z')")
    return moment.astimezone(UTC)


def evalgate_parse_time(text: str, what: str = "expires_at") -> datetime:
    """Parse an ISO 8601 time with a timezone into an aware UTC datetime."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise EvalgateConfigError("override", what, f"{text!r} is not an ISO 8601 time") from None
    return _aware(moment, what)


def evalgate_format_time(moment: datetime) -> str:
    """An aware datetime as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC, whole seconds, truncated)."""
    return _aware(moment, "time").strftime("%Y-%m-%dT%H:%M:%SZ")


def _unverified_statement(envelope: Mapping[str, Any]) -> dict[str, Any]:
    body, _ = _envelope_parts(envelope)
    return _parse_statement(body)


def _check_expiry(expires: datetime, now: datetime, max_days: int) -> None:
    if expires <= now:
        raise EvalgateConfigError("override", "expires_at", "the expiry is in the past")
    if expires > now + timedelta(days=max_days):
        reason = f"the expiry is more than {max_days} days ahead"
        raise EvalgateConfigError("override", "expires_at", reason)


def _override_predicate(
    decision_envelope: Mapping[str, Any], approver: str, reason: str, issued: datetime
) -> dict[str, Any]:
    decision = _unverified_statement(decision_envelope)
    if decision.get("predicateType") != EVALGATE_PREDICATE_TYPE:
        raise EvalgateSignatureError("the envelope to override is not an evalgate decision")
    if decision["predicate"].get("verdict") == "pass":
        raise EvalgateSignatureError("the decision passed; there is nothing to override")
    return {
        "decision": {
            "payload_sha256": evalgate_payload_sha256(decision_envelope),
            "predicateType": EVALGATE_PREDICATE_TYPE,
            "verdict": decision["predicate"].get("verdict"),
        },
        "subject": decision["subject"],
        "approver": approver,
        "reason": reason,
        "issued_at": evalgate_format_time(issued),
    }


def _required_text(value: str, what: str) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        raise EvalgateConfigError("override", what, "must be a non-empty text")
    return text


def evalgate_override(
    decision_envelope: Mapping[str, Any],
    approver: str,
    reason: str,
    expires_at: str | datetime,
    key: str,
    *,
    now: datetime | None = None,
    max_days: int = EVALGATE_OVERRIDE_MAX_DAYS,
) -> dict[str, Any]:
    """Sign an override ("ship despite the gate") of a non-passing decision envelope.

    The override statement has the decision's subject, predicateType
    :data:`EVALGATE_OVERRIDE_TYPE`, and a predicate with the decision's payload sha256, its
    verdict, approver, reason, ``issued_at`` and ``expires_at`` (UTC). The expiry must lie in
    (now, now + ``max_days``]. The decision's own signature is not checked here (the approver
    may hold another key); :func:`evalgate_verify_override` checks both."""
    issued = _utc_now(now)
    if isinstance(expires_at, str):
        expires = evalgate_parse_time(expires_at)
    else:
        expires = _aware(expires_at, "expires_at")
    _check_expiry(expires, issued, max_days)
    predicate = _override_predicate(
        decision_envelope,
        _required_text(approver, "approver"),
        _required_text(reason, "reason"),
        issued,
    )
    predicate["expires_at"] = evalgate_format_time(expires)
    statement = {
        "_type": EVALGATE_STATEMENT_TYPE,
        "subject": predicate["subject"],
        "predicateType": EVALGATE_OVERRIDE_TYPE,
        "predicate": predicate,
    }
    return evalgate_sign(statement, key)


def evalgate_verify_override(
    override_envelope: Mapping[str, Any],
    decision_envelope: Mapping[str, Any],
    public_key_pem_path: str,
    now: datetime | None = None,
    *,
    decision_key_pem_path: str | None = None,
) -> dict[str, Any]:
    """Verify an override and return its statement: both signatures (the decision's under
    ``decision_key_pem_path``, default the same key), the override's predicateType, its link
    to the decision's payload sha256, and ``issued_at <= now < expires_at``."""
    verify_key = decision_key_pem_path or public_key_pem_path
    decision = evalgate_verify(decision_envelope, verify_key)
    override = evalgate_verify(override_envelope, public_key_pem_path)
    evalgate_check_override(override, decision, evalgate_payload_sha256(decision_envelope), now)
    return override


def evalgate_check_override(
    override: Mapping[str, Any],
    decision: Mapping[str, Any],
    decision_payload_sha256: str,
    now: datetime | None = None,
    *,
    window: bool = True,
) -> None:
    """The checks of :func:`evalgate_verify_override` after both signatures verified: the
    override's predicateType, its link to the decision (payload sha256 and subject) and, with
    ``window``, ``issued_at <= now < expires_at``. Raises :class:`EvalgateSignatureError`."""
    if override.get("predicateType") != EVALGATE_OVERRIDE_TYPE:
        raise EvalgateSignatureError(
            f"the override's predicateType is not {EVALGATE_OVERRIDE_TYPE}"
        )
    _check_link(override["predicate"], decision, decision_payload_sha256)
    if window:
        _check_window(override["predicate"], _utc_now(now))


def _check_link(predicate: dict[str, Any], decision: Mapping[str, Any], payload_hex: str) -> None:
    linked = predicate.get("decision")
    if not isinstance(linked, dict) or linked.get("payload_sha256") != payload_hex:
        raise EvalgateSignatureError("the override names another decision (payload sha256)")
    if predicate.get("subject") != decision["subject"]:
        raise EvalgateSignatureError("the override's subject is not the decision's subject")


def _check_window(predicate: dict[str, Any], now: datetime) -> None:
    try:
        issued = evalgate_parse_time(str(predicate.get("issued_at")), "issued_at")
        expires = evalgate_parse_time(str(predicate.get("expires_at")), "expires_at")
    except EvalgateConfigError as exc:
        raise EvalgateSignatureError(f"the override's times are malformed: {exc}") from None
    if now < issued:
        raise EvalgateSignatureError(f"the override is issued in the future ({issued})")
    if now >= expires:
        raise EvalgateSignatureError(f"the override expired at {evalgate_format_time(expires)}")
