"""Report folders kept in the store beside the decision copy (issue 15): on a folder store and
on a real S3 store (SeaweedFS), every file of the report folder is published, byte for byte,
under ``<suite>/reports/<stem>/``, the stem being the kept decision's; nothing is replaced."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from reportkit import sample_decision
from seaweedkit import EvalgateSeaweed
from suitekit import make_cases, write_suite

from pytest_evalgate.attest.keys import evalgate_generate_key
from pytest_evalgate.report import (
    evalgate_keep_decision,
    evalgate_keep_report,
    evalgate_report_prefix,
)
from pytest_evalgate.store import EvalgateLocalStore, EvalgateS3Store

GOOD = "simulated://?accuracy=0.9&seed=5"
OTHER = "simulated://?accuracy=0.7&seed=6"
ARGS = ("--evalgate", "suite", "-p", "no:cacheprovider", "-q")
REPORT_FILES = ["decision.json", "forest.png", "report.html", "report.md"]


def _suite(pytester: pytest.Pytester) -> Path:
    return write_suite(
        pytester.path / "suite",
        {"candidate": GOOD, "baseline": OTHER},
        cases=make_cases(["alpha", "beta"], 10),
    )


def _stem(kept: str) -> str:
    return kept.rsplit("/", 1)[1].removesuffix(".json")


def test_the_report_prefix_follows_the_kept_decision() -> None:
    kept = "support/decisions/20260101T000000000000Z-0123456789ab.json"
    assert evalgate_report_prefix(kept) == "support/reports/20260101T000000000000Z-0123456789ab"
    with pytest.raises(ValueError, match="not a kept decision"):
        evalgate_report_prefix("support/other/x.json")


def test_a_kept_report_is_byte_for_byte_and_never_replaced(tmp_path: Path) -> None:
    store = EvalgateLocalStore(str(tmp_path / "store"))
    kept = evalgate_keep_decision(store, sample_decision(), datetime(2026, 1, 1, tzinfo=UTC))
    folder = tmp_path / "rep"
    folder.mkdir()
    (folder / "report.md").write_text("# one\n")
    (folder / "forest.png").write_bytes(b"\x89PNG\x00\xff")
    paths = [str(folder / "report.md"), str(folder / "forest.png")]
    published = evalgate_keep_report(store, kept, paths)
    prefix = f"demo-suite/reports/{_stem(kept)}"
    assert published == [f"{prefix}/report.md", f"{prefix}/forest.png"]
    assert store.evalgate_read(f"{prefix}/forest.png") == b"\x89PNG\x00\xff"
    (folder / "report.md").write_text("# two\n")
    with pytest.raises(FileExistsError):
        evalgate_keep_report(store, kept, paths)
    assert store.evalgate_read(f"{prefix}/report.md") == b"# one\n"


def test_a_run_keeps_its_report_folder_in_a_folder_store(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest(*ARGS, "--evalgate-store=store", "--evalgate-report=rep")
    assert result.ret == 0
    store = pytester.path / "store" / "test-suite"
    (kept,) = os.listdir(store / "decisions")
    reports = store / "reports" / kept.removesuffix(".json")
    assert sorted(os.listdir(reports)) == REPORT_FILES
    for name in REPORT_FILES:
        assert (reports / name).read_bytes() == (pytester.path / "rep" / name).read_bytes(), name
    prefix = f"test-suite/reports/{kept.removesuffix('.json')}/"
    result.stdout.fnmatch_lines([f"report kept in the store: {prefix} (4 files)"])


def test_a_store_that_cannot_keep_the_report_costs_only_the_copy(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    blocker = pytester.path / "store" / "test-suite" / "reports"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the folder should be")
    result = pytester.runpytest(*ARGS, "--evalgate-store=store", "--evalgate-report=rep")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*verdict PASS*", "report not kept in the store: *"])
    assert (pytester.path / "rep" / "report.html").is_file()


def test_an_s3_run_leaves_its_signed_report_in_the_bucket(
    pytester: pytest.Pytester, seaweed: EvalgateSeaweed, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester)
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    location = seaweed.new_store()
    private, _public = evalgate_generate_key(str(pytester.path / "keys"))
    store_arg, report_arg = f"--evalgate-store={location}", "--evalgate-report=rep"
    # in-process runs: the store is a process, its client is made from the environment above
    assert pytester.runpytest_inprocess(*ARGS, store_arg).ret == 0  # the shard's rows
    # the aggregation, as its pod runs it: no volume, the report in its own folder
    result = pytester.runpytest_inprocess(
        *ARGS, store_arg, "--evalgate-aggregate", report_arg, f"--evalgate-sign-key={private}"
    )
    assert result.ret == 0
    s3 = EvalgateS3Store(location, client=seaweed.client())
    (kept,) = s3.evalgate_children("test-suite/decisions")
    prefix = f"test-suite/reports/{kept.removesuffix('.json')}"
    assert s3.evalgate_children(prefix) == sorted([*REPORT_FILES, "decision.dsse.json"])
    for name in [*REPORT_FILES, "decision.dsse.json"]:
        local = (pytester.path / "rep" / name).read_bytes()
        assert s3.evalgate_read(f"{prefix}/{name}") == local, name
    result.stdout.fnmatch_lines([f"report kept in the store: {prefix}/ (5 files)"])
    # the rows of the shard are the segments, already in the bucket; the report is no segment
    segments = s3.evalgate_list("test-suite")
    assert segments and all("/reports/" not in path for path in segments)
