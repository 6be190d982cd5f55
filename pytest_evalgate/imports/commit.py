"""Imported samples mapped to the suite's identities and committed exactly once.

Contracts
---------
- Every sample is mapped before anything is written: its case id must be one of the dataset's
  (or its row one of the dataset's rows), its repetition in ``0..repetitions-1``; the first that
  is not raises ``EvalgateConfigError`` naming the file and the line (or member). So a refused
  import commits nothing.
- One candidate's imported files share one task definition (harness, task, task version, config
  digest): the first import fixes it, read back from the records in the store; a file of another
  one is refused naming it and the first file. Aggregation checks the same (``aggregate.sources``).
- A sample whose identity already holds a result with the same content (output, score, passed,
  finish reason; a sample without a finish reason, lm-eval's, needs only the first three) is not
  written again: importing a file twice, or a file of what a test run already stored, changes
  nothing. One with a
  different content is committed, so the store holds both and the gate is ``invalid``, naming the
  identity; the report lists these conflicts with the file and line they came from.
- Records go through the store's segment writer into the candidate's newest generation (the
  ``import`` shard folder), the same records a test run writes, plus ``source``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_evalgate.aggregate.suitecheck import evalgate_expectation
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.imports.sample import HarnessFile, Sample
from pytest_evalgate.manifest.dataset import EvalgateCase
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.scoring import evalgate_threshold
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateRecord,
    EvalgateSegmentWriter,
    EvalgateStoreBackend,
    evalgate_candidate_prefix,
    evalgate_read_generation,
    evalgate_use_generation,
)
from pytest_evalgate.store.reader import evalgate_content
from pytest_evalgate.store.seal import evalgate_seal_line

_SHARD_DIR = "import"


@dataclass
class ImportReport:
    """What an import did: records committed, samples already stored alike, samples skipped
    (harness errors), and the conflicts it committed (``file:line: identity: why``)."""

    committed: int = 0
    unchanged: int = 0
    skipped: int = 0
    conflicts: list[str] = field(default_factory=list)


def import_files(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    candidate: str,
    files: Sequence[HarnessFile],
) -> ImportReport:
    """Commit the samples of ``files`` as records of ``candidate`` (see the module contracts);
    a record is passed when its score reaches the evaluator's ``threshold`` (default 1.0)."""
    threshold = evalgate_threshold(dict(manifest.evaluator.options), manifest.path)
    if candidate not in manifest.candidates:
        known = ", ".join(manifest.candidates)
        reason = f"no candidate {candidate!r} in the manifest (it has {known})"
        raise EvalgateConfigError(manifest.path, "--candidate", reason)
    mapped = [(item, _identities(manifest, candidate, item)) for item in files]
    prefix = evalgate_candidate_prefix(
        manifest.suite, manifest.definition_digest, manifest.candidates[candidate].key
    )
    folder = evalgate_use_generation(backend, prefix)
    stored = evalgate_read_generation(backend, folder, evalgate_expectation(manifest, candidate))
    _same_task(files, stored.results.values())
    return _commit(backend, manifest, candidate, folder, mapped, stored.results, threshold)


def _identities(
    manifest: EvalgateManifest, candidate: str, item: HarnessFile
) -> list[tuple[EvalgateIdentity, EvalgateCase, Sample]]:
    index = manifest.evalgate_case_index()
    out = []
    for sample in item.samples:
        case = _case(manifest, index, item.path, sample)
        if not 0 <= sample.repetition < manifest.repetitions:
            reason = f"repetition {sample.repetition} is outside 0..{manifest.repetitions - 1}"
            raise EvalgateConfigError(item.path, sample.at, reason)
        key = EvalgateIdentity(
            manifest.dataset_revision, case.case_id, candidate, sample.repetition
        )
        out.append((key, case, sample))
    return out


def _case(
    manifest: EvalgateManifest, index: Mapping[str, EvalgateCase], path: str, sample: Sample
) -> EvalgateCase:
    if sample.case_id is not None:
        case = index.get(sample.case_id)
        if case is None:
            reason = f"case {sample.case_id!r} is not in the suite's dataset"
            raise EvalgateConfigError(path, sample.at, reason)
        return case
    row = sample.row if sample.row is not None else -1
    if not 0 <= row < len(manifest.cases):
        reason = f"row {row} (doc_id) is not in the suite's dataset ({len(manifest.cases)} rows)"
        raise EvalgateConfigError(path, sample.at, reason)
    return manifest.cases[row]


def _same_task(files: Sequence[HarnessFile], stored: Iterable[EvalgateRecord]) -> None:
    first: tuple[tuple[str, ...], str] | None = None
    for record in stored:
        source = record.get("source")
        if source is not None:
            task = (source["harness"], source["task"], source["task_version"])
            first = ((*task, source["config_digest"]), source["file"])
            break
    for item in files:
        if first is None:
            first = (item.task_key, item.source["file"])
        elif item.task_key != first[0]:
            raise EvalgateConfigError(item.path, "task", _other_task(item, first))


def _other_task(item: HarnessFile, first: tuple[tuple[str, ...], str]) -> str:
    (harness, task, version, digest), name = first
    return (
        f"another task version or config than the first import {name} ({harness} task "
        f"{task!r} version {version}, config {digest[:19]}): this file has {item.task_key[0]} "
        f"task {item.task_key[1]!r} version {item.task_key[2]}, config {item.task_key[3][:19]}"
    )


def _commit(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    candidate: str,
    folder: str,
    mapped: Sequence[tuple[HarnessFile, list[tuple[EvalgateIdentity, EvalgateCase, Sample]]]],
    stored: Mapping[EvalgateIdentity, EvalgateRecord],
    threshold: float,
) -> ImportReport:
    report = ImportReport()
    seen: dict[EvalgateIdentity, tuple[EvalgateRecord, str]] = {
        key: (record, _where(record)) for key, record in stored.items()
    }
    for item, samples in mapped:
        report.skipped += item.skipped
        writer = EvalgateSegmentWriter(backend, _SHARD_DIR, writer=_writer(item))
        for key, case, sample in samples:
            record, line = _record(manifest, key, case, sample, item, (writer.writer, threshold))
            first = seen.get(key)
            if first is not None and _alike(first[0], record):
                report.unchanged += 1
                continue
            if first is not None:
                report.conflicts.append(_conflict(item, sample, key, first))
            else:
                seen[key] = (record, f"{record['source']['file']}:{sample.at}")
            writer.evalgate_add(folder, record, line)
        writer.evalgate_commit()
        report.committed += writer.committed
    return report


def _alike(stored: EvalgateRecord, record: EvalgateRecord) -> bool:
    """Whether ``record`` says what ``stored`` says: the same content, or, for a harness that
    logs no finish reason (lm-eval), the same output, score and passed."""
    if evalgate_content(stored) == evalgate_content(record):
        return True
    return record["finish_reason"] is None and all(
        stored[key] == record[key] for key in ("output", "score", "passed")
    )


def _writer(item: HarnessFile) -> str:
    return f"import-{item.source['harness']}-{item.source['sha256'][:16]}"


def _where(record: EvalgateRecord) -> str:
    source = record.get("source")
    return "a test run" if source is None else f"{source['file']} {source['at']}"


def _conflict(
    item: HarnessFile, sample: Sample, key: EvalgateIdentity, first: tuple[EvalgateRecord, str]
) -> str:
    old = first[0]["score"]
    return (
        f"{item.path}: {sample.at}: {key.evalgate_label()}: score {sample.score} or output "
        f"differs from the stored one (score {old}, from {first[1]}): the gate will be invalid"
    )


def _record(
    manifest: EvalgateManifest,
    key: EvalgateIdentity,
    case: EvalgateCase,
    sample: Sample,
    item: HarnessFile,
    writing: tuple[str, float],
) -> tuple[EvalgateRecord, bytes]:
    writer, threshold = writing
    body = {
        "identity": key.evalgate_fields(),
        "definition_digest": manifest.definition_digest,
        "candidate_key": manifest.candidates[key.candidate].key,
        "category": case.category,
        "cluster": case.cluster,
        "output": sample.output,
        "score": sample.score,
        "passed": sample.score >= threshold,
        "attempts": 1,
        "error": None,
        # the harness timed its own requests its own way: no samples for perf rules
        "timing": {
            "queued_s": None,
            "ttft_s": None,
            "tpot_s": None,
            "e2e_s": None,
            "itl_p95_s": None,
        },
        "usage": {"prompt_tokens": None, "completion_tokens": None},
        "finish_reason": sample.finish_reason,
        "shard": 0,
        "writer": writer,
        "started_at": sample.started_at,
        "finished_at": sample.finished_at,
        "source": {**item.source, "at": sample.at},
    }
    return evalgate_seal_line(body)
