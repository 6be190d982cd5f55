"""Store layout and generations: which folder a candidate's records live in.

A candidate folder (``<suite>/<definition_digest[:16]>/<candidate_key>``) holds numbered
generations, ``gen-<g>/`` with a ``GENERATION.json`` marker. Readers see only the newest one; a
fresh run (``--evalgate-fresh``) claims a new generation instead of touching the old ones, so
starting over never overwrites or deletes anything. Processes of one run (xdist workers, pods)
that share a run id join the same generation.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pytest_evalgate.errors import EvalgateStoreError
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.store.backend import EvalgateStoreBackend

EVALGATE_GENERATION_MARKER = "GENERATION.json"
_GENERATION_CLAIM_TRIES = 64


def evalgate_candidate_prefix(suite: str, definition_digest: str, candidate_key: str) -> str:
    """The store folder of one candidate under one definition."""
    return f"{suite}/{definition_digest[:16]}/{candidate_key}"


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
