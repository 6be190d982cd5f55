"""The model registry (SPEC section 14): per weights digest, an append-only chain of signed
state transitions, each linked to the one before it.

Layout of a registry folder (``--registry PATH``; it may live under the result store's root)::

    PATH/
      gate.pub                 the gate's public key: promotions verify decisions under it
      sha256-<hex>/            one folder per weights digest
        000001.json            entry 1, a DSSE envelope (canonical JSON and a newline)
        000002.json            entry 2, ...
        .tmp-*                 a write in progress (never read)

Contracts:

- An entry is an in-toto Statement (predicateType :data:`EVALGATE_REGISTRY_ENTRY_TYPE`,
  subject = the weights digest) signed with the registry key (ECDSA P-256, DSSE, as
  :mod:`pytest_evalgate.attest`). Its predicate holds ``sequence``, ``digest``, ``state``,
  ``previous_state``, ``previous_entry`` (hex sha256 of the previous entry's signed payload),
  ``who``, ``when``, ``why``, ``attestation_sha256`` (the decision's payload sha256, the id
  overrides name), ``override_sha256`` and ``attestations`` (copies of the decision envelope
  and of the override envelope it rests on).
- :func:`evalgate_registry_read` verifies a whole chain: contiguous sequence numbers, canonical
  bytes, every signature, every link, every transition. An edited, removed (inside the chain) or
  reordered entry raises :class:`EvalgateRegistryError`. A removed *last* entry leaves a shorter
  valid chain; :func:`evalgate_registry_rollback` detects it against a remembered head.
- Transitions (:func:`evalgate_transition_refusal`): ``candidate -> gated -> canary -> ga ->
  deprecated`` one step at a time, the first entry is ``candidate``, ``revoked`` from any state
  (also as the first entry), nothing after ``revoked``.
- Promotion to ``gated``, ``canary`` or ``ga`` needs a basis that admits the digest now
  (:func:`evalgate_check_basis`): a decision that verifies under ``gate.pub``, names this digest
  and passed, or that failed with a valid, unexpired override naming it. Without new
  attestations a promotion carries the previous entry's basis forward (and re-checks it).
- Entries are published with a hard link (never replaces a file): of two concurrent writers of
  the same sequence number exactly one succeeds.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from pytest_evalgate.attest import (
    EVALGATE_OVERRIDE_TYPE,
    EVALGATE_PREDICATE_TYPE,
    EVALGATE_STATEMENT_TYPE,
    evalgate_check_override,
    evalgate_format_time,
    evalgate_load_envelope,
    evalgate_load_private_key,
    evalgate_load_public_key,
    evalgate_payload_sha256,
    evalgate_sign,
    evalgate_verify_with_key,
)
from pytest_evalgate.canonical import evalgate_canonical_json
from pytest_evalgate.errors import (
    EvalgateConfigError,
    EvalgateRegistryError,
    EvalgateSignatureError,
)

EVALGATE_REGISTRY_ENTRY_TYPE = "https://pytest-evalgate.dev/registry-entry/v1"
EVALGATE_REGISTRY_STATES = ("candidate", "gated", "canary", "ga", "deprecated", "revoked")
EVALGATE_GATED_STATES = frozenset({"gated", "canary", "ga"})
EVALGATE_REGISTRY_GATE_KEY = "gate.pub"

EvalgateVerifier = Callable[[Mapping[str, Any]], dict[str, Any]]
"""Verifies one envelope under the gate key and returns its statement, or raises
:class:`EvalgateSignatureError` (admission passes a cached one)."""

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_ENTRY_NAME = re.compile(r"(\d{6})\.json")
_NEXT: dict[str | None, str] = {
    None: "candidate",
    "candidate": "gated",
    "gated": "canary",
    "canary": "ga",
    "ga": "deprecated",
}
_PREDICATE_KEYS = frozenset(
    {
        "sequence", "digest", "state", "previous_state", "previous_entry", "who", "when", "why",
        "attestation_sha256", "override_sha256", "attestations",
    }
)  # fmt: skip


# --- values ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalgateRegistryEntry:
    """One verified entry; ``entry_sha256`` is the hex sha256 of its signed payload (what the
    next entry's ``previous_entry`` names)."""

    sequence: int
    digest: str
    state: str
    previous_state: str | None
    previous_entry: str | None
    who: str
    when: str
    why: str
    attestation_sha256: str | None
    override_sha256: str | None
    attestations: tuple[dict[str, Any], ...]
    entry_sha256: str
    path: str


@dataclass(frozen=True)
class EvalgateRegistryChain:
    """A digest's verified chain, oldest entry first (empty when the digest is unknown)."""

    digest: str
    entries: tuple[EvalgateRegistryEntry, ...]

    @property
    def head(self) -> EvalgateRegistryEntry | None:
        """The newest entry, or None."""
        return self.entries[-1] if self.entries else None

    @property
    def state(self) -> str | None:
        """The digest's current state, or None when it has no entry."""
        return self.entries[-1].state if self.entries else None


@dataclass(frozen=True)
class EvalgateBasis:
    """What a digest's admission rests on: a verified decision and, when it did not pass, the
    verified override that admits it (``override`` is the override's predicate)."""

    decision_sha256: str
    verdict: str
    override: dict[str, Any] | None

    def describe(self) -> str:
        """One line: the decision, its verdict and the override, if any."""
        text = f"decision {self.decision_sha256[:16]} verdict {self.verdict}"
        if self.override is None:
            return text
        approver, expires = self.override.get("approver"), self.override.get("expires_at")
        return f"{text}, override approved by {approver} until {expires}"


# --- digests, states, transitions -------------------------------------------------------------


def evalgate_parse_digest(text: str, source: str = "DIGEST") -> str:
    """``text`` when it is ``sha256:`` and 64 lowercase hex digits, else
    :class:`EvalgateConfigError`."""
    if not isinstance(text, str) or not _DIGEST.fullmatch(text):
        reason = f"{text!r} is not a weights digest of the form sha256:<64 lowercase hex>"
        raise EvalgateConfigError(source, "digest", reason)
    return text


def evalgate_digest_folder(root: str, digest: str) -> str:
    """The folder holding ``digest``'s entries (``sha256-<hex>``: no colon in file names)."""
    return os.path.join(root, evalgate_parse_digest(digest).replace(":", "-", 1))


def evalgate_transition_refusal(previous: str | None, to: str) -> str | None:
    """Why ``previous -> to`` is not an allowed transition, or None when it is."""
    if to not in EVALGATE_REGISTRY_STATES:
        return f"unknown state {to!r} (states: {', '.join(EVALGATE_REGISTRY_STATES)})"
    if previous == "revoked":
        return "the digest is revoked: nothing follows a revocation"
    if to == "revoked" or _NEXT.get(previous) == to:
        return None
    start = "no entry" if previous is None else previous
    return f"{start} -> {to} is not allowed (next from {start}: {_NEXT.get(previous)} or revoked)"


# --- reading and verifying a chain ------------------------------------------------------------


def _entry_files(folder: str) -> list[str]:
    """Entry file names in sequence order; refuses gaps and unexpected files."""
    try:
        names = [name for name in os.listdir(folder) if not name.startswith(".")]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise EvalgateRegistryError(f"{folder}: cannot list: {exc.strerror}") from None
    stray = sorted(name for name in names if not _ENTRY_NAME.fullmatch(name))
    if stray:
        raise EvalgateRegistryError(f"{folder}: unexpected files {stray} (entries were renamed?)")
    names.sort()
    for index, name in enumerate(names, start=1):
        if name != f"{index:06d}.json":
            raise EvalgateRegistryError(f"{folder}: entry {index} is missing (removed?)")
    return names


def evalgate_registry_read(
    root: str, digest: str, registry_key: ec.EllipticCurvePublicKey
) -> EvalgateRegistryChain:
    """Read and verify ``digest``'s whole chain under the registry's public key.

    Raises :class:`EvalgateRegistryError` naming the entry and the reason: a gap (a removed
    entry), non-canonical bytes or a bad signature (an edit), a wrong sequence number or link
    (a reordered or replaced entry), a refused transition, or a basis missing from a gated
    entry. An unknown digest has an empty chain."""
    folder = evalgate_digest_folder(root, digest)
    entries: list[EvalgateRegistryEntry] = []
    for name in _entry_files(folder):
        previous = entries[-1] if entries else None
        entries.append(_read_entry(os.path.join(folder, name), digest, registry_key, previous))
    return EvalgateRegistryChain(digest, tuple(entries))


def _read_entry(
    path: str,
    digest: str,
    key: ec.EllipticCurvePublicKey,
    previous: EvalgateRegistryEntry | None,
) -> EvalgateRegistryEntry:
    sequence = 1 if previous is None else previous.sequence + 1
    try:
        envelope = _load_canonical(path)
        statement = evalgate_verify_with_key(envelope, key)
        entry = _entry_from_statement(statement, path, evalgate_payload_sha256(envelope))
        _check_entry(entry, digest, sequence, previous)
    except (EvalgateSignatureError, EvalgateRegistryError) as exc:
        raise EvalgateRegistryError(f"{path}: entry {sequence} of {digest}: {exc}") from None
    return entry


def _load_canonical(path: str) -> dict[str, Any]:
    envelope = evalgate_load_envelope(path)
    with open(path, "rb") as handle:
        data = handle.read()
    # Every byte of an entry file is meaningful, as for decision envelopes: a reformatted file
    # is an edited file.
    if data != evalgate_canonical_json(envelope) + b"\n":
        raise EvalgateRegistryError("the file is not canonical JSON (edited?)")
    return envelope


def _entry_from_statement(
    statement: dict[str, Any], path: str, entry_sha256: str
) -> EvalgateRegistryEntry:
    if statement.get("predicateType") != EVALGATE_REGISTRY_ENTRY_TYPE:
        raise EvalgateRegistryError(f"not a registry entry: {statement.get('predicateType')!r}")
    predicate = statement["predicate"]
    if set(predicate) != _PREDICATE_KEYS:
        raise EvalgateRegistryError(f"entry keys {sorted(predicate)} are not the entry format")
    _check_types(predicate)
    entry = EvalgateRegistryEntry(
        **{key: predicate[key] for key in _PREDICATE_KEYS if key != "attestations"},
        attestations=tuple(predicate["attestations"]),
        entry_sha256=entry_sha256,
        path=path,
    )
    if statement["subject"] != [_subject(entry.digest)]:
        raise EvalgateRegistryError("the statement's subject is not the entry's digest")
    return entry


def _check_types(predicate: Mapping[str, Any]) -> None:
    texts = ("digest", "state", "who", "when", "why")
    optional = ("previous_state", "previous_entry", "attestation_sha256", "override_sha256")
    ok = (
        type(predicate["sequence"]) is int
        and all(isinstance(predicate[key], str) for key in texts)
        and all(predicate[key] is None or isinstance(predicate[key], str) for key in optional)
        and isinstance(predicate["attestations"], list)
        and all(isinstance(item, dict) for item in predicate["attestations"])
    )
    if not ok:
        raise EvalgateRegistryError("an entry field has the wrong type")


def _check_entry(
    entry: EvalgateRegistryEntry,
    digest: str,
    sequence: int,
    previous: EvalgateRegistryEntry | None,
) -> None:
    if entry.digest != digest:
        raise EvalgateRegistryError(f"the entry is for {entry.digest}, not this digest")
    if entry.sequence != sequence:
        raise EvalgateRegistryError(f"it says sequence {entry.sequence} (reordered?)")
    expected_link = None if previous is None else previous.entry_sha256
    if entry.previous_entry != expected_link:
        raise EvalgateRegistryError("its link does not name the entry before it (replaced?)")
    previous_state = None if previous is None else previous.state
    if entry.previous_state != previous_state:
        raise EvalgateRegistryError(
            f"previous_state {entry.previous_state!r} != {previous_state!r}"
        )
    refusal = evalgate_transition_refusal(previous_state, entry.state)
    if refusal is not None:
        raise EvalgateRegistryError(f"refused transition: {refusal}")
    _check_basis_shape(entry)


def _check_basis_shape(entry: EvalgateRegistryEntry) -> None:
    """The digests an entry states match the envelopes it carries (signatures are checked
    under the gate key by :func:`evalgate_check_basis`, not here)."""
    if entry.state in EVALGATE_GATED_STATES and entry.attestation_sha256 is None:
        raise EvalgateRegistryError(f"a {entry.state} entry without the decision it rests on")
    carried = _payload_digests(entry.attestations)
    for stated in (entry.attestation_sha256, entry.override_sha256):
        if stated is not None and stated not in carried:
            raise EvalgateRegistryError(f"it names attestation {stated} but carries no copy")


def _payload_digests(envelopes: Iterable[Mapping[str, Any]]) -> set[str]:
    try:
        return {evalgate_payload_sha256(envelope) for envelope in envelopes}
    except EvalgateSignatureError as exc:
        raise EvalgateRegistryError(f"a carried attestation is malformed: {exc}") from None


# --- rollback (a removed last entry) ---------------------------------------------------------


def evalgate_registry_rollback(
    remembered: tuple[int, str] | None, chain: EvalgateRegistryChain
) -> str | None:
    """Why ``chain`` is a rollback of a head seen before (``(sequence, entry_sha256)``), or
    None. A hash chain alone cannot show that its last entries were removed; a reader that
    remembers the head it saw can."""
    if remembered is None:
        return None
    sequence, entry_sha256 = remembered
    if len(chain.entries) < sequence:
        return (
            f"the registry was rolled back: entry {sequence} was seen before and is gone "
            f"(the chain now ends at {len(chain.entries)})"
        )
    if chain.entries[sequence - 1].entry_sha256 != entry_sha256:
        return f"the registry was rewritten: entry {sequence} is not the one seen before"
    return None


def evalgate_registry_signature(root: str, digest: str) -> tuple[tuple[str, int, int, int], ...]:
    """A cheap fingerprint of ``digest``'s folder (name, inode, size, mtime of every entry):
    it changes when an entry is added, removed, renamed or rewritten, so a reader re-reads
    and re-verifies the chain only then. Empty for an unknown digest."""
    try:
        with os.scandir(evalgate_digest_folder(root, digest)) as found:
            files = [(item.name, item.stat()) for item in found]
    except FileNotFoundError:
        return ()
    return tuple(
        sorted((name, st.st_ino, st.st_size, st.st_mtime_ns) for name, st in files)
    )  # fmt: skip


# --- the basis of an admission ----------------------------------------------------------------


def evalgate_check_basis(
    envelopes: Sequence[Mapping[str, Any]],
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


def _verified(envelope: Mapping[str, Any], digest: str, verify: EvalgateVerifier) -> dict[str, Any]:
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


def _kind_name(predicate_type: Any) -> str:
    return "decision" if predicate_type == EVALGATE_PREDICATE_TYPE else "override"


def _digest_of(subject: Any) -> str:
    digests = subject.get("digest") if isinstance(subject, dict) else None
    return f"sha256:{digests.get('sha256') if isinstance(digests, dict) else None}"


def _basis(
    decision_env: Mapping[str, Any],
    decision: dict[str, Any],
    override: dict[str, Any] | None,
    now: datetime | None,
    *,
    window: bool,
) -> EvalgateBasis:
    decision_sha256 = evalgate_payload_sha256(decision_env)
    verdict = str(decision["predicate"].get("verdict"))
    if override is None:
        return EvalgateBasis(decision_sha256, verdict, None)
    if verdict == "pass":
        raise EvalgateSignatureError("an override of a decision that passed")
    evalgate_check_override(override, decision, decision_sha256, now, window=window)
    return EvalgateBasis(decision_sha256, verdict, override["predicate"])


def evalgate_registry_gate_key(root: str) -> ec.EllipticCurvePublicKey:
    """The gate's public key kept in the registry (``PATH/gate.pub``), under which promotions
    verify decisions and overrides. Missing or unusable: :class:`EvalgateConfigError`."""
    path = os.path.join(root, EVALGATE_REGISTRY_GATE_KEY)
    if not os.path.isfile(path):
        reason = "missing: copy the gate's public key (evalgate.pub) here once"
        raise EvalgateConfigError(path, "gate key", reason)
    return evalgate_load_public_key(path)


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
) -> EvalgateRegistryEntry:
    """Sign ``draft`` with the registry key and publish it as ``digest``'s next entry.

    Checks the chain (read and verified under the key's public half unless given), the
    transition and the basis's shape, not the basis's signatures: that is
    :func:`evalgate_registry_promote`'s job, and admission re-checks every basis under its
    own gate key. Of two writers of the same sequence number the first wins; the other raises
    :class:`EvalgateRegistryError`."""
    evalgate_parse_digest(digest)
    if chain is None:
        public_key = evalgate_load_private_key(sign_key_path).public_key()
        chain = evalgate_registry_read(root, digest, public_key)
    refusal = evalgate_transition_refusal(chain.state, draft.state)
    if refusal is not None:
        raise EvalgateRegistryError(f"{digest}: refused: {refusal}")
    predicate = _predicate(digest, draft, chain.head)
    statement = _statement(digest, predicate)
    entry = _entry_from_statement(statement, "", "")
    _check_basis_shape(entry)
    envelope = evalgate_sign(statement, sign_key_path)
    path = _publish(evalgate_digest_folder(root, digest), entry.sequence, envelope)
    return _entry_from_statement(statement, path, evalgate_payload_sha256(envelope))


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


def _subject(digest: str) -> dict[str, Any]:
    return {"name": digest, "digest": {"sha256": digest.removeprefix("sha256:")}}


def _statement(digest: str, predicate: dict[str, Any]) -> dict[str, Any]:
    return {
        "_type": EVALGATE_STATEMENT_TYPE,
        "subject": [_subject(digest)],
        "predicateType": EVALGATE_REGISTRY_ENTRY_TYPE,
        "predicate": predicate,
    }


def _publish(folder: str, sequence: int, envelope: Mapping[str, Any]) -> str:
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
    attestations: Sequence[Mapping[str, Any]],
    sign_key_path: str,
    *,
    who: str,
    now: datetime | None = None,
) -> EvalgateRegistryEntry:
    """Append state ``to`` for ``digest`` (``evalgate registry promote``).

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
    public_key = evalgate_load_private_key(sign_key_path).public_key()
    chain = evalgate_registry_read(root, digest, public_key)
    refusal = evalgate_transition_refusal(chain.state, to)
    if refusal is not None:
        raise EvalgateRegistryError(f"{digest}: refused: {refusal}")
    draft = _promotion_draft(root, chain, to, attestations, who, now)
    return evalgate_registry_append(root, digest, draft, sign_key_path, chain)


def _promotion_draft(
    root: str,
    chain: EvalgateRegistryChain,
    to: str,
    given: Sequence[Mapping[str, Any]],
    who: str,
    now: datetime | None,
) -> EvalgateRegistryDraft:
    if not given and to not in EVALGATE_GATED_STATES:
        return _carried_draft(chain, to, who, now)
    envelopes = _basis_envelopes(root, chain, given)
    if not envelopes and to in EVALGATE_GATED_STATES:
        reason = f"promoting to {to} needs a decision: give --attestation decision.dsse.json"
        raise EvalgateRegistryError(f"{chain.digest}: refused: {reason}")
    if not envelopes:
        return EvalgateRegistryDraft(to, who, f"promoted to {to}", _when(now))
    verify = _gate_verifier(root)
    try:
        basis = evalgate_check_basis(
            envelopes, chain.digest, verify, now, admit=to in EVALGATE_GATED_STATES
        )
    except EvalgateSignatureError as exc:
        raise EvalgateRegistryError(f"{chain.digest}: refused: {exc}") from None
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


def _gate_verifier(root: str) -> EvalgateVerifier:
    key = evalgate_registry_gate_key(root)
    return lambda envelope: evalgate_verify_with_key(envelope, key)


def _basis_envelopes(
    root: str, chain: EvalgateRegistryChain, given: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The decision (first) and override (second) a promotion rests on."""
    if not given:
        return list(chain.head.attestations) if chain.head else []
    verify = _gate_verifier(root)
    kinds = [(envelope, _verify_kind(verify, envelope)) for envelope in given]
    decisions = [e for e, k in kinds if k[0] == EVALGATE_PREDICATE_TYPE]
    overrides = [(e, k[1]) for e, k in kinds if k[0] == EVALGATE_OVERRIDE_TYPE]
    if not decisions and len(overrides) == 1:
        decisions = [_recorded_decision(chain, overrides[0][1])]
    return [*decisions, *(e for e, _ in overrides)]


def _verify_kind(verify: EvalgateVerifier, envelope: Mapping[str, Any]) -> tuple[Any, Any]:
    """(predicateType, predicate) of a verified envelope."""
    try:
        statement = verify(envelope)
    except EvalgateSignatureError as exc:
        raise EvalgateRegistryError(f"refused: an attestation does not verify: {exc}") from None
    return statement.get("predicateType"), statement.get("predicate")


def _recorded_decision(chain: EvalgateRegistryChain, override: Any) -> Mapping[str, Any]:
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
) -> EvalgateRegistryEntry:
    """Append ``revoked`` for ``digest`` (``evalgate registry revoke``), from any state or
    none; ``reason`` (non-empty) is the entry's ``why``. A revoked digest stays revoked."""
    evalgate_parse_digest(digest)
    if not isinstance(reason, str) or not reason.strip():
        raise EvalgateConfigError("--reason", "reason", "a revocation needs a non-empty reason")
    draft = EvalgateRegistryDraft("revoked", who, reason.strip(), _when(now))
    return evalgate_registry_append(root, digest, draft, sign_key_path)


def evalgate_registry_describe(chain: EvalgateRegistryChain) -> list[str]:
    """Lines for ``evalgate registry show``: the state, then one line per entry."""
    lines = [f"digest: {chain.digest}", f"state: {chain.state or 'unknown (no entries)'}"]
    for entry in chain.entries:
        basis = f" [decision {entry.attestation_sha256[:16]}]" if entry.attestation_sha256 else ""
        override = f" [override {entry.override_sha256[:16]}]" if entry.override_sha256 else ""
        lines.append(
            f"{entry.sequence:>3} {entry.when} {entry.previous_state or '-'} -> {entry.state} "
            f"by {entry.who}: {entry.why}{basis}{override}"
        )
    return lines
