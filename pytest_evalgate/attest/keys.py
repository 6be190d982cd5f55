"""Signing keys (SPEC section 7): ECDSA P-256 PEM keys, their key ids, and ``evalgate keygen``.

Contracts:

- Only ECDSA P-256 keys (cosign's default key type) are accepted: a PEM private key and a PEM
  SubjectPublicKeyInfo public key (the format of ``cosign.pub``). An encrypted private key takes
  its password from the environment variable ``PYTEST_EVALGATE_SIGN_KEY_PASSWORD``.
- Unusable key files and existing key files raise :class:`EvalgateConfigError`; a new private
  key is created with mode 0600 and never overwrites a file.
- A key id is the hex sha256 of the public key's DER SubjectPublicKeyInfo.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_KEY_PASSWORD_ENV = "PYTEST_EVALGATE_SIGN_KEY_PASSWORD"
EVALGATE_PRIVATE_KEY_NAME = "evalgate.key"
EVALGATE_PUBLIC_KEY_NAME = "evalgate.pub"


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
