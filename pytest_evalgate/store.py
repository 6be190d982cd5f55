"""The result store: sealed records in atomic, append-only segment files.

Layout (SPEC section 5; docs/store.md)::

    <root>/<suite>/<definition_digest[:16]>/<candidate_key>/gen-<g>/GENERATION.json
    <root>/<suite>/<definition_digest[:16]>/<candidate_key>/gen-<g>/shard-<i>-of-<N>/seg-<writer>-<seq>.jsonl

A candidate folder holds numbered generations. Readers see only the newest one; a fresh run
(``--evalgate-fresh``) claims a new generation instead of touching the old ones, so starting
over never overwrites or deletes anything. Processes of one run (xdist workers, pods) that share a
run id join the same generation.

A writer (one per process) writes only its own segment files. A segment is JSON Lines, written
to a hidden temporary file, fsynced, and renamed into place, so it appears whole or not at all;
a SIGKILL loses at most the records not yet committed. Nothing is ever overwritten or deleted.

Reading verifies every line: malformed JSON, missing fields, checksum failures, records of another
definition digest, dataset revision or candidate key, and conflicting duplicates are reported as
``EvalgateStoreProblem`` (file, line, identity, reason); identical duplicates collapse and are
counted. An identity whose records are all errors has no result; a later success supersedes them.

The filesystem is reached only through ``EvalgateStoreBackend``, so an object store can be added
without touching callers.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from pytest_evalgate.canonical import evalgate_canonical_json, evalgate_sha256_hex
from pytest_evalgate.errors import EvalgateStoreError

EvalgateIdentityKey = tuple[str, str, str, int]

EVALGATE_RECORD_FIELDS = frozenset(
    {
        "identity", "definition_digest", "candidate_key", "category", "cluster", "output",
        "score", "passed", "attempts", "error", "timing", "usage", "finish_reason", "shard",
        "writer", "started_at", "finished_at", "checksum",
    }
)  # fmt: skip


class EvalgateStoreBackend(Protocol):
    """Where segments live. Paths are '/'-separated and relative to the store root."""

    def evalgate_write_atomic(self, relpath: str, data: bytes) -> None:
        """Make ``data`` visible at ``relpath`` all at once; refuse to replace an existing file."""

    def evalgate_list(self, prefix: str) -> list[str]:
        """Every committed segment path under ``prefix`` (recursively), sorted."""

    def evalgate_read(self, relpath: str) -> bytes:
        """The bytes of one committed segment."""

    def evalgate_children(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` (folders and files), sorted; [] when it is absent."""


class EvalgateLocalStore:
    """A store on a local or mounted shared folder (NFS, a PVC, ...)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def evalgate_write_atomic(self, relpath: str, data: bytes) -> None:
        """Write to a hidden temp file, fsync, rename (no replace), fsync the folder."""
        target = os.path.join(self.root, relpath)
        folder = os.path.dirname(target)
        os.makedirs(folder, exist_ok=True)
        temp = os.path.join(folder, f".tmp-{uuid.uuid4().hex}")
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _fault_pause()
        try:
            _publish(temp, target)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
        _fsync_dir(folder)

    def evalgate_list(self, prefix: str) -> list[str]:
        """Committed segments (``*.jsonl``, not hidden) under ``prefix``."""
        base = os.path.join(self.root, prefix)
        found: list[str] = []
        for folder, _dirs, files in os.walk(base):
            rel = os.path.relpath(folder, self.root)
            found.extend(f"{rel}/{name}" for name in files if _is_segment(name))
        return sorted(found)

    def evalgate_read(self, relpath: str) -> bytes:
        """Read one segment's bytes."""
        with open(os.path.join(self.root, relpath), "rb") as handle:
            return handle.read()

    def evalgate_children(self, prefix: str) -> list[str]:
        """Names directly under ``prefix``, hidden temp files left out."""
        try:
            names = os.listdir(os.path.join(self.root, prefix))
        except FileNotFoundError:
            return []
        return sorted(name for name in names if not name.startswith("."))


EVALGATE_FAULT_COMMIT_PAUSE_ENV = "PYTEST_EVALGATE_FAULT_COMMIT_PAUSE_S"


def _fault_pause() -> None:
    # Fault injection for tests: hold a written, unpublished temp file for this many seconds,
    # so a test can SIGKILL a writer in the middle of a commit (otherwise a ~0.3 ms window).
    pause = os.environ.get(EVALGATE_FAULT_COMMIT_PAUSE_ENV)
    if pause:
        time.sleep(float(pause))


def _publish(temp: str, target: str) -> None:
    # A hard link fails when the target exists, so a committed segment is never replaced.
    # Filesystems without hard links fall back to a checked rename (names are unique per writer).
    try:
        os.link(temp, target)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV) or os.path.exists(target):
            raise
        os.rename(temp, target)


def _is_segment(name: str) -> bool:
    return name.endswith(".jsonl") and not name.startswith(".")


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def evalgate_seal(record: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``record`` with its ``checksum`` (sha256 of the canonical record without it)."""
    body = {key: value for key, value in record.items() if key != "checksum"}
    body["checksum"] = evalgate_sha256_hex(body)
    return body


def evalgate_identity_key(identity: Mapping[str, Any]) -> EvalgateIdentityKey:
    """The identity as a hashable tuple (dataset_revision, case_id, candidate, repetition)."""
    return (
        str(identity["dataset_revision"]),
        str(identity["case_id"]),
        str(identity["candidate"]),
        int(identity["repetition"]),
    )


def evalgate_candidate_prefix(suite: str, definition_digest: str, candidate_key: str) -> str:
    """The store folder of one candidate under one definition."""
    return f"{suite}/{definition_digest[:16]}/{candidate_key}"


def evalgate_writer_id() -> str:
    """A writer id unique to this process: host, pid and a random suffix."""
    host = socket.gethostname().replace("/", "_")[:40]
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class EvalgateSegmentWriter:
    """Buffers this process's records and commits them as atomic segments.

    ``add`` never writes; ``evalgate_commit`` writes one segment per candidate folder with
    pending records; ``evalgate_maybe_commit`` does so when enough records or time piled up.
    """

    def __init__(
        self,
        backend: EvalgateStoreBackend,
        shard_dir: str,
        *,
        writer: str | None = None,
        max_records: int = 512,
        max_age_s: float = 0.5,
    ) -> None:
        self.backend = backend
        self.shard_dir = shard_dir
        self.writer = writer or evalgate_writer_id()
        self.max_records = max_records
        self.max_age_s = max_age_s
        self._pending: dict[str, list[bytes]] = {}
        self._count = 0
        self._oldest = 0.0
        self._seq = 0
        self.committed = 0

    def evalgate_add(self, prefix: str, record: Mapping[str, Any]) -> None:
        """Queue one sealed record for the candidate folder ``prefix``."""
        if not self._count:
            self._oldest = time.monotonic()
        self._pending.setdefault(prefix, []).append(evalgate_canonical_json(record) + b"\n")
        self._count += 1

    def evalgate_due(self) -> bool:
        """Whether ``max_records`` are pending or the oldest is ``max_age_s`` old."""
        return self._count >= self.max_records or bool(
            self._count and time.monotonic() - self._oldest >= self.max_age_s
        )

    def evalgate_maybe_commit(self) -> None:
        """Commit when ``evalgate_due``."""
        if self.evalgate_due():
            self.evalgate_commit()

    def evalgate_commit(self) -> None:
        """Write every pending record; each candidate folder gets one new segment."""
        self.evalgate_write(self.evalgate_take())

    def evalgate_take(self) -> list[tuple[str, bytes, int]]:
        """Empty the buffer into named segments ``(relpath, data, records)``, not yet written.

        Cheap, so the caller can take on its busy thread and ``evalgate_write`` (write + fsync)
        on another; segments must be written in the order they were taken.
        """
        segments = []
        for prefix, lines in self._pending.items():
            self._seq += 1
            relpath = f"{prefix}/{self.shard_dir}/seg-{self.writer}-{self._seq:06d}.jsonl"
            segments.append((relpath, b"".join(lines), len(lines)))
        self._pending.clear()
        self._count = 0
        return segments

    def evalgate_write(self, segments: list[tuple[str, bytes, int]]) -> None:
        """Make taken segments visible atomically, one by one; counts them in ``committed``."""
        for relpath, data, records in segments:
            try:
                self.backend.evalgate_write_atomic(relpath, data)
            except OSError as exc:
                raise EvalgateStoreError(f"{relpath}: cannot commit segment: {exc}") from exc
            self.committed += records


@dataclass(frozen=True)
class EvalgateStoreProblem:
    """One thing wrong in the store, with where it is."""

    file: str
    line: int
    identity: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.identity}: {self.reason}"


@dataclass
class EvalgateStoreView:
    """What a store holds for one candidate under one definition, verified."""

    results: dict[EvalgateIdentityKey, dict[str, Any]] = field(default_factory=dict)
    errors: dict[EvalgateIdentityKey, dict[str, Any]] = field(default_factory=dict)
    duplicates: int = 0
    problems: list[EvalgateStoreProblem] = field(default_factory=list)
    segments: int = 0
    where: dict[EvalgateIdentityKey, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class EvalgateExpectation:
    """What every record in a candidate folder must agree with."""

    definition_digest: str
    dataset_revision: str
    candidate_key: str


def evalgate_read_candidate(
    backend: EvalgateStoreBackend, prefix: str, expect: EvalgateExpectation
) -> EvalgateStoreView:
    """Read and verify the newest generation of a candidate folder (what aggregation sees).

    A folder without generations (the layout before generations existed) is read whole.
    """
    generations = evalgate_generations(backend, prefix)
    folder = evalgate_generation_prefix(prefix, generations[-1]) if generations else prefix
    return evalgate_read_generation(backend, folder, expect)


def evalgate_read_generation(
    backend: EvalgateStoreBackend, prefix: str, expect: EvalgateExpectation
) -> EvalgateStoreView:
    """Read and verify every committed record under ``prefix`` (one generation folder)."""
    return EvalgateStoreFollower(backend, prefix, expect).evalgate_poll()


class EvalgateStoreFollower:
    """Reads one folder incrementally: each poll reads only segments it has not read before.

    Segments are immutable once visible, so a segment read once never needs reading again; a
    process uses this to learn what other writers committed since it last looked.
    """

    def __init__(
        self, backend: EvalgateStoreBackend, prefix: str, expect: EvalgateExpectation
    ) -> None:
        self.backend = backend
        self.prefix = prefix
        self.expect = expect
        self.view = EvalgateStoreView()
        self._seen: set[str] = set()

    def evalgate_poll(self) -> EvalgateStoreView:
        """Read the segments committed since the last poll; returns the cumulative view."""
        for relpath in self.backend.evalgate_list(self.prefix):
            if relpath in self._seen:
                continue
            self._seen.add(relpath)
            self.view.segments += 1
            for number, line in _lines(self.backend, relpath):
                _take(self.view, relpath, number, line, self.expect)
        return self.view


EVALGATE_GENERATION_MARKER = "GENERATION.json"
_GENERATION_CLAIM_TRIES = 64


def evalgate_generation_prefix(candidate_prefix: str, generation: int) -> str:
    """The folder of one generation: ``<candidate_prefix>/gen-<generation>``."""
    return f"{candidate_prefix}/gen-{generation}"


def evalgate_generations(backend: EvalgateStoreBackend, candidate_prefix: str) -> list[int]:
    """The generations of a candidate folder, ascending (only those with a marker file)."""
    found = []
    for name in backend.evalgate_children(candidate_prefix):
        number = name.removeprefix("gen-")
        if name.startswith("gen-") and number.isdigit():
            folder = evalgate_generation_prefix(candidate_prefix, int(number))
            if EVALGATE_GENERATION_MARKER in backend.evalgate_children(folder):
                found.append(int(number))
    return sorted(found)


def evalgate_use_generation(
    backend: EvalgateStoreBackend, candidate_prefix: str, fresh_run: str | None = None
) -> str:
    """The generation folder a run writes to and resumes from.

    Without ``fresh_run``: the newest generation (generation 1 is created when there is none).
    With it: the generation claimed by that run id, or a new one after the newest. Claiming is
    an atomic create-if-absent of the marker, so concurrent processes of one run (same id) end
    in one generation, and nothing that exists is ever replaced.
    """
    for _ in range(_GENERATION_CLAIM_TRIES):
        generations = evalgate_generations(backend, candidate_prefix)
        joined = _joinable(backend, candidate_prefix, generations, fresh_run)
        if joined is not None:
            return evalgate_generation_prefix(candidate_prefix, joined)
        number = (generations[-1] if generations else 0) + 1
        if _claim(backend, candidate_prefix, number, fresh_run):
            return evalgate_generation_prefix(candidate_prefix, number)
    raise EvalgateStoreError(f"{candidate_prefix}: cannot claim a store generation")


def _joinable(
    backend: EvalgateStoreBackend, prefix: str, generations: list[int], fresh_run: str | None
) -> int | None:
    if fresh_run is None:
        return generations[-1] if generations else None
    for number in reversed(generations):
        if _marker(backend, prefix, number).get("run") == fresh_run:
            return number
    return None


def _marker(backend: EvalgateStoreBackend, prefix: str, number: int) -> dict[str, Any]:
    path = f"{evalgate_generation_prefix(prefix, number)}/{EVALGATE_GENERATION_MARKER}"
    try:
        data = json.loads(backend.evalgate_read(path))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _claim(backend: EvalgateStoreBackend, prefix: str, number: int, fresh_run: str | None) -> bool:
    marker = {"generation": number, "run": fresh_run, "created_at": _utc_now()}
    path = f"{evalgate_generation_prefix(prefix, number)}/{EVALGATE_GENERATION_MARKER}"
    try:
        backend.evalgate_write_atomic(path, evalgate_canonical_json(marker) + b"\n")
    except FileExistsError:
        return False  # another process claimed this number first: look again
    return True


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _lines(backend: EvalgateStoreBackend, relpath: str) -> Iterator[tuple[int, bytes]]:
    data = backend.evalgate_read(relpath)
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            yield number, line


def _take(
    view: EvalgateStoreView, relpath: str, number: int, line: bytes, expect: EvalgateExpectation
) -> None:
    record, reason = _parse_record(line, expect)
    if record is None:
        view.problems.append(EvalgateStoreProblem(relpath, number, _identity_text(line), reason))
        return
    key = evalgate_identity_key(record["identity"])
    if record["error"] is not None:
        view.errors.setdefault(key, record)
        return
    _merge_result(view, relpath, number, key, record)


def _merge_result(
    view: EvalgateStoreView,
    relpath: str,
    number: int,
    key: EvalgateIdentityKey,
    record: dict[str, Any],
) -> None:
    existing = view.results.get(key)
    if existing is None:
        view.results[key] = record
        view.where[key] = f"{relpath}:{number}"
        view.errors.pop(key, None)
    elif _content(existing) == _content(record):
        view.duplicates += 1
    else:
        reason = (
            "conflicting duplicate: same identity, different output or score than "
            + view.where[key]
        )
        view.problems.append(EvalgateStoreProblem(relpath, number, _key_text(key), reason))


def _content(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return (record["output"], record["score"], record["passed"], record["finish_reason"])


def _parse_record(line: bytes, expect: EvalgateExpectation) -> tuple[dict[str, Any] | None, str]:
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None, "malformed line (not JSON): a truncated or corrupted record"
    if not isinstance(record, dict) or set(record) != EVALGATE_RECORD_FIELDS:
        return None, "malformed record: fields differ from the record schema"
    if not _checksum_ok(line, record):
        return None, "checksum mismatch: the record was altered or corrupted"
    return _check_expectation(record, expect)


def _checksum_ok(line: bytes, record: dict[str, Any]) -> bool:
    # Fast path: writers store the canonical JSON of the sealed record, so the line without its
    # checksum member is exactly the hashed body (a JSON string cannot contain an unescaped
    # quote, so the first `"checksum":"<hex>",` is the member itself). Any other line falls
    # back to re-canonicalising the parsed record.
    checksum = record["checksum"]
    if isinstance(checksum, str):
        member = b'"checksum":"' + checksum.encode("ascii", "replace") + b'",'
        if hashlib.sha256(line.strip().replace(member, b"", 1)).hexdigest() == checksum:
            return True
    return bool(evalgate_seal(record)["checksum"] == checksum)


def _check_expectation(
    record: dict[str, Any], expect: EvalgateExpectation
) -> tuple[dict[str, Any] | None, str]:
    if record["definition_digest"] != expect.definition_digest:
        return None, f"foreign definition digest {str(record['definition_digest'])[:16]}"
    if record["candidate_key"] != expect.candidate_key:
        return None, f"foreign candidate key {record['candidate_key']}"
    identity = record["identity"]
    if (
        not isinstance(identity, dict)
        or identity.get("dataset_revision") != expect.dataset_revision
    ):
        return None, "foreign dataset revision"
    return record, ""


def _identity_text(line: bytes) -> str:
    try:
        identity = json.loads(line)["identity"]
        return _key_text(evalgate_identity_key(identity))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "<unreadable identity>"


def _key_text(key: EvalgateIdentityKey) -> str:
    revision, case_id, candidate, repetition = key
    return f"{revision}/{candidate}/{case_id}[r{repetition}]"
