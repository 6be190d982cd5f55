"""What the demo (``scripts/demo``) writes: every file is free of case input, target and output
(eval sets are crown jewels) unless ``--evalgate-report-text`` asks for them, and its JUnit file
validates against junit-10.xsd with and without ``-n 2``.

The demo runs for real (simulated models, the load phase, a signed decision) with its store,
report folder, keys and logs moved into the test's temp folder.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import xmlschema

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = Path(__file__).parent / "data" / "junit-10.xsd"
CASES = ROOT / "suites" / "support" / "cases.jsonl"
# A text shorter than this (a target "no", "21") says nothing when found in a report full of
# numbers; longer ones (inputs, dates, names, phrases) are specific to the case.
_DISTINCT = 8


def _start_demo(tmp: Path, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """Start the demo with the store and keys ``store-NAME``, ``keys-NAME`` (made or copied
    beforehand) and its own report folder and logs; returns (process, report folder, logs)."""
    report, logs = tmp / f"report-{name}", tmp / f"logs-{name}"
    logs.mkdir()
    env = dict(os.environ, EVALGATE_REPORT_DIR=str(report),
               EVALGATE_KEYS_DIR=str(tmp / f"keys-{name}"))  # fmt: skip
    env.pop("GITHUB_STEP_SUMMARY", None)
    argv = [
        "bash", "scripts/demo", f"--evalgate-store={tmp / f'store-{name}'}",
        f"--evalgate-request-log={logs / 'requests.jsonl'}",
        f"--log-file={logs / 'pytest.log'}", "--log-file-level=DEBUG", *args,
    ]  # fmt: skip
    with (logs / "demo.stdout.log").open("wb") as out, (logs / "demo.stderr.log").open("wb") as err:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err)
    return process, report, logs


def _finish_demo(started: tuple[subprocess.Popen[bytes], Path, Path]) -> tuple[Path, Path]:
    """Wait for a demo :func:`_start_demo` started; returns (report folder, folder of its logs)."""
    process, report, logs = started
    try:
        status = process.wait(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stdout = (logs / "demo.stdout.log").read_text()
    stderr = (logs / "demo.stderr.log").read_text()
    assert status == 0, stdout[-3000:] + stderr[-3000:]
    assert "result: VALID" in stdout  # the decision was signed and verified
    return report, logs


def _files(*folders: Path) -> Iterator[Path]:
    for folder in folders:
        yield from (path for path in sorted(folder.rglob("*")) if path.is_file())


def _readable(path: Path) -> str:
    """The file's text in every form a fragment could hide in: raw, HTML-unescaped, and (for
    JSON) every string value decoded."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    forms = [text, html.unescape(text)]
    if path.suffix == ".json":
        forms.append(json.dumps(json.loads(text), ensure_ascii=False))
    return "\n".join(forms)


def _outputs(store: Path) -> dict[str, list[str]]:
    outputs: dict[str, list[str]] = {}
    for segment in store.rglob("*.jsonl"):
        for line in segment.read_text().splitlines():
            record = json.loads(line)
            if "identity" in record and record.get("output"):
                case_id = record["identity"]["case_id"]
                outputs.setdefault(case_id, []).append(record["output"].strip())
    return outputs


def _fragments(outputs: dict[str, list[str]]) -> dict[str, set[str]]:
    """Case id -> distinctive pieces of its input, target and outputs (single lines, so no
    escaping of newlines can hide them)."""
    found: dict[str, set[str]] = {}
    for line in CASES.read_text().splitlines():
        case: dict[str, Any] = json.loads(line)
        pieces = {case["input"][:40]}
        pieces |= {part for part in case["input"].split("\n") if len(part) >= 24}
        pieces |= {text for text in [case["target"], *outputs.get(case["id"], [])]
                   if len(text) >= _DISTINCT}  # fmt: skip
        found[case["id"]] = pieces
    return found


def _heads() -> dict[str, str]:
    rows = [json.loads(line) for line in CASES.read_text().splitlines()]
    return {row["id"]: row["input"][:40] for row in rows}


def _targets() -> dict[str, str]:
    rows = [json.loads(line) for line in CASES.read_text().splitlines()]
    return {row["id"]: row["target"] for row in rows}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("demo")
    plain = _finish_demo(_start_demo(tmp, "plain"))
    # The two reruns resume from the first run's store (they request nothing) and make their
    # reports at the same time, each from its own copy of that store and of the keys: neither
    # reads what the other writes.
    for name in ("text", "n2"):
        shutil.copytree(tmp / "store-plain", tmp / f"store-{name}", symlinks=True)
        shutil.copytree(tmp / "keys-plain", tmp / f"keys-{name}", symlinks=True)
    started = [_start_demo(tmp, "text", "--evalgate-report-text"),
               _start_demo(tmp, "n2", "-n", "2")]  # fmt: skip
    texts, xdist = [_finish_demo(each) for each in started]
    outputs = _outputs(tmp / "store-plain")
    return {"plain": plain, "text": texts, "n2": xdist, "fragments": _fragments(outputs)}


@pytest.mark.slow
def test_the_demo_writes_every_report_file(demo: dict[str, Any]) -> None:
    report, _logs = demo["plain"]
    names = {path.name for path in report.iterdir()}
    assert {"decision.json", "report.md", "report.html", "forest.png", "junit.xml",
            "decision.dsse.json"} <= names  # fmt: skip


@pytest.mark.slow
def test_no_file_the_demo_writes_holds_case_text(demo: dict[str, Any]) -> None:
    fragments: dict[str, set[str]] = demo["fragments"]
    assert len(fragments) == 600 and sum(len(p) for p in fragments.values()) > 1500
    for name in ("plain", "n2"):
        report, logs = demo[name]
        files = list(_files(report, logs))
        wanted = {"junit.xml", "pytest.log", "demo.stdout.log", "report.html"}
        # the first run requests every identity (the simulators log each request); the -n 2
        # rerun resumes from the store and requests nothing
        wanted |= {"requests.jsonl"} if name == "plain" else set()
        assert {p.name for p in files} >= wanted
        assert (logs / "pytest.log").stat().st_size > 0  # the log file has lines to search
        for path in files:
            text = _readable(path)
            leaks = [(case_id, piece) for case_id, pieces in fragments.items()
                     for piece in pieces if piece in text]  # fmt: skip
            assert leaks == [], f"{name}: {path.name} holds case text: {leaks[:3]}"


@pytest.mark.slow
def test_report_text_asks_for_the_flipped_cases_text(demo: dict[str, Any]) -> None:
    report, _logs = demo["text"]
    decision = json.loads((report / "decision.json").read_text())
    flipped = [flip["case_id"] for flip in decision["flipped"]["cases"]]
    assert len(flipped) > 10
    fragments: dict[str, set[str]] = demo["fragments"]
    heads, all_targets = _heads(), _targets()
    for name in ("report.md", "report.html"):
        text = _readable(report / name)
        for case_id in flipped:
            assert heads[case_id] in text, (name, case_id)  # each input's opening
        targets = {all_targets[c] for c in flipped if len(all_targets[c]) >= _DISTINCT}
        assert targets and all(target in text for target in targets), name
    # the record itself stays text-free even when the reports show text
    record = _readable(report / "decision.json")
    assert not any(piece in record for pieces in fragments.values() for piece in pieces)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["plain", "n2", "text"])
def test_the_demo_junit_validates(demo: dict[str, Any], name: str) -> None:
    report, _logs = demo[name]
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(report / "junit.xml"))
    text = (report / "junit.xml").read_text()
    assert 'value="None"' not in text and "<testcase" in text
    assert "evalgate.support-eval.verdict" in text
