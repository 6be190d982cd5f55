"""lm-evaluation-harness ``--log_samples`` files: ``samples_<task>_<time>.jsonl`` and the
``results_<time>.json`` written beside it (tested with lm-eval 0.4.13; docs/imports.md).

Each line of the samples file is one document: ``doc_id`` (its row in the task's split),
``doc`` (the document itself), ``target``, ``resps``/``filtered_resps`` and one member per
metric. The results file gives the harness version (``lm_eval_version``), the task's version
(``versions``) and its configuration (``configs``), whose digest leaves out ``metadata``: lm-eval
copies the model arguments (the endpoint's URL among them) into it, so it changes with every run
that is otherwise the same task.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.imports.sample import (
    HarnessFile,
    Sample,
    config_digest,
    file_sha256,
    member,
    unit_score,
)

_PREFIX, _SUFFIX = "samples_", ".jsonl"


def read_lm_eval_samples(
    path: str, *, metric: str = "exact_match", id_field: str = "id", repetition: int = 0
) -> HarnessFile:
    """The samples of one lm-eval samples file, scored by ``metric``; each names its case by
    ``doc[id_field]``, or by ``doc_id`` as the dataset's row when the document has no such
    field. A bad file name, a missing results file, a malformed line or a score outside 0..1
    raises ``EvalgateConfigError`` naming the file (and the line)."""
    task, stamp = _name_parts(path)
    results = _results(path, stamp)
    with open(path, "rb") as handle:
        data = handle.read()
    source = _source(path, data, task, results)
    when = _when(results)
    samples = tuple(
        _sample(path, number, line, metric, id_field, repetition, when)
        for number, line in enumerate(data.split(b"\n"), start=1)
        if line.strip()
    )
    if not samples:
        raise EvalgateConfigError(path, "-", "no samples in the file")
    return HarnessFile(path, source, samples)


def _name_parts(path: str) -> tuple[str, str]:
    name = os.path.basename(path)
    stem = name.removeprefix(_PREFIX).removesuffix(_SUFFIX)
    if not (name.startswith(_PREFIX) and name.endswith(_SUFFIX) and "_" in stem):
        reason = "not an lm-eval samples file name (samples_<task>_<time>.jsonl)"
        raise EvalgateConfigError(path, "file name", reason)
    task, stamp = stem.rsplit("_", 1)
    return task, stamp


def _results(path: str, stamp: str) -> Mapping[str, Any]:
    results = os.path.join(os.path.dirname(path), f"results_{stamp}.json")
    try:
        with open(results, encoding="utf-8") as handle:
            value = json.load(handle)
    except FileNotFoundError:
        reason = f"no results_{stamp}.json beside it: its task version and config are unknown"
        raise EvalgateConfigError(path, "results", reason) from None
    except (OSError, ValueError) as exc:
        raise EvalgateConfigError(results, "-", f"unreadable results file: {exc}") from None
    if not isinstance(value, dict):
        raise EvalgateConfigError(results, "-", "not an lm-eval results file")
    return value


def _source(path: str, data: bytes, task: str, results: Mapping[str, Any]) -> dict[str, str]:
    configs = results.get("configs")
    config = configs.get(task) if isinstance(configs, dict) else None
    versions = results.get("versions")
    if not isinstance(config, dict) or not isinstance(versions, dict) or task not in versions:
        reason = f"the results file beside it has no config and version of task {task!r}"
        raise EvalgateConfigError(path, "results", reason)
    kept = {key: value for key, value in config.items() if key != "metadata"}
    return {
        "harness": "lm-eval",
        "version": str(results.get("lm_eval_version") or "unknown"),
        "file": os.path.basename(path),
        "sha256": file_sha256(data),
        "task": task,
        "task_version": str(versions[task]),
        "config_digest": config_digest(kept),
    }


def _when(results: Mapping[str, Any]) -> str:
    date = results.get("date")
    if isinstance(date, int | float) and not isinstance(date, bool):
        return datetime.fromtimestamp(date, UTC).isoformat(timespec="seconds")
    return ""


def _sample(
    path: str,
    number: int,
    line: bytes,
    metric: str,
    id_field: str,
    repetition: int,
    when: str,
) -> Sample:
    at = f"line {number}"
    try:
        row = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise EvalgateConfigError(path, at, "malformed line: not JSON") from None
    if not isinstance(row, dict):
        raise EvalgateConfigError(path, at, "malformed line: not a JSON object")
    doc = member(row, "doc", path, at)
    doc_id = member(row, "doc_id", path, at)
    if not isinstance(doc_id, int) or isinstance(doc_id, bool) or doc_id < 0:
        raise EvalgateConfigError(path, at, f"malformed sample: doc_id {doc_id!r}")
    named = doc.get(id_field) if isinstance(doc, dict) else None
    score = unit_score(member(row, metric, path, at), path, at, f"metric {metric!r}")
    return Sample(
        at=at,
        case_id=None if named is None else str(named),
        row=doc_id if named is None else None,
        repetition=repetition,
        score=score,
        output=_output(row),
        finish_reason=None,
        started_at=when,
        finished_at=when,
    )


def _output(row: Mapping[str, Any]) -> str | None:
    """The filtered response the metric scored (a generation's text; other kinds as JSON)."""
    responses = row.get("filtered_resps", row.get("resps"))
    if isinstance(responses, list) and responses:
        first = responses[0]
        while isinstance(first, list) and len(first) == 1:
            first = first[0]
        return first if isinstance(first, str) else evalgate_canonical_json(first).decode()
    return None
