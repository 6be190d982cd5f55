"""Run preparation: a suite's generations claimed and its stored records read, and the works
(one per identity to request) of a suite or of the collected items.

Each step returns what it made (``EvalgatePrepared``, ``EvalgateWorks``); the plugin keeps it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypedDict

from pytest_evalgate.errors import EvalgateStorePathError
from pytest_evalgate.items import EvalgateItem
from pytest_evalgate.runner.work import EvalgateSuiteRun, EvalgateWork
from pytest_evalgate.session.options import EvalgateOptions
from pytest_evalgate.session.select import EvalgateSelector
from pytest_evalgate.session.suite import EvalgateSuite
from pytest_evalgate.shard.plan import EvalgateTopology, evalgate_sub_shard
from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateIdentity,
    EvalgateRecord,
    EvalgateStoreBackend,
    evalgate_candidate_prefix,
    evalgate_read_generation,
    evalgate_use_generation,
)
from pytest_evalgate.store.journal import evalgate_journal_folder


@dataclass(frozen=True)
class EvalgatePrepared:
    """One suite's run (generations claimed) and the records its generations hold."""

    run: EvalgateSuiteRun
    stored: dict[EvalgateIdentity, EvalgateRecord]


@dataclass(frozen=True)
class EvalgateWorks:
    """Works made by a step: every one by identity (``made``), and those still to request in
    order (``pending``: not committed before)."""

    made: dict[EvalgateIdentity, EvalgateWork]
    pending: list[EvalgateWork]


class EvalgateChosen(TypedDict):
    """What one process ran of a suite (builtins: it crosses ``workeroutput``)."""

    candidates: list[str]
    cases: list[str]


def evalgate_prepare_run(
    backend: EvalgateStoreBackend,
    suite: EvalgateSuite,
    options: EvalgateOptions,
    topology: EvalgateTopology,
) -> EvalgatePrepared:
    """Claim (or resume) each candidate's generation of ``suite`` and read what it holds; a
    store whose folders cannot be written raises ``EvalgateStorePathError``."""
    manifest = suite.manifest
    keys = {c.name: c.key for c in manifest.candidates.values()}
    run_id = topology.run_id if options.fresh else None
    prefixes = {
        name: _generation(
            backend,
            evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key),
            run_id,
            options.store_root,
        )
        for name, key in keys.items()
    }
    stored: dict[EvalgateIdentity, EvalgateRecord] = {}
    for prefix in prefixes.values():
        _check_writes(backend, prefix, topology.shard_dir)
    for name, prefix in prefixes.items():
        expect = EvalgateExpectation(
            manifest.definition_digest, manifest.dataset_revision, keys[name]
        )
        stored.update(evalgate_read_generation(backend, prefix, expect).results)
    run = EvalgateSuiteRun(manifest, suite.scorer, suite.threshold, {}, prefixes, keys)
    run.sandbox = suite.execution
    return EvalgatePrepared(run, stored)


def _generation(
    backend: EvalgateStoreBackend, candidate_prefix: str, run_id: str | None, store_root: str
) -> str:
    # Resume into the newest generation; --evalgate-fresh (a run id) claims a new one.
    try:
        return evalgate_use_generation(backend, candidate_prefix, run_id)
    except OSError as exc:  # the store's folders cannot be made or written: refused
        reason = f"cannot be written ({exc.strerror or exc})"
        raise EvalgateStorePathError(store_root, reason) from exc


def _check_writes(backend: EvalgateStoreBackend, prefix: str, shard_dir: str) -> None:
    # The folders this process will commit into (its shard's segments and journal) are looked
    # at before any request: one that leads out of the store (a symlink) is refused here, with
    # nothing requested, rather than at the first commit after the answers were paid for.
    for folder in (f"{prefix}/{shard_dir}", evalgate_journal_folder(prefix, shard_dir)):
        backend.evalgate_children(folder)


def evalgate_suite_works(
    path: str,
    run: EvalgateSuiteRun,
    options: EvalgateOptions,
    selector: EvalgateSelector,
    stored: Mapping[EvalgateIdentity, EvalgateRecord],
) -> EvalgateWorks:
    """The works of every identity of the suite this process would collect and keep: the
    items' order (candidates, cases, repetitions), ``--evalgate-candidate``, the tier and
    this shard applied as ``pytest_collection_modifyitems`` applies them."""
    manifest = run.manifest
    sharded = selector.evalgate_sharded
    made: dict[EvalgateIdentity, EvalgateWork] = {}
    pending = []
    for name in manifest.candidates:
        if not options.evalgate_wants_candidate(name):
            continue
        for case in manifest.cases:
            if not selector.evalgate_in_tier(path, case.case_id):
                continue
            shard = selector.evalgate_shard(path, case.case_id, manifest.shards)
            if sharded and not selector.evalgate_in_shard(path, case.case_id):
                continue
            for repetition in range(manifest.repetitions):
                key = EvalgateIdentity(manifest.dataset_revision, case.case_id, name, repetition)
                work = EvalgateWork(key, run, case, name, repetition, shard)
                made[key] = work
                if key not in stored:
                    pending.append(work)
    return EvalgateWorks(made, pending)


def evalgate_item_works(
    items: Iterable[EvalgateItem],
    runs: Mapping[str, EvalgateSuiteRun],
    known: Mapping[EvalgateIdentity, EvalgateWork],
    selector: EvalgateSelector,
    stored: Mapping[EvalgateIdentity, EvalgateRecord],
) -> EvalgateWorks:
    """The works of the collected ``items``, in their order: those ``known`` (made when the
    runner started early) reused, the others made (``made``)."""
    made: dict[EvalgateIdentity, EvalgateWork] = {}
    pending = []
    for item in items:
        key = item.evalgate_key
        work = known.get(key) or made.get(key)
        if work is None:
            run = runs[item.suite_path]
            shard = selector.evalgate_shard(item.suite_path, item.case.case_id, run.manifest.shards)
            work = EvalgateWork(key, run, item.case, item.candidate, item.repetition, shard)
            made[key] = work
        if key not in stored:
            pending.append(work)
    return EvalgateWorks(made, pending)


def evalgate_prefetch(works: list[EvalgateWork], topology: EvalgateTopology) -> list[EvalgateWork]:
    """The works this xdist worker requests ahead of its items: its sub-shard of its shard."""
    if topology.worker_count <= 1:
        return works
    shards, count, index = topology.shard_count, topology.worker_count, topology.worker_index
    return [w for w in works if evalgate_sub_shard(w.case.case_id, shards, count) == index]


def evalgate_selection(
    previous: Mapping[str, EvalgateChosen], items: Iterable[EvalgateItem]
) -> dict[str, EvalgateChosen]:
    """``previous`` (what workers reported) with what ``items`` ran added, each list sorted and
    without duplicates."""
    merged = {
        path: EvalgateChosen(candidates=list(e["candidates"]), cases=list(e["cases"]))
        for path, e in previous.items()
    }
    for item in items:
        entry = merged.setdefault(item.suite_path, EvalgateChosen(candidates=[], cases=[]))
        entry["candidates"].append(item.candidate)
        entry["cases"].append(item.case.case_id)
    return {
        path: EvalgateChosen(candidates=sorted(set(e["candidates"])), cases=sorted(set(e["cases"])))
        for path, e in merged.items()
    }
