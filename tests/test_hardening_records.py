"""Issue 19 (part A): stored records checked by type and against the suite; aggregate mode.

A real run (the plugin, simulated candidates on loopback) fills a store once per module; each
case copies it, changes one committed record the way a hand edit would (fields changed and the
checksum recomputed, "resealed"), and gates the copy with ``evalgate gate``: the verdict must be
INVALID (exit 1), the summary must name the segment file, the line and the identity with the
reason, and no committed byte may change. The unchanged copy gates PASS, so each failure is the
edit's doing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from suitekit import write_suite

from pytest_evalgate.cli import main
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.store import evalgate_candidate_prefix, evalgate_seal

GOOD = "simulated://?accuracy=1.0&seed=1"
Capsys = pytest.CaptureFixture[str]


@dataclass(frozen=True)
class _Filled:
    suite: Path
    store: Path
    manifest: EvalgateManifest


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> _Filled:
    """A suite (12 cases, 2 categories, 2 candidates) and a store a real run filled."""
    folder = tmp_path_factory.mktemp("filled")
    path = write_suite(folder / "suite", {"candidate": GOOD, "baseline": GOOD})
    store = folder / "store"
    argv = [sys.executable, "-m", "pytest", "--evalgate", "suite", f"--evalgate-store={store}"]
    argv += ["-p", "no:cacheprovider", "-p", "no:randomly", "-q"]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return _Filled(path.parent, store, evalgate_load_manifest(str(path)))


def _committed(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*.jsonl"))}


def _segment(filled: _Filled, store: Path) -> Path:
    candidate = filled.manifest.candidates["candidate"]
    prefix = evalgate_candidate_prefix(
        filled.manifest.suite, filled.manifest.definition_digest, candidate.key
    )
    segments = sorted((store / prefix).rglob("seg-*.jsonl"))
    assert segments, "the run committed no segment"
    return segments[0]


_Edit = Callable[[dict[str, Any]], bytes]


def _edited_store(filled: _Filled, tmp_path: Path, edit: _Edit) -> tuple[Path, Path]:
    store = tmp_path / "store"
    shutil.copytree(filled.store, store)
    segment = _segment(filled, store)
    lines = segment.read_bytes().splitlines()
    record = json.loads(lines[0])
    lines[0] = edit(record)
    os.chmod(segment, 0o644)
    segment.write_bytes(b"\n".join(lines) + b"\n")
    return store, segment


def _resealed(**changes: Any) -> Callable[[dict[str, Any]], bytes]:
    def edit(record: dict[str, Any]) -> bytes:
        identity = dict(record["identity"], **changes.pop("identity", {}))
        return evalgate_canonical_json(evalgate_seal({**record, **changes, "identity": identity}))

    return edit


def _other_category(filled: _Filled, case_id: str) -> str:
    category = filled.manifest.evalgate_case(case_id).category
    return next(c for c in filled.manifest.categories if c != category)


def _gate(filled: _Filled, store: Path, capsys: Capsys) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["gate", str(filled.suite), "--store", str(store)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out


def test_the_unchanged_store_gates_pass(filled: _Filled, tmp_path: Path, capsys: Capsys) -> None:
    store = tmp_path / "store"
    shutil.copytree(filled.store, store)
    status, out = _gate(filled, store, capsys)
    assert status == 0 and "verdict PASS" in out


def _nan_score_with_a_valid_checksum(record: dict[str, Any]) -> bytes:
    # What a writer with allow_nan=True would store: the checksum is right for these bytes.
    body = {key: value for key, value in record.items() if key != "checksum"}
    body["score"] = float("nan")
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    checksum = hashlib.sha256(text.encode()).hexdigest()
    line = json.dumps({**body, "checksum": checksum}, sort_keys=True, separators=(",", ":"))
    return line.encode()


CASES: dict[str, tuple[Callable[..., Any], str]] = {
    "moved-category": (lambda f, r: _resealed(category=_other_category(f, r)), "category "),
    "other-cluster": (lambda f, r: _resealed(cluster="elsewhere"), "cluster 'elsewhere' differs"),
    "unknown-case": (
        lambda f, r: _resealed(identity={"case_id": "no-such-case"}),
        "case id 'no-such-case' is not in the suite's dataset",
    ),
    "repetition-out-of-range": (
        lambda f, r: _resealed(identity={"repetition": 3}),
        "repetition 3 is outside 0..0",
    ),
    "foreign-candidate": (
        lambda f, r: _resealed(identity={"candidate": "baseline"}),
        "candidate 'baseline' in the folder of 'candidate'",
    ),
    "score-above-one": (lambda f, r: _resealed(score=1.5), "score must be a finite number in 0..1"),
    "score-as-text": (lambda f, r: _resealed(score="1.0"), "score must be a finite number"),
    "repetition-as-bool": (
        lambda f, r: _resealed(identity={"repetition": True}),
        "identity.repetition must be an integer >= 0",
    ),
    "negative-time": (
        lambda f, r: _resealed(timing={"queued_s": 0.0, "e2e_s": -1.0}),
        "timing.e2e_s must be a finite number >= 0",
    ),
    "nan-score-valid-checksum": (
        lambda f, r: _nan_score_with_a_valid_checksum,
        "score must be a finite number in 0..1 or null, not nan",
    ),
    "flagged-usage-keeping-counts": (
        lambda f, r: _resealed(usage={"prompt_tokens": 3, "completion_tokens": 5, "flagged": "x"}),
        "usage.flagged must be a reason with both token counts null",
    ),
    "flagged-usage-not-text": (
        lambda f, r: _resealed(
            usage={"prompt_tokens": None, "completion_tokens": None, "flagged": 1}
        ),
        "usage.flagged must be a reason with both token counts null",
    ),
    "usage-foreign-member": (
        lambda f, r: _resealed(usage={"prompt_tokens": 3, "completion_tokens": 5, "cost": 1}),
        "usage must be an object with members completion_tokens, prompt_tokens",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_edited_and_resealed_record_makes_the_run_invalid(
    filled: _Filled, tmp_path: Path, capsys: Capsys, name: str
) -> None:
    make, reason = CASES[name]
    first_case = json.loads(_segment(filled, filled.store).read_bytes().splitlines()[0])
    case_id = first_case["identity"]["case_id"]
    store, segment = _edited_store(filled, tmp_path, make(filled, case_id))
    before = _committed(store)
    status, out = _gate(filled, store, capsys)
    assert status == 1
    assert "verdict INVALID" in out
    relative = str(segment.relative_to(store))
    lines = [line for line in out.splitlines() if line.startswith("INVALID: ")]
    assert len(lines) == 1, out
    assert lines[0].startswith(f"INVALID: {relative}:1: ")
    assert reason in lines[0]
    assert case_id in lines[0] or name == "unknown-case"
    assert _committed(store) == before  # gating changed no committed record


def test_a_flagged_usage_with_null_counts_is_a_valid_record(
    filled: _Filled, tmp_path: Path, capsys: Capsys
) -> None:
    # what the client stores for implausible usage numbers (client.checks): no counts, a reason
    flagged = {"prompt_tokens": None, "completion_tokens": None, "flagged": "negative usage"}
    store, _segment_path = _edited_store(filled, tmp_path, _resealed(usage=flagged))
    status, out = _gate(filled, store, capsys)
    assert "INVALID" not in out
    assert status == 0, out


# --------------------------------------------------------------------------- aggregate mode


def _pytester_suite(pytester: pytest.Pytester, baseline: str) -> Path:
    return write_suite(pytester.path / "suite", {"candidate": GOOD, "baseline": baseline})


def test_aggregate_mode_reports_each_items_stored_outcome(pytester: pytest.Pytester) -> None:
    _pytester_suite(pytester, "simulated://?accuracy=0.0&seed=2")
    args = ("--evalgate", "suite", "-p", "no:cacheprovider")
    pytester.runpytest(*args).assert_outcomes(passed=12 + 1, failed=12)
    result = pytester.runpytest(*args, "--evalgate-aggregate")
    result.assert_outcomes(passed=12 + 1, failed=12)  # +1: the gate rule's testcase
    assert result.ret == 0
    out = result.stdout.str()
    assert "no committed record" not in out
    result.stdout.fnmatch_lines(["*wrong answer [[]alpha]: score 0.00*", "*verdict PASS*"])


def test_aggregate_mode_over_an_edited_store_is_invalid_and_names_the_record(
    pytester: pytest.Pytester,
) -> None:
    path = _pytester_suite(pytester, GOOD)
    store = pytester.path / "store"
    args = ("--evalgate", "suite", f"--evalgate-store={store}", "-p", "no:cacheprovider")
    pytester.runpytest(*args).assert_outcomes(passed=25)
    filled = _Filled(path.parent, store, evalgate_load_manifest(str(path)))
    segment = _segment(filled, store)
    lines = segment.read_bytes().splitlines()
    record = json.loads(lines[0])
    lines[0] = _resealed(category=_other_category(filled, record["identity"]["case_id"]))(record)
    os.chmod(segment, 0o644)
    segment.write_bytes(b"\n".join(lines) + b"\n")
    result = pytester.runpytest(*args, "--evalgate-aggregate")
    assert result.ret == 1
    result.assert_outcomes(passed=23 + 1, errors=1)  # the edited identity is the error
    out = result.stdout.str()
    assert "verdict INVALID" in out
    assert f"INVALID: {segment.relative_to(store)}:1: " in out
    assert "no result [missing]: no committed record in the store that verifies" in out


def test_an_unreadable_segment_makes_the_run_invalid_naming_it(
    filled: _Filled, tmp_path: Path, capsys: Capsys
) -> None:
    store = tmp_path / "store"
    shutil.copytree(filled.store, store)
    folder = _segment(filled, store).parent
    (folder / "seg-gone-000001.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    status, out = _gate(filled, store, capsys)
    assert status == 1 and "verdict INVALID" in out
    assert f"{(folder / 'seg-gone-000001.jsonl').relative_to(store)}" in out


def test_a_record_that_cannot_be_canonicalised_never_carries_its_checksum() -> None:
    from pytest_evalgate.store import evalgate_checksum_ok

    body = {"score": float("nan"), "checksum": "0" * 64}
    line = json.dumps(body).encode()
    assert evalgate_checksum_ok(line, body) is False


def _judgment(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "judgment": {"dataset_revision": "r", "case_id": "c", "candidate": "candidate",
                     "repetition": 0, "order": None},
        "judge_key": "k" * 64, "definition_digest": "d" * 64, "answers": ["a" * 64],
        "baseline": None, "category": "alpha", "cluster": "c", "output": "{}",
        "verdict": {"score": 4, "value": 0.75, "passed": True, "reason": "fine"},
        "error": None, "attempts": 1, "e2e_s": 0.1, "writer": "w",
        "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:00:01+00:00",
    }  # fmt: skip
    body.update(changes)
    return body


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"verdict": {"score": 4, "value": float("nan"), "passed": True}}, "value in 0..1"),
        ({"verdict": {"score": 4, "value": 1.5, "passed": True}}, "value in 0..1"),
        ({"verdict": {"winner": "C", "reason": ""}}, "winner must be A, B or tie"),
        ({"verdict": {"score": 4, "value": 0.5, "passed": 1}}, "passed must be true or false"),
        ({"e2e_s": float("inf")}, "e2e_s must be a finite number"),
        ({"answers": "abc"}, "answers must be a list"),
    ],
)
def test_a_judgment_with_wrong_values_is_malformed(changes: dict[str, Any], reason: str) -> None:
    from pytest_evalgate.store.recordcheck import evalgate_judgment_problem

    assert evalgate_judgment_problem(_judgment()) is None
    problem = evalgate_judgment_problem(_judgment(**changes))
    assert problem is not None and problem.startswith("malformed judgment: ")
    assert reason in problem
