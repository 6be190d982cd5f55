"""The decision's ``weights`` (SPEC section 20): which weights answered, and how that is known.

``binding`` is ``verified`` when this process ran where the weights are served and their
model-signing signature was verified there before the server started: the serving sidecar's
init container (``evalgate weights verify ... --record PATH``) leaves a record, and the
environment variable :data:`EVALGATE_WEIGHTS_VERIFIED_ENV` names it. The record must be for the
candidate's ``pins.weights_digest`` and, with a trust file, signed by a ``release`` key. Any
other case is ``declared``: the manifest's word for a remote endpoint, with ``why``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pytest_evalgate.attest.trust import EvalgateTrust
from pytest_evalgate.manifest.pins import EVALGATE_WEIGHTS_VERIFIED_ENV

__all__ = ["EVALGATE_WEIGHTS_VERIFIED_ENV", "evalgate_weights_record"]
_SIGNATURE_KEYS = ("signature_sha256", "identity", "keyid")


def evalgate_weights_record(
    digest: object, trust: EvalgateTrust | None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The decision's ``weights`` block for the candidate's weights ``digest``."""
    environ = os.environ if env is None else env
    path = environ.get(EVALGATE_WEIGHTS_VERIFIED_ENV)
    if not path:
        why = "a remote endpoint: the weights digest is the manifest's pins.weights_digest"
        return {"digest": digest, "binding": "declared", "why": why}
    verified, why = _read_verified(path, digest, trust)
    if verified is None:
        return {"digest": digest, "binding": "declared", "why": why}
    return {"digest": digest, "binding": "verified", "signature": verified}


def _read_verified(
    path: str, digest: object, trust: EvalgateTrust | None
) -> tuple[dict[str, Any] | None, str]:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError) as exc:
        return None, f"{EVALGATE_WEIGHTS_VERIFIED_ENV}={path}: unreadable record: {exc}"
    if not isinstance(record, dict) or not all(
        isinstance(record.get(k), str) for k in _SIGNATURE_KEYS
    ):
        return None, f"{path}: not a weights verification record"
    if record.get("weights_digest") != digest:
        named = record.get("weights_digest")
        return None, f"{path}: verified weights {named}, not the candidate's {digest}"
    if trust is not None:
        key = trust.evalgate_key(str(record["keyid"]))
        if key is None or "release" not in key.roles:
            return (
                None,
                f"{path}: signer {record['identity']} holds no release role in {trust.path}",
            )
    return {key: record[key] for key in _SIGNATURE_KEYS}, ""
