"""Aggregation streams: peak memory grows by bytes per identity; a per-record check seam.

The record path held every record as a dict (about 3 KB each with its nested members and
strings); the column path keeps about 100 bytes per identity. Measured with tracemalloc (Python
and numpy allocations) around ``evalgate_aggregate`` on a real store of 6,000 identities.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate.combine import EvalgateSelection, evalgate_aggregate
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    evalgate_candidate_prefix,
    evalgate_record,
)

URL = "simulated://?accuracy=1.0"


def test_peak_memory_per_identity_is_far_below_a_record(tmp_path: Path) -> None:
    cases = make_cases(["alpha", "beta", "gamma"], 1000)
    path = write_suite(tmp_path / "s", {"candidate": URL, "baseline": URL}, cases=cases)
    manifest = evalgate_load_manifest(str(path))
    store = EvalgateLocalStore(str(tmp_path / "store"))
    writer = EvalgateSegmentWriter(store, "shard-0-of-1", writer="w")
    outcome = {
        "output": "x" * 200, "finish_reason": "stop", "attempts": 1, "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": 0.01, "tpot_s": 0.001, "e2e_s": 0.02,
                   "itl_p95_s": 0.002},
        "usage": {"prompt_tokens": 30, "completion_tokens": 50},
        "started_at": "2026-12-01T00:00:00+00:00", "finished_at": "2026-12-01T00:00:01+00:00",
    }  # fmt: skip
    for name in ("candidate", "baseline"):
        key = manifest.candidates[name].key
        prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
        for case in manifest.cases:
            identity = EvalgateIdentity(manifest.dataset_revision, case.case_id, name, 0)
            record = evalgate_record(
                identity, outcome, lambda _: (1.0, True),  # type: ignore[arg-type]
                definition_digest=manifest.definition_digest, candidate_key=key,
                category=case.category, cluster=case.cluster, shard=0, writer="w",
            )  # fmt: skip
            writer.evalgate_add(prefix, record)
            writer.evalgate_maybe_commit()  # segments of 512 records, as the runner commits
    writer.evalgate_commit()
    selection = EvalgateSelection(("candidate", "baseline"), tuple(c["id"] for c in cases))
    evalgate_aggregate(store, manifest, selection, ("candidate", "baseline"))  # warm imports
    tracemalloc.start()
    try:
        result = evalgate_aggregate(store, manifest, selection, ("candidate", "baseline"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.status == "complete" and result.completed == 6000
    # The peak holds the columns, the suite's row index and one segment (512 lines) at a time:
    # the record path's 6,000 dicts were about 3 KB each.
    per_identity = peak / 6000
    assert per_identity < 600, f"{per_identity:.0f} bytes per identity"


def test_a_record_check_turns_a_verified_record_into_a_problem(tmp_path: Path) -> None:
    from pytest_evalgate.store import EvalgateExpectation
    from pytest_evalgate.store.table import EvalgateCandidateTable, evalgate_read_table

    cases = make_cases(["alpha"], 3)
    path = write_suite(tmp_path / "s", {"candidate": URL}, cases=cases)
    manifest = evalgate_load_manifest(str(path))
    store = EvalgateLocalStore(str(tmp_path / "store"))
    key = manifest.candidates["candidate"].key
    prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
    writer = EvalgateSegmentWriter(store, "shard-0-of-1", writer="w")
    outcome = {
        "output": "0", "finish_reason": "stop", "attempts": 1, "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": None, "tpot_s": None, "e2e_s": 0.02,
                   "itl_p95_s": None},
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        "started_at": "t0", "finished_at": "t1",
    }  # fmt: skip
    for case in manifest.cases:
        identity = EvalgateIdentity(manifest.dataset_revision, case.case_id, "candidate", 0)
        record = evalgate_record(
            identity, outcome, lambda _: (1.0, True),  # type: ignore[arg-type]
            definition_digest=manifest.definition_digest, candidate_key=key,
            category="alpha" if case.case_id != "alpha-001" else "beta", cluster=case.cluster,
            shard=0, writer="w",
        )  # fmt: skip
        writer.evalgate_add(prefix, record)
    writer.evalgate_commit()
    rows = {case.case_id: i for i, case in enumerate(manifest.cases)}
    expect = EvalgateExpectation(manifest.definition_digest, manifest.dataset_revision, key)

    def check(record: Any) -> str:
        return "" if record["category"] == "alpha" else "category differs from the dataset's"

    table = evalgate_read_table(store, prefix, expect, EvalgateCandidateTable(rows, 1, None, check))
    [problem] = table.problems
    assert problem.line == 2 and "alpha-001" in problem.identity
    assert problem.reason == "category differs from the dataset's"
    assert table.state[:, 0].tolist() == [2, 0, 2]  # the checked-out record never entered
