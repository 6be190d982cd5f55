"""Conversations and tool loops end to end (SPEC 17, issue 31): real ``pytest --evalgate`` runs
against the built-in simulator's tool style, with and without ``-n 2``; bad fixtures refused
before any request; a SIGKILLed run with a side-effecting mock service rerun to exactly once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from suitekit import write_suite

ROOT = Path(__file__).resolve().parent.parent
ORDER = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
FIXTURE: dict[str, Any] = {
    "revision": "tools-v1",
    "tools": [
        {
            "name": "lookup_order",
            "description": "Look up an order.",
            "parameters": ORDER,
            "results": [
                {"when": {"order_id": f"A{i}"}, "result": {"status": f"status{i}"}}
                for i in range(8)
            ],
        },
        {"name": "delete_account", "parameters": ORDER, "side_effects": True, "results": []},
    ],
}
TOOLS: dict[str, Any] = {
    "fixture": "tools.yaml",
    "revision": "tools-v1",
    "max_steps": 4,
    "max_tool_calls": 6,
}


def _lookup_rows(count: int = 8) -> list[dict[str, Any]]:
    return [
        {
            "id": f"lookup-{i:03d}",
            "category": "lookup" if i % 2 else "status",
            "input": f"What is the status of order A{i}?",
            "target": f"status{i}",
            "expect": {
                "calls": [{"name": "lookup_order", "arguments": {"order_id": f"A{i}"}}],
                "forbidden": ["delete_account"],
                "max_calls": 2,
            },
        }
        for i in range(count)
    ]


def _tool_suite(folder: Path, candidates: dict[str, str], **extra: Any) -> Path:
    doc = extra.pop("fixture_doc", FIXTURE)
    path = write_suite(
        folder,
        candidates,
        cases=_lookup_rows(),
        extra={
            "evaluator": {"revision": "e1", "scorer": "tools"},
            "tools": TOOLS,
            **extra,
        },
    )
    (folder / "tools.yaml").write_text(yaml.safe_dump(doc))
    return path


def _sim(**knobs: Any) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"accuracy": 1.0, "seed": 1, **knobs}.items())
    return f"simulated://?{query}"


def _records(store: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(store.rglob("seg-*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def _decision(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "decision.json").read_text()))


# -- tool loops --------------------------------------------------------------------------------


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_a_tool_loop_passes_with_the_required_call_and_fails_on_a_forbidden_one(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    # tool_accuracy=0: every case calls the first tool its plan does not use, delete_account
    _tool_suite(
        pytester.path / "suite",
        {"candidate": _sim(), "baseline": _sim(tool_accuracy=0, seed=2)},
    )
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "--evalgate-report", "out", *xdist
    )
    result.assert_outcomes(passed=8 + 1, failed=8)  # +1: the gate rule
    result.stdout.fnmatch_lines(["*verdict PASS*", "*identities completed 16/16*"])
    result.stdout.fnmatch_lines(["*missing call lookup_order; forbidden call delete_account*"])
    assert "status3" not in result.stdout.str()  # no eval text in the failure lines
    dialogue = _decision(pytester.path / "out")["dialogue"]
    assert dialogue["candidate"]["all"]["identities"] == 8
    assert dialogue["candidate"]["all"]["tool_calls"] == 8  # one lookup per case
    assert dialogue["candidate"]["all"]["steps"] == 16  # the call, then the answer
    assert dialogue["baseline"]["lookup"]["identities"] == 4
    records = _records(pytester.path / ".evalgate")
    good = [r for r in records if r["identity"]["candidate"] == "candidate"]
    assert {r["score"] for r in good} == {1.0}
    transcript = good[0]["dialogue"]["transcript"]
    assert [m["role"] for m in transcript] == ["assistant", "tool", "assistant"]
    assert transcript[0]["tool_calls"][0]["function"]["name"] == "lookup_order"


def test_invalid_arguments_are_counted_as_tool_call_invalid_never_as_errors(
    pytester: pytest.Pytester,
) -> None:
    _tool_suite(
        pytester.path / "suite",
        {"candidate": _sim(tool_invalid=1), "baseline": _sim(seed=2)},
    )
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider",
                                "--evalgate-report", "out")  # fmt: skip
    result.stdout.fnmatch_lines(["*tool_call_invalid (lookup_order, step 0)*", "*errors none*"])
    counts = _decision(pytester.path / "out")["dialogue"]["candidate"]
    assert counts["all"]["tool_call_invalid"] == 8 and counts["lookup"]["tool_call_invalid"] == 4
    assert _decision(pytester.path / "out")["dialogue"]["baseline"]["all"]["tool_call_invalid"] == 0
    report = (pytester.path / "out" / "report.md").read_text()
    assert "`candidate.all.tool_call_invalid` | 8" in report


def test_a_model_that_never_stops_calling_ends_by_max_steps(pytester: pytest.Pytester) -> None:
    _tool_suite(
        pytester.path / "suite",
        {"candidate": _sim(tool_loop=1), "baseline": _sim(seed=2)},
    )
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider",
                                "--evalgate-report", "out")  # fmt: skip
    result.stdout.fnmatch_lines(["*ended by max_steps before a final answer*"])
    counts = _decision(pytester.path / "out")["dialogue"]["candidate"]["all"]
    assert counts["max_steps"] == 8 and counts["steps"] == 8 * TOOLS["max_steps"]
    records = [
        r
        for r in _records(pytester.path / ".evalgate")
        if r["identity"]["candidate"] == "candidate"
    ]
    assert {r["dialogue"]["end"] for r in records} == {"max_steps"}
    assert {r["passed"] for r in records} == {False} and all(r["error"] is None for r in records)


def test_the_fixtures_revision_and_digest_are_in_the_definition(tmp_path: Path) -> None:
    from pytest_evalgate.manifest.load import evalgate_load_manifest

    path = _tool_suite(tmp_path / "s", {"candidate": _sim()})
    first = evalgate_load_manifest(str(path))
    assert first.definition["tools"]["revision"] == "tools-v1"
    doc = json.loads(json.dumps(FIXTURE))
    doc["tools"][0]["description"] = "Look an order up."  # the same revision, other bytes
    (tmp_path / "s" / "tools.yaml").write_text(yaml.safe_dump(doc))
    second = evalgate_load_manifest(str(path))
    assert second.definition_digest != first.definition_digest


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        ({"evaluator": {"revision": "e1", "scorer": "exact"}}, "evaluator.scorer", "scored by"),
        ({"tools": {**TOOLS, "revision": "tools-v9"}}, "revision", "is not the manifest's"),
        ({"tools": {**TOOLS, "fixture": "missing.yaml"}}, "tools.fixture", "cannot read"),
    ],
)
def test_bad_tools_keys_are_exit_4_before_any_request(
    pytester: pytest.Pytester, change: dict[str, Any], key: str, reason: str
) -> None:
    _tool_suite(pytester.path / "suite", {"candidate": _sim()}, **change)
    log = pytester.path / "requests.log"
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider",
                                "--evalgate-request-log", str(log))  # fmt: skip
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*{key}*{reason}*"])
    assert not log.exists() or log.read_text() == ""


def test_an_expect_naming_an_undeclared_tool_names_the_dataset_line(
    pytester: pytest.Pytester,
) -> None:
    rows = _lookup_rows()
    rows[2]["expect"]["forbidden"] = ["wipe_disk"]
    path = _tool_suite(pytester.path / "suite", {"candidate": _sim()})
    (pytester.path / "suite" / "cases.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    subprocess.run([sys.executable, "-m", "pytest_evalgate.cli", "pin", str(path)], check=True)
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*cases.jsonl*line 3*expect*'wipe_disk'*does not declare*"])


def test_a_mock_service_that_does_not_start_is_exit_4_naming_the_tool(
    pytester: pytest.Pytester,
) -> None:
    doc = json.loads(json.dumps(FIXTURE))
    doc["tools"].append(
        {"name": "refund", "parameters": ORDER,
         "service": {"command": ["{python}", "-c", "import sys; print('no port'); sys.exit(3)"],
                     "timeout_s": 5}}
    )  # fmt: skip
    _tool_suite(pytester.path / "suite", {"candidate": _sim(), "baseline": _sim()}, fixture_doc=doc)
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*tools.yaml: tools?2? refund: service: exited with status 3*"])


# -- conversations -----------------------------------------------------------------------------


def _turn_rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"chat-{i:03d}",
            "category": "chat",
            "cluster": f"c{i}",
            "turns": [
                {"user": f"Order C{i} ships from Lyon. Which city?", "target": "Lyon"},
                # the simulator answers the target text; as a regex it does not match itself
                {"user": f"For C{i}: how many days?", "target": "^[0-9]+$",
                 "check": {"scorer": "regex"}},
                {"user": f"For C{i}: the return window?", "target": "30"},
            ],
        }
        for i in range(count)
    ]  # fmt: skip


@pytest.mark.parametrize(("mode", "score"), [("share", 2 / 3), ("all", 0.0)])
def test_a_three_turn_conversation_is_scored_per_turn(
    pytester: pytest.Pytester, mode: str, score: float
) -> None:
    write_suite(
        pytester.path / "suite",
        {"candidate": _sim(), "baseline": _sim(seed=2)},
        cases=_turn_rows(4),
        extra={"evaluator": {"revision": "e1", "scorer": "exact", "turns": mode}},
    )
    log = pytester.path / "requests.log"
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider",
                                "--evalgate-request-log", str(log))  # fmt: skip
    result.assert_outcomes(failed=8, passed=1)  # threshold 1.0: no case passes; the gate does
    result.stdout.fnmatch_lines(["*turn 2 wrong*"])
    records = _records(pytester.path / ".evalgate")
    assert len(records) == 8
    assert all(r["score"] == pytest.approx(score) for r in records)
    assert all(r["dialogue"]["outputs"] == ["Lyon", "^[0-9]+$", "30"] for r in records)
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    assert len([r for r in requests if r["path"].endswith("/chat/completions")]) == 8 * 3


def test_a_turn_target_its_check_cannot_read_is_refused_at_load(tmp_path: Path) -> None:
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.manifest.load import evalgate_load_manifest

    rows = _turn_rows(2)
    rows[1]["turns"][1]["check"] = {"scorer": "numeric"}
    rows[1]["turns"][1]["target"] = "seven"
    path = write_suite(tmp_path / "s", {"candidate": _sim()}, cases=rows)
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_manifest(str(path))
    assert caught.value.source.endswith("cases.jsonl")
    assert caught.value.key == "line 2: id 'chat-001': turns[1].target"
    assert "holds no number" in caught.value.reason


def test_the_example_suites_give_one_verdict_with_and_without_xdist(
    pytester: pytest.Pytester,
) -> None:
    # in-process runs (as the tool-loop tests above), each with its own store and report
    shutil.copytree(ROOT / "suites" / "support-tools", pytester.path / "support-tools")
    verdicts: list[tuple[str, Any, int]] = []
    for extra in ([], ["-n", "2"]):
        run = len(verdicts)
        result = pytester.runpytest("--evalgate", "support-tools", "-p", "no:cacheprovider",
                                    "-q", f"--evalgate-store=store{run}",
                                    f"--evalgate-report=out{run}", *extra)  # fmt: skip
        assert result.ret in (0, 1), result.stdout.str()[-2000:] + result.stderr.str()[-2000:]
        decision = _decision(pytester.path / f"out{run}")
        verdicts.append((decision["verdict"], decision["dialogue"], int(result.ret)))
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][0] == "pass"
    state = next((pytester.path / "store0" / ".tool-state").rglob("refunds.jsonl"))
    assert len(state.read_text().splitlines()) == 2 * 10  # one refund per refund case and model


# -- SIGKILL with a side-effecting service -----------------------------------------------------


def test_a_sigkilled_run_with_a_side_effect_reruns_to_exactly_once(tmp_path: Path) -> None:
    suite = tmp_path / "support-tools"
    shutil.copytree(ROOT / "suites" / "support-tools", suite)
    shipped = (suite / "evalgate.yaml").read_text()
    manifest = yaml.safe_load(shipped)
    for spec in manifest["candidates"].values():  # slow answers: the kill lands mid-run
        spec["base_url"] = spec["base_url"].replace("ttft_ms=10", "ttft_ms=120")
    manifest["budget"]["max_concurrency"] = 2
    (suite / "evalgate.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    command = [sys.executable, "-m", "pytest", "--evalgate", "support-tools", "-p",
               "no:cacheprovider", "-q"]  # fmt: skip
    store = tmp_path / ".evalgate"
    quiet = subprocess.DEVNULL
    run = subprocess.Popen(command, cwd=tmp_path, stdout=quiet, stderr=quiet)
    log = store / ".tool-state" / "support-tools" / "refunds.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 3 and _records(store):
            break
        time.sleep(0.02)
    assert run.poll() is None, "the run ended before the kill: make it slower"
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    applied_before = len(log.read_text().splitlines())
    # the rerun as shipped: latency and budget are transport, outside every identity, so it
    # resumes the same store (and does not wait out the slow answers a second time)
    (suite / "evalgate.yaml").write_text(shipped)
    rerun = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           check=False)  # fmt: skip
    assert "identities completed 60/60" in rerun.stdout, rerun.stdout[-3000:]
    assert "duplicates collapsed 0" in rerun.stdout
    assert "reused " in rerun.stdout  # it resumed the killed run's store
    records = _records(store)
    keys = [json.dumps(r["identity"], sort_keys=True) for r in records]
    assert len(keys) == len(set(keys)) == 60  # every identity exactly once
    effects = [json.loads(line) for line in log.read_text().splitlines()]
    per_identity: dict[str, int] = {}
    for effect in effects:
        per_identity[effect["identity"]] = per_identity.get(effect["identity"], 0) + 1
    assert len(per_identity) == 20 and set(per_identity.values()) == {1}  # once per identity
    assert applied_before >= 3 and len(effects) == 20
