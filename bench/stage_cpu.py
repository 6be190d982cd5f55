"""CPU per model call of the three kinds of item, side by side in one run (issue 36): plain
chat items (one call each), tool loops (three calls a case: two tool calls, then the answer)
and multiple choice by log-likelihood (one ``/v1/completions`` request per choice, four a case).

Each kind runs ``pytest --evalgate`` (the candidate only) twice against the in-process
simulator at 50 ms per call, budget 64: once with ``--calls`` model calls and once with a tenth
of them. The whole process tree's CPU (user + system, the runner child included: ``os.wait4``)
of both runs gives the marginal CPU per model call, ``(cpu_big - cpu_small) / (calls_big -
calls_small)``: start-up, collection set-up and the gate cancel out, so kinds with different
calls per item compare per call. The whole big run's CPU per call is printed beside it. The
simulator runs in this process, so its CPU is not counted. Kinds alternate within a round.

Run: ``python bench/stage_cpu.py [--calls 6000] [--rounds 2]``. Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import mc
import tools
from _calls import phase_from_records
from _tree import run_tree
from suitekit import make_cases, write_answer_key, write_suite
from throughput import bench_env

from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.server import EvalgateSimServer

LATENCY_MS = 50.0
BUDGET = 64


def _plain(folder: Path, cases: int, base_url: str) -> Path:
    return write_suite(
        folder,
        {"candidate": base_url, "baseline": base_url},  # only the candidate is run
        cases=make_cases(["alpha", "beta", "gamma", "delta"], -(-cases // 4)),
        budget={"max_concurrency": BUDGET, "max_attempts": 2, "timeout_s": 30},
        extra={"stream": False},
    )


# kind: (suite writer, model calls per case, model calls a record made)
KINDS: dict[str, tuple[Callable[[Path, int, str], Path], int, Callable[[dict[str, Any]], int]]] = {
    "plain": (_plain, 1, lambda record: 1),
    "tools": (tools._suite, 3, lambda record: len(record["dialogue"]["steps"])),
    "choice": (mc._suite, 4, lambda record: int(record["choice"]["count"])),
}


def _run(kind: str, calls: int) -> tuple[float, int]:
    """(CPU seconds of the whole tree, model calls the records made) of one run of ``kind``."""
    write, per_case, count = KINDS[kind]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        placeholder = write(work / "suite", calls // per_case, "http://127.0.0.1:9/v1")
        key = write_answer_key(placeholder, work / "answers.jsonl")
        config = EvalgateSimConfig(accuracy=1.0, latency_ms=LATENCY_MS, seed=1)
        with EvalgateSimServer(config, answers=key) as server:
            manifest = write(work / "suite", calls // per_case, server.base_url)
            argv = [sys.executable, "-m", "pytest", "--evalgate", str(manifest), "-q",
                    "-p", "no:cacheprovider", "--evalgate-candidate", "candidate"]  # fmt: skip
            run = run_tree(argv, work, env=bench_env())
        made = phase_from_records(work / ".evalgate", count)[1]
    if made < calls * 0.95:
        raise SystemExit(f"{kind}: only {made} of {calls} model calls made:\n{run['output']}")
    return float(run["cpu"]), made  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"{args.calls} and {args.calls // 10} model calls per kind, budget {BUDGET}, "
          f"{LATENCY_MS:.0f} ms/call; load average {os.getloadavg()[0]:.2f} at start")  # fmt: skip
    for kind in KINDS:
        _run(kind, 60)  # warm-up: bytecode and the page cache
    marginal: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for number in range(1, args.rounds + 1):
        print(f"round {number}, load average {os.getloadavg()[0]:.2f}")
        for kind in KINDS:
            small_cpu, small = _run(kind, args.calls // 10)
            big_cpu, big = _run(kind, args.calls)
            per_call = (big_cpu - small_cpu) / (big - small) * 1000
            marginal[kind].append(per_call)
            print(f"  {kind:7s} marginal CPU {per_call:.3f} ms/model call | whole run "
                  f"{big_cpu / big * 1000:.3f} ms/call ({big} calls, {big_cpu:.2f} s)")  # fmt: skip
    plain = statistics.median(marginal["plain"])
    print("median marginal CPU per model call, against plain items:")
    for kind, values in marginal.items():
        value = statistics.median(values)
        print(f"  {kind:7s} {value:.3f} ms = {value / plain:.2f}x plain")


if __name__ == "__main__":
    main()
