"""Signer roles (SPEC section 20): which public key may sign what.

A trust file names public keys, each with an identity and its roles::

    keys:
      - identity: "system:serviceaccount:eval-llm:eval-gate"
        public_key: gate.pub          # relative to the trust file
        roles: [gate]

Roles: ``gate`` (decisions), ``policy`` (policy approvals), ``override`` (overrides; the
approver is the signing key's identity), ``registry`` (registry entries), ``release`` (weights).

Contracts:

- :func:`evalgate_load_trust` refuses, as :class:`EvalgateConfigError` naming the file, the
  key and the reason: an unreadable or non-YAML file, a key other than ``keys`` at the top or
  ``identity``/``public_key``/``roles`` in an entry, an empty identity, an unknown or repeated
  role, a missing or non-P-256 public key, and one key listed twice (same key id).
- :meth:`EvalgateTrust.evalgate_verify` accepts an envelope only when a key of the file that
  holds the role signed it (its signature verifies); a verifying signature by a key without
  the role is refused naming its key id, its identity and the role it lacks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from pytest_evalgate.attest.dsse import (
    EVALGATE_APPROVAL_TYPE,
    EVALGATE_PREDICATE_TYPE,
    evalgate_envelope_parts,
    evalgate_parse_statement,
    evalgate_verify_with_key,
)
from pytest_evalgate.attest.keys import (
    evalgate_keyid,
    evalgate_load_private_key,
    evalgate_load_public_key,
)
from pytest_evalgate.attest.override import EVALGATE_OVERRIDE_TYPE
from pytest_evalgate.errors import (
    EvalgateConfigError,
    EvalgateSignatureError,
    EvalgateYamlError,
)
from pytest_evalgate.formats.yamlread import evalgate_load_yaml

EVALGATE_ROLES = ("gate", "policy", "override", "registry", "release")
EVALGATE_TRUST_ENTRY_KEYS = frozenset({"identity", "public_key", "roles"})
EVALGATE_ROLE_MEANINGS: Mapping[str, str] = {
    "gate": "signs decisions (`--evalgate-sign-key`); admission admits only these",
    "policy": "approves gate policies (`evalgate policy approve`)",
    "override": "signs overrides; the override's approver is this key's identity",
    "registry": "signs model registry entries (promotions, revocations)",
    "release": "signs the weights (`evalgate weights sign`, OpenSSF model signing)",
}
EVALGATE_TRUST_ENTRY_MEANINGS: Mapping[str, str] = {
    "identity": "who holds the key (a person, team or service account), named in every refusal",
    "public_key": "the PEM public key (ECDSA P-256), relative to the trust file",
    "roles": "what the key may sign (roles below), at least one, each once",
}
# registry.chain's entry type; the registry imports attest, never the reverse.
EVALGATE_REGISTRY_ENTRY_TYPE = "https://pytest-evalgate.dev/registry-entry/v1"


@dataclass(frozen=True)
class EvalgateTrustedKey:
    """One key of a trust file: who holds it, its key id and what it may sign."""

    identity: str
    keyid: str
    roles: frozenset[str]
    public_key: ec.EllipticCurvePublicKey
    path: str

    def describe(self) -> str:
        """``key <keyid16> (<identity>)``: how errors and reports name a signer."""
        return f"key {self.keyid[:16]} ({self.identity})"


@dataclass(frozen=True)
class EvalgateSigned:
    """A verified statement and the trusted key whose signature verified it."""

    statement: dict[str, Any]
    signer: EvalgateTrustedKey


@dataclass(frozen=True)
class EvalgateTrust:
    """The keys of one trust file, by key id."""

    path: str
    keys: tuple[EvalgateTrustedKey, ...]

    def evalgate_key(self, keyid: str) -> EvalgateTrustedKey | None:
        """The trusted key with ``keyid``, or None."""
        return next((key for key in self.keys if key.keyid == keyid), None)

    def evalgate_with_role(self, role: str) -> tuple[EvalgateTrustedKey, ...]:
        """The keys that hold ``role``."""
        return tuple(key for key in self.keys if role in key.roles)

    def evalgate_check_role(self, public_key: ec.EllipticCurvePublicKey, role: str) -> str:
        """The identity of ``public_key`` when it holds ``role``; else
        :class:`EvalgateSignatureError` saying it is unknown or lacks the role."""
        keyid = evalgate_keyid(public_key)
        key = self.evalgate_key(keyid)
        if key is None:
            raise EvalgateSignatureError(f"key {keyid[:16]} is not in the trust file {self.path}")
        if role not in key.roles:
            raise EvalgateSignatureError(f"{key.describe()} lacks role {role}")
        return key.identity

    def evalgate_verify(self, envelope: Mapping[str, object], role: str) -> EvalgateSigned:
        """Verify ``envelope`` under the trust file's keys that hold ``role`` (module
        docstring). Raises :class:`EvalgateSignatureError` with the reason."""
        _body, signatures = evalgate_envelope_parts(envelope)
        claimed = [self.evalgate_key(str(entry.get("keyid"))) for entry in signatures]
        known = [key for key in claimed if key is not None]
        for key in known:
            if role in key.roles:
                return EvalgateSigned(evalgate_verify_with_key(envelope, key.public_key), key)
        for key in known:  # a trusted key signed it, but not in this role: say so if it verifies
            evalgate_verify_with_key(envelope, key.public_key)
            raise EvalgateSignatureError(f"signed by {key.describe()}, which lacks role {role}")
        found = sorted(str(entry.get("keyid"))[:16] for entry in signatures)
        raise EvalgateSignatureError(
            f"no signature by a key of the trust file {self.path} (the envelope has {found})"
        )

    def evalgate_verifier(self) -> EvalgateRoleVerifier:
        """A verifier for decisions, overrides and policy approvals: each envelope needs the
        role its statement's predicate type asks for (:func:`evalgate_role_for`)."""
        return EvalgateRoleVerifier(self)


@dataclass(frozen=True)
class EvalgateRoleVerifier:
    """Verifies an envelope under the role its (unverified) predicate type names; callable
    where a one-key verifier is (``registry.basis.EvalgateVerifier``)."""

    trust: EvalgateTrust

    def __call__(self, envelope: Mapping[str, Any]) -> dict[str, Any]:
        return self.evalgate_signed(envelope).statement

    def evalgate_signed(self, envelope: Mapping[str, Any]) -> EvalgateSigned:
        """The verified statement and its signer. An override's approver must be the
        identity of the ``override`` key that signed it (SPEC section 20)."""
        body, _signatures = evalgate_envelope_parts(envelope)
        role = evalgate_role_for(evalgate_parse_statement(body).get("predicateType"))
        signed = self.trust.evalgate_verify(envelope, role)
        approver = signed.statement["predicate"].get("approver")
        if role == "override" and approver != signed.signer.identity:
            raise EvalgateSignatureError(
                f"the override names approver {approver!r}, but {signed.signer.describe()} "
                "signed it: the approver is the identity of the override key"
            )
        return signed


def evalgate_role_for(predicate_type: object) -> str:
    """The role a statement of ``predicate_type`` must be signed in."""
    roles = {
        EVALGATE_PREDICATE_TYPE: "gate",
        EVALGATE_OVERRIDE_TYPE: "override",
        EVALGATE_APPROVAL_TYPE: "policy",
        EVALGATE_REGISTRY_ENTRY_TYPE: "registry",
    }
    role = roles.get(str(predicate_type))
    if role is None:
        raise EvalgateSignatureError(f"no role signs statements of type {predicate_type!r}")
    return role


# --- loading ---------------------------------------------------------------------------------


def evalgate_load_trust(path: str, option: str = "--evalgate-trust") -> EvalgateTrust:
    """Read and check a trust file (module docstring); ``option`` names where it was given."""
    document = _read_document(path, option)
    if not isinstance(document, dict) or set(document) != {"keys"}:
        found = sorted(document) if isinstance(document, dict) else type(document).__name__
        raise EvalgateConfigError(path, "keys", f"a trust file is a mapping with 'keys' ({found})")
    entries = document["keys"]
    if not isinstance(entries, list) or not entries:
        raise EvalgateConfigError(path, "keys", "must be a non-empty list of keys")
    base = os.path.dirname(os.path.abspath(path))
    keys = tuple(_entry(path, base, number, entry) for number, entry in enumerate(entries))
    _refuse_duplicates(path, keys)
    return EvalgateTrust(path, keys)


def _read_document(path: str, option: str) -> object:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        reason = f"cannot read the trust file: {exc.strerror}"
        raise EvalgateConfigError(path, option, reason) from None
    except UnicodeDecodeError:
        raise EvalgateConfigError(path, option, "the trust file is not UTF-8 text") from None
    try:
        return evalgate_load_yaml(text)
    except EvalgateYamlError as exc:
        raise EvalgateConfigError(path, option, f"not a YAML trust file: {exc}") from None


def _entry(path: str, base: str, number: int, entry: object) -> EvalgateTrustedKey:
    where = f"keys[{number}]"
    if not isinstance(entry, dict):
        raise EvalgateConfigError(path, where, "each key is a mapping")
    unknown = sorted(set(entry) - EVALGATE_TRUST_ENTRY_KEYS)
    missing = sorted(EVALGATE_TRUST_ENTRY_KEYS - set(entry))
    if unknown or missing:
        reason = f"unknown keys {unknown}" if unknown else f"missing {missing}"
        raise EvalgateConfigError(path, where, f"{reason}: a key has identity, public_key, roles")
    identity = entry["identity"]
    if not isinstance(identity, str) or not identity.strip():
        raise EvalgateConfigError(path, f"{where}.identity", "must be a non-empty string")
    roles = _roles(path, f"{where}.roles", entry["roles"])
    public_key = _public_key(path, base, f"{where}.public_key", entry["public_key"])
    key_path = os.path.join(base, str(entry["public_key"]))
    return EvalgateTrustedKey(identity, evalgate_keyid(public_key), roles, public_key, key_path)


def _roles(path: str, where: str, value: object) -> frozenset[str]:
    if not isinstance(value, list) or not value:
        raise EvalgateConfigError(path, where, f"a non-empty list of roles {list(EVALGATE_ROLES)}")
    for role in value:
        if role not in EVALGATE_ROLES:
            reason = f"unknown role {role!r}: roles are {', '.join(EVALGATE_ROLES)}"
            raise EvalgateConfigError(path, where, reason)
    if len(set(value)) != len(value):
        raise EvalgateConfigError(path, where, f"a role is listed twice: {value}")
    return frozenset(value)


def _public_key(path: str, base: str, where: str, value: object) -> ec.EllipticCurvePublicKey:
    if not isinstance(value, str) or not value:
        raise EvalgateConfigError(path, where, "a path to a PEM public key (relative to the file)")
    key_path = os.path.join(base, value)
    try:
        return evalgate_load_public_key(key_path)
    except EvalgateConfigError as exc:
        raise EvalgateConfigError(path, where, f"{value}: {exc.reason}") from None


def _refuse_duplicates(path: str, keys: Sequence[EvalgateTrustedKey]) -> None:
    seen: dict[str, int] = {}
    for number, key in enumerate(keys):
        if key.keyid in seen:
            reason = (
                f"key id {key.keyid[:16]} is listed twice (keys[{seen[key.keyid]}] and "
                f"keys[{number}]): give one key its roles in one entry"
            )
            raise EvalgateConfigError(path, f"keys[{number}].public_key", reason)
        seen[key.keyid] = number


def evalgate_trust_for_signing(
    trust_path: str | None, sign_key: str | None, trust_option: str, key_option: str
) -> EvalgateTrust | None:
    """Load the trust file (when given) and check the sign key (when given): a usable P-256
    private key that, with a trust file, holds the ``gate`` role. Either wrong is
    :class:`EvalgateConfigError` naming the option."""
    trust = None if trust_path is None else evalgate_load_trust(trust_path, trust_option)
    if sign_key is None:
        return trust
    try:
        key = evalgate_load_private_key(sign_key)
        if trust is not None:
            trust.evalgate_check_role(key.public_key(), "gate")
    except EvalgateConfigError as exc:
        raise EvalgateConfigError(exc.source, key_option, exc.reason) from None
    except EvalgateSignatureError as exc:
        raise EvalgateConfigError(sign_key, key_option, str(exc)) from None
    return trust


def evalgate_release_refusal(decision: Mapping[str, Any], trust: EvalgateTrust) -> str | None:
    """Why the weights of a signed decision are not known to be signed by a ``release`` key of
    ``trust``, or None: the decision's ``weights.signature`` (recorded where the harness saw
    the weights verified against their model-signing signature) must name a key of the trust
    file holding ``release``."""
    weights = decision.get("weights")
    signature = weights.get("signature") if isinstance(weights, Mapping) else None
    if not isinstance(signature, Mapping):
        return (
            "no release signature: the decision records no verified weights signature "
            "(pins.weights_signature, verified where the weights are served)"
        )
    keyid = str(signature.get("keyid"))
    key = trust.evalgate_key(keyid)
    if key is None:
        return f"the weights signature's key {keyid[:16]} is not in the trust file {trust.path}"
    if "release" not in key.roles:
        return f"the weights were signed by {key.describe()}, which lacks role release"
    return None


# --- the reference -----------------------------------------------------------------------


_REFERENCE_HEAD = """## Trust files (`--evalgate-trust`, `--trust`) and policy approvals

A trust file is a mapping with one key, `keys`: a non-empty list of entries. Each public key is
listed once (one key id), with all its roles; an identity may hold several keys (rotation).
Anything else is refused naming the file, the entry (`keys[2].roles`) and the reason (exit 4,
before any request). A policy approval (`<policy stem>.approval.dsse.json`, beside the policy)
is written by `evalgate policy approve POLICY --sign-key KEY [--expires DATE]`, never by hand: a
DSSE envelope over the policy's version and semantic digest, signed by a `policy` key.

| entry key | meaning |
|---|---|
"""


def evalgate_trust_reference() -> str:
    """The trust-file section of docs/reference.md; ``KeyError`` when an entry key or a role
    has no meaning, or a meaning names neither."""
    for names, meanings in ((EVALGATE_TRUST_ENTRY_KEYS, EVALGATE_TRUST_ENTRY_MEANINGS),
                            (frozenset(EVALGATE_ROLES), EVALGATE_ROLE_MEANINGS)):  # fmt: skip
        if set(names) != set(meanings):
            raise KeyError(f"trust reference: {sorted(set(names) ^ set(meanings))} out of step")
    entries = [f"| `{key}` | {EVALGATE_TRUST_ENTRY_MEANINGS[key]} |" for key in sorted(
        EVALGATE_TRUST_ENTRY_KEYS)]  # fmt: skip
    roles = [f"| `{role}` | {EVALGATE_ROLE_MEANINGS[role]} |" for role in EVALGATE_ROLES]
    table = "\n".join(entries) + "\n\n| role | meaning |\n|---|---|\n" + "\n".join(roles)
    return _REFERENCE_HEAD + table + "\n"
