"""Reports tell one story (issue 19): a run replaces its report folder whole, so nothing of an
earlier run (a signed pass) survives beside a later unsigned, incomplete decision; a folder
holding other files is refused untouched; a re-render keeps only an envelope of its decision."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from inprockit import run_cli_inprocess
from reportkit import sample_decision
from suitekit import make_cases, write_suite

from pytest_evalgate.attest.keys import evalgate_generate_key
from pytest_evalgate.cli import main
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.report import evalgate_replace_folder, evalgate_write_report
from pytest_evalgate.report.write import evalgate_rerender_report

GOOD = "simulated://?accuracy=0.9&seed=5"
OTHER = "simulated://?accuracy=0.7&seed=6"
ARGS = ("--evalgate", "suite", "-p", "no:cacheprovider", "-q")


def _suite(pytester: pytest.Pytester) -> Path:
    return write_suite(
        pytester.path / "suite",
        {"candidate": GOOD, "baseline": OTHER},
        cases=make_cases(["alpha", "beta"], 10),
    )


def _verify(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli_inprocess("verify", *args, cwd=cwd)  # tests/inprockit.py


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# --------------------------------------------------------------------------- the case


def test_a_later_unsigned_incomplete_run_leaves_no_signed_pass_behind(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    private, public = evalgate_generate_key(str(pytester.path / "keys"))
    signed = pytester.runpytest(
        *ARGS, "--evalgate-store=store", "--evalgate-report=rep", f"--evalgate-sign-key={private}"
    )
    assert signed.ret == 0
    envelope = pytester.path / "rep" / "decision.dsse.json"
    first = _verify(pytester.path, "rep/decision.dsse.json", "--key", public, "--require-pass")
    assert first.returncode == 0, first.stdout  # the earlier signed pass verifies
    assert "verdict: pass" in first.stdout
    assert "checked: rep/decision.json beside the envelope is the signed decision" in first.stdout

    # later: an aggregation over an empty store, unsigned, into the same report folder
    later = pytester.runpytest(
        *ARGS, "--evalgate-aggregate", "--evalgate-store=empty", "--evalgate-report=rep"
    )
    assert later.ret == 1
    later.stdout.fnmatch_lines(["*verdict INCOMPLETE*"])
    assert not envelope.exists()  # no stale signature beside the incomplete decision
    names = sorted(p.name for p in (pytester.path / "rep").iterdir())
    assert names == ["decision.json", "report.html", "report.md"]  # no forest.png of before
    decision = json.loads((pytester.path / "rep" / "decision.json").read_text())
    assert decision["verdict"] == "incomplete"
    assert (
        "signature: not signed: no signing key was given"
        in (pytester.path / "rep" / "report.md").read_text()
    )
    gated = _verify(pytester.path, "rep/decision.dsse.json", "--key", public, "--require-pass")
    assert gated.returncode == 1
    assert gated.stdout.startswith("INVALID: rep/decision.dsse.json: cannot read")
    assert not [p for p in pytester.path.iterdir() if p.name.startswith(".rep.")]  # no leftovers


def test_verify_refuses_a_folder_that_mixes_two_runs(pytester: pytest.Pytester) -> None:
    # a folder mixed by hand (or by an older version): the envelope of one decision beside
    # another decision.json is INVALID, whatever the signature says
    _suite(pytester)
    private, public = evalgate_generate_key(str(pytester.path / "keys"))
    args = (*ARGS, "--evalgate-store=store", "--evalgate-report=rep")
    assert pytester.runpytest(*args, f"--evalgate-sign-key={private}").ret == 0
    decision = pytester.path / "rep" / "decision.json"
    mixed = json.loads(decision.read_text())
    mixed["verdict"] = "incomplete"
    decision.write_text(json.dumps(mixed, indent=2, sort_keys=True) + "\n")
    envelope_before = (pytester.path / "rep" / "decision.dsse.json").read_bytes()
    result = _verify(pytester.path, "rep/decision.dsse.json", "--key", public, "--require-pass")
    assert result.returncode == 1
    assert result.stdout == (
        "INVALID: rep/decision.json: is not the signed decision: the folder mixes the files "
        "of two runs\n"
    )
    assert (pytester.path / "rep" / "decision.dsse.json").read_bytes() == envelope_before


def test_a_junit_file_in_the_report_folder_is_rewritten_not_refused(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    args = (*ARGS, "--evalgate-store=store", "--evalgate-report=rep", "--junitxml=rep/junit.xml")
    assert pytester.runpytest(*args).ret == 0
    first = (pytester.path / "rep" / "junit.xml").read_text()
    assert pytester.runpytest(*args).ret == 0  # the folder of run 1 is replaced, not refused
    names = sorted(p.name for p in (pytester.path / "rep").iterdir())
    assert names == ["decision.json", "forest.png", "junit.xml", "report.html", "report.md"]
    assert (pytester.path / "rep" / "junit.xml").read_text() != first  # this run's file


def test_a_report_folder_with_other_files_is_refused_before_any_request(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    folder = pytester.path / "rep"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (folder / "decision.json").write_text("{}")
    before = _tree(folder)
    result = pytester.runpytest(*ARGS, "--evalgate-store=store", "--evalgate-report=rep")
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        ["*rep: --evalgate-report: holds entries no evalgate report writes (notes.txt)*"]
    )
    assert _tree(folder) == before  # nothing touched
    assert not (pytester.path / "store").exists()  # no request, nothing committed


def test_the_console_gate_refuses_a_foreign_folder_with_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(tmp_path / "suite", {"candidate": GOOD, "baseline": OTHER},
                        cases=make_cases(["alpha"], 4))  # fmt: skip
    folder = tmp_path / "rep"
    folder.mkdir()
    (folder / "conftest.py").write_text("# not a report\n")
    argv = ["gate", str(suite), "--store", str(tmp_path / "store"), "--report", str(folder)]
    assert main(argv) == 4
    assert "holds entries no evalgate report writes (conftest.py)" in capsys.readouterr().err
    assert (folder / "conftest.py").read_text() == "# not a report\n"


# --------------------------------------------------------------------------- the folder swap


def test_replacing_swaps_the_whole_folder_and_maps_the_paths(tmp_path: Path) -> None:
    folder = tmp_path / "rep"
    evalgate_write_report(str(folder), sample_decision())
    (folder / "decision.dsse.json").write_text("{}")
    assert "forest.png" in os.listdir(folder)

    def fill(staging: str) -> list[str]:
        path = os.path.join(staging, "report.md")
        Path(path).write_text("new story\n")
        return [path]

    written = evalgate_replace_folder(str(folder), fill)
    assert written == [str(folder / "report.md")]
    assert _tree(folder) == {"report.md": b"new story\n"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no staging left


def test_a_failing_writer_leaves_the_earlier_folder_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "rep"
    evalgate_write_report(str(folder), sample_decision())
    before = _tree(folder)

    def fill(staging: str) -> list[str]:
        Path(staging, "report.md").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        evalgate_replace_folder(str(folder), fill)
    assert _tree(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


def test_a_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "rep").write_text("x")
    with pytest.raises(EvalgateConfigError, match="rep: --evalgate-report: exists and is not"):
        evalgate_replace_folder(str(tmp_path / "rep"), lambda staging: [])
    assert (tmp_path / "rep").read_text() == "x"


# --------------------------------------------------------------------------- re-rendering


def _envelope_of(decision: dict[str, Any]) -> str:
    import base64

    statement = {"_type": "https://in-toto.io/Statement/v1", "predicate": decision}
    payload = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps({"payloadType": "application/vnd.in-toto+json", "payload": payload})


def test_a_re_render_keeps_the_envelope_of_its_decision(tmp_path: Path) -> None:
    folder = tmp_path / "rep"
    decision = sample_decision()
    evalgate_write_report(str(folder), decision)
    (folder / "decision.dsse.json").write_text(_envelope_of(decision))
    written, note = evalgate_rerender_report(str(folder))
    assert note is None
    assert str(folder / "decision.dsse.json") in written
    assert (folder / "decision.dsse.json").read_text() == _envelope_of(decision)
    assert (
        "an envelope decision.dsse.json lies beside decision.json"
        in (folder / "report.md").read_text()
    )


def test_a_re_render_drops_a_stale_envelope_of_another_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "rep"
    decision = sample_decision()
    evalgate_write_report(str(folder), decision)
    earlier = sample_decision()
    earlier["verdict"] = "fail"
    (folder / "decision.dsse.json").write_text(_envelope_of(earlier))
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"dropped {folder / 'decision.dsse.json'}: its payload is not a statement" in out
    assert not (folder / "decision.dsse.json").exists()
    assert json.loads((folder / "decision.json").read_text()) == decision
    assert "an envelope decision.dsse.json lies beside" not in (folder / "report.md").read_text()
