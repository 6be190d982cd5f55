"""The report step of a real run: the files written, decisions kept in the store and compared,
the signature status, the step summary, case text only when asked, and re-rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from reportkit import sample_decision
from suitekit import make_cases, write_suite

from pytest_evalgate.attest.keys import evalgate_generate_key
from pytest_evalgate.cli import main
from pytest_evalgate.report import evalgate_keep_decision, evalgate_last_decision
from pytest_evalgate.report.history import evalgate_decisions_prefix
from pytest_evalgate.store import EvalgateLocalStore

GOOD = "simulated://?accuracy=0.9&seed=5"
OTHER = "simulated://?accuracy=0.7&seed=6"
ARGS = ("--evalgate", "suite", "-p", "no:cacheprovider", "-q")


def _suite(pytester: pytest.Pytester, **kwargs: Any) -> Path:
    return write_suite(
        pytester.path / "suite",
        {"candidate": GOOD, "baseline": OTHER},
        cases=make_cases(["alpha", "beta"], 10),
        **kwargs,
    )


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*ARGS, "--evalgate-store=store", *args)


def _kept(pytester: pytest.Pytester) -> list[str]:
    folder = pytester.path / "store" / evalgate_decisions_prefix("test-suite")
    return sorted(path.name for path in folder.iterdir()) if folder.exists() else []


# --------------------------------------------------------------------------- history (unit)


def test_kept_decisions_sort_by_time_and_the_newest_readable_one_is_the_last(
    tmp_path: Path,
) -> None:
    from datetime import UTC, datetime

    store = EvalgateLocalStore(str(tmp_path))
    assert evalgate_last_decision(store, "demo-suite") is None  # nothing kept yet
    first, second = sample_decision(), sample_decision()
    second["verdict"] = "fail"
    evalgate_keep_decision(store, second, datetime(2026, 1, 2, tzinfo=UTC))
    evalgate_keep_decision(store, first, datetime(2026, 1, 1, tzinfo=UTC))
    last = evalgate_last_decision(store, "demo-suite")
    assert last is not None and last["verdict"] == "fail"  # by time, not by writing order
    folder = tmp_path / "demo-suite" / "decisions"
    (folder / "20270101T000000000000Z-ffffffffffff.json").write_text("{not json")
    (folder / "notes.txt").write_text("ignored")
    again = evalgate_last_decision(store, "demo-suite")
    assert again is not None and again["verdict"] == "fail"  # a damaged copy is skipped


def test_a_kept_copy_is_never_replaced(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    store = EvalgateLocalStore(str(tmp_path))
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    path = evalgate_keep_decision(store, sample_decision(), moment)
    assert path.startswith("demo-suite/decisions/20260101T000000000000Z-")
    with pytest.raises(FileExistsError):
        evalgate_keep_decision(store, sample_decision(), moment)
    assert json.loads((tmp_path / path).read_text())["suite"] == "demo-suite"


# --------------------------------------------------------------------------- a real run


def test_a_run_writes_every_report_file_and_keeps_its_decision(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = _run(pytester, "--evalgate-report=rep")
    assert result.ret == 0
    for name in ("decision.json", "report.md", "report.html", "forest.png"):
        assert (pytester.path / "rep" / name).is_file(), name
        result.stdout.fnmatch_lines([f"wrote rep/{name}"])
    (kept,) = _kept(pytester)
    copy = json.loads((pytester.path / "store" / "test-suite" / "decisions" / kept).read_text())
    assert copy == json.loads((pytester.path / "rep" / "decision.json").read_text())
    report = (pytester.path / "rep" / "report.md").read_text()
    assert "No earlier decision of this suite is kept in the store" in report
    assert "signature: not signed: no signing key was given" in report


def test_the_store_still_aggregates_exactly_once_beside_kept_decisions(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    first = _run(pytester, "--evalgate-report=r1")
    again = _run(pytester, "--evalgate-aggregate", "--evalgate-report=r2")
    assert first.ret == again.ret == 0
    one = json.loads((pytester.path / "r1" / "decision.json").read_text())
    two = json.loads((pytester.path / "r2" / "decision.json").read_text())
    for key in ("verdict", "counts", "rates", "rules", "slices"):
        assert one[key] == two[key], key
    assert len(_kept(pytester)) == 2
    assert "Unchanged since the decision of" in (pytester.path / "r2" / "report.md").read_text()


def test_a_changed_definition_is_listed_against_the_last_decision(
    pytester: pytest.Pytester,
) -> None:
    path = _suite(pytester)
    assert _run(pytester, "--evalgate-report=r1").ret == 0
    manifest = yaml.safe_load(path.read_text())
    manifest["prompt"]["revision"] = "p2"
    manifest["generation"]["max_tokens"] = 24
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    assert _run(pytester, "--evalgate-report=r2").ret == 0
    report = (pytester.path / "r2" / "report.md").read_text()
    assert "change(s) since the decision of" in report
    assert "| `definition.prompt.revision` | `p1` | `p2` | changed |" in report
    assert "| `definition.generation.max_tokens` | `16` | `24` | changed |" in report
    html = (pytester.path / "r2" / "report.html").read_text()
    assert 'data-change="definition.prompt.revision"' in html


def test_a_store_that_cannot_keep_the_copy_costs_only_the_comparison(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    blocker = pytester.path / "store" / "test-suite" / "decisions"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the folder should be")
    result = _run(pytester, "--evalgate-report=rep")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*verdict PASS*", "decision copy not kept in the store: *"])
    assert (pytester.path / "rep" / "report.html").is_file()


# --------------------------------------------------------------------------- signature


def test_a_signed_decision_reports_its_key_id(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    private, _public = evalgate_generate_key(str(pytester.path / "keys"))
    assert _run(pytester, "--evalgate-report=rep", f"--evalgate-sign-key={private}").ret == 0
    envelope = json.loads((pytester.path / "rep" / "decision.dsse.json").read_text())
    keyid = envelope["signatures"][0]["keyid"]
    report = (pytester.path / "rep" / "report.md").read_text()
    assert f"signed: DSSE envelope decision.dsse.json, ECDSA P-256 key id {keyid}" in report
    assert 'data-signature="signed"' in (pytester.path / "rep" / "report.html").read_text()


def test_a_partial_run_says_why_it_is_not_signed(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    private, _public = evalgate_generate_key(str(pytester.path / "keys"))
    result = _run(
        pytester, "-k", "alpha", "--evalgate-report=rep", f"--evalgate-sign-key={private}"
    )
    assert result.ret == 0
    assert not (pytester.path / "rep" / "decision.dsse.json").exists()
    report = (pytester.path / "rep" / "report.md").read_text()
    assert "signature: not signed: verdict 'partial' is never signed" in report


def test_re_rendering_a_folder_sees_the_envelope_and_writes_the_html(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    _suite(pytester)
    private, _public = evalgate_generate_key(str(pytester.path / "keys"))
    assert _run(pytester, "--evalgate-report=rep", f"--evalgate-sign-key={private}").ret == 0
    folder = pytester.path / "rep"
    (folder / "report.html").unlink()
    assert main(["report", str(folder)]) == 0
    assert f"wrote {folder / 'report.html'}" in capsys.readouterr().out
    report = (folder / "report.md").read_text()
    assert "an envelope decision.dsse.json lies beside decision.json" in report
    assert "Not compared: this report was rendered from decision.json alone." in report


# --------------------------------------------------------------------------- step summary


def test_the_step_summary_gets_report_md_when_set(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    summary.write_text("earlier step\n")
    assert _run(pytester, "--evalgate-report=rep").ret == 0
    report = (pytester.path / "rep" / "report.md").read_text()
    assert summary.read_text() == "earlier step\n" + report  # appended, not replaced
    assert _run(pytester, "--evalgate-report=rep").ret == 0
    assert summary.read_text().count("# Release gate: test-suite") == 2


def test_no_step_summary_without_the_variable_or_without_a_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester)
    summary = pytester.path / "summary.md"
    assert _run(pytester, "--evalgate-report=rep").ret == 0  # conftest removes the variable
    assert not summary.exists()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert _run(pytester).ret == 0
    assert not summary.exists()


# --------------------------------------------------------------------------- case text


def test_case_text_only_with_the_option(pytester: pytest.Pytester) -> None:
    cases = make_cases(["alpha", "beta"], 10)
    _suite(pytester)
    plain = _run(pytester, "--evalgate-report=plain")
    asked = _run(pytester, "--evalgate-report=asked", "--evalgate-report-text")
    assert plain.ret == asked.ret == 0
    decision = json.loads((pytester.path / "asked" / "decision.json").read_text())
    flipped = [flip["case_id"] for flip in decision["flipped"]["cases"]]
    assert flipped, "the suite must flip some cases"
    inputs = [case["input"] for case in cases if case["id"] in flipped]
    for folder in ("plain", "asked"):
        assert not any(text in (pytester.path / folder / "decision.json").read_text()
                       for text in inputs)  # fmt: skip
    for name in ("report.md", "report.html"):
        plain_text = (pytester.path / "plain" / name).read_text()
        asked_text = (pytester.path / "asked" / name).read_text()
        assert not any(text in plain_text for text in inputs), name
        assert all(text in asked_text for text in inputs), name


def test_the_answer_section_of_a_wrong_item_only_with_the_option(
    pytester: pytest.Pytester,
) -> None:
    write_suite(
        pytester.path / "suite",
        {"candidate": "simulated://?accuracy=0.0&seed=1", "baseline": GOOD},
        cases=make_cases(["alpha"], 2),
    )
    hidden = pytester.runpytest(*ARGS, "--evalgate-store=s1")
    out = hidden.stdout.str()
    assert "wrong answer [alpha]" in out and "evalgate answer" not in out
    assert "Question 1 about alpha" not in out and "target: 2" not in out
    shown = pytester.runpytest(*ARGS, "--evalgate-store=s2", "--evalgate-report-text")
    shown.stdout.fnmatch_lines(["*evalgate answer*", "target: 2", "output: *"])


def test_the_console_gate_writes_the_reports_keeps_the_copy_and_shows_text_when_asked(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = make_cases(["alpha", "beta"], 10)
    _suite(pytester)
    assert _run(pytester).ret == 0  # fills the store; no report, so no copy kept
    assert _kept(pytester) == []
    store, suite = str(pytester.path / "store"), str(pytester.path / "suite")
    assert main(["gate", suite, "--store", store, "--report", str(pytester.path / "a")]) == 0
    argv = ["gate", suite, "--store", store, "--report", str(pytester.path / "b"), "--report-text"]
    assert main(argv) == 0
    assert "wrote" in capsys.readouterr().out
    assert len(_kept(pytester)) == 2
    decision = json.loads((pytester.path / "b" / "decision.json").read_text())
    flipped = {flip["case_id"] for flip in decision["flipped"]["cases"]}
    inputs = [case["input"] for case in cases if case["id"] in flipped]
    assert inputs and all(
        text in (pytester.path / "b" / "report.md").read_text() for text in inputs
    )
    assert not any(text in (pytester.path / "a" / "report.md").read_text() for text in inputs)
    assert "Unchanged since the decision of" in (pytester.path / "b" / "report.md").read_text()
