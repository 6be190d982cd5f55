"""Restart safety, end to end: SIGKILL a real ``pytest --evalgate`` run, rerun it, and check the
store and the simulator's request log.

Each scenario runs a 240-identity suite (120 cases x 2 candidates) against one in-process
simulator with a request log (100 ms per request, 8 in flight: about 3 s a run), kills the run at
one moment, reruns the same command to the end (against a 10 ms twin of the simulator that logs
to the same file, through ``PYTEST_EVALGATE_BASE_URL_*``: transport, outside every identity),
and asserts:

- every expected identity is in the store exactly once (one line, no problems, no duplicates);
- no identity committed before the kill is requested by the rerun (the server's log);
- the rerun requests exactly the identities that were neither committed nor journaled (the
  resume journal, store.journal, replays answered ones), each once;
- what the rerun re-sends of the first run's requests is bounded by what was in flight at the
  kill plus the writer's uncommitted tail (see ``check_resent_bound``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from assertkit import (
    evalgate_decided_exit,
    evalgate_descendants,
    evalgate_wait_gone,
    evalgate_wait_idle,
)
from suitekit import make_cases, write_suite

from pytest_evalgate.manifest.load import (
    EvalgateManifest,
    evalgate_base_url_env,
    evalgate_load_manifest,
)
from pytest_evalgate.simulated import EvalgateSimConfig, evalgate_write_answer_key
from pytest_evalgate.simulated.server import EvalgateSimServer
from pytest_evalgate.store import EVALGATE_FAULT_COMMIT_PAUSE_ENV, EvalgateLocalStore

pytestmark = pytest.mark.slow

LATENCY_S = 0.1
CONCURRENCY = 8
# The segment writer commits when its oldest pending record is max_age_s (0.5 s) old, checked
# every max_age_s / 2 (0.25 s) by the item loop while it waits, and after each finished record.
COMMIT_WINDOW_S = 0.5 + 0.25
FAST_LATENCY_S = 0.01  # the runs to the end (Rig.run): none is killed
PAUSE_S = 0.3  # fault-injected hold of a written temp file (third kill only)
RUN_TIMEOUT_S = 60.0


@dataclass
class Rig:
    """A suite, its store, and a simulator that logs every request."""

    root: Path
    suite: Path
    manifest: EvalgateManifest
    store: Path
    log: Path
    server: EvalgateSimServer  # the killed runs' (LATENCY_S)
    to_fast: dict[str, str]  # the environment that sends a run to the fast one

    @property
    def expected(self) -> set[str]:
        revision = self.manifest.dataset_revision
        return {
            f"{revision}/{name}/{case.case_id}/r0"
            for name in self.manifest.candidates
            for case in self.manifest.cases
        }

    def command(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pytest",
            "--evalgate",
            str(self.suite),
            "-q",
            "-p",
            "no:cacheprovider",
            f"--evalgate-store={self.store}",
            *extra,
        ]

    def start(self, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.command(*extra),
            cwd=self.root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )

    def run(self, *extra: str) -> int:
        """Run to the end against the fast simulator; the run must reach a decided verdict and
        exit by it (0 or 1)."""
        completed = subprocess.run(
            self.command(*extra),
            cwd=self.root,
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            env={**os.environ, **self.to_fast},
        )
        implied = evalgate_decided_exit(completed.stdout.decode(errors="replace"))
        assert completed.returncode == implied, completed.stderr.decode(errors="replace")[-3000:]
        return completed.returncode

    def requests(self) -> list[tuple[float, str]]:
        """(time, identity) of every completion request the simulator has logged."""
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [(row["t"], row["identity"]) for row in rows if row["identity"]]

    def committed(self) -> Counter[str]:
        """identity -> number of committed lines holding it, over every segment."""
        backend = EvalgateLocalStore(str(self.store))
        seen: Counter[str] = Counter()
        for relpath in backend.evalgate_list(""):
            for line in backend.evalgate_read(relpath).splitlines():
                identity = json.loads(line)["identity"]
                seen[
                    f"{identity['dataset_revision']}/{identity['candidate']}/"
                    f"{identity['case_id']}/r{identity['repetition']}"
                ] += 1
        return seen


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    log = tmp_path / "requests.jsonl"
    answers = tmp_path / "answers.jsonl"
    suite_path = tmp_path / "suite"

    def suite(url: str) -> EvalgateManifest:
        path = write_suite(
            suite_path,
            {"candidate": url, "baseline": url},
            cases=make_cases(["alpha", "beta"], 60),
            budget={"max_concurrency": CONCURRENCY, "max_attempts": 3, "timeout_s": 10},
        )
        return evalgate_load_manifest(str(path))

    # The answer key comes from the prompts, which do not depend on the endpoint URL.
    rows = ((c.evalgate_prompt_json(), c.target, c.category) for c in suite("http://x/v1").cases)
    evalgate_write_answer_key(answers, rows)
    config = EvalgateSimConfig(accuracy=0.9, latency_ms=LATENCY_S * 1000, seed=3)
    # The same simulator at FAST_LATENCY_S, logging to the same file, for the runs to the end
    # (Rig.run): the bounds above are about the killed runs, whose timing the rerun's latency
    # does not change.
    fast_config = replace(config, latency_ms=FAST_LATENCY_S * 1000)
    with (
        EvalgateSimServer(config, answers=answers, request_log=log) as server,
        EvalgateSimServer(fast_config, answers=answers, request_log=log) as fast,
    ):
        manifest = suite(server.base_url)
        # transport only: the same identities, store and candidate keys
        to_fast = {evalgate_base_url_env(name): fast.base_url for name in manifest.candidates}
        yield Rig(tmp_path, suite_path, manifest, tmp_path / "store", log, server, to_fast)


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[bytes]) -> bool:
    """Poll ``condition`` every few ms until true; False if the run ended first (bounded)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return True
        time.sleep(0.003)
    return False


def temp_file_present(store: Path) -> bool:
    """A segment is being written: a writer's hidden temp file exists."""
    for _folder, _dirs, files in os.walk(store):
        if any(name.startswith(".tmp-") for name in files):
            return True
    return False


@dataclass
class Kill:
    """What was true at the SIGKILL."""

    time: float
    in_flight: int
    committed: set[str]
    requested: list[tuple[float, str]]
    pause: float = 0.0  # the fault-injected commit pause of that run: it widens the tail
    journaled: set[str] = field(default_factory=set)  # answered, in the resume journal


def journaled(store: Path) -> set[str]:
    """Identities whose answers the runner's child journaled (store.journal), committed or not."""
    found = set()
    for path in store.rglob("*.journal"):
        found |= {json.loads(line)["identity"] for line in path.read_bytes().splitlines()}
    return found


def kill(rig: Rig, process: subprocess.Popen[bytes], victim: int, pause: float = 0.0) -> Kill:
    in_flight = int(rig.server.stats()["in_flight"])
    below = evalgate_descendants(victim)  # its runner child, which journals until it exits
    at = time.time()
    os.kill(victim, signal.SIGKILL)
    if victim == process.pid:
        process.wait(RUN_TIMEOUT_S)
    evalgate_wait_gone(below)  # the child's last journal lines are written
    if victim == process.pid:
        # requests already on the wire reach the log (a killed worker's siblings keep sending,
        # so only a whole run's end makes the simulator idle; those tests re-read the log)
        evalgate_wait_idle(rig.server)
    return Kill(at, in_flight, set(rig.committed()), rig.requests(), pause, journaled(rig.store))


def check_resent_bound(rig: Rig, at_kill: Kill, rerun: list[str], workers: int = 1) -> None:
    """Re-sent = first-run requests the rerun sends again. They were in flight at the kill or
    finished but not yet committed (the writer's tail), so:

    - each was first requested at most COMMIT_WINDOW_S + one request + 1 s slack before the kill;
    - their number <= in-flight bound (CONCURRENCY) + tail bound, the tail being what finishes
      in one commit window at full speed: CONCURRENCY / LATENCY_S * COMMIT_WINDOW_S per worker.
    """
    first: dict[str, float] = {}
    for at, identity in at_kill.requested:
        first.setdefault(identity, at)
    resent = set(rerun) & set(first)
    tail = len(resent) - at_kill.in_flight
    window = COMMIT_WINDOW_S + at_kill.pause
    bound = CONCURRENCY + workers * math.ceil(CONCURRENCY / LATENCY_S * window)
    print(
        f"\nkill: committed={len(at_kill.committed)} requested={len(first)}"
        f" in_flight={at_kill.in_flight} resent={len(resent)} tail={tail} bound={bound}"
    )
    assert len(resent) <= bound
    oldest = at_kill.time - (window + LATENCY_S + 1.0)
    assert all(first[identity] >= oldest for identity in resent)


def check_resumed(rig: Rig, at_kill: Kill, until: int | None = None, workers: int = 1) -> None:
    """Checks on the rerun after ``at_kill``: its requests are log lines [kill, ``until``)."""
    rerun = [identity for _at, identity in rig.requests()[len(at_kill.requested) : until]]
    assert not set(rerun) & at_kill.committed, "committed identities were requested again"
    assert set(Counter(rerun).values()) <= {1}, "the rerun requested an identity twice"
    # journaled answers are replayed (rescored, committed), never requested again
    assert set(rerun) <= rig.expected - at_kill.committed - at_kill.journaled
    check_resent_bound(rig, at_kill, rerun, workers)


def check_complete(rig: Rig, last: Kill) -> None:
    """After the final rerun: every identity once in the store, every missing one requested."""
    rerun = [identity for _at, identity in rig.requests()[len(last.requested) :]]
    assert Counter(rerun) == Counter(rig.expected - last.committed - last.journaled)
    final = rig.committed()
    assert set(final) == rig.expected
    assert set(final.values()) == {1}, "an identity was committed twice"


def test_kill_early_mid_run_and_while_writing_then_resume(rig: Rig) -> None:
    """One store, three killed runs in a row, then a run to the end.

    Kill 1 comes before any commit (requests on the wire), kill 2 with 40 % committed, kill 3
    while a segment's temp file exists (the write in progress). Each rerun resumes what the
    previous one left.
    """
    total = len(rig.expected)
    moments: list[Callable[[], bool]] = [
        lambda: rig.log.exists() and len(rig.requests()) >= CONCURRENCY,
        lambda: sum(rig.committed().values()) >= total * 0.4,
        lambda: sum(rig.committed().values()) >= total * 0.6 and temp_file_present(rig.store),
    ]
    # The third run holds each written temp file for PAUSE_S before publishing it (the store's
    # fault-injection knob), so "while a segment is being written" is a moment a poll can see.
    pauses = [0.0, 0.0, PAUSE_S]
    kills: list[Kill] = []
    for moment, pause in zip(moments, pauses, strict=True):
        env = {EVALGATE_FAULT_COMMIT_PAUSE_ENV: str(pause)} if pause else None
        process = rig.start(env=env)
        assert wait_until(moment, process), "the run ended before the kill"
        kills.append(kill(rig, process, process.pid, pause))
    assert not kills[0].committed
    assert 0 < len(kills[1].committed) < len(kills[2].committed) < total
    rig.run()
    for at_kill, following in zip(kills, [*kills[1:], None], strict=True):
        check_resumed(rig, at_kill, None if following is None else len(following.requested))
    check_complete(rig, kills[-1])


def test_complete_run_then_rerun_then_fresh(rig: Rig) -> None:
    """A rerun of a complete run requests nothing; --evalgate-fresh requests everything again
    into a new generation and leaves the old one byte for byte."""
    first = rig.run()
    assert len(rig.requests()) == len(rig.expected)
    assert rig.run() == first  # the same store, the same verdict
    assert len(rig.requests()) == len(rig.expected)
    old = {p: p.read_bytes() for p in rig.store.rglob("*.jsonl")}
    assert rig.run("--evalgate-fresh") == first  # the simulator answers alike again
    counts = Counter(identity for _at, identity in rig.requests())
    assert counts == Counter({identity: 2 for identity in rig.expected})
    assert {p: p.read_bytes() for p in old} == old  # nothing overwritten or deleted
    generations = {p.parent.parent.name for p in rig.store.rglob("*.jsonl")}
    assert generations == {"gen-1", "gen-2"}
    assert set(rig.committed().values()) == {2}  # once per generation


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc/*/stat; psutil is not installed)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def test_kill_one_xdist_worker(rig: Rig) -> None:
    process = rig.start("-n", "2", "--max-worker-restart=0")
    total = len(rig.expected)
    assert wait_until(lambda: sum(rig.committed().values()) >= total * 0.3, process)
    workers = children(process.pid)
    assert len(workers) == 2, workers
    at_kill = kill(rig, process, workers[0])
    assert process.wait(RUN_TIMEOUT_S) != 0  # a crashed worker never yields a passing session
    at_kill.requested = rig.requests()  # the surviving worker kept going: all first-run requests
    at_kill.committed = set(rig.committed())
    assert 0 < len(at_kill.committed) < total
    rig.run("-n", "2")
    check_resumed(rig, at_kill, workers=2)
    check_complete(rig, at_kill)
