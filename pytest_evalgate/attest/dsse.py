"""Signed decision records (SPEC section 7): statements, DSSE envelopes, sign and verify.

A decision record (a builtins dict from the gate/report stage) becomes an in-toto Statement v1
whose subject is the candidate's weights digest; the statement's canonical JSON bytes are signed
in a DSSE envelope (PAE signing) with an ECDSA P-256 / SHA-256 key, cosign's default key type.
Keys live in :mod:`pytest_evalgate.attest.keys`, overrides in
:mod:`pytest_evalgate.attest.override`.

Contracts:

- Only ``pass`` and ``fail`` verdicts of a decision with ``attestable: true`` are signed.
  ``partial``, ``incomplete``, ``invalid``, unknown verdicts and ``attestable`` other than
  ``True`` are refused with :class:`EvalgateSignatureError`, so they can never be signed as
  passing; :func:`evalgate_refusal_reason` tells a caller beforehand.
- Verification failures raise :class:`EvalgateSignatureError` naming the reason.
- Any change to a byte of the signed content (payload, payloadType, signature, key id) fails
  verification, and so does any signature claiming the trusted key id that does not verify
  (not only an envelope where none verifies). Base64 may be standard or URL-safe, padded or
  not (DSSE requires verifiers to accept either), but must be the one canonical text of its
  bytes in one alphabet.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from pytest_evalgate.attest.keys import (
    evalgate_keyid,
    evalgate_load_private_key,
    evalgate_load_public_key,
)
from pytest_evalgate.errors import EvalgateSignatureError
from pytest_evalgate.formats.canonical import evalgate_canonical_json

EVALGATE_STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
EVALGATE_PAYLOAD_TYPE = "application/vnd.in-toto+json"
EVALGATE_PREDICATE_TYPE = "https://pytest-evalgate.dev/decision/v1"
# A policy approval (attest.approval); here so that trust and approval need not import each other.
EVALGATE_APPROVAL_TYPE = "https://pytest-evalgate.dev/policy-approval/v1"
EVALGATE_ATTESTABLE_VERDICTS = frozenset({"pass", "fail"})

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


# --- statements ------------------------------------------------------------------------------


def evalgate_refusal_reason(decision: Mapping[str, object]) -> str | None:
    """Why ``decision`` must not be signed, or None when it may be (pass/fail, attestable)."""
    verdict = decision.get("verdict")
    if verdict not in EVALGATE_ATTESTABLE_VERDICTS:
        return (
            f"verdict {verdict!r} is never signed: only 'pass' and 'fail' decisions are "
            "attestable (partial, incomplete and invalid runs are not)"
        )
    if decision.get("attestable") is not True:
        approval = decision.get("policy_approval")
        if isinstance(approval, Mapping) and approval.get("approved") is False:
            return f"not attestable: {approval.get('reason')}"
        return f"the decision says attestable: {decision.get('attestable')!r}; it is not signed"
    return None


def _weights_hex(decision: Mapping[str, object]) -> str:
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


def _candidate(decision: Mapping[str, object]) -> Mapping[str, Any]:
    candidate = decision.get("candidate")
    if not isinstance(candidate, Mapping):
        raise EvalgateSignatureError("the decision has no 'candidate' object")
    return candidate


def _subject_name(decision: Mapping[str, object]) -> str:
    candidate = _candidate(decision)
    for field in ("model", "key", "name"):
        value = candidate.get(field)
        if isinstance(value, str) and value:
            return value
    raise EvalgateSignatureError("the decision's candidate has no model, key or name")


def _plain_copy(value: object, what: str) -> Any:
    """A builtins deep copy through canonical JSON: what is signed is exactly what verifies."""
    try:
        return json.loads(evalgate_canonical_json(value))
    except (TypeError, ValueError) as exc:
        raise EvalgateSignatureError(f"{what} is not canonical JSON: {exc}") from None


def evalgate_statement(
    decision: Mapping[str, object], predicate_type: str = EVALGATE_PREDICATE_TYPE
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


def _check_statement(statement: object) -> dict[str, Any]:
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


def evalgate_sign(statement: Mapping[str, object], private_key_pem_path: str) -> dict[str, Any]:
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


def evalgate_envelope_parts(envelope: object) -> tuple[bytes, list[dict[str, Any]]]:
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


def _verify_body(envelope: object, public_key: ec.EllipticCurvePublicKey) -> bytes:
    """The payload bytes when every signature claiming ``public_key``'s key id verifies.

    One failing signature under the trusted key id fails the envelope, even beside one that
    verifies: an envelope that carries a bad signature in the trusted signer's name is not
    what that signer wrote (a spliced or damaged file), so it is never accepted."""
    body, signatures = evalgate_envelope_parts(envelope)
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


def evalgate_parse_statement(body: bytes) -> dict[str, Any]:
    """The shape-checked statement in decoded payload bytes (no signature is checked here)."""
    try:
        statement = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise EvalgateSignatureError(f"the payload is not JSON: {exc}") from None
    return _check_statement(statement)


def evalgate_verify(envelope: Mapping[str, object], public_key_pem_path: str) -> dict[str, Any]:
    """Verify a DSSE envelope against a PEM public key and return its in-toto statement.

    Raises :class:`EvalgateSignatureError` naming the reason (bad base64, wrong payloadType,
    unknown key id, signature mismatch, not a statement, unattestable decision)."""
    return evalgate_verify_with_key(envelope, evalgate_load_public_key(public_key_pem_path))


def evalgate_verify_with_key(
    envelope: Mapping[str, object], public_key: ec.EllipticCurvePublicKey
) -> dict[str, Any]:
    """:func:`evalgate_verify` with a loaded key (callers that verify many envelopes load the
    key once); same checks, same errors."""
    return evalgate_parse_statement(_verify_body(envelope, public_key))


def evalgate_payload_sha256(envelope: Mapping[str, object]) -> str:
    """Hex sha256 of an envelope's decoded payload bytes: the id an override links to."""
    body, _ = evalgate_envelope_parts(envelope)
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


def evalgate_check_beside(statement: Mapping[str, object], envelope_path: str) -> str | None:
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


def evalgate_write_envelope(envelope: Mapping[str, object], path: str) -> None:
    """Write an envelope as canonical JSON plus a newline (every byte of the file matters)."""
    with open(path, "wb") as handle:
        handle.write(evalgate_canonical_json(envelope) + b"\n")
