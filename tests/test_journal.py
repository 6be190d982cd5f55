"""The resume journal (issue 15): answered responses are in the store before they are scored, so
a rerun after a SIGKILL replays them instead of requesting them again.

End to end, on the folder store and on S3 (SeaweedFS): a run at concurrency 16 is SIGKILLed
at about 40 % of its requests; the rerun re-sends at most 16 identities that the endpoint had
already been asked for (the simulator's request log), and no identity is stored twice. Without
the journal the rerun would re-send the whole uncommitted tail (about a commit window of
answers: well over 16 at this rate), so the bound fails if the journal does not work.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from assertkit import evalgate_decided_exit, evalgate_wait_idle
from suitekit import make_cases, write_suite

from pytest_evalgate.formats.canonical import evalgate_canonical_json, evalgate_sha256_hex
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.runner.journal import EvalgateJournalWriter
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.server import EvalgateSimServer
from pytest_evalgate.store import (
    EvalgateLocalStore,
    EvalgateS3Store,
    EvalgateStoreBackend,
    evalgate_read_generation,
)
from pytest_evalgate.store.journal import (
    evalgate_journal_folder,
    evalgate_journal_line,
    evalgate_journal_line_of,
    evalgate_journal_name,
    evalgate_read_journal,
)

CONCURRENCY = 16
LATENCY_MS = 100
RUN_TIMEOUT_S = 120.0
OUTCOME: dict[str, object] = {
    "output": "42",
    "finish_reason": "stop",
    "attempts": 1,
    "error": None,
    "timing": {"queued_s": 0.0, "ttft_s": 0.01, "tpot_s": None, "e2e_s": 0.02, "itl_p95_s": None},
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    "started_at": "2026-01-01T00:00:00+00:00",
    "finished_at": "2026-01-01T00:00:01+00:00",
}


# -- the journal's format -------------------------------------------------------------------


def test_journal_lines_are_read_back_first_wins_and_bad_lines_skipped(tmp_path: Path) -> None:
    store = EvalgateLocalStore(str(tmp_path))
    folder = evalgate_journal_folder("s/d/k/gen-1", "shard-0-of-1")
    errored = dict(OUTCOME, output=None, error={"category": "timeout", "status": None,
                                                "message": "x"})  # fmt: skip
    data = b"".join(
        [
            evalgate_journal_line("rev/c/a/r0", OUTCOME),
            evalgate_journal_line("rev/c/a/r0", dict(OUTCOME, output="other")),  # later: ignored
            evalgate_journal_line("rev/c/b/r0", errored),  # errors are never replayed
            b'{"identity": "rev/c/c/r0", "outcome": {"output": "cut',  # a torn line
            evalgate_canonical_json({"identity": "rev/c/d/r0", "outcome": {"output": "x"}}),
            b"\n",
        ]
    )
    store.evalgate_write_atomic(evalgate_journal_name(folder, "w", 1), data)
    store.evalgate_write_atomic(
        evalgate_journal_name(folder, "w", 2), evalgate_journal_line("rev/c/e/r0", OUTCOME)
    )
    found = evalgate_read_journal(store, "s/d/k/gen-1")
    assert sorted(found) == ["rev/c/a/r0", "rev/c/e/r0"]
    assert found["rev/c/a/r0"]["output"] == "42"
    assert evalgate_read_journal(store, "s/d/k/gen-2") == {}


def test_a_journal_line_is_the_canonical_json_of_its_entry_and_digest() -> None:
    for output in ("42", 'x","sha256":"0', "naïve\u2028"):
        line = evalgate_journal_line("rev/c/a/r0", dict(OUTCOME, output=output))
        entry = json.loads(line)
        assert line == evalgate_canonical_json(entry) + b"\n"
        digest = entry.pop("sha256")
        assert digest == evalgate_sha256_hex(entry)


def test_a_line_of_an_encoded_outcome_is_the_same_line() -> None:
    # The child encodes an answer's outcome once: its line must be byte for byte the one
    # evalgate_journal_line builds from the dict, whatever the identity or output hold.
    for identity in ("rev/c/a/r0", 'rev/"q"/ünï\u2028/r1'):
        for output in ("42", 'x","sha256":"0', "naïve\u2028"):
            outcome = dict(OUTCOME, output=output)
            encoded = evalgate_journal_line_of(identity, evalgate_canonical_json(outcome))
            assert encoded == evalgate_journal_line(identity, outcome)
            assert json.loads(encoded)["identity"] == identity


def test_a_line_whose_digest_does_not_match_is_skipped(tmp_path: Path) -> None:
    # journals are published without fsync: a torn, zeroed or edited line must fail its digest
    store = EvalgateLocalStore(str(tmp_path))
    folder = evalgate_journal_folder("s/d/k/gen-1", "shard-0-of-1")
    good = evalgate_journal_line("rev/c/a/r0", OUTCOME)
    edited = evalgate_journal_line("rev/c/b/r0", OUTCOME).replace(b'"42"', b'"43"')
    entry = json.loads(evalgate_journal_line("rev/c/c/r0", OUTCOME))
    entry["extra"] = 1  # a member the digest does not cover
    entry["sha256"] = evalgate_sha256_hex({k: v for k, v in entry.items() if k != "sha256"})
    undigested = evalgate_canonical_json({"identity": "rev/c/d/r0", "outcome": OUTCOME}) + b"\n"
    zeroed = b"\0" * 40 + b"\n"
    data = good + edited + evalgate_canonical_json(entry) + b"\n" + undigested + zeroed
    store.evalgate_write_atomic(evalgate_journal_name(folder, "w", 1), data)
    assert b'"43"' in edited
    assert sorted(evalgate_read_journal(store, "s/d/k/gen-1")) == ["rev/c/a/r0"]


def test_the_child_publishes_journals_without_fsync_and_segments_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    store = EvalgateLocalStore(str(tmp_path))
    store.evalgate_write_atomic("a/seg-1.jsonl", b"x\n")
    assert len(synced) == 2  # the file and its folder
    store.evalgate_write_atomic("a/j-1.journal", b"y\n", durable=False)
    assert len(synced) == 2
    assert (tmp_path / "a" / "j-1.journal").read_bytes() == b"y\n"
    with pytest.raises(FileExistsError):
        store.evalgate_write_atomic("a/j-1.journal", b"z\n", durable=False)
    writer = EvalgateJournalWriter(store, "w", lambda line: None)
    folder = evalgate_journal_folder("s/d/k/gen-1", "shard-0-of-1")
    asyncio.run(writer.evalgate_append(folder, evalgate_journal_line("rev/c/a/r0", OUTCOME)))
    assert len(synced) == 2 and writer.objects == 1
    assert list(evalgate_read_journal(store, "s/d/k/gen-1")) == ["rev/c/a/r0"]


def test_a_folder_journal_is_one_appended_file_per_process_and_never_replaced(
    tmp_path: Path,
) -> None:
    store = EvalgateLocalStore(str(tmp_path))
    folder = evalgate_journal_folder("s/d/k/gen-1", "shard-0-of-1")
    logged: list[str] = []

    async def journal(writer: EvalgateJournalWriter, names: list[str]) -> None:
        for name in names:
            await writer.evalgate_append(folder, evalgate_journal_line(name, OUTCOME))

    first = EvalgateJournalWriter(store, "w", logged.append)
    asyncio.run(journal(first, ["rev/c/a/r0", "rev/c/b/r0", "rev/c/c/r0"]))
    # another process that happens to carry the same writer id takes the next free name
    second = EvalgateJournalWriter(store, "w", logged.append)
    asyncio.run(journal(second, ["rev/c/d/r0"]))
    first.evalgate_close()
    second.evalgate_close()
    files = sorted(p.name for p in (tmp_path / folder).iterdir())
    assert files == ["w-000001.journal", "w-000002.journal"]
    assert (first.objects, first.published, second.published) == (1, 3, 1)
    assert len((tmp_path / folder / files[0]).read_bytes().splitlines()) == 3
    found = evalgate_read_journal(store, "s/d/k/gen-1")
    assert sorted(found) == ["rev/c/a/r0", "rev/c/b/r0", "rev/c/c/r0", "rev/c/d/r0"]
    assert logged == []
    with pytest.raises(FileExistsError):
        store.evalgate_appender(f"{folder}/{files[0]}")


def test_a_journal_folder_that_leads_out_of_the_store_is_logged_not_written(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = EvalgateLocalStore(str(tmp_path / "store"))
    folder = evalgate_journal_folder("s/d/k/gen-1", "shard-0-of-1")
    (tmp_path / "store" / folder).parent.mkdir(parents=True)
    (tmp_path / "store" / folder).symlink_to(outside)
    logged: list[str] = []
    writer = EvalgateJournalWriter(store, "w", logged.append)
    line = evalgate_journal_line("rev/c/a/r0", OUTCOME)
    asyncio.run(writer.evalgate_append(folder, line))
    asyncio.run(writer.evalgate_append(folder, line))
    assert list(outside.iterdir()) == []
    assert len(logged) == 1 and "cannot write" in logged[0]


def test_journals_are_never_read_as_segments(tmp_path: Path) -> None:
    from test_store import EXPECT, PREFIX

    store = EvalgateLocalStore(str(tmp_path))
    folder = evalgate_journal_folder(PREFIX, "shard-0-of-1")
    store.evalgate_write_atomic(
        evalgate_journal_name(folder, "w", 1), evalgate_journal_line("x", OUTCOME)
    )
    assert store.evalgate_list(PREFIX) == []
    view = evalgate_read_generation(store, PREFIX, EXPECT)
    assert (view.segments, view.problems) == (0, [])


# -- SIGKILL at ~40 %, concurrency 16 ---------------------------------------------------------


SLOW_ITEMS = """
import os
import time

_SLOW_S = float(os.environ.get("EVALGATE_TEST_SLOW_ITEM_S", "0"))


def pytest_runtest_logreport(report):
    if _SLOW_S and report.when == "call":
        time.sleep(_SLOW_S)
"""


class JournalRig:
    """A 320-identity suite against one logging simulator, and a store (folder or S3)."""

    def __init__(
        self, root: Path, location: str, backend: EvalgateStoreBackend, env: dict[str, str]
    ) -> None:
        self.root = root
        self.location = location
        self.backend = backend
        self.env = env
        self.log = root / "requests.jsonl"

    def suite(self, url: str) -> EvalgateManifest:
        path = write_suite(
            self.root / "suite",
            {"candidate": url, "baseline": url},
            cases=make_cases(["alpha", "beta"], 80),
            budget={"max_concurrency": CONCURRENCY, "max_attempts": 3, "timeout_s": 10},
        )
        (path.parent / "conftest.py").write_text(SLOW_ITEMS, "utf-8")
        return evalgate_load_manifest(str(path))

    def start(self, slow: bool = False) -> subprocess.Popen[bytes]:
        """``pytest --evalgate suite`` in its own session; ``slow``: each item's call report
        takes 20 ms more (the suite's conftest), so the item loop commits at 50 items/s while
        answers arrive at 160/s and answered-but-uncommitted identities pile up whatever the
        machine's load (the premise of the kill test)."""
        argv = [sys.executable, "-m", "pytest", "--evalgate", "suite", "-q"]
        argv += ["-p", "no:cacheprovider", f"--evalgate-store={self.location}"]
        env = {**self.env, "EVALGATE_TEST_SLOW_ITEM_S": "0.02"} if slow else self.env
        with open(self.root / "run.out", "ab") as out:
            return subprocess.Popen(
                argv, cwd=self.root, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def requests(self) -> list[str]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [row["identity"] for row in rows if row.get("identity")]

    def committed(self) -> Counter[str]:
        seen: Counter[str] = Counter()
        for relpath in self.backend.evalgate_list(""):
            for line in self.backend.evalgate_read(relpath).splitlines():
                identity = json.loads(line)["identity"]
                seen[
                    f"{identity['dataset_revision']}/{identity['candidate']}/"
                    f"{identity['case_id']}/r{identity['repetition']}"
                ] += 1
        return seen


def _env(extra: dict[str, str]) -> dict[str, str]:
    steering = ("PYTEST_EVALGATE_", "PYTEST_ADDOPTS", "AWS_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(steering)}, **extra}


@pytest.fixture(params=["folder", "s3"])
def journal_rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JournalRig]:
    if request.param == "folder":
        location = str(tmp_path / "store")
        yield JournalRig(tmp_path, location, EvalgateLocalStore(location), _env({}))
        return
    seaweed = request.getfixturevalue("seaweed")
    location = seaweed.new_store()
    backend = EvalgateS3Store(location, client=seaweed.client())
    yield JournalRig(tmp_path, location, backend, _env(seaweed.env()))


def _wait_for_requests(rig: JournalRig, count: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while len(rig.requests()) < count:
        assert process.poll() is None, (rig.root / "run.out").read_text()[-3000:]
        assert time.monotonic() < deadline, "the run did not get to 40 %"
        time.sleep(0.005)


@pytest.mark.slow
def test_a_kill_costs_at_most_the_requests_in_flight(journal_rig: JournalRig) -> None:
    rig = journal_rig
    config = EvalgateSimConfig(accuracy=0.9, latency_ms=LATENCY_MS, seed=5)
    with EvalgateSimServer(config, request_log=rig.log) as server:
        manifest = rig.suite(server.base_url)
        expected = 2 * len(manifest.cases)
        first = rig.start(slow=True)
        try:
            _wait_for_requests(rig, int(0.4 * expected), first)
        finally:
            os.killpg(first.pid, signal.SIGKILL)  # pytest and its runner child, as a dying pod
            first.wait(RUN_TIMEOUT_S)
        evalgate_wait_idle(server)  # requests already on the wire reach the log
        asked_before = rig.requests()
        committed_before = set(rig.committed())
        rerun = rig.start()
        code = rerun.wait(RUN_TIMEOUT_S)
        assert code == evalgate_decided_exit((rig.root / "run.out").read_text())
        asked_again = rig.requests()[len(asked_before) :]
    resent = set(asked_again) & set(asked_before)
    asked = len(set(asked_before))
    print(f"\nasked={asked} committed={len(committed_before)} resent={len(resent)}")
    assert 0.3 * expected < len(set(asked_before)) < 0.7 * expected, "not killed near 40 %"
    # the journal must have mattered: answers beyond the in-flight bound were not committed yet
    assert len(set(asked_before) - committed_before) > CONCURRENCY
    assert len(resent) <= CONCURRENCY, sorted(resent)
    assert max(Counter(asked_again).values()) == 1
    final = rig.committed()
    assert len(final) == expected and set(final.values()) == {1}, "an identity stored twice"
