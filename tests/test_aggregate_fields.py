"""aggregate.py: every field of the gate input checked against the store it came from.

One real local store, two candidates, two categories, two repetitions; every record's score,
pass, timings and tokens differ by side, case and repetition, so that a field read from the
wrong side, case, repetition or metric gets a different value. The expected values are computed
here from the table the records were written from (plain Python), not from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aggregatekit import aggregation_path  # noqa: F401 (autouse: both paths)
from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate.combine import (
    EvalgateAggregate,
    EvalgateRate,
    EvalgateSelection,
    evalgate_aggregate,
)
from pytest_evalgate.gate import rules as gate
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.policy import values as policy_values
from pytest_evalgate.store import (
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    evalgate_candidate_prefix,
    evalgate_seal,
)

URL = "simulated://?accuracy=1.0"
CANARY = "EVALGATE-CANARY-7f3a"
SIDES = ("candidate", "baseline")
CASES = [f"alpha-{i:03d}" for i in range(4)] + [f"beta-{i:03d}" for i in range(4)]
ERRORED = {("candidate", "alpha-003", 1), ("candidate", "beta-000", 0)}
MISSING = {("baseline", "beta-003", 1)}
LEAKED = ("candidate", "beta-001", 1)
CODE_CASES = Path(__file__).resolve().parent.parent / "suites" / "code" / "cases.jsonl"


def passed(side: str, case: int, rep: int) -> bool:
    """The table: the candidate fails alpha-001 rep 1 and beta-002; the baseline fails beta-001
    and alpha-002 rep 0."""
    if side == "candidate":
        return not ((case == 1 and rep == 1) or case == 6)
    return not (case == 5 or (case == 2 and rep == 0))  # alpha-002 scores exactly 0.5


def ttft(side: str, case: int, rep: int) -> float:
    return (0.5 if side == "candidate" else 0.25) + case / 64 + rep / 128


def tokens(side: str, case: int, rep: int) -> int:
    return (40 if side == "candidate" else 20) + 2 * case + rep


@pytest.fixture
def manifest(tmp_path: Path) -> EvalgateManifest:
    cases = make_cases(["alpha"], 4) + make_cases(["beta"], 4)
    path = write_suite(
        tmp_path / "s", dict.fromkeys(SIDES, URL), cases=cases, repetitions=2,
        extra={"canary": CANARY},
    )  # fmt: skip
    return evalgate_load_manifest(str(path))


def record(manifest: EvalgateManifest, side: str, index: int, rep: int) -> dict[str, Any]:
    case_id = CASES[index]
    case = manifest.evalgate_case(case_id)
    ok = passed(side, index, rep)
    output = case.target if ok else "wrong"
    if (side, case_id, rep) == LEAKED:
        output += f" {CANARY}"
    body: dict[str, Any] = {
        "identity": {"dataset_revision": manifest.dataset_revision, "case_id": case_id,
                     "candidate": side, "repetition": rep},
        "definition_digest": manifest.definition_digest,
        "candidate_key": manifest.candidates[side].key,
        "category": case.category, "cluster": case.cluster,
        "output": output, "score": float(ok), "passed": ok, "attempts": 1, "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": ttft(side, index, rep),
                   "tpot_s": ttft(side, index, rep) / 10, "e2e_s": 2 * ttft(side, index, rep),
                   "itl_p95_s": None if index % 2 else ttft(side, index, rep) / 5},
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens(side, index, rep)},
        "finish_reason": "stop", "shard": 0, "writer": "w", "started_at": "t0",
        "finished_at": "t1",
    }  # fmt: skip
    if (side, case_id, rep) in ERRORED:
        error = {"category": "timeout", "status": None, "message": "read timeout"}
        body.update(output=None, score=None, passed=None, error=error)
    return evalgate_seal(body)


@pytest.fixture
def aggregate(tmp_path: Path, manifest: EvalgateManifest) -> EvalgateAggregate:
    store = EvalgateLocalStore(str(tmp_path / "store"))
    writer = EvalgateSegmentWriter(store, "shard-0-of-1")
    for side in SIDES:
        prefix = evalgate_candidate_prefix(
            manifest.suite, manifest.definition_digest, manifest.candidates[side].key
        )
        for index, case_id in enumerate(CASES):
            for rep in range(2):
                if (side, case_id, rep) not in MISSING:
                    writer.evalgate_add(prefix, record(manifest, side, index, rep))
    writer.evalgate_commit()
    selection = EvalgateSelection(SIDES, tuple(CASES))
    return evalgate_aggregate(store, manifest, selection, SIDES)


def paired() -> list[int]:
    unpaired = {case for _, case, _ in ERRORED | MISSING}
    return [i for i, case in enumerate(CASES) if case not in unpaired]


def results(side: str) -> list[tuple[int, int]]:
    gone = {(case, rep) for s, case, rep in ERRORED | MISSING if s == side}
    return [(i, r) for i, c in enumerate(CASES) for r in range(2) if (c, r) not in gone]


def test_counts_status_errors_and_rates(aggregate: EvalgateAggregate) -> None:
    assert (aggregate.status, aggregate.partial) == ("incomplete", False)
    assert (aggregate.expected, aggregate.completed, aggregate.missing) == (32, 29, 1)
    assert dict(aggregate.errors) == {"timeout": 2}
    assert aggregate.duplicates == 0 and aggregate.problems == []
    for side in SIDES:
        done = results(side)
        for name in ("all", "alpha", "beta"):
            mine = [(i, r) for i, r in done if name == "all" or CASES[i].startswith(name)]
            rate = aggregate.rates[side][name]
            assert (rate.passed, rate.scored) == (
                sum(passed(side, i, r) for i, r in mine),
                len(mine),
            )
    assert aggregate.rates["candidate"]["all"].scored == 14
    assert aggregate.rates["baseline"]["all"].scored == 15


def test_scores_clusters_and_floor_counts_per_case(aggregate: EvalgateAggregate) -> None:
    data = aggregate.gate_input
    assert data is not None
    keep = paired()
    assert data.case_ids == tuple(CASES[i] for i in keep)
    assert data.categories.tolist() == [CASES[i].split("-")[0] for i in keep]
    assert data.clusters.tolist() == [f"{CASES[i][:-4]}-p{int(CASES[i][-3:]) // 2}" for i in keep]
    for side, scores in (("candidate", data.candidate_scores), ("baseline", data.baseline_scores)):
        expected = [(passed(side, i, 0) + passed(side, i, 1)) / 2 for i in keep]
        assert scores.tolist() == expected, side
    failed = [int(not (passed("candidate", i, 0) and passed("candidate", i, 1))) for i in keep]
    assert data.candidate_fail_counts.tolist() == failed == [0, 1, 0, 0, 1]
    assert data.candidate_trials.tolist() == [1] * len(keep)
    assert data.repetitions == (2, 2)


def test_perf_samples_belong_to_their_own_side_and_metric(aggregate: EvalgateAggregate) -> None:
    data = aggregate.gate_input
    assert data is not None
    assert set(data.perf) == {"ttft", "tpot", "itl", "e2e", "output_tokens", "chunk_counted"}
    for position, side in enumerate(SIDES):
        done = results(side)
        expect = {
            "ttft": [ttft(side, i, r) for i, r in done],
            "tpot": [ttft(side, i, r) / 10 for i, r in done],
            "e2e": [2 * ttft(side, i, r) for i, r in done],
            "itl": [ttft(side, i, r) / 5 for i, r in done if i % 2 == 0],
            "output_tokens": [float(tokens(side, i, r)) for i, r in done],
            "chunk_counted": [],  # every count here is the server's (no usage.source)
        }
        for metric, values in expect.items():
            got = data.perf[metric][position]
            assert sorted(got.tolist()) == sorted(values), (side, metric)


def test_a_perf_rule_on_the_aggregated_input_sees_the_candidate_slower(
    aggregate: EvalgateAggregate,
) -> None:
    # The named survivor: with the candidate's samples swapped for the baseline's, every ratio is 1.
    data = aggregate.gate_input
    assert data is not None
    rule = policy_values.EvalgateRule("perf_ratio", 0, metric="output_tokens_p50", limit=1.2)
    (only,) = gate.evalgate_evaluate(
        policy_values.EvalgatePolicy("t", (rule,), resamples=200), data
    ).rules
    cand = np.percentile([tokens("candidate", i, r) for i, r in results("candidate")], 50,
                         method="inverted_cdf")  # fmt: skip
    base = np.percentile([tokens("baseline", i, r) for i, r in results("baseline")], 50,
                         method="inverted_cdf")  # fmt: skip
    assert only.estimate == float(cand) / float(base) and only.estimate > 1.5
    assert not only.passed and only.n_cases == 14


def test_error_rates_count_errored_and_missing_identities_per_side(
    aggregate: EvalgateAggregate,
) -> None:
    data = aggregate.gate_input
    assert data is not None
    assert dict(data.error_rates) == {"candidate": (2, 16), "baseline": (1, 16)}


def test_flipped_cases_and_canary_hits(aggregate: EvalgateAggregate) -> None:
    keep = paired()
    flips = []
    for i in keep:
        before = (passed("baseline", i, 0) + passed("baseline", i, 1)) / 2
        after = (passed("candidate", i, 0) + passed("candidate", i, 1)) / 2
        if (before >= 0.5) != (after >= 0.5):
            flips.append({"case_id": CASES[i], "category": CASES[i].split("-")[0],
                          "baseline": before, "candidate": after})  # fmt: skip
    assert aggregate.flipped == flips
    assert [flip["case_id"] for flip in flips] == ["beta-001", "beta-002"]
    assert aggregate.canary_hits == 1
    side, case_id, rep = LEAKED
    assert [
        (i["candidate"], i["case_id"], i["repetition"]) for i in aggregate.canary_identities
    ] == [(side, case_id, rep)]


def test_no_pair_gives_no_gate_input(tmp_path: Path, manifest: EvalgateManifest) -> None:
    store = EvalgateLocalStore(str(tmp_path / "empty"))
    only = EvalgateSelection(("candidate",), tuple(CASES))
    result = evalgate_aggregate(store, manifest, only, SIDES)
    assert result.gate_input is None and result.flipped == []
    assert (result.status, result.missing, result.partial) == ("incomplete", 16, True)
    empty = evalgate_aggregate(store, manifest, EvalgateSelection(SIDES, tuple(CASES)), SIDES)
    assert empty.gate_input is not None and empty.gate_input.case_ids == ()
    assert empty.gate_input.candidate_scores.tolist() == []
    assert empty.gate_input.baseline_scores.tolist() == []
    assert dict(empty.gate_input.error_rates) == {"candidate": (16, 16), "baseline": (16, 16)}


def test_rates_combine_by_denominators_as_spec_section_6_says() -> None:
    combined = EvalgateRate(9, 10).evalgate_add(EvalgateRate(10, 20))
    assert combined == EvalgateRate(19, 30) and combined.rate == 19 / 30
    assert EvalgateRate(0, 0).rate is None and EvalgateRate(0, 4).rate == 0.0


def test_a_code_suite_gets_its_sandbox_facts_from_the_records(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in CODE_CASES.read_text().splitlines()[:4]]
    path = write_suite(
        tmp_path / "code", dict.fromkeys(SIDES, URL), cases=rows, repetitions=2,
        extra={"evaluator": {"revision": "t1", "scorer": "code", "pass_at_k": 2},
               "sandbox": {"isolation": "none", "timeout_s": 5}},
    )  # fmt: skip
    manifest = evalgate_load_manifest(str(path))
    store = EvalgateLocalStore(str(tmp_path / "store"))
    writer = EvalgateSegmentWriter(store, "shard-0-of-1")
    case_ids = [row["id"] for row in rows]
    outcomes = {"candidate": ["passed", "passed", "failed", "timeout"],
                "baseline": ["passed", "failed", "failed", "failed"]}  # fmt: skip
    for side in SIDES:
        prefix = evalgate_candidate_prefix(
            manifest.suite, manifest.definition_digest, manifest.candidates[side].key
        )
        for i, case_id in enumerate(case_ids):
            for rep in range(2):
                if side == "baseline" and i == 3 and rep == 1:
                    error = {"category": "sandbox", "status": None, "message": "no sandbox"}
                    record = _code_record(manifest, side, case_id, None, error, rep)
                    writer.evalgate_add(prefix, record)
                    continue
                # the candidate's case 0 fails its second repetition: pass@2 1.0, mean 0.5
                outcome = "failed" if (side, i, rep) == ("candidate", 0, 1) else outcomes[side][i]
                # every member a real record's sandbox facts hold (store.recordcheck)
                facts = {"outcome": outcome, "message": "", "exit_status": 0,
                         "isolation": "none", "sandboxed": False,
                         "start_s": 0.01 * (i + 1), "run_s": 0.1 * (i + 1)}  # fmt: skip
                writer.evalgate_add(prefix, _code_record(manifest, side, case_id, facts, None, rep))
    writer.evalgate_commit()
    result = evalgate_aggregate(store, manifest, EvalgateSelection(SIDES, tuple(case_ids)), SIDES)
    facts = result.sandbox
    assert facts is not None and result.canary_hits == 0 and result.canary_identities == []
    assert facts["outcomes"] == {
        "baseline": {"failed": 5, "passed": 2},
        "candidate": {"failed": 3, "passed": 3, "timeout": 2},
    }
    assert (facts["executions"], facts["sandbox_errors"], facts["unsandboxed_executions"]) == (
        15,
        1,
        15,
    )
    assert facts["isolation"] == ["none"] and facts["sandboxed"] is False
    assert facts["pass_at_k"] == 2
    # nearest rank over 0.01..0.04 twice (candidate) and 0.01..0.03 twice, 0.04 once (baseline)
    assert facts["start_s"] == {"p50": 0.02, "p95": 0.04}  # the 8th and 15th of 15
    assert facts["run_s"]["p95"] == 0.4
    data = result.gate_input
    assert data is not None and data.case_ids == tuple(case_ids[:3])  # case 3 is unpaired
    assert data.candidate_scores.tolist() == [1.0, 1.0, 0.0]  # pass@2, not the mean 0.5
    assert data.baseline_scores.tolist() == [1.0, 0.0, 0.0]


def _code_record(
    manifest: EvalgateManifest, side: str, case_id: str, facts: Any, error: Any, rep: int
) -> dict[str, Any]:
    case = manifest.evalgate_case(case_id)
    ok = facts is not None and facts["outcome"] == "passed"
    body: dict[str, Any] = {
        "identity": {"dataset_revision": manifest.dataset_revision, "case_id": case_id,
                     "candidate": side, "repetition": rep},
        "definition_digest": manifest.definition_digest,
        "candidate_key": manifest.candidates[side].key,
        "category": case.category, "cluster": case.cluster,
        "output": None if error else "code", "score": None if error else float(ok),
        "passed": None if error else ok, "attempts": 1, "error": error,
        "timing": {"queued_s": 0.0, "ttft_s": 0.01, "tpot_s": 0.001, "e2e_s": 0.02,
                   "itl_p95_s": None},
        "usage": {"prompt_tokens": 5, "completion_tokens": 2}, "finish_reason": "stop",
        "shard": 0, "writer": "w", "started_at": "t0", "finished_at": "t1",
    }  # fmt: skip
    if facts is not None:
        body["sandbox"] = facts
    return evalgate_seal(body)


def test_error_rates_are_keyed_by_role_whatever_the_candidates_are_called(tmp_path: Path) -> None:
    # Names that are not the role names: a swap of role and name cannot pass unnoticed.
    names = ("new-weights", "old-weights")
    cases = make_cases(["alpha"], 4)
    path = write_suite(tmp_path / "s", dict.fromkeys(names, URL), cases=cases, repetitions=1)
    named = evalgate_load_manifest(str(path))
    store = EvalgateLocalStore(str(tmp_path / "store"))
    writer = EvalgateSegmentWriter(store, "shard-0-of-1")
    failing = {("new-weights", 0), ("new-weights", 1), ("old-weights", 3)}
    for name in names:
        key = named.candidates[name].key
        for index, case in enumerate(named.cases):
            body: dict[str, Any] = {
                "identity": {"dataset_revision": named.dataset_revision, "case_id": case.case_id,
                             "candidate": name, "repetition": 0},
                "definition_digest": named.definition_digest, "candidate_key": key,
                "category": case.category, "cluster": case.cluster, "output": case.target,
                "score": 1.0, "passed": True, "attempts": 1, "error": None,
                "timing": {"queued_s": 0.0, "ttft_s": 0.1, "tpot_s": 0.01, "e2e_s": 0.2,
                           "itl_p95_s": None},
                "usage": {"prompt_tokens": 5, "completion_tokens": 3}, "finish_reason": "stop",
                "shard": 0, "writer": "w", "started_at": "t0", "finished_at": "t1",
            }  # fmt: skip
            if (name, index) in failing:
                error = {"category": "timeout", "status": None, "message": "read timeout"}
                body.update(output=None, score=None, passed=None, error=error)
            prefix = evalgate_candidate_prefix(named.suite, named.definition_digest, key)
            writer.evalgate_add(prefix, evalgate_seal(body))
    writer.evalgate_commit()
    ids = tuple(case.case_id for case in named.cases)
    forward = evalgate_aggregate(store, named, EvalgateSelection(names, ids), names)
    assert forward.gate_input is not None
    assert dict(forward.gate_input.error_rates) == {"candidate": (2, 4), "baseline": (1, 4)}
    assert forward.gate_input.case_ids == (ids[2],)  # paired: neither side errored
    backward = evalgate_aggregate(store, named, EvalgateSelection(names, ids), names[::-1])
    assert backward.gate_input is not None
    assert dict(backward.gate_input.error_rates) == {"candidate": (1, 4), "baseline": (2, 4)}


def test_flips_cross_one_half_either_way_and_a_nan_counts_as_below() -> None:
    from types import SimpleNamespace

    from pytest_evalgate.aggregate.paired import flipped as _flipped

    data = SimpleNamespace(
        case_ids=("a", "b", "c", "d", "e", "f"),
        categories=np.array(["k", "k", "j", "j", "k", "j"]),
        baseline_scores=np.array([0.0, 1.0, np.nan, 0.5, 0.49, np.nan]),
        candidate_scores=np.array([1.0, 1.0, 1.0, 0.4, 0.5, 0.0]),
    )
    flips = _flipped(data)  # type: ignore[arg-type]
    assert [(f["case_id"], f["category"], f["candidate"]) for f in flips] == [
        ("a", "k", 1.0), ("c", "j", 1.0), ("d", "j", 0.4), ("e", "k", 0.5),
    ]  # fmt: skip
    assert all(type(f["baseline"]) is float and type(f["candidate"]) is float for f in flips)
    assert flips[1]["baseline"] != flips[1]["baseline"]  # the NaN is kept as it was
