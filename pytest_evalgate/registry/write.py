"""Writing the registry: appending an entry (signed, published with a hard link), and the two
policies on top of it, ``promote`` and ``revoke``."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

from pytest_evalgate.attest.approval import evalgate_decision_approval_refusal
from pytest_evalgate.attest.dsse import (
    EVALGATE_PREDICATE_TYPE,
    evalgate_payload_sha256,
    evalgate_sign,
    evalgate_verify_with_key,
)
from pytest_evalgate.attest.keys import evalgate_load_private_key
from pytest_evalgate.attest.override import EVALGATE_OVERRIDE_TYPE, evalgate_format_time
from pytest_evalgate.attest.trust import EvalgateTrust
from pytest_evalgate.errors import (
    EvalgateConfigError,
    EvalgateRegistryError,
    EvalgateSignatureError,
)
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.registry.basis import (
    EvalgateVerifier,
    evalgate_check_basis,
    evalgate_registry_gate_key,
)
from pytest_evalgate.registry.chain import (
    EVALGATE_GATED_STATES,
    EVALGATE_REGISTRY_STATES,
    EvalgateRegistryChain,
    EvalgateRegistryEntry,
    evalgate_check_entry_shape,
    evalgate_digest_folder,
    evalgate_entry_from_statement,
    evalgate_entry_statement,
    evalgate_parse_digest,
    evalgate_registry_read,
    evalgate_transition_refusal,
)

# --- writing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalgateRegistryDraft:
    """What a new entry says; the chain supplies the sequence, the link and the previous
    state. ``attestation_sha256`` / ``override_sha256`` name envelopes among ``attestations``."""

    state: str
    who: str
    why: str
    when: str
    attestations: tuple[dict[str, Any], ...] = ()
    attestation_sha256: str | None = None
    override_sha256: str | None = None


def evalgate_registry_append(
    root: str,
    digest: str,
    draft: EvalgateRegistryDraft,
    sign_key_path: str,
    chain: EvalgateRegistryChain | None = None,
    trust: EvalgateTrust | None = None,
) -> EvalgateRegistryEntry:
    """Sign ``draft`` with the registry key and publish it as ``digest``'s next entry.

    Checks the chain (read and verified under the key's public half unless given), the
    transition and the basis's shape, not the basis's signatures: that is
    :func:`evalgate_registry_promote`'s job, and admission re-checks every basis under its
    own gate key. Of two writers of the same sequence number the first wins; the other raises
    :class:`EvalgateRegistryError`."""
    evalgate_parse_digest(digest)
    if chain is None:
        chain = evalgate_registry_read(root, digest, _entry_key(sign_key_path, trust))
    refusal = evalgate_transition_refusal(chain.state, draft.state)
    if refusal is not None:
        raise EvalgateRegistryError(f"{digest}: refused: {refusal}")
    predicate = _predicate(digest, draft, chain.head)
    statement = evalgate_entry_statement(digest, predicate)
    entry = evalgate_entry_from_statement(statement, "", "")
    evalgate_check_entry_shape(entry)
    envelope = evalgate_sign(statement, sign_key_path)
    path = _publish(evalgate_digest_folder(root, digest), entry.sequence, envelope)
    return evalgate_entry_from_statement(statement, path, evalgate_payload_sha256(envelope))


def _entry_key(
    sign_key_path: str, trust: EvalgateTrust | None
) -> ec.EllipticCurvePublicKey | EvalgateTrust:
    """What the chain is read under: the signing key's public half, or with a trust file the
    file's ``registry`` keys, after checking the signing key holds that role."""
    public_key = evalgate_load_private_key(sign_key_path).public_key()
    if trust is None:
        return public_key
    try:
        trust.evalgate_check_role(public_key, "registry")
    except EvalgateSignatureError as exc:
        raise EvalgateConfigError(sign_key_path, "--sign-key", str(exc)) from None
    return trust


def _predicate(
    digest: str, draft: EvalgateRegistryDraft, head: EvalgateRegistryEntry | None
) -> dict[str, Any]:
    return {
        "sequence": 1 if head is None else head.sequence + 1,
        "digest": digest,
        "state": draft.state,
        "previous_state": None if head is None else head.state,
        "previous_entry": None if head is None else head.entry_sha256,
        "who": draft.who,
        "when": draft.when,
        "why": draft.why,
        "attestation_sha256": draft.attestation_sha256,
        "override_sha256": draft.override_sha256,
        "attestations": [json.loads(evalgate_canonical_json(e)) for e in draft.attestations],
    }


def _publish(folder: str, sequence: int, envelope: Mapping[str, object]) -> str:
    """Write a hidden temp file, fsync it, hard-link it to the entry's name (which fails when
    the name exists: an entry is never replaced), fsync the folder."""
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, f"{sequence:06d}.json")
    temp = os.path.join(folder, f".tmp-{os.getpid()}-{secrets.token_hex(6)}")
    with open(temp, "wb") as handle:
        handle.write(evalgate_canonical_json(envelope) + b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temp, target)
    except FileExistsError:
        raise EvalgateRegistryError(
            f"{target}: another writer published entry {sequence} first; read and retry"
        ) from None
    finally:
        os.unlink(temp)
    _fsync_dir(folder)
    return target


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- promote and revoke -----------------------------------------------------------------------


def _when(now: datetime | None) -> str:
    return evalgate_format_time(datetime.now(UTC) if now is None else now)


def evalgate_registry_promote(
    root: str,
    digest: str,
    to: str,
    attestations: Sequence[Mapping[str, object]],
    sign_key_path: str,
    *,
    who: str,
    now: datetime | None = None,
    trust: EvalgateTrust | None = None,
) -> EvalgateRegistryEntry:
    """Append state ``to`` for ``digest`` (``evalgate registry promote``).

    With ``trust`` (SPEC section 20) keys come from the trust file by role: the signing key
    needs ``registry``, decisions ``gate``, overrides ``override``, and a gated state's
    decision must rest on an approved policy; ``gate.pub`` is not read.

    ``attestations`` are envelopes: a decision, an override, or both; an override alone finds
    its decision among the attestations the chain recorded. Given attestations must verify
    under ``gate.pub`` and name ``digest``. For ``gated``, ``canary`` and ``ga`` the basis
    (given, else the previous entry's, carried forward) must admit the digest at ``now``.
    ``why`` is written from the basis. Refused transitions and bases raise
    :class:`EvalgateRegistryError`; a bad digest, an unknown state, ``--to revoked`` or a
    missing ``gate.pub`` raise :class:`EvalgateConfigError`."""
    evalgate_parse_digest(digest)
    if to == "revoked":
        reason = "revoking needs a reason: use `evalgate registry revoke DIGEST --reason TEXT`"
        raise EvalgateConfigError("--to", "state", reason)
    if to not in EVALGATE_REGISTRY_STATES:
        reason = f"unknown state {to!r} (one of {', '.join(EVALGATE_REGISTRY_STATES[:-1])})"
        raise EvalgateConfigError("--to", "state", reason)
    chain = evalgate_registry_read(root, digest, _entry_key(sign_key_path, trust))
    refusal = evalgate_transition_refusal(chain.state, to)
    if refusal is not None:
        raise EvalgateRegistryError(f"{digest}: refused: {refusal}")
    verify = _gate_verifier(root, trust)
    draft = _promotion_draft(chain, to, attestations, who, now, (verify, trust))
    return evalgate_registry_append(root, digest, draft, sign_key_path, chain, trust)


def _promotion_draft(
    chain: EvalgateRegistryChain,
    to: str,
    given: Sequence[Mapping[str, object]],
    who: str,
    now: datetime | None,
    keys: tuple[EvalgateVerifier, EvalgateTrust | None],
) -> EvalgateRegistryDraft:
    verify, trust = keys
    if not given and to not in EVALGATE_GATED_STATES:
        return _carried_draft(chain, to, who, now)
    envelopes = _basis_envelopes(verify, chain, given)
    if not envelopes and to in EVALGATE_GATED_STATES:
        reason = f"promoting to {to} needs a decision: give --attestation decision.dsse.json"
        raise EvalgateRegistryError(f"{chain.digest}: refused: {reason}")
    if not envelopes:
        return EvalgateRegistryDraft(to, who, f"promoted to {to}", _when(now))
    try:
        basis = evalgate_check_basis(
            envelopes, chain.digest, verify, now, admit=to in EVALGATE_GATED_STATES
        )
    except EvalgateSignatureError as exc:
        raise EvalgateRegistryError(f"{chain.digest}: refused: {exc}") from None
    unapproved = (
        None if trust is None else evalgate_decision_approval_refusal(basis.decision, trust)
    )
    if unapproved is not None and to in EVALGATE_GATED_STATES:
        raise EvalgateRegistryError(f"{chain.digest}: refused: {unapproved}")
    override = envelopes[1] if len(envelopes) > 1 else None
    return EvalgateRegistryDraft(
        to, who, f"promoted to {to} on {basis.describe()}", _when(now),
        tuple(dict(envelope) for envelope in envelopes),
        basis.decision_sha256, None if override is None else evalgate_payload_sha256(override),
    )  # fmt: skip


def _carried_draft(
    chain: EvalgateRegistryChain, to: str, who: str, now: datetime | None
) -> EvalgateRegistryDraft:
    """A step that needs no admitting basis (``candidate``, ``deprecated``) copies the previous
    entry's basis as it is, without re-verifying it (the gate key may have been rotated)."""
    head = chain.head
    if head is None:
        return EvalgateRegistryDraft(to, who, f"promoted to {to}", _when(now))
    return EvalgateRegistryDraft(
        to, who, f"promoted to {to}", _when(now),
        head.attestations, head.attestation_sha256, head.override_sha256,
    )  # fmt: skip


def _gate_verifier(root: str, trust: EvalgateTrust | None) -> EvalgateVerifier:
    if trust is not None:
        return trust.evalgate_verifier()
    # gate.pub is read when an attestation is verified, not before: a promotion without one
    # (to candidate) needs no gate key.
    return lambda envelope: evalgate_verify_with_key(envelope, evalgate_registry_gate_key(root))


def _basis_envelopes(
    verify: EvalgateVerifier, chain: EvalgateRegistryChain, given: Sequence[Mapping[str, object]]
) -> list[Mapping[str, Any]]:
    """The decision (first) and override (second) a promotion rests on."""
    if not given:
        return list(chain.head.attestations) if chain.head else []
    kinds = [(envelope, _verify_kind(verify, envelope)) for envelope in given]
    decisions = [e for e, k in kinds if k[0] == EVALGATE_PREDICATE_TYPE]
    overrides = [(e, k[1]) for e, k in kinds if k[0] == EVALGATE_OVERRIDE_TYPE]
    if not decisions and len(overrides) == 1:
        decisions = [_recorded_decision(chain, overrides[0][1])]
    return [*decisions, *(e for e, _ in overrides)]


def _verify_kind(verify: EvalgateVerifier, envelope: Mapping[str, object]) -> tuple[Any, Any]:
    """(predicateType, predicate) of a verified envelope."""
    try:
        statement = verify(envelope)
    except EvalgateSignatureError as exc:
        raise EvalgateRegistryError(f"refused: an attestation does not verify: {exc}") from None
    return statement.get("predicateType"), statement.get("predicate")


def _recorded_decision(chain: EvalgateRegistryChain, override: object) -> Mapping[str, Any]:
    linked = override.get("decision", {}) if isinstance(override, dict) else {}
    wanted = linked.get("payload_sha256") if isinstance(linked, dict) else None
    for entry in reversed(chain.entries):
        for envelope in entry.attestations:
            if evalgate_payload_sha256(envelope) == wanted:
                return envelope
    raise EvalgateRegistryError(
        f"{chain.digest}: refused: the override names decision {wanted}, which this registry "
        "has not recorded: give the decision too (--attestation DECISION --attestation OVERRIDE)"
    )


def evalgate_registry_revoke(
    root: str,
    digest: str,
    reason: str,
    sign_key_path: str,
    *,
    who: str,
    now: datetime | None = None,
    trust: EvalgateTrust | None = None,
) -> EvalgateRegistryEntry:
    """Append ``revoked`` for ``digest`` (``evalgate registry revoke``), from any state or
    none; ``reason`` (non-empty) is the entry's ``why``. A revoked digest stays revoked."""
    evalgate_parse_digest(digest)
    if not isinstance(reason, str) or not reason.strip():
        raise EvalgateConfigError("--reason", "reason", "a revocation needs a non-empty reason")
    draft = EvalgateRegistryDraft("revoked", who, reason.strip(), _when(now))
    return evalgate_registry_append(root, digest, draft, sign_key_path, trust=trust)
