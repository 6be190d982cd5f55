"""Resume after a kill at 90 %: requests and wall time of the rerun against a full run.

One in-process simulator with a request log serves a suite of CASES x 2 candidates. In one
invocation, side by side:

1. a full run into an empty store (requests, wall time);
2. a run into a second empty store, SIGKILLed once 90 % of the identities are committed;
3. the same command again (the resume): requests it sent, how many of them the killed run had
   already sent (re-sent), and its wall time.

Target (issue 4): the resume sends at most 10 % of the requests plus those in flight at the kill.
Run: ``python bench/resume.py [--cases 600] [--latency-ms 50] [--concurrency 32]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from suitekit import make_cases, write_suite

from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.simulated import EvalgateSimConfig, evalgate_write_answer_key
from pytest_evalgate.simulated.server import EvalgateSimServer
from pytest_evalgate.store import EvalgateLocalStore


def command(suite: Path, store: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "--evalgate",
        str(suite),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--evalgate-store={store}",
    ]


def committed(store: Path) -> int:
    backend = EvalgateLocalStore(str(store))
    return sum(backend.evalgate_read(p).count(b"\n") for p in backend.evalgate_list(""))


def log_lines(log: Path) -> list[str]:
    if not log.exists():
        return []
    rows = (json.loads(line) for line in log.read_text().splitlines() if line)
    return [row["identity"] for row in rows if row["identity"]]


def timed_run(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, capture_output=True, timeout=600, check=False)
    return time.perf_counter() - start


def kill_at(argv: list[str], cwd: Path, store: Path, target: int, server: EvalgateSimServer) -> int:
    """Run until ``target`` records are committed, SIGKILL; returns in-flight at the kill."""
    process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while process.poll() is None and time.monotonic() < deadline:
        if committed(store) >= target:
            break
        time.sleep(0.005)
    in_flight = int(server.stats()["in_flight"])
    os.kill(process.pid, signal.SIGKILL)
    process.wait(60)
    time.sleep(0.3)
    return in_flight


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=600)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evalgate-bench-resume-") as temp:
        return bench(Path(temp), args)


def bench(root: Path, args: argparse.Namespace) -> int:
    suite, log, answers = root / "suite", root / "requests.jsonl", root / "answers.jsonl"
    budget = {"max_concurrency": args.concurrency, "max_attempts": 3, "timeout_s": 30}
    cases = make_cases(["alpha", "beta"], args.cases // 2)

    def write(url: str) -> int:
        path = write_suite(suite, {"candidate": url, "baseline": url}, cases=cases, budget=budget)
        manifest = evalgate_load_manifest(str(path))
        rows = ((c.evalgate_prompt_json(), c.target, c.category) for c in manifest.cases)
        evalgate_write_answer_key(answers, rows)
        return len(manifest.cases) * len(manifest.candidates)

    write("http://127.0.0.1:9/v1")
    config = EvalgateSimConfig(accuracy=0.9, latency_ms=args.latency_ms, seed=3)
    with EvalgateSimServer(config, answers=answers, request_log=log) as server:
        expected = write(server.base_url)
        full_s = timed_run(command(suite, root / "store-full"), root)
        full_requests = len(log_lines(log))
        before = len(log_lines(log))
        store = root / "store-resume"
        in_flight = kill_at(command(suite, store), root, store, int(expected * 0.9), server)
        first = log_lines(log)[before:]
        at_kill = committed(store)
        resume_s = timed_run(command(suite, store), root)
        rerun = log_lines(log)[before + len(first) :]
        noop_s = timed_run(command(suite, store), root)
    resent = len(set(rerun) & set(first))
    print(f"identities: {expected}; latency {args.latency_ms:g} ms; concurrency {args.concurrency}")
    print(f"full run:          {full_requests:6d} requests  {full_s:6.2f} s")
    print(
        f"killed at:         {at_kill:6d} committed ({at_kill / expected:.1%}),"
        f" {len(first)} requested, {in_flight} in flight"
    )
    print(
        f"resume:            {len(rerun):6d} requests  {resume_s:6.2f} s"
        f"  (re-sent {resent}: in flight {in_flight} + uncommitted tail {resent - in_flight})"
    )
    print(f"rerun, all stored: {len(log_lines(log)) - before - len(first) - len(rerun):6d} requests"
          f"  {noop_s:6.2f} s  (pytest + plugin start-up and item loop only)")  # fmt: skip
    print(
        f"ratios resume/full: requests {len(rerun) / full_requests:.3f},"
        f" wall {resume_s / full_s:.3f}; target requests <= 0.100 + in-flight"
        f" {in_flight / expected:.3f} = {0.1 + in_flight / expected:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
