"""Inspect ``.eval`` logs (tested with inspect-ai 0.3.285; docs/imports.md).

A ``.eval`` log is a zip archive: ``header.json`` (the eval's task, versions, configuration,
status), ``samples/<id>_epoch_<n>.json`` (one per sample and epoch: ``id``, ``epoch``,
``output``, ``scores``, ``error``), plus summaries and a journal. Inspect compresses the members
with zstd (zip method 93), which Python's ``zipfile`` lists but cannot open; the ``zstandard``
package (the ``inspect`` extra) decompresses them here, after ``zipfile`` found each member's
place, and the member's CRC-32 is checked against the archive's directory. Stored and deflated
members are read by ``zipfile`` itself.

The configuration digest covers what changes what a sample means: the task's arguments, solver,
scorers, dataset, the model's generate config, the plan and the epochs; not the run's ids,
times, or where the log was written.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.imports.sample import (
    HarnessFile,
    Sample,
    config_digest,
    file_sha256,
    member,
    unit_score,
)

_ZSTD = 93  # the zip compression method number of zstd
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
_LOCAL_SIGNATURE = b"PK\x03\x04"
_GRADES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}  # Inspect's CORRECT/INCORRECT/PARTIAL/NOANSWER
_EVAL_KEYS = ("task_args", "solver", "solver_args", "scorers", "model_generate_config")
_DATASET_KEYS = ("name", "location", "samples", "sample_ids", "shuffled")


def read_inspect_log(path: str, *, scorer: str | None = None) -> HarnessFile:
    """The samples of one Inspect ``.eval`` log, scored by ``scorer`` (default: the log's only
    scorer); sample id -> case id, epoch (from 1) -> repetition (from 0). A sample that ended in
    an error has no score and is skipped (counted). Anything unreadable raises
    ``EvalgateConfigError`` naming the file and the member."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        reason = f"not an Inspect .eval log (a zip archive): {exc}"
        raise EvalgateConfigError(path, "-", reason) from None
    with archive:
        header = _json_member(archive, path, "header.json")
        source = _source(path, data, header)
        names = sorted(n for n in archive.namelist() if n.startswith("samples/"))
        read = [_sample(path, name, _json_member(archive, path, name), scorer) for name in names]
    samples = tuple(sample for sample in read if sample is not None)
    if not samples:
        raise EvalgateConfigError(path, "samples/", "no scored samples in the log")
    return HarnessFile(path, source, samples, skipped=len(read) - len(samples))


def _json_member(archive: zipfile.ZipFile, path: str, name: str) -> Any:
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise EvalgateConfigError(path, name, "no such member: not an Inspect .eval log") from None
    raw = _zstd_member(archive, path, info) if info.compress_type == _ZSTD else None
    try:
        text = raw if raw is not None else archive.read(info)
        return json.loads(text)
    except (ValueError, UnicodeDecodeError, zipfile.BadZipFile, NotImplementedError) as exc:
        raise EvalgateConfigError(path, name, f"malformed member: {exc}") from None


def _zstd_member(archive: zipfile.ZipFile, path: str, info: zipfile.ZipInfo) -> bytes:
    try:
        import zstandard
    except ImportError:  # the optional extra is not installed
        reason = "zstd-compressed members need zstandard: pip install 'pytest-evalgate[inspect]'"
        raise EvalgateConfigError(path, info.filename, reason) from None
    handle = archive.fp
    assert handle is not None  # an open archive
    handle.seek(info.header_offset)
    signature, name_length, extra_length = _LOCAL_HEADER.unpack(handle.read(30))
    if signature != _LOCAL_SIGNATURE:
        raise EvalgateConfigError(path, info.filename, "malformed member: bad local header")
    handle.seek(info.header_offset + 30 + name_length + extra_length)
    compressed = handle.read(info.compress_size)
    try:
        data = zstandard.ZstdDecompressor().decompressobj().decompress(compressed)
    except zstandard.ZstdError as exc:
        raise EvalgateConfigError(path, info.filename, f"malformed member: {exc}") from None
    if zlib.crc32(data) != info.CRC or len(data) != info.file_size:
        raise EvalgateConfigError(path, info.filename, "malformed member: CRC-32 mismatch")
    return data


def _source(path: str, data: bytes, header: Any) -> dict[str, str]:
    spec = header.get("eval") if isinstance(header, dict) else None
    if not isinstance(spec, dict) or "task" not in spec:
        raise EvalgateConfigError(path, "header.json", "malformed header: no eval.task")
    packages = spec.get("packages")
    version = packages.get("inspect_ai") if isinstance(packages, dict) else None
    return {
        "harness": "inspect",
        "version": str(version or "unknown"),
        "file": os.path.basename(path),
        "sha256": file_sha256(data),
        "task": str(spec["task"]),
        "task_version": str(spec.get("task_version", 0)),
        "config_digest": config_digest(_config(header, spec)),
    }


def _config(header: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    dataset = spec.get("dataset")
    config = spec.get("config")
    return {
        **{key: spec.get(key) for key in _EVAL_KEYS},
        "dataset": {k: dataset.get(k) for k in _DATASET_KEYS}
        if isinstance(dataset, dict)
        else None,
        "epochs": config.get("epochs") if isinstance(config, dict) else None,
        "plan": header.get("plan"),
    }


def _sample(path: str, name: str, row: Any, scorer: str | None) -> Sample | None:
    if not isinstance(row, dict):
        raise EvalgateConfigError(path, name, "malformed sample: not a JSON object")
    if row.get("error"):
        return None
    epoch = member(row, "epoch", path, name)
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise EvalgateConfigError(path, name, f"malformed sample: epoch {epoch!r}")
    output = row.get("output")
    choices = output.get("choices") if isinstance(output, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else {}
    completion = output.get("completion") if isinstance(output, dict) else None
    return Sample(
        at=name,
        case_id=str(member(row, "id", path, name)),
        row=None,
        repetition=epoch - 1,
        score=_score(path, name, member(row, "scores", path, name), scorer),
        output=completion if isinstance(completion, str) else None,
        finish_reason=_text(first.get("stop_reason") if isinstance(first, dict) else None),
        started_at=_text(row.get("started_at")) or "",
        finished_at=_text(row.get("completed_at")) or "",
    )


def _score(path: str, name: str, scores: Any, scorer: str | None) -> float:
    if not isinstance(scores, dict) or not scores:
        raise EvalgateConfigError(path, name, "malformed sample: no scores")
    if scorer is None and len(scores) != 1:
        reason = f"several scorers ({', '.join(sorted(scores))}): name one with --scorer"
        raise EvalgateConfigError(path, name, reason)
    chosen = scorer if scorer is not None else next(iter(scores))
    score = scores.get(chosen)
    if not isinstance(score, dict) or "value" not in score:
        raise EvalgateConfigError(path, name, f"no score of scorer {chosen!r}")
    value = score["value"]
    value = _GRADES.get(value, value) if isinstance(value, str) else value
    return unit_score(value, path, name, f"scorer {chosen!r} value")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
