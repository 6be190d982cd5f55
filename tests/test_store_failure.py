"""A store that fails in the middle of a run (issue 37, Bad): real processes only.

A real pytest process runs a suite against the simulator; its store fails while it runs: the S3
store's SeaweedFS is SIGKILLed, or the folder store's shard folder is swapped for a symlink out
of the store. Wanted: the requests stop within a bounded number of answers (not every identity),
no item whose record was not committed is reported as passed, the session ends with verdict
incomplete (the reason and how many answers were lost) and exit 1, never an INTERNALERROR, and
what was committed stays (a rerun resumes from it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from seaweedkit import EvalgateSeaweed, evalgate_weed_unusable
from suitekit import make_cases, write_suite

CONCURRENCY = 4
CASES = 150  # per candidate and category pair below: 600 identities, ~8 s at 4 in flight
WINDOW = 4 * CONCURRENCY + 64  # the runner's window (runner/parent.py)
TIMEOUT_S = 300.0
ENDPOINT = "simulated://?accuracy=0.9&seed=3&latency_ms=40"
OTHER = "simulated://?accuracy=0.8&seed=4&latency_ms=40"


def _suite(root: Path) -> Path:
    return write_suite(
        root / "suite",
        {"candidate": ENDPOINT, "baseline": OTHER},
        cases=make_cases(["alpha", "beta"], CASES),
        budget={"max_concurrency": CONCURRENCY, "max_attempts": 2, "timeout_s": 10},
    )


def _start(root: Path, env: dict[str, str], store: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "pytest", "--evalgate", "suite", "-p", "no:cacheprovider"]
    argv += ["-q", f"--evalgate-store={store}", f"--evalgate-request-log={root / 'req.log'}"]
    with open(root / "run.out", "wb") as out:
        return subprocess.Popen(
            argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _env(extra: dict[str, str]) -> dict[str, str]:
    steering = ("PYTEST_EVALGATE_", "PYTEST_ADDOPTS", "AWS_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(steering)}, **extra}


def _wait(condition: Callable[[], bool], process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError("the run ended (or timed out) before the store could fail under it")


def _outcomes(text: str) -> dict[str, int]:
    last = text.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?)", last)}


def _passed_records(lines: list[bytes]) -> int:
    return sum(bool(json.loads(line).get("passed")) for line in lines if line.strip())


def _requests(root: Path) -> int:
    log = root / "req.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _check_stopped(root: Path, process: subprocess.Popen[bytes], committed: list[bytes]) -> str:
    """The common assertions; returns the run's output."""
    try:
        status = process.wait(TIMEOUT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    out = (root / "run.out").read_text()
    assert status == 1, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    lost = re.search(r"verdict INCOMPLETE: the store failed mid-run \((.+)\); requests stopped,"
                     r" (\d+) answer\(s\) not committed", out)  # fmt: skip
    assert lost is not None, out[-3000:]
    outcomes = _outcomes(out)
    # never reported passed without its record committed
    assert outcomes.get("passed", 0) <= _passed_records(committed), (outcomes, out[-2000:])
    assert outcomes.get("errors", outcomes.get("error", 0)) > 0
    identities = 2 * 2 * CASES
    requested = _requests(root)
    # stopped within a bounded number of answers: what was committed, plus the window and
    # the requests in flight (and each identity asked at most twice)
    assert requested <= 2 * (len(committed) + WINDOW + CONCURRENCY) < 2 * identities
    assert requested < identities, requested
    return out


def _segments(folder: Path) -> list[bytes]:
    lines: list[bytes] = []
    for path in sorted(folder.rglob("seg-*.jsonl")):
        lines += path.read_bytes().splitlines()
    return lines


def test_a_folder_store_whose_shard_folder_leads_out_mid_run_stops_the_run(
    tmp_path: Path,
) -> None:
    _suite(tmp_path)
    process = _start(tmp_path, _env({}), "store")
    store = tmp_path / "store"

    def shard_folder() -> Path | None:
        for path in store.rglob("seg-*.jsonl"):
            if "candidate-" in str(path):
                return path.parent
        return None

    _wait(lambda: shard_folder() is not None, process)
    folder = shard_folder()
    assert folder is not None
    outside = tmp_path / "outside"
    folder.rename(outside)  # what was committed stays, out of the run's reach
    folder.symlink_to(outside, target_is_directory=True)
    before = sorted(p.name for p in outside.iterdir())
    out = _check_stopped(tmp_path, process, _segments(store) + _segments(outside))
    assert "refusing to follow a symlink that leaves the store" in out
    assert sorted(p.name for p in outside.iterdir()) == before  # nothing written through it


S3_TEST = "test_an_s3_store_killed_mid_run_stops_the_run_with_verdict_incomplete"


@pytest.fixture(scope="module", autouse=True)
def early_weed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Future[EvalgateSeaweed] | None]:
    """The S3 test's own SeaweedFS (it is killed), started in a thread when this module begins,
    so that its start (~3.5 s, nearly all of it weed waiting on itself) overlaps the folder
    test; None when the S3 test is not to run here or weed cannot run."""
    wanted = any(item.name == S3_TEST for item in request.session.items)
    if not wanted or evalgate_weed_unusable() is not None:
        yield None
        return
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(EvalgateSeaweed.start, tmp_path_factory.mktemp("weed") / "weed")
        try:
            yield future
        finally:
            if future.exception() is None:
                future.result().stop()  # by PID; a no-op when the test ended it already


def _restart(killed: EvalgateSeaweed) -> Future[EvalgateSeaweed]:
    """Start weed again on ``killed``'s data in a thread (its ports are new ones)."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(EvalgateSeaweed.start, killed.folder)
    pool.shutdown(wait=False)
    return future


def test_an_s3_store_killed_mid_run_stops_the_run_with_verdict_incomplete(
    tmp_path: Path, early_weed: Future[EvalgateSeaweed] | None
) -> None:
    reason = evalgate_weed_unusable()
    if reason:
        pytest.skip(reason)
    _suite(tmp_path)
    # our own weed: it is killed
    seaweed = early_weed.result() if early_weed else EvalgateSeaweed.start(tmp_path / "weed")
    restarted: Future[EvalgateSeaweed] | None = None
    try:
        location = seaweed.new_store()
        client = seaweed.client()
        bucket, prefix = location.removeprefix("s3://").split("/", 1)

        def committed() -> list[bytes]:
            lines: list[bytes] = []
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    if "/seg-" in item["Key"]:
                        body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"]
                        lines += body.read().splitlines()
            return lines

        process = _start(tmp_path, _env(seaweed.env()), location)
        _wait(lambda: len(committed()) > 0, process)
        os.kill(seaweed.process.pid, signal.SIGKILL)
        seaweed.process.wait(30)
        killed = seaweed
        # the same data, to count it, started while the run stops: on new ports, which the
        # run's store (pointed at the killed one's) never reaches
        restarted = _restart(killed)
        status_out = _check_stopped_later(tmp_path, process)
        seaweed = restarted.result()
        if seaweed.endpoint == killed.endpoint:  # the kernel gave its S3 port again: start
            _kill(seaweed)  # anew, now that the run has ended
            seaweed = EvalgateSeaweed.start(killed.folder)
        client = seaweed.client()
        lines = committed()
        assert 0 < len(lines) < 2 * 2 * CASES
        _check_stopped(tmp_path, status_out, lines)
    finally:
        _kill(seaweed)
        if restarted is not None and restarted.exception() is None:
            _kill(restarted.result())


def _kill(server: EvalgateSeaweed) -> None:
    """SIGKILL by PID: only counted from or killed anyway, no server here needs stop()'s 2 s
    of grace (seaweedkit.STOP_GRACE_S: weed keeps serving a while after SIGTERM)."""
    if server.process.poll() is None:
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(30)


def _check_stopped_later(root: Path, process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """Wait for the run (its store is down, so it is counted after a restart)."""
    try:
        process.wait(TIMEOUT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    return process
