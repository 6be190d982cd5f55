"""Which weights answered (issue 30), from outside: ``pytest --evalgate`` against a simulator on
127.0.0.1 that answers under another model name (its ``served_model`` knob).

Without the opt-out the candidate is stopped after its first answer (``model_mismatch``, an
endpoint error, never a wrong answer), its other items are not requested, and the session
ends ``incomplete`` with exit status 1; with ``model_rewrite: true`` the run passes and every
record keeps the name the endpoint reported and its ``system_fingerprint``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from suitekit import write_suite

GOOD = "simulated://?accuracy=1.0&seed=1"
RENAMED = "simulated://?accuracy=1.0&seed=1&served_model=other-weights-7b"
CASES = 12  # suitekit's default: 2 categories x 6
FINGERPRINT = "evalgate-simulator"
WORKERS = [pytest.param([], id="one-process"), pytest.param(["-n", "2"], id="xdist")]


def _suite(pytester: pytest.Pytester, *, rewrite: bool, stream: bool = True) -> None:
    path = write_suite(
        pytester.path / "suite", {"candidate": RENAMED, "baseline": GOOD}, extra={"stream": stream}
    )
    if rewrite:  # suitekit writes no candidate-level keys beyond the usual ones
        manifest = yaml.safe_load(path.read_text())
        manifest["candidates"]["candidate"]["model_rewrite"] = True
        path.write_text(yaml.safe_dump(manifest, sort_keys=False))


def _run(pytester: pytest.Pytester, *extra: str) -> pytest.RunResult:
    # in this process: what is asserted is the session's output and records, not the process's
    # (the simulators, the runner's child and xdist's workers are still processes of their own)
    return pytester.runpytest_inprocess(
        "--evalgate", "suite", "--evalgate-store=store", "-p", "no:cacheprovider", "--tb=line",
        "-rs", f"--evalgate-request-log={pytester.path / 'requests.jsonl'}", *extra,
    )  # fmt: skip


def _records(pytester: pytest.Pytester, candidate: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted((pytester.path / "store").rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("identity", {}).get("candidate") == candidate:
                rows.append(record)
    return rows


def _requests(pytester: pytest.Pytester, candidate: str) -> int:
    lines = (pytester.path / "requests.jsonl").read_text().splitlines()
    return sum(f"/{candidate}/" in str(json.loads(line).get("identity")) for line in lines)


@pytest.mark.parametrize("workers", WORKERS)
def test_an_endpoint_answering_as_another_model_stops_the_candidate(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    _suite(pytester, rewrite=False)
    result = _run(pytester, *workers)
    text = result.stdout.str()
    assert result.ret == 1, text
    outcomes = result.parseoutcomes()
    assert "failed" not in outcomes  # never scored as a wrong answer
    assert outcomes.get("passed") == CASES  # the baseline's
    probes = outcomes.get("errors", 0)
    assert 1 <= probes <= (2 if workers else 1)  # one probe per process holding its items
    assert outcomes.get("skipped") == CASES - probes  # the rest were not requested
    result.stdout.fnmatch_lines(
        [
            "*endpoint error [[]model_mismatch] (HTTP 200) after 1 attempt(s): candidate"
            " 'candidate': the endpoint answered as model 'other-weights-7b', the manifest says"
            " 'model-candidate'; the candidate is stopped (set"
            " candidates.candidate.model_rewrite: true if a gateway rewrites model names)*",
        ]
    )
    assert "candidate 'candidate' was stopped after model_mismatch" in text
    assert "verdict INCOMPLETE" in text and "verdict PASS" not in text
    assert re.search(rf"errors model_mismatch {probes}\b", text), text
    assert _requests(pytester, "candidate") == probes
    records = _records(pytester, "candidate")
    assert len(records) == probes  # only the probes; the rest stay missing for the next run
    for record in records:
        assert record["error"]["category"] == "model_mismatch"
        assert record["error"]["status"] == 200
        assert (record["score"], record["passed"]) == (None, None)
        assert (record["model"], record["system_fingerprint"]) == ("other-weights-7b", FINGERPRINT)
    baseline = _records(pytester, "baseline")
    assert len(baseline) == CASES
    assert {(r["model"], r["system_fingerprint"]) for r in baseline} == {
        ("model-baseline", FINGERPRINT)
    }


@pytest.mark.parametrize(
    ("stream", "workers"),
    [pytest.param(True, [], id="streamed"), pytest.param(False, ["-n", "2"], id="whole-xdist")],
)
def test_the_opt_out_passes_and_the_records_keep_the_reported_model(
    pytester: pytest.Pytester, stream: bool, workers: list[str]
) -> None:
    _suite(pytester, rewrite=True, stream=stream)
    result = _run(pytester, *workers, "--evalgate-report=rep")
    text = result.stdout.str()
    assert result.ret == 0, text
    assert "verdict PASS" in text and "model_mismatch" not in text
    weights = json.loads((pytester.path / "rep/decision.json").read_text())["weights"]
    assert weights["model_check"] == "off: model_rewrite (a gateway renames)"  # said, not hidden
    assert result.parseoutcomes().get("passed") == 2 * CASES + 1  # and the gate rule
    records = _records(pytester, "candidate")
    assert len(records) == CASES and all(r["error"] is None for r in records)
    assert {(r["model"], r["system_fingerprint"]) for r in records} == {
        ("other-weights-7b", FINGERPRINT)
    }
