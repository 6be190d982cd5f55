"""A digest's chain of registry entries: the entry format, reading and verifying a chain, the
transition table, rollback detection and the folder fingerprint (see the package docstring)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from pytest_evalgate.attest.dsse import (
    EVALGATE_STATEMENT_TYPE,
    evalgate_load_envelope,
    evalgate_payload_sha256,
    evalgate_verify_with_key,
)
from pytest_evalgate.attest.trust import (
    EVALGATE_REGISTRY_ENTRY_TYPE as EVALGATE_REGISTRY_ENTRY_TYPE,
)
from pytest_evalgate.attest.trust import EvalgateTrust
from pytest_evalgate.errors import (
    EvalgateConfigError,
    EvalgateRegistryError,
    EvalgateSignatureError,
)
from pytest_evalgate.formats.canonical import evalgate_canonical_json

EVALGATE_REGISTRY_STATES = ("candidate", "gated", "canary", "ga", "deprecated", "revoked")
EVALGATE_GATED_STATES = frozenset({"gated", "canary", "ga"})
EVALGATE_REGISTRY_GATE_KEY = "gate.pub"

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
    root: str, digest: str, registry_key: ec.EllipticCurvePublicKey | EvalgateTrust
) -> EvalgateRegistryChain:
    """Read and verify ``digest``'s whole chain under the registry's public key, or with a
    trust file under its keys holding the ``registry`` role (SPEC section 20).

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
    key: ec.EllipticCurvePublicKey | EvalgateTrust,
    previous: EvalgateRegistryEntry | None,
) -> EvalgateRegistryEntry:
    sequence = 1 if previous is None else previous.sequence + 1
    try:
        envelope = _load_canonical(path)
        statement = _verified_entry(envelope, key)
        entry = evalgate_entry_from_statement(statement, path, evalgate_payload_sha256(envelope))
        _check_entry(entry, digest, sequence, previous)
    except (EvalgateSignatureError, EvalgateRegistryError) as exc:
        raise EvalgateRegistryError(f"{path}: entry {sequence} of {digest}: {exc}") from None
    return entry


def _verified_entry(
    envelope: dict[str, Any], key: ec.EllipticCurvePublicKey | EvalgateTrust
) -> dict[str, Any]:
    if isinstance(key, EvalgateTrust):
        return key.evalgate_verify(envelope, "registry").statement
    return evalgate_verify_with_key(envelope, key)


def _load_canonical(path: str) -> dict[str, Any]:
    envelope = evalgate_load_envelope(path)
    with open(path, "rb") as handle:
        data = handle.read()
    # Every byte of an entry file is meaningful, as for decision envelopes: a reformatted file
    # is an edited file.
    if data != evalgate_canonical_json(envelope) + b"\n":
        raise EvalgateRegistryError("the file is not canonical JSON (edited?)")
    return envelope


def evalgate_entry_from_statement(
    statement: dict[str, Any], path: str, entry_sha256: str
) -> EvalgateRegistryEntry:
    """The entry a (verified) statement holds, after checking its format; raises
    :class:`EvalgateRegistryError`."""
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


def _check_types(predicate: Mapping[str, object]) -> None:
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
    evalgate_check_entry_shape(entry)


def evalgate_check_entry_shape(entry: EvalgateRegistryEntry) -> None:
    """The digests an entry states match the envelopes it carries (signatures are checked
    under the gate key by :func:`evalgate_check_basis`, not here)."""
    if entry.state in EVALGATE_GATED_STATES and entry.attestation_sha256 is None:
        raise EvalgateRegistryError(f"a {entry.state} entry without the decision it rests on")
    carried = _payload_digests(entry.attestations)
    for stated in (entry.attestation_sha256, entry.override_sha256):
        if stated is not None and stated not in carried:
            raise EvalgateRegistryError(f"it names attestation {stated} but carries no copy")


def _payload_digests(envelopes: Iterable[Mapping[str, object]]) -> set[str]:
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


def _subject(digest: str) -> dict[str, Any]:
    return {"name": digest, "digest": {"sha256": digest.removeprefix("sha256:")}}


def evalgate_entry_statement(digest: str, predicate: Mapping[str, object]) -> dict[str, Any]:
    """The in-toto Statement of an entry's predicate (what the registry key signs)."""
    return {
        "_type": EVALGATE_STATEMENT_TYPE,
        "subject": [_subject(digest)],
        "predicateType": EVALGATE_REGISTRY_ENTRY_TYPE,
        "predicate": predicate,
    }


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
