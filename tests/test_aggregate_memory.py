"""Aggregation streams: its peak memory grows by bytes per identity, not by the records' size.

The record path held every record as a dict (about 3 KB each with its nested members and
strings); the column path keeps about 100 bytes per identity. Measured with tracemalloc (Python
and numpy allocations) around ``evalgate_aggregate`` on a real store of 6,000 identities.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate import EvalgateSelection, evalgate_aggregate
from pytest_evalgate.manifest import evalgate_load_manifest
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
