"""The resume journal: answered responses kept in the store before they are scored.

The runner's child appends every answered call outcome (the raw completion, its timings and
usage) to its own journal as it arrives, before the pytest process scores it; a rerun replays
journaled outcomes (rescoring, sealing, committing) instead of requesting those identities again.
So a SIGKILL costs at most the requests that were in flight.

Layout, inside a store generation (so ``--evalgate-fresh`` starts with an empty journal)::

    <generation>/journal/<shard_dir>/<writer>-<seq>.journal

Each object is published once (the backend's no-replace write: a rename, or a conditional put),
one canonical JSON line per answered identity:
``{"identity": <header>, "outcome": {...}, "sha256": <hex>}``, ``<header>`` being the request's
``revision/candidate/case/rN`` and ``sha256`` the digest of the line's canonical JSON without it.
The names do not end in ``.jsonl``, so no segment reader ever takes a journal for records.

Journal objects are published without fsync (``durable=False``): a killed process loses nothing
that was published, a lost machine may lose or tear the newest objects. The digest is what makes
that safe: a torn or zeroed line fails it and is skipped, so its identity is requested again (a
journal is a saving, never a record; docs/decisions.md).

The journal is never a second source of truth: a committed record wins (the pytest process
journals nothing for committed identities and replays only uncommitted ones), a replayed line is
committed as a record and so consumed once, errors are never journaled (they are requested
again), and an unreadable or malformed line is skipped (that identity is simply requested).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from pytest_evalgate.errors import EvalgateStorePathError
from pytest_evalgate.formats.canonical import evalgate_canonical_json, evalgate_sha256_hex
from pytest_evalgate.store.backend import EvalgateStoreBackend
from pytest_evalgate.store.records import (
    EVALGATE_OUTCOME_FIELDS,
    EVALGATE_SERVED_FIELDS,
    EvalgateOutcome,
)

EVALGATE_JOURNAL_DIR = "journal"
EVALGATE_JOURNAL_SUFFIX = ".journal"


def evalgate_journal_folder(generation_prefix: str, shard_dir: str) -> str:
    """Where one shard's journals live inside a generation folder."""
    return f"{generation_prefix}/{EVALGATE_JOURNAL_DIR}/{shard_dir}"


def evalgate_journal_name(folder: str, writer: str, seq: int) -> str:
    """The ``seq``-th journal object of ``writer`` in ``folder``."""
    return f"{folder}/{writer}-{seq:06d}{EVALGATE_JOURNAL_SUFFIX}"


def evalgate_journal_line(identity: str, outcome: Mapping[str, object]) -> bytes:
    """One journal line: the identity header, the answered outcome and their digest. (The
    digest's key sorts last, so the line is the hashed body with the member appended: one
    canonical encoding, and the canonical JSON of the whole entry.)"""
    return evalgate_journal_line_of(identity, evalgate_canonical_json(dict(outcome)))


def evalgate_journal_line_of(identity: str, outcome_json: bytes) -> bytes:
    """``evalgate_journal_line`` of an outcome already in canonical JSON (``outcome_json``):
    the runner's child encodes each answer once, for this line and for its wire message. The
    keys ``identity`` < ``outcome`` are in canonical order, so the body is byte for byte the
    canonical JSON of ``{"identity": ..., "outcome": ...}``."""
    header = json.dumps(identity, ensure_ascii=False).encode("utf-8")
    body = b'{"identity":' + header + b',"outcome":' + outcome_json + b"}"
    digest = hashlib.sha256(body).hexdigest()
    return body[:-1] + b',"sha256":"' + digest.encode("ascii") + b'"}\n'


def _digest(entry: Mapping[str, object]) -> str:
    return evalgate_sha256_hex(entry)


def evalgate_read_journal(
    backend: EvalgateStoreBackend, generation_prefix: str
) -> dict[str, EvalgateOutcome]:
    """identity header -> answered outcome, from every journal of a generation (the first line
    of an identity wins; malformed lines and unreadable objects are skipped)."""
    found: dict[str, EvalgateOutcome] = {}
    base = f"{generation_prefix}/{EVALGATE_JOURNAL_DIR}"
    for shard_dir in _children(backend, base):
        folder = f"{base}/{shard_dir}"
        for name in _children(backend, folder):
            if name.endswith(EVALGATE_JOURNAL_SUFFIX):
                _take(found, _read(backend, f"{folder}/{name}"))
    return found


def _children(backend: EvalgateStoreBackend, prefix: str) -> list[str]:
    try:
        return backend.evalgate_children(prefix)
    except EvalgateStorePathError:
        return []  # a journal folder symlinked out of the store is not read: nothing replayed


def _read(backend: EvalgateStoreBackend, relpath: str) -> bytes:
    try:
        return backend.evalgate_read(relpath)
    except (OSError, EvalgateStorePathError):
        # gone, unreadable, or a symlink out of the store: its identities are requested again
        return b""


def _take(found: dict[str, EvalgateOutcome], data: bytes) -> None:
    for line in data.split(b"\n"):
        entry = _parse(line)
        if entry is not None:
            found.setdefault(entry[0], entry[1])


def _parse(line: bytes) -> tuple[str, EvalgateOutcome] | None:
    try:
        entry = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None  # an empty or cut line
    if not isinstance(entry, dict) or not isinstance(entry.get("identity"), str):
        return None
    digest = entry.pop("sha256", None)
    if entry.keys() != {"identity", "outcome"} or digest != _digest(entry):
        return None  # torn, zeroed, edited, or written before lines carried a digest
    outcome = entry.get("outcome")
    if not isinstance(outcome, dict) or outcome.keys() - EVALGATE_SERVED_FIELDS != (
        EVALGATE_OUTCOME_FIELDS
    ):
        return None  # (an older child's lines lack the served fields: still replayed)
    if outcome["error"] is not None or not isinstance(outcome["output"], str):
        return None  # only answers are journaled; anything else is requested again
    return entry["identity"], outcome  # type: ignore[return-value]
