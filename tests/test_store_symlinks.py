"""The folder store refuses to follow a symlink that leaves it, for reading and for writing, and
says so (issue 19): the message names the path, where it leads and why; an aggregation over
such a store is ``invalid`` (exit 1); a run whose store would lead writes out of it stops
before any request; nothing committed changes, nothing is written outside."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from suitekit import make_cases, write_suite

from pytest_evalgate.errors import EvalgateConfigError, EvalgateStorePathError
from pytest_evalgate.store import (
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    evalgate_check_store_folder,
)

GOOD = "simulated://?accuracy=0.9&seed=5"
OTHER = "simulated://?accuracy=0.7&seed=6"
ARGS = ("--evalgate", "suite", "-p", "no:cacheprovider", "-q")
LEAVES = "refusing to follow a symlink that leaves the store"


def _store(tmp_path: Path) -> tuple[EvalgateLocalStore, Path, Path]:
    root, outside = tmp_path / "store", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    return EvalgateLocalStore(str(root)), root, outside


def _snapshot(folder: Path) -> dict[str, str]:
    """Every regular file (symlinks not followed) -> sha256 of its bytes."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


# --------------------------------------------------------------------------- the backend


def test_reading_a_segment_symlinked_out_of_the_store_is_refused(tmp_path: Path) -> None:
    store, root, outside = _store(tmp_path)
    (outside / "secret.jsonl").write_text("not yours\n")
    (root / "suite").mkdir()
    (root / "suite" / "seg.jsonl").symlink_to(outside / "secret.jsonl")
    with pytest.raises(EvalgateStorePathError) as caught:
        store.evalgate_read("suite/seg.jsonl")
    assert str(caught.value) == (
        f"{root}/suite/seg.jsonl: {LEAVES} {root.resolve()}: "
        f"it leads to {(outside / 'secret.jsonl').resolve()}"
    )
    assert store.evalgate_list("suite") == ["suite/seg.jsonl"]  # listed, never read


def test_writing_through_a_folder_symlinked_out_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    store, root, outside = _store(tmp_path)
    (root / "suite").symlink_to(outside, target_is_directory=True)
    with pytest.raises(EvalgateStorePathError, match=f"{root}/suite/a/seg.jsonl: {LEAVES}"):
        store.evalgate_write_atomic("suite/a/seg.jsonl", b"{}\n")
    assert list(outside.iterdir()) == []  # not even the folder or a temp file
    with pytest.raises(EvalgateStorePathError, match=f"{root}/suite: {LEAVES}"):
        store.evalgate_children("suite")


def test_the_segment_writer_names_the_refused_segment(tmp_path: Path) -> None:
    store, root, outside = _store(tmp_path)
    (root / "suite").symlink_to(outside, target_is_directory=True)
    writer = EvalgateSegmentWriter(store, "shard-0-of-1", writer="w")
    writer.evalgate_add("suite/cand", {"identity": "x"})
    with pytest.raises(EvalgateStorePathError, match="suite/cand/shard-0-of-1/seg-w-000001"):
        writer.evalgate_commit()
    assert writer.committed == 0
    assert list(outside.iterdir()) == []


def test_dot_dot_and_absolute_paths_are_refused(tmp_path: Path) -> None:
    store, _root, outside = _store(tmp_path)
    for relpath in ("../outside/seg.jsonl", "a/../../outside/seg.jsonl", "/etc/passwd", "a//b"):
        with pytest.raises(EvalgateStorePathError, match="not a plain relative path"):
            store.evalgate_write_atomic(relpath, b"x")
    assert list(outside.iterdir()) == []


def test_a_symlink_that_stays_inside_the_store_is_followed(tmp_path: Path) -> None:
    store, root, _outside = _store(tmp_path)
    store.evalgate_write_atomic("real/seg.jsonl", b"line\n")
    (root / "alias").symlink_to(root / "real", target_is_directory=True)
    assert store.evalgate_read("alias/seg.jsonl") == b"line\n"
    assert store.evalgate_list("alias") == ["alias/seg.jsonl"]
    store.evalgate_write_atomic("alias/two.jsonl", b"two\n")
    assert (root / "real" / "two.jsonl").read_bytes() == b"two\n"


def test_listing_does_not_descend_a_folder_symlinked_out(tmp_path: Path) -> None:
    store, root, outside = _store(tmp_path)
    store.evalgate_write_atomic("suite/own/seg.jsonl", b"mine\n")
    (outside / "seg.jsonl").write_text("theirs\n")
    (root / "suite" / "elsewhere").symlink_to(outside, target_is_directory=True)
    (root / "suite" / "alias").symlink_to(root / "suite" / "own", target_is_directory=True)
    # the folder that leads out is listed under its own name (never descended), so a reader
    # names it; one that stays inside is neither descended nor listed
    assert store.evalgate_list("suite") == ["suite/elsewhere", "suite/own/seg.jsonl"]
    with pytest.raises(EvalgateStorePathError, match=f"{root}/suite/elsewhere: {LEAVES}"):
        store.evalgate_read("suite/elsewhere")


def test_an_output_folder_inside_the_store_must_stay_inside(tmp_path: Path) -> None:
    store, root, outside = _store(tmp_path)
    (root / "report").symlink_to(outside, target_is_directory=True)
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_store_folder(store, str(root / "report"), "--evalgate-report")
    assert str(caught.value).startswith(f"{root}/report: --evalgate-report: {LEAVES}")
    evalgate_check_store_folder(store, str(root / "plain"), "--evalgate-report")  # inside: fine
    evalgate_check_store_folder(store, str(outside / "rep"), "--evalgate-report")  # not in it


def test_a_last_component_swapped_for_a_symlink_after_the_check_is_refused(
    tmp_path: Path,
) -> None:
    from pytest_evalgate.store.paths import evalgate_open_nofollow

    _store_obj, root, outside = _store(tmp_path)
    (outside / "x.jsonl").write_text("theirs\n")
    checked = root / "seg.jsonl"  # resolved and checked while it was a plain name
    checked.symlink_to(outside / "x.jsonl")  # then swapped
    with pytest.raises(EvalgateStorePathError) as caught:
        evalgate_open_nofollow(str(checked), os.O_RDONLY)
    assert str(caught.value) == f"{checked}: {LEAVES}: it became a symlink"


def test_a_journal_symlinked_out_of_the_store_is_not_replayed(tmp_path: Path) -> None:
    from test_journal import OUTCOME

    from pytest_evalgate.store.journal import (
        evalgate_journal_folder,
        evalgate_journal_line,
        evalgate_journal_name,
        evalgate_read_journal,
    )

    store, root, outside = _store(tmp_path)
    folder = evalgate_journal_folder("s/d/k/gen-1", "shard-0-of-1")
    store.evalgate_write_atomic(
        evalgate_journal_name(folder, "w", 1), evalgate_journal_line("rev/c/a/r0", OUTCOME)
    )
    planted = outside / "w.journal"
    planted.write_bytes(evalgate_journal_line("rev/c/b/r0", OUTCOME))
    (root / folder / "planted.journal").symlink_to(planted)
    assert sorted(evalgate_read_journal(store, "s/d/k/gen-1")) == ["rev/c/a/r0"]
    (root / "s/d/k/gen-2").mkdir(parents=True)
    (root / "s/d/k/gen-2/journal").symlink_to(outside, target_is_directory=True)
    assert evalgate_read_journal(store, "s/d/k/gen-2") == {}  # the folder is not even listed


# --------------------------------------------------------------------------- through pytest


def _suite(pytester: pytest.Pytester) -> None:
    write_suite(
        pytester.path / "suite",
        {"candidate": GOOD, "baseline": OTHER},
        cases=make_cases(["alpha", "beta"], 4),
    )


def test_aggregating_a_store_with_a_segment_symlinked_out_is_invalid(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    assert pytester.runpytest(*ARGS, "--evalgate-store=store").ret in (0, 1)
    store = pytester.path / "store"
    (segment,) = [p for p in store.rglob("seg-*.jsonl") if "candidate-" in str(p)]
    outside = pytester.path / "outside.jsonl"
    outside.write_bytes(segment.read_bytes())
    link = segment.parent / "seg-planted.jsonl"
    link.symlink_to(outside)
    before, outside_before = _snapshot(store), outside.read_bytes()
    result = pytester.runpytest(*ARGS, "--evalgate-store=store", "--evalgate-aggregate")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict INVALID*"])
    shown = str(link.relative_to(store))
    result.stdout.fnmatch_lines(
        [f"INVALID: {shown}:0: <not read>: {LEAVES} {store.resolve()}: it leads to {outside}"]
    )
    assert _snapshot(store) == before  # nothing committed changed
    assert outside.read_bytes() == outside_before


def test_a_run_whose_store_leads_out_stops_before_any_request(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    outside = pytester.path / "outside"
    outside.mkdir()
    (pytester.path / "store").mkdir()
    (pytester.path / "store" / "test-suite").symlink_to(outside, target_is_directory=True)
    log = pytester.path / "requests.log"
    result = pytester.runpytest(*ARGS, "--evalgate-store=store", f"--evalgate-request-log={log}")
    assert result.ret == 1
    result.stdout.fnmatch_lines([f"*evalgate: store refused: store/test-suite/*: {LEAVES} *"])
    assert list(outside.iterdir()) == []
    assert not log.exists() or log.read_text() == ""  # nothing was requested


@pytest.mark.parametrize(
    "select", [(), ("-k", "candidate"), ("-n", "2")], ids=["early", "item-loop", "xdist"]
)
def test_a_store_that_cannot_be_written_stops_before_any_request(
    pytester: pytest.Pytester, select: tuple[str, ...]
) -> None:
    # A regular file where the store's folder would go: whether the runner starts while pytest
    # collects (the whole suite), at the item loop (-k) or in xdist workers (each stops at its
    # collection and the controller says why: it was an INTERNALERROR), exit 1, no request.
    _suite(pytester)
    (pytester.path / "blocker").write_text("not a folder")
    log = pytester.path / "requests.log"
    store = "--evalgate-store=blocker/store"
    result = pytester.runpytest(*ARGS, store, f"--evalgate-request-log={log}", *select)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*evalgate: store refused: blocker/store: cannot be written (Not a directory);"
         " nothing was requested*"]
    )  # fmt: skip
    assert "INTERNALERROR" not in result.stdout.str() and "Traceback" not in result.stdout.str()
    assert not log.exists() or log.read_text() == ""


def test_a_report_folder_in_the_store_that_leads_out_is_refused(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    outside = pytester.path / "outside"
    outside.mkdir()
    (pytester.path / "store").mkdir()
    (pytester.path / "store" / "report").symlink_to(outside, target_is_directory=True)
    result = pytester.runpytest(*ARGS, "--evalgate-store=store", "--evalgate-report=store/report")
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*store/report: --evalgate-report: {LEAVES} *"])
    assert list(outside.iterdir()) == []
    assert sorted(os.listdir(pytester.path / "store")) == ["report"]  # nothing committed


def test_a_junit_file_in_the_store_that_leads_out_is_refused(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    outside = pytester.path / "outside"
    outside.mkdir()
    (pytester.path / "store").mkdir()
    (pytester.path / "store" / "ci").symlink_to(outside, target_is_directory=True)
    result = pytester.runpytest(*ARGS, "--evalgate-store=store", "--junitxml=store/ci/junit.xml")
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*store/ci: --junitxml: {LEAVES} *"])
    assert list(outside.iterdir()) == []


def _shard_folder(store: Path) -> Path:
    found = store.rglob("shard-0-of-1")
    (folder,) = [p for p in found if "candidate-" in str(p) and p.parent.name != "journal"]
    return folder


def _swap_for_link(folder: Path, outside: Path) -> None:
    """``folder`` moved out of the store and replaced by a symlink to where it went."""
    folder.rename(outside)
    folder.symlink_to(outside, target_is_directory=True)


def test_a_shard_folder_that_leads_out_stops_the_run_before_any_request(
    pytester: pytest.Pytester,
) -> None:
    # issue 37: the shard folder itself replaced by a symlink out of the store; the run sent
    # every request, showed them passed, then ended in an INTERNALERROR at the first commit.
    _suite(pytester)
    first = pytester.runpytest(*ARGS, "--evalgate-store=store", "-k", "candidate and alpha")
    assert first.ret in (0, 1)  # the candidate's beta cases are still to request
    store = pytester.path / "store"
    outside = pytester.path / "outside"
    _swap_for_link(_shard_folder(store), outside)
    moved = _snapshot(outside)
    log = pytester.path / "requests.log"
    for select in ((), ("-k", "candidate")):  # started early / at the item loop
        result = pytester.runpytest(
            *ARGS, "--evalgate-store=store", f"--evalgate-request-log={log}", *select
        )
        assert result.ret == 1
        result.stdout.fnmatch_lines(
            [f"*evalgate: store refused: store/*/shard-0-of-1: {LEAVES} *; nothing was requested*"]
        )
        assert " passed" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()
        assert not log.exists() or log.read_text() == ""
        assert _snapshot(outside) == moved  # nothing written through the link


def test_aggregating_a_store_whose_shard_folder_leads_out_is_invalid_naming_the_link(
    pytester: pytest.Pytester,
) -> None:
    # it was "incomplete (missing 8)": the listing skipped the linked folder in silence
    _suite(pytester)
    assert pytester.runpytest(*ARGS, "--evalgate-store=store").ret in (0, 1)
    store = pytester.path / "store"
    folder = _shard_folder(store)
    _swap_for_link(folder, pytester.path / "outside")
    result = pytester.runpytest(*ARGS, "--evalgate-store=store", "--evalgate-aggregate")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict INVALID*"])
    shown = str(folder.relative_to(store))
    result.stdout.fnmatch_lines([f"INVALID: {shown}:0: <not read>: {LEAVES} *"])
    assert "verdict INCOMPLETE" not in result.stdout.str()
