"""Canonical JSON and sha256 digests: the one way this package turns values into bytes."""

from __future__ import annotations

import hashlib
import json


def evalgate_canonical_json(obj: object) -> bytes:
    """Serialise ``obj`` as canonical JSON: sorted keys, no spaces, UTF-8, no NaN."""
    text = json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def evalgate_sha256_hex(obj: object) -> str:
    """Hex sha256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(evalgate_canonical_json(obj)).hexdigest()


def evalgate_file_sha256(path: str) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
