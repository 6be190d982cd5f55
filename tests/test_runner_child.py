"""The runner from the inside: its child process, the window, urgent works, the auth probe,
commits off the item loop, and the child's death with the pytest process.

Real loopback simulator (``EvalgateSimServer``), real child process; no pytest run around it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import suitekit

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.errors import EvalgateError
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.runner.child_process import evalgate_loop_factory
from pytest_evalgate.runner.parent import EvalgateLimits, EvalgateRunner
from pytest_evalgate.runner.work import EvalgateSuiteRun, EvalgateWork
from pytest_evalgate.scoring import evalgate_make_scorer
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.server import EvalgateSimServer
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    evalgate_seal,
)

PREFIX = "suite/digest/cand-key/gen-1"


def write_suite(folder: Path, cases: int) -> Path:
    """A pinned one-candidate suite; returns the manifest path (base URL filled in later)."""
    rows = [
        {"id": f"c{i:03d}", "input": f"q {i}?", "target": f"a {i}", "category": "k"}
        for i in range(cases)
    ]
    return suitekit.write_suite(
        folder,
        {"cand": "http://127.0.0.1:1/v1"},
        cases=rows,
        extra={"stream": False, "generation": {"temperature": 0.0, "max_tokens": 8}},
        suite="runner",
        revision="v1",
        models={"cand": "m"},
    )


class Rig:
    """A suite, a simulator, works, and a runner over them."""

    def __init__(self, folder: Path, cases: int, api: str = "chat", **knobs: Any) -> None:
        self.folder = folder
        path = write_suite(folder, cases)
        manifest = evalgate_load_manifest(str(path))
        key = suitekit.write_answer_key(path, folder / "answers.key")
        config = EvalgateSimConfig(accuracy=1.0, **knobs)
        self.log = folder / "requests.jsonl"
        self.server = EvalgateSimServer(config, answers=key, request_log=self.log).start()
        endpoint = EvalgateEndpoint(self.server.base_url, "m", api, None, 10.0, 2, False)
        scorer = evalgate_make_scorer("exact", {}, {}, "evalgate.yaml")
        keys = {"cand": "cand-key"}
        run = EvalgateSuiteRun(manifest, scorer, 1.0, {"cand": endpoint}, {"cand": PREFIX}, keys)
        self.works = [
            EvalgateWork(_identity(manifest, c), run, c, "cand", 0, 0) for c in manifest.cases
        ]
        self.store = folder / "store"
        self.writer = EvalgateSegmentWriter(EvalgateLocalStore(str(self.store)), "shard-0-of-1")

    def runner(
        self, concurrency: int, window: int | None, *, early: bool = False
    ) -> EvalgateRunner:
        limits = EvalgateLimits(concurrency, None, None)
        return EvalgateRunner(
            self.works, self.writer, limits, concurrency=concurrency, window=window, early=early
        )

    def logged(self) -> list[str]:
        """Identities the server saw, in arrival order."""
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line)["identity"] for line in lines]

    def requests(self) -> int:
        return int(self.server.stats()["requests_total"])

    def stored(self) -> list[dict[str, Any]]:
        lines = []
        for segment in sorted(self.store.rglob("*.jsonl")):
            lines += [json.loads(line) for line in segment.read_text().splitlines()]
        return lines


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Any]:
    rigs: list[Rig] = []

    def make(cases: int, **knobs: Any) -> Rig:
        rigs.append(Rig(tmp_path, cases, **knobs))
        return rigs[-1]

    yield make
    for rig in rigs:
        rig.server.stop()


def test_records_come_in_item_order_sealed_and_the_window_stays_flat(make_rig: Any) -> None:
    rig = make_rig(60, latency_ms=20)
    runner = rig.runner(concurrency=4, window=8)
    runner.evalgate_start()
    try:
        for consumed, work in enumerate(rig.works):
            assert rig.requests() <= consumed + 8  # never more than the window ahead
            record = runner.evalgate_wait(work)
            assert record["identity"]["case_id"] == work.case.case_id
            assert record["passed"] is True and record["error"] is None
            assert evalgate_seal(record) == record  # the checksum covers what was scored
    finally:
        runner.evalgate_close()
    assert rig.requests() == 60
    assert runner.progress.done == 60 and runner.progress.in_flight == 0
    assert rig.server.stats()["peak_in_flight"] <= 4


@pytest.mark.parametrize("asyncio_loop", [False, True], ids=["uvloop", "asyncio-loop"])
def test_the_child_runs_on_uvloop_unless_asked_for_asyncio_loop(
    make_rig: Any, monkeypatch: pytest.MonkeyPatch, asyncio_loop: bool
) -> None:
    if asyncio_loop:
        monkeypatch.setenv("PYTEST_EVALGATE_ASYNCIO_LOOP", "1")
    else:
        monkeypatch.delenv("PYTEST_EVALGATE_ASYNCIO_LOOP", raising=False)
    rig = make_rig(24, latency_ms=5)
    runner = rig.runner(concurrency=4, window=8)
    runner.evalgate_start()
    try:
        assert runner._pipe.process is not None
        child = runner._pipe.process.pid
        records = [runner.evalgate_wait(work) for work in rig.works]
        maps = Path(f"/proc/{child}/maps").read_text(encoding="utf-8")
    finally:
        runner.evalgate_close()
    assert [r["identity"]["case_id"] for r in records] == [w.case.case_id for w in rig.works]
    assert all(r["passed"] is True and r["error"] is None for r in records)
    assert ("uvloop" in maps) is not asyncio_loop  # uvloop's extension is mapped, or is not


def test_the_loop_factory_falls_back_to_asyncio_without_uvloop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    import uvloop

    monkeypatch.delenv("PYTEST_EVALGATE_ASYNCIO_LOOP", raising=False)
    assert evalgate_loop_factory() is uvloop.new_event_loop
    monkeypatch.setenv("PYTEST_EVALGATE_ASYNCIO_LOOP", "1")
    assert evalgate_loop_factory() is asyncio.new_event_loop
    monkeypatch.delenv("PYTEST_EVALGATE_ASYNCIO_LOOP")
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on a platform without uvloop
    assert evalgate_loop_factory() is asyncio.new_event_loop


def test_an_early_runner_sends_a_larger_first_window_then_the_usual_one(make_rig: Any) -> None:
    # started while pytest collects (session.evalgate_start_early): 16 per slot before the item
    # loop confirms (256 at 16), then the usual 4 per slot + 64 (128) ahead of the loop
    rig = make_rig(400, latency_ms=5)
    runner = rig.runner(concurrency=16, window=None, early=True)
    runner.evalgate_start()
    try:
        deadline = time.monotonic() + 30
        while rig.requests() < 256 and time.monotonic() < deadline:
            time.sleep(0.02)  # nobody pumps: the child works through its first window alone
        time.sleep(0.3)
        assert rig.requests() == 256  # the first window, not 400 and not the usual 128
        runner.evalgate_confirm(rig.works[:300])  # the collected items: the first 300
        for consumed, work in enumerate(rig.works[:300]):
            assert rig.requests() <= max(256, consumed + 128)  # the usual window from here on
            runner.evalgate_wait(work)
    finally:
        runner.evalgate_close()
    assert rig.requests() == 300  # nothing past the confirmed works was ever sent
    wanted = {work.case.case_id for work in rig.works[:300]}
    assert {header.split("/")[2] for header in rig.logged()} == wanted


def test_an_item_asked_out_of_order_jumps_the_queue(make_rig: Any) -> None:
    rig = make_rig(40, latency_ms=100)
    runner = rig.runner(concurrency=1, window=4)
    runner.evalgate_start()
    try:
        record = runner.evalgate_wait(rig.works[-1])  # far outside the window
        assert record["identity"]["case_id"] == rig.works[-1].case.case_id
        for work in rig.works[:-1]:
            assert runner.evalgate_wait(work)["identity"]["case_id"] == work.case.case_id
    finally:
        runner.evalgate_close()
    logged = rig.logged()
    assert len(logged) == len(set(logged)) == 40  # each once, the urgent one included
    # Only the work already on the wire (one at concurrency 1) went before the urgent one.
    assert logged.index("v1/cand/c039/r0") <= 1


def test_a_fatal_auth_error_stops_the_candidate_after_one_request(make_rig: Any) -> None:
    rig = make_rig(20, fail_401=True)
    runner = rig.runner(concurrency=8, window=16)
    runner.evalgate_start()
    try:
        records = [runner.evalgate_wait(work) for work in rig.works]
    finally:
        runner.evalgate_close()
    assert records[0]["error"]["category"] == "auth"
    assert {r["error"]["category"] for r in records[1:]} == {"not_requested"}
    assert rig.requests() == 1
    assert "auth" in (runner.evalgate_stopped_reason(rig.works[5]) or "")
    assert [r["identity"]["case_id"] for r in rig.stored()] == ["c000"]  # only the probe


def test_while_the_probe_is_out_the_child_opens_the_connections_of_the_works_behind_it(
    make_rig: Any,
) -> None:
    rig = make_rig(20, latency_ms=600)
    runner = rig.runner(concurrency=8, window=16)
    runner.evalgate_start()
    try:
        _wait_for(lambda: rig.server.stats()["connections_open"] >= 8, timeout=5.0)
        stats = rig.server.stats()
        assert stats["requests_total"] == 1  # the probe alone: warming sends no request
        assert stats["connections_open"] == 8  # the probe's and 7 for the works behind it
        records = [runner.evalgate_wait(work) for work in rig.works]
    finally:
        runner.evalgate_close()
    assert all(record["error"] is None for record in records)
    assert rig.requests() == 20


def test_every_record_is_committed_once_by_close(make_rig: Any) -> None:
    rig = make_rig(30, latency_ms=5)
    runner = rig.runner(concurrency=8, window=12)
    runner.evalgate_start()
    try:
        for work in rig.works[:10]:  # the item loop stops early (-x, a crash in a hook)
            runner.evalgate_wait(work)
    finally:
        runner.evalgate_close()
    stored = [r["identity"]["case_id"] for r in rig.stored()]
    assert len(stored) == len(set(stored)) == rig.writer.committed
    # Whatever was sent within the window is finished and committed, not thrown away.
    assert {f"c{i:03d}" for i in range(10)} <= set(stored) and len(stored) <= 10 + 12


def test_segments_are_committed_before_close_by_the_committer(make_rig: Any) -> None:
    rig = make_rig(12, latency_ms=10)
    rig.writer.max_age_s = 0.0  # due at every look: each arrival is handed to the committer
    runner = rig.runner(concurrency=4, window=64)
    runner.evalgate_start()
    try:
        for work in rig.works:
            runner.evalgate_wait(work)
        _wait_for(lambda: len(rig.stored()) == 12)  # written without close or another wait
    finally:
        runner.evalgate_close()
    assert rig.writer.committed == 12


def test_the_tail_is_committed_once_every_work_is_answered_not_at_the_writers_age(
    make_rig: Any,
) -> None:
    rig = make_rig(12, latency_ms=5)
    rig.writer.max_age_s = 3600.0  # never due by age in this test: only the tail rule commits
    runner = rig.runner(concurrency=4, window=64)  # half the window (32) is never waiting
    runner.evalgate_start()
    try:
        records = [runner.evalgate_wait(work) for work in rig.works]
        assert rig.writer.committed == 12  # each handed out only once committed
    finally:
        runner.evalgate_close()
    assert [r["identity"]["case_id"] for r in records] == [w.case.case_id for w in rig.works]
    assert len(rig.stored()) == 12


def test_a_failure_inside_the_child_reaches_the_item_loop(make_rig: Any) -> None:
    rig = make_rig(5, api="bogus")  # the client refuses the endpoint: an error, not an answer
    runner = rig.runner(concurrency=2, window=4)
    runner.evalgate_start()
    with pytest.raises(EvalgateError, match="api"):
        runner.evalgate_wait(rig.works[0])
    with pytest.raises(EvalgateError, match="api"):
        runner.evalgate_close()
    assert rig.requests() == 0


def test_the_child_dies_with_a_killed_pytest_process(make_rig: Any, tmp_path: Path) -> None:
    rig = make_rig(200, latency_ms=300)
    script = tmp_path / "parent.py"
    script.write_text(_parent_script(rig), encoding="utf-8")
    with subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as parent:
        try:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            _wait_for(lambda: rig.requests() > 0)
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait(10)
            _wait_for(lambda: not _alive(child))
        finally:
            if parent.poll() is None:
                parent.kill()
    after_kill = rig.requests()
    time.sleep(0.5)
    assert rig.requests() == after_kill  # not one request after the parent is gone
    assert after_kill <= 8  # it never got past the first window


def _parent_script(rig: Rig) -> str:
    # A pytest process stand-in: start a runner, report the child's pid, block.
    return textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_runner_child as t
        from pytest_evalgate.runner.parent import EvalgateLimits, EvalgateRunner
        from pytest_evalgate.store import EvalgateLocalStore, EvalgateSegmentWriter
        works = t.works_for(Path({str(rig.folder)!r}), {rig.server.base_url!r})
        writer = EvalgateSegmentWriter(EvalgateLocalStore({str(rig.store)!r}), "shard-0-of-1")
        limits = EvalgateLimits(4, None, None)
        runner = EvalgateRunner(works, writer, limits, concurrency=4, window=8)
        runner.evalgate_start()
        print(runner._pipe.process.pid, flush=True)
        time.sleep(60)
        """
    )


def works_for(folder: Path, base_url: str) -> list[EvalgateWork]:
    """The works of the suite in ``folder`` against ``base_url`` (for the parent stand-in)."""
    manifest = evalgate_load_manifest(str(folder / "evalgate.yaml"))
    endpoint = EvalgateEndpoint(base_url, "m", "chat", None, 10.0, 2, False)
    scorer = evalgate_make_scorer("exact", {}, {}, "evalgate.yaml")
    run = EvalgateSuiteRun(manifest, scorer, 1.0, {"cand": endpoint}, {"cand": PREFIX}, {})
    return [EvalgateWork(_identity(manifest, c), run, c, "cand", 0, 0) for c in manifest.cases]


def _identity(manifest: Any, case: Any) -> EvalgateIdentity:
    return EvalgateIdentity(manifest.dataset_revision, case.case_id, "cand", 0)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
