"""Sign and verify a weights folder with OpenSSF model signing (sigstore model-transparency's
format, the ``model-signing`` package) and an ECDSA P-256 key, offline: no Rekor, no Fulcio.

Contracts:

- :func:`evalgate_sign_weights` writes a signature bundle over every file of the folder (the
  signature file itself is left out when it lies inside), never over an existing file.
- :func:`evalgate_verify_weights` accepts the weights when the bundle verifies under one of the
  given keys and every file's sha256 matches it; it returns who signed, the key id (sha256 of
  the key's DER SubjectPublicKeyInfo, as ``attest.keys``) and the sha256 of the signature file.
  Otherwise :class:`EvalgateSignatureError` says why: the first file (in path order) that
  differs, is missing or is extra, or that no given key signed the bundle (naming the keys
  tried). A missing folder, signature or key file is :class:`EvalgateConfigError`.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.attest.keys import evalgate_keyid, evalgate_load_public_key
from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError
from pytest_evalgate.formats.canonical import evalgate_file_sha256

EVALGATE_WEIGHTS_RECORD_FIELDS = ("weights_digest", "signature_sha256", "identity", "keyid")
_MISMATCH = "Signature mismatch: "
_CHANGED = re.compile(r"Hash mismatch for '(?P<name>[^']+)'")
_LISTED = re.compile(r"(?P<kind>Extra|Missing) files (?:found )?in model '[^']*': (?P<names>.+)")


@dataclass(frozen=True)
class EvalgateWeightsVerified:
    """A verified weights folder: the signer's identity and key id, the signature's sha256."""

    identity: str
    keyid: str
    signature_sha256: str

    def evalgate_record(self, weights_digest: str) -> dict[str, str]:
        """The record the decision reads (``decision.weights``): this verification of the
        weights served by digest ``weights_digest``."""
        return {
            "weights_digest": weights_digest,
            "signature_sha256": self.signature_sha256,
            "identity": self.identity,
            "keyid": self.keyid,
        }


def _ignored(model_dir: str, signature_path: str) -> list[str]:
    signature = os.path.abspath(signature_path)
    root = os.path.abspath(model_dir)
    inside = os.path.commonpath([root, signature]) == root
    return [os.path.relpath(signature, root)] if inside else []


def _require(path: str, what: str, folder: bool = False) -> None:
    exists = os.path.isdir(path) if folder else os.path.isfile(path)
    if not exists:
        raise EvalgateConfigError(path, what, "no such folder" if folder else "no such file")


def evalgate_sign_weights(model_dir: str, private_key_pem: str, signature_path: str) -> None:
    """Sign every file under ``model_dir`` with the P-256 key into ``signature_path``."""
    from model_signing import hashing, signing

    _require(model_dir, "weights", folder=True)
    _require(private_key_pem, "--sign-key")
    if os.path.exists(signature_path):
        raise EvalgateConfigError(signature_path, "--output", "refusing to overwrite a signature")
    # model-signing's configs are untyped calls
    hashes = hashing.Config().set_ignored_paths(  # type: ignore[no-untyped-call]
        paths=_ignored(model_dir, signature_path)
    )
    config = signing.Config().set_hashing_config(hashes)  # type: ignore[no-untyped-call]
    config.use_elliptic_key_signer(private_key=private_key_pem).sign(model_dir, signature_path)


def evalgate_verify_weights(
    model_dir: str, signature_path: str, keys: Sequence[tuple[str, str]]
) -> EvalgateWeightsVerified:
    """Verify ``model_dir`` against ``signature_path`` under one of ``keys`` (identity, PEM
    public key path); see the module docstring."""
    _require(model_dir, "weights", folder=True)
    _require(signature_path, "--signature")
    tried: list[str] = []
    for identity, key_path in keys:
        keyid = evalgate_keyid(evalgate_load_public_key(key_path))
        if _verify_one(model_dir, signature_path, key_path):
            return EvalgateWeightsVerified(identity, keyid, evalgate_file_sha256(signature_path))
        tried.append(f"{keyid[:16]} ({identity})")
    raise EvalgateSignatureError(
        f"{signature_path}: not signed by a release key (tried {', '.join(tried) or 'none'})"
    )


def _verify_one(model_dir: str, signature_path: str, key_path: str) -> bool:
    """True when the bundle verifies under ``key_path`` and the files match; False when another
    key signed it; :class:`EvalgateSignatureError` when the files differ."""
    from model_signing import hashing, verifying

    hashes = hashing.Config().set_ignored_paths(  # type: ignore[no-untyped-call]
        paths=_ignored(model_dir, signature_path)
    )
    config = verifying.Config().set_hashing_config(hashes)  # type: ignore[no-untyped-call]
    try:
        config.use_elliptic_key_verifier(public_key=key_path).verify(model_dir, signature_path)
    except ValueError as exc:
        text = str(exc)
        if text.startswith(_MISMATCH):
            raise EvalgateSignatureError(_first_difference(text, model_dir)) from None
        if text.startswith("Key mismatch"):
            return False
        raise EvalgateSignatureError(f"{signature_path}: {text}") from None
    except Exception as exc:  # a malformed or forged bundle: the file's fault
        reason = f"not a model-signing signature ({type(exc).__name__}: {exc})"
        raise EvalgateSignatureError(f"{signature_path}: {reason}") from None
    return True


def _first_difference(text: str, model_dir: str) -> str:
    """The first file (in path order) that differs from the signature, and how."""
    found: list[tuple[str, str]] = []
    try:
        diffs: Any = ast.literal_eval(text.removeprefix(_MISMATCH))
    except (SyntaxError, ValueError):
        diffs = [text]
    for diff in diffs if isinstance(diffs, list) else [diffs]:
        changed = _CHANGED.match(str(diff))
        listed = _LISTED.match(str(diff))
        if changed:
            found.append((changed["name"], "its content differs from the signature"))
        elif listed:
            how = "is not in the signature" if listed["kind"] == "Extra" else "is missing"
            found.extend((name, how) for name in listed["names"].split(", "))
    if not found:
        return f"{model_dir}: the weights differ from the signature ({text[:200]})"
    name, how = min(found)
    return f"{model_dir}: first file that differs: {name} ({how}; {len(found)} in all)"


def evalgate_write_verified_record(record: dict[str, str], path: str) -> None:
    """Write the verification record (JSON) that ``PYTEST_EVALGATE_WEIGHTS_VERIFIED`` names."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, sort_keys=True)
        handle.write("\n")
