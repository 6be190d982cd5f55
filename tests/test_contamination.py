"""Contamination (issue 16, SPEC section 12): a canary in an answer fails the verdict naming the
identities; ``evalgate canary-scan`` streams training files and names file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate.contamination import (
    evalgate_canary_identities,
    evalgate_contaminated_verdict,
    evalgate_scan_file,
)
from pytest_evalgate.cli import main
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.simulated.answers import evalgate_prompt_digest
from pytest_evalgate.simulated.canary import evalgate_sim_leaks
from pytest_evalgate.simulated.draws import evalgate_sim_salt
from pytest_evalgate.simulated.knobs import evalgate_parse_simulated_url

CANARY = "EVALGATE-CANARY-0badc0de"
RATE = 1 / 600
POLICY: dict[str, Any] = {
    "version": "canary-v1",
    "bootstrap": {"resamples": 1000, "seed": 0},
    "rules": [{"slice": "all", "rule": "non_inferior", "margin": 0.2}],
}


def _url(seed: int, rate: float = RATE) -> str:
    return f"simulated://?accuracy=0.9&seed={seed}&canary={CANARY}&canary_rate={rate:.6f}"


def _leaks(manifest_path: Path, url: str) -> list[str]:
    """Case ids whose prompt the simulator at ``url`` answers with the canary (at temperature 0)."""
    manifest = evalgate_load_manifest(str(manifest_path))
    config = evalgate_parse_simulated_url(url)
    model = manifest.candidates["candidate"].model
    return [
        case.case_id
        for case in manifest.cases
        if evalgate_sim_leaks(
            config,
            evalgate_sim_salt(
                config, model, evalgate_prompt_digest(case.evalgate_prompt_json()), 0.0, 7
            ),
        )
    ]


def _suite(folder: Path, url: str) -> Path:
    return write_suite(
        folder,
        {"candidate": url, "baseline": "simulated://?accuracy=0.9&seed=2"},
        cases=make_cases(["alpha", "beta", "gamma"], 200),
        policy=POLICY,
        repetitions=2,
        budget={"max_concurrency": 32, "max_attempts": 2, "timeout_s": 10},
        extra={"canary": CANARY},
    )


def _one_leak_seed(folder: Path) -> tuple[int, str]:
    for seed in range(1, 200):
        path = _suite(folder, _url(seed))
        leaks = _leaks(path, _url(seed))
        if len(leaks) == 1:
            return seed, leaks[0]
    raise AssertionError("no seed leaks exactly once")


def test_one_canary_in_600_answers_fails_the_verdict(pytester: pytest.Pytester) -> None:
    _seed, case_id = _one_leak_seed(pytester.path / "suite")
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-report=rep"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*verdict FAIL*",
            "*non_inferior[[]all]*pass: passes*",
            f"*CONTAMINATED: contaminated: the model has seen this suite; canary in "
            f"candidate::{case_id}[[]r0], candidate::{case_id}[[]r1]*",
        ]
    )
    decision = json.loads((pytester.path / "rep" / "decision.json").read_text())
    assert decision["verdict"] == "fail" and decision["canary_hits"] == 2
    assert all(rule["passed"] for rule in decision["rules"])
    named = decision["contamination"]["identities"]
    assert [(i["case_id"], i["repetition"], i["candidate"]) for i in named] == [
        (case_id, 0, "candidate"),
        (case_id, 1, "candidate"),
    ]
    assert decision["contamination"]["reason"] == "contaminated: the model has seen this suite"


def test_a_clean_run_of_the_same_suite_passes(pytester: pytest.Pytester) -> None:
    _suite(pytester.path / "suite", _url(3, rate=0.0))
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-report=rep"
    )
    assert result.ret == 0
    decision = json.loads((pytester.path / "rep" / "decision.json").read_text())
    assert "contamination" not in decision and decision["verdict"] == "pass"


def test_canary_identities_and_verdict_rules() -> None:
    def record(case: str, output: str | None) -> dict[str, Any]:
        identity = {"dataset_revision": "r", "case_id": case, "candidate": "c", "repetition": 0}
        return {"identity": identity, "output": output}

    records = [record("b", f"x {CANARY}"), record("a", "clean"), record("c", None)]
    assert [i["case_id"] for i in evalgate_canary_identities(CANARY, records)] == ["b"]
    assert evalgate_canary_identities(None, records) == []
    hit = [{"case_id": "b"}]
    assert evalgate_contaminated_verdict("pass", hit) == "fail"
    assert evalgate_contaminated_verdict("partial", hit) == "fail"
    assert evalgate_contaminated_verdict("incomplete", hit) == "fail"
    assert evalgate_contaminated_verdict("invalid", hit) == "invalid"
    assert evalgate_contaminated_verdict("pass", []) == "pass"


# ----------------------------------------------------------------------------- canary-scan


def test_scan_finds_a_canary_straddling_chunks(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    lines = [f"clean line number {i}" for i in range(1000)]
    lines[10] = f"prefix {CANARY} and again {CANARY}"
    lines[777] = f"{CANARY}"
    path.write_text("\n".join(lines) + "\n")
    for chunk in (1, 7, 16, 64, 1 << 20):
        hits = [hit.line for hit in evalgate_scan_file(str(path), CANARY, chunk=chunk)]
        assert hits == [11, 778], chunk


def test_scan_streams_a_large_file_without_newlines(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    with path.open("wb") as handle:
        for _ in range(24):  # 24 MiB of one line, the canary at the very end
            handle.write(b"\xff" * (1 << 20))
        handle.write(CANARY.encode())
    assert [hit.line for hit in evalgate_scan_file(str(path), CANARY)] == [1]


def test_canary_scan_command_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = _suite(tmp_path / "suite", "simulated://?seed=1")
    dirty, clean = tmp_path / "dirty.jsonl", tmp_path / "clean.jsonl"
    dirty.write_text('{"text": "a"}\n{"text": "b"}\n{"text": "' + CANARY + '"}\n')
    clean.write_text('{"text": "a"}\n')
    assert main(["canary-scan", str(suite.parent), str(clean), str(dirty)]) == 1
    out = capsys.readouterr().out
    assert f"{dirty}:3: contains the canary of test-suite" in out
    assert str(clean) + ":" not in out
    assert main(["canary-scan", str(suite.parent), str(clean)]) == 0


def test_canary_scan_refuses_a_suite_without_canary_or_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(tmp_path / "plain", {"candidate": "simulated://?seed=1"})
    data = tmp_path / "d.txt"
    data.write_text("x\n")
    assert main(["canary-scan", str(suite.parent), str(data)]) == 4
    assert "the suite has no canary" in capsys.readouterr().err
    canary_suite = _suite(tmp_path / "suite", "simulated://?seed=1")
    assert main(["canary-scan", str(canary_suite.parent), str(tmp_path / "nope")]) == 4
