"""What a harness file gives the importer, whatever the harness: its source facts and samples.

A ``Sample`` names its case either by id (``case_id``) or by its row in the dataset (``row``,
lm-eval's ``doc_id`` when the document has no id field); ``at`` is where it is in its file
(``line 7``, or an archive member), so every refusal can name file and place.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex


@dataclass(frozen=True)
class Sample:
    """One scored sample of a harness file."""

    at: str
    case_id: str | None
    row: int | None
    repetition: int
    score: float
    output: str | None
    finish_reason: str | None
    started_at: str
    finished_at: str


@dataclass(frozen=True)
class HarnessFile:
    """One harness file, read: where it is, its source facts (``EvalgateSource`` without
    ``at``) and its scored samples; ``skipped`` counts samples that ended in a harness error
    (they have no score, so their identities stay missing)."""

    path: str
    source: Mapping[str, str]
    samples: tuple[Sample, ...]
    skipped: int = 0

    @property
    def task_key(self) -> tuple[str, str, str, str]:
        """What every file imported for one candidate must share: harness, task, task version
        and config digest."""
        get = self.source.__getitem__
        return get("harness"), get("task"), get("task_version"), get("config_digest")


def file_sha256(data: bytes) -> str:
    """The hex sha256 of a file's bytes."""
    return hashlib.sha256(data).hexdigest()


def config_digest(config: object) -> str:
    """The sha256 of a configuration's canonical JSON (``sha256:<hex>``)."""
    return "sha256:" + evalgate_sha256_hex(config)


def unit_score(value: object, path: str, at: str, what: str) -> float:
    """``value`` as a score in 0..1 (bools count 1/0); refused naming file and place."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0:
        return float(value)
    raise EvalgateConfigError(path, at, f"{what} {value!r} is not a score in 0..1")


def member(data: Mapping[str, Any], key: str, path: str, at: str) -> Any:
    """``data[key]``; a missing key is refused naming file and place."""
    if key not in data:
        raise EvalgateConfigError(path, at, f"malformed sample: no {key!r}")
    return data[key]
