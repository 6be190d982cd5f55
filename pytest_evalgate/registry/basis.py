"""The basis of a release state: the decision (and override) an entry rests on, checked under
the gate's key."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from pytest_evalgate.attest.dsse import EVALGATE_PREDICATE_TYPE, evalgate_payload_sha256
from pytest_evalgate.attest.keys import evalgate_load_public_key
from pytest_evalgate.attest.override import EVALGATE_OVERRIDE_TYPE, evalgate_check_override
from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError

EVALGATE_REGISTRY_GATE_KEY = "gate.pub"

EvalgateVerifier = Callable[[Mapping[str, Any]], dict[str, Any]]
"""Verifies one envelope under the gate key and returns its statement, or raises
:class:`EvalgateSignatureError` (admission passes a cached one)."""


@dataclass(frozen=True)
class EvalgateBasis:
    """What a digest's admission rests on: a verified decision and, when it did not pass, the
    verified override that admits it (``override`` is the override's predicate)."""

    decision_sha256: str
    verdict: str
    override: dict[str, Any] | None
    decision: Mapping[str, Any] = field(default_factory=dict, compare=False)  # its predicate

    def describe(self) -> str:
        """One line: the decision, its verdict and the override, if any."""
        text = f"decision {self.decision_sha256[:16]} verdict {self.verdict}"
        if self.override is None:
            return text
        approver, expires = self.override.get("approver"), self.override.get("expires_at")
        return f"{text}, override approved by {approver} until {expires}"


# --- the basis of an admission ----------------------------------------------------------------


def evalgate_check_basis(
    envelopes: Sequence[Mapping[str, object]],
    digest: str,
    verify: EvalgateVerifier,
    now: datetime | None = None,
    *,
    admit: bool = True,
) -> EvalgateBasis:
    """Check the attestations an entry rests on: exactly one decision and at most one override
    of it, every envelope verifying (``verify``, under the gate key) and naming ``digest``.
    With ``admit`` (the default) the basis must also admit the digest at ``now``: the
    decision passed, or an override names it and ``issued_at <= now < expires_at``; without
    it, time and verdict are left to the caller (admission checks them on every review).
    Raises :class:`EvalgateSignatureError` with the reason."""
    statements = [(envelope, _verified(envelope, digest, verify)) for envelope in envelopes]
    decisions = [pair for pair in statements if pair[1]["predicateType"] == EVALGATE_PREDICATE_TYPE]
    overrides = [pair for pair in statements if pair[1]["predicateType"] == EVALGATE_OVERRIDE_TYPE]
    if len(decisions) != 1 or len(overrides) > 1 or len(statements) > 2:
        raise EvalgateSignatureError(
            f"no decision recorded: a basis is one decision and at most one override "
            f"(found {len(decisions)} decisions, {len(overrides)} overrides)"
        )
    decision_env, decision = decisions[0]
    override = overrides[0][1] if overrides else None
    basis = _basis(decision_env, decision, override, now if admit else None, window=admit)
    if admit and basis.verdict != "pass" and basis.override is None:
        raise EvalgateSignatureError(f"decision verdict {basis.verdict!r} and no override of it")
    return basis


def _verified(
    envelope: Mapping[str, object], digest: str, verify: EvalgateVerifier
) -> dict[str, Any]:
    try:
        statement = verify(envelope)
    except EvalgateSignatureError as exc:
        raise EvalgateSignatureError(f"an attestation does not verify: {exc}") from None
    kind = statement.get("predicateType")
    if kind not in (EVALGATE_PREDICATE_TYPE, EVALGATE_OVERRIDE_TYPE):
        raise EvalgateSignatureError(f"an attestation of an unknown type {kind!r}")
    named = [_digest_of(subject) for subject in statement["subject"]]
    if named != [digest]:
        raise EvalgateSignatureError(f"the {_kind_name(kind)} is for weights {named}, not {digest}")
    return statement


def _kind_name(predicate_type: object) -> str:
    return "decision" if predicate_type == EVALGATE_PREDICATE_TYPE else "override"


def _digest_of(subject: object) -> str:
    digests = subject.get("digest") if isinstance(subject, dict) else None
    return f"sha256:{digests.get('sha256') if isinstance(digests, dict) else None}"


def _basis(
    decision_env: Mapping[str, object],
    decision: dict[str, Any],
    override: dict[str, Any] | None,
    now: datetime | None,
    *,
    window: bool,
) -> EvalgateBasis:
    decision_sha256 = evalgate_payload_sha256(decision_env)
    verdict = str(decision["predicate"].get("verdict"))
    if override is None:
        return EvalgateBasis(decision_sha256, verdict, None, decision["predicate"])
    if verdict == "pass":
        raise EvalgateSignatureError("an override of a decision that passed")
    evalgate_check_override(override, decision, decision_sha256, now, window=window)
    return EvalgateBasis(decision_sha256, verdict, override["predicate"], decision["predicate"])


def evalgate_registry_gate_key(root: str) -> ec.EllipticCurvePublicKey:
    """The gate's public key kept in the registry (``PATH/gate.pub``), under which promotions
    verify decisions and overrides. Missing or unusable: :class:`EvalgateConfigError`."""
    path = os.path.join(root, EVALGATE_REGISTRY_GATE_KEY)
    if not os.path.isfile(path):
        reason = "missing: copy the gate's public key (evalgate.pub) here once"
        raise EvalgateConfigError(path, "gate key", reason)
    return evalgate_load_public_key(path)
