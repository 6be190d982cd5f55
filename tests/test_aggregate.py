"""Aggregation over a real local store: exactly once, denominators, statuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aggregatekit import aggregation_path  # noqa: F401 (autouse: both paths)
from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate.combine import EvalgateSelection, evalgate_aggregate
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.store import (
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    evalgate_candidate_prefix,
    evalgate_seal,
)

URL = "simulated://?accuracy=1.0"


@pytest.fixture
def manifest(tmp_path: Path) -> EvalgateManifest:
    cases = make_cases(["alpha"], 10) + make_cases(["beta"], 20)
    path = write_suite(tmp_path / "s", {"candidate": URL, "baseline": URL}, cases=cases)
    return evalgate_load_manifest(str(path))


def _record(
    manifest: EvalgateManifest, case_id: str, name: str, ok: bool, **over: Any
) -> dict[str, Any]:
    case = manifest.evalgate_case(case_id)
    record: dict[str, Any] = {
        "identity": {"dataset_revision": manifest.dataset_revision, "case_id": case_id,
                     "candidate": name, "repetition": 0},
        "definition_digest": manifest.definition_digest,
        "candidate_key": manifest.candidates[name].key,
        "category": case.category, "cluster": case.cluster,
        "output": case.target if ok else "wrong", "score": float(ok), "passed": ok,
        "attempts": 1, "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": 0.01, "tpot_s": 0.001, "e2e_s": 0.02,
                   "itl_p95_s": None},
        "usage": {"prompt_tokens": 5, "completion_tokens": 2}, "finish_reason": "stop",
        "shard": 0, "writer": "w", "started_at": "t0", "finished_at": "t1",
    }  # fmt: skip
    record.update(over)
    return evalgate_seal(record)


def _write(
    store: EvalgateLocalStore, manifest: EvalgateManifest, shard: str, records: list[dict[str, Any]]
) -> None:
    writer = EvalgateSegmentWriter(store, shard)
    for record in records:
        key = manifest.candidates[record["identity"]["candidate"]].key
        writer.evalgate_add(
            evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key), record
        )
    writer.evalgate_commit()


def _full(
    manifest: EvalgateManifest, names: tuple[str, ...] = ("candidate", "baseline")
) -> EvalgateSelection:
    return EvalgateSelection(names, tuple(case.case_id for case in manifest.cases))


def _fill(store: EvalgateLocalStore, manifest: EvalgateManifest) -> None:
    """Two shards: alpha 9/10 correct, beta 10/20 correct, for both candidates."""
    for name in ("candidate", "baseline"):
        alpha = [_record(manifest, f"alpha-{i:03d}", name, i != 0) for i in range(10)]
        beta = [_record(manifest, f"beta-{i:03d}", name, i % 2 == 0) for i in range(20)]
        _write(store, manifest, "shard-0-of-2", alpha)
        _write(store, manifest, "shard-1-of-2", beta)


def test_rates_combine_by_denominators(tmp_path: Path, manifest: EvalgateManifest) -> None:
    store = EvalgateLocalStore(str(tmp_path / "store"))
    _fill(store, manifest)
    result = evalgate_aggregate(store, manifest, _full(manifest), ("candidate", "baseline"))
    assert result.status == "complete" and not result.partial
    rate = result.rates["candidate"]["all"]
    assert (rate.passed, rate.scored) == (19, 30)
    assert rate.rate == pytest.approx(0.6333, abs=1e-4)  # never (0.9 + 0.5) / 2
    assert result.expected == result.completed == 60
    assert result.gate_input is not None and len(result.gate_input.case_ids) == 30


def test_identical_duplicates_collapse_and_are_counted(
    tmp_path: Path, manifest: EvalgateManifest
) -> None:
    store = EvalgateLocalStore(str(tmp_path / "store"))
    _fill(store, manifest)
    again = _record(manifest, "alpha-001", "candidate", True, writer="other-pod", started_at="t9")
    _write(store, manifest, "shard-0-of-2", [again])
    result = evalgate_aggregate(store, manifest, _full(manifest), None)
    assert result.status == "complete" and result.duplicates == 1
    assert result.rates["candidate"]["all"].scored == 30


def test_a_conflicting_duplicate_makes_the_run_invalid(
    tmp_path: Path, manifest: EvalgateManifest
) -> None:
    store = EvalgateLocalStore(str(tmp_path / "store"))
    _fill(store, manifest)
    _write(store, manifest, "shard-0-of-2", [_record(manifest, "alpha-001", "candidate", False)])
    result = evalgate_aggregate(store, manifest, _full(manifest), None)
    assert result.status == "invalid"
    [problem] = result.problems
    assert "conflicting duplicate" in problem.reason and "alpha-001" in problem.identity
    # Both places are named: the one reported and the one it conflicts with.
    places = {f"{problem.file}:{problem.line}", problem.reason.rsplit(" ", 1)[-1]}
    assert len(places) == 2 and all("shard-0-of-2/seg-" in place for place in places)


def test_missing_and_errored_identities_make_it_incomplete(
    tmp_path: Path, manifest: EvalgateManifest
) -> None:
    store = EvalgateLocalStore(str(tmp_path / "store"))
    error = {"category": "timeout", "status": None, "message": "cut"}
    records = [_record(manifest, "alpha-000", "candidate", True)]
    records.append(
        _record(manifest, "alpha-001", "candidate", True, error=error, score=None, passed=None)
    )
    _write(store, manifest, "shard-0-of-1", records)
    result = evalgate_aggregate(store, manifest, _full(manifest, ("candidate",)), None)
    assert result.status == "incomplete"
    assert (result.completed, result.errors["timeout"], result.missing) == (1, 1, 28)


def test_a_later_success_supersedes_an_error(tmp_path: Path, manifest: EvalgateManifest) -> None:
    store = EvalgateLocalStore(str(tmp_path / "store"))
    error = {"category": "server_error", "status": 503, "message": "busy"}
    failed = _record(manifest, "alpha-000", "candidate", True, error=error, score=None, passed=None)
    _write(store, manifest, "shard-0-of-1", [failed])
    _write(store, manifest, "shard-0-of-1", [_record(manifest, "alpha-000", "candidate", True)])
    selection = EvalgateSelection(("candidate",), ("alpha-000",))
    result = evalgate_aggregate(store, manifest, selection, None)
    assert result.status == "complete" and result.partial
    assert result.rates["candidate"]["all"].passed == 1


def test_a_selection_smaller_than_the_suite_is_partial(
    tmp_path: Path, manifest: EvalgateManifest
) -> None:
    store = EvalgateLocalStore(str(tmp_path / "store"))
    _fill(store, manifest)
    selection = EvalgateSelection(
        ("candidate", "baseline"), tuple(f"alpha-{i:03d}" for i in range(10))
    )
    result = evalgate_aggregate(store, manifest, selection, ("candidate", "baseline"))
    assert result.partial and result.status == "complete"
    assert result.rates["candidate"]["all"].scored == 10


def test_floors_count_a_case_once_when_any_repetition_failed(tmp_path: Path) -> None:
    path = write_suite(
        tmp_path / "r", {"candidate": URL, "baseline": URL}, cases=make_cases(["alpha"], 4),
        repetitions=2,
    )  # fmt: skip
    manifest = evalgate_load_manifest(str(path))
    store = EvalgateLocalStore(str(tmp_path / "store"))
    records = []
    for name in ("candidate", "baseline"):
        for i in range(4):
            for rep in range(2):
                ok = not (name == "candidate" and i == 0 and rep == 1)  # one failed repetition
                rec = _record(manifest, f"alpha-{i:03d}", name, ok)
                rec["identity"]["repetition"] = rep
                records.append(evalgate_seal(rec))
    _write(store, manifest, "shard-0-of-1", records)
    result = evalgate_aggregate(store, manifest, _full(manifest), ("candidate", "baseline"))
    data = result.gate_input
    assert data is not None
    assert list(data.candidate_fail_counts) == [1, 0, 0, 0]  # case alpha-000 failed once
    assert list(data.candidate_trials) == [1, 1, 1, 1]  # one trial per case, not per repetition
    assert list(data.candidate_scores) == [0.5, 1.0, 1.0, 1.0]  # quality still averages them
