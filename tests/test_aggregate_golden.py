"""The aggregation's whole result, field by field, on real stores, against a recorded golden.

``tests/data/aggregate_golden.json`` was written by the aggregation that held every record as a
dict (before issue 18 made it stream); the streaming one must give the very same aggregate:
statuses, counts, problems (file, line, identity, reason), rates, canary hits, flipped cases and
every array of the gate input. Regenerate (only when a change of result is intended) with
``EVALGATE_WRITE_GOLDEN=1``.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aggregatekit import aggregation_path  # noqa: F401 (autouse: both paths)
from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate.combine import (
    EvalgateAggregate,
    EvalgateSelection,
    evalgate_aggregate,
)
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.store import (
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    evalgate_candidate_prefix,
    evalgate_seal,
)

GOLDEN = Path(__file__).parent / "data" / "aggregate_golden.json"
URL = "simulated://?accuracy=1.0"
NAMES = ("candidate", "baseline", "third")
CANARY = "EVALGATE-CANARY-0f3c"


def _manifest(tmp_path: Path) -> EvalgateManifest:
    cases = make_cases(["alpha", "beta", "gamma"], 6, cluster_size=2)
    path = write_suite(
        tmp_path / "s", dict.fromkeys(NAMES, URL), cases=cases, repetitions=2,
        extra={"canary": CANARY},
    )  # fmt: skip
    return evalgate_load_manifest(str(path))


def _record(
    manifest: EvalgateManifest, case_id: str, name: str, rep: int, ok: bool, **over: Any
) -> dict[str, Any]:
    case = manifest.evalgate_case_index().get(case_id)
    i = sum(map(ord, case_id + name)) + rep
    record: dict[str, Any] = {
        "identity": {"dataset_revision": manifest.dataset_revision, "case_id": case_id,
                     "candidate": name, "repetition": rep},
        "definition_digest": manifest.definition_digest,
        "candidate_key": manifest.candidates[name].key,
        "category": case.category if case else "alpha",
        "cluster": case.cluster if case else "x",
        "output": (case.target if case else "t") if ok else f"wrong {i}",
        "score": float(ok), "passed": ok, "attempts": 1 + i % 2, "error": None,
        "timing": {"queued_s": 0.001 * (i % 5), "ttft_s": None if i % 3 == 0 else 0.01 + i / 1e4,
                   "tpot_s": 0.001 + i / 1e5, "e2e_s": 0.02 + i / 1e4,
                   "itl_p95_s": None if i % 4 else 0.003},
        "usage": {"prompt_tokens": 5, "completion_tokens": None if i % 7 == 0 else 2 + i % 3},
        "finish_reason": "stop", "shard": 0, "writer": "w", "started_at": "t0",
        "finished_at": "t1",
    }  # fmt: skip
    record.update(over)
    return evalgate_seal(record)


def _error(manifest: EvalgateManifest, case_id: str, name: str, rep: int, category: str) -> Any:
    error = {"category": category, "status": 503, "message": "unavailable"}
    return _record(manifest, case_id, name, rep, False, output=None, score=None, passed=None,
                   error=error)  # fmt: skip


def _write(
    store: EvalgateLocalStore, manifest: EvalgateManifest, shard: str, writer: str,
    records: list[dict[str, Any]],
) -> None:  # fmt: skip
    out = EvalgateSegmentWriter(store, shard, writer=writer)
    for record in records:
        key = manifest.candidates[record["identity"]["candidate"]].key
        out.evalgate_add(
            evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key), record
        )
    out.evalgate_commit()


def _ok(case: int, rep: int, name: int) -> bool:
    return (case + 2 * name) % 3 != 0 and not (rep == 1 and case % 5 == 1)


def _fill(store: EvalgateLocalStore, manifest: EvalgateManifest) -> None:
    """Every identity of candidate and baseline, some of third; errors, dups, a leak."""
    for n, name in enumerate(NAMES):
        rows = []
        for c, case in enumerate(manifest.cases):
            if name == "third" and c % 3:
                continue
            for rep in range(2):
                ok = _ok(c, rep, n)
                over = (
                    {"output": f"{CANARY} leaked"} if (c, rep, n) in {(4, 0, 0), (9, 1, 1)} else {}
                )
                rows.append(_record(manifest, case.case_id, name, rep, ok, **over))
        half = len(rows) // 2
        _write(store, manifest, "shard-0-of-2", f"w{n}a", rows[:half])
        _write(store, manifest, "shard-1-of-2", f"w{n}b", rows[half:])
    ids = [case.case_id for case in manifest.cases]
    # errors: one error only (no result); an error superseded by a later success; a missing one
    _write(store, manifest, "shard-1-of-2", "w9", [
        _error(manifest, ids[2], "candidate", 1, "timeout"),
        _error(manifest, ids[5], "baseline", 0, "server_error"),
        _error(manifest, ids[3], "candidate", 0, "timeout"),
        # an identical duplicate (another writer, same content)
        _record(manifest, ids[1], "candidate", 1, _ok(1, 1, 0), writer="other"),
    ])  # fmt: skip


def _drop(store: Path, manifest: EvalgateManifest, case_id: str, name: str, rep: int) -> None:
    """Remove one identity's lines from the store (a missing identity)."""
    needle = f'"candidate":"{name}","case_id":"{case_id}","dataset_revision"'
    for path in store.rglob("*.jsonl"):
        lines = path.read_text().splitlines(keepends=True)
        kept = [
            line for line in lines
            if not (needle in line and f'"repetition":{rep}}}' in line and '"error":null' in line)
        ]  # fmt: skip
        path.write_text("".join(kept))


def _corrupt(store: EvalgateLocalStore, root: Path, manifest: EvalgateManifest) -> None:
    """Conflicting duplicate, foreign digest/key/revision, malformed, checksum-failing; a case
    and a repetition outside the suite (issue 19: problems since the suite check)."""
    ids = [case.case_id for case in manifest.cases]
    key = manifest.candidates["candidate"].key
    _write(store, manifest, "shard-0-of-2", "x1", [
        _record(manifest, ids[7], "candidate", 0, True, output="a different answer"),
        _record(manifest, ids[8], "candidate", 0, True, definition_digest="f" * 64),
        _record(manifest, ids[8], "candidate", 1, True, candidate_key="other-key"),
        _record(manifest, ids[8], "candidate", 1, True, identity={
            "dataset_revision": "old", "case_id": ids[8], "candidate": "candidate",
            "repetition": 1}),
        _record(manifest, "zeta-999", "candidate", 0, True),
        _record(manifest, ids[0], "candidate", 7, True),
    ])  # fmt: skip
    prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
    [segment] = sorted((root / prefix / "shard-0-of-2").glob("seg-x1-*.jsonl"))
    text = segment.read_text()
    good = _record(manifest, ids[9], "candidate", 0, True)
    line = json.dumps(good, sort_keys=True, separators=(",", ":"))
    segment.write_text(text + "{not json\n" + line.replace('"score":1.0', '"score":0.5') + "\n")


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, float | np.floating):
        return repr(float(value))
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    return value


def _summary(result: EvalgateAggregate) -> dict[str, Any]:
    out = _plain(result)
    out["problems"] = sorted(str(problem) for problem in result.problems)
    out["rates"] = {
        name: {s: [r.passed, r.scored] for s, r in slices.items()}
        for name, slices in result.rates.items()
    }  # fmt: skip
    return out  # type: ignore[no-any-return]


def _scenarios(tmp_path: Path) -> dict[str, dict[str, Any]]:
    manifest = _manifest(tmp_path)
    ids = tuple(case.case_id for case in manifest.cases)
    out = {}
    for dirty in (False, True):
        root = tmp_path / f"store-{dirty}"
        store = EvalgateLocalStore(str(root))
        _fill(store, manifest)
        _drop(root, manifest, ids[11], "candidate", 0)
        _drop(root, manifest, ids[12], "baseline", 1)
        _drop(root, manifest, ids[2], "candidate", 1)  # its error record stays: an error
        _drop(root, manifest, ids[5], "baseline", 0)
        if dirty:
            _corrupt(store, root, manifest)
        both = ("candidate", "baseline")
        selections = {
            "full": (EvalgateSelection(NAMES, ids), both),
            "pair-only": (EvalgateSelection(both, ids), ("baseline", "candidate")),
            "partial": (EvalgateSelection(both, ids[3:14]), both),
            "no-pair": (EvalgateSelection(("third", "candidate"), ids), None),
        }
        for name, (selection, pair) in selections.items():
            result = evalgate_aggregate(store, manifest, selection, pair)
            out[f"{'dirty' if dirty else 'clean'}/{name}"] = _summary(result)
    return out


def test_the_aggregate_equals_the_recorded_golden(tmp_path: Path) -> None:
    got = _scenarios(tmp_path)
    if os.environ.get("EVALGATE_WRITE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], name
    # The scenarios exercise what they claim to (so the golden is not trivially empty).
    clean, dirty = want["clean/pair-only"], want["dirty/pair-only"]
    assert clean["status"] == "incomplete" and dirty["status"] == "invalid"
    assert clean["missing"] == 2 and clean["errors"] == {"server_error": 1, "timeout": 1}
    assert clean["duplicates"] == 1 and clean["canary_hits"] == 2
    assert len(dirty["problems"]) == 8  # 6 malformed or foreign, 2 outside the suite
    assert len(clean["gate_input"]["case_ids"]) == 14 and clean["flipped"]


@pytest.mark.parametrize("dirty", [False, True])
def test_golden_scenarios_are_deterministic(tmp_path: Path, dirty: bool) -> None:
    # Segment names carry the writer ids given above, so problems name the same files each run.
    first = _scenarios(tmp_path / "a")
    second = _scenarios(tmp_path / "b")
    key = f"{'dirty' if dirty else 'clean'}/full"
    assert first[key]["problems"] == second[key]["problems"]
