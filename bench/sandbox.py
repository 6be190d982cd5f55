"""Sandbox start time and capacity: bubblewrap against unshare, side by side in one run.

Each isolation that works here runs the same EXECUTIONS small executions (a task's answer and
its assert-based tests, like a code suite's case) at sandbox concurrency 2 (an
``asyncio.Semaphore(2)``, as the runner's budget share would be), after a short warm-up.
Reported per isolation: executions per second over the whole batch (wall clock), and the
sandbox start time p50/p95 (spawn until the driver runs inside: namespaces, mounts, interpreter
start-up), plus the run time p50/p95 (the code and tests, and the teardown). ``none`` (no
sandbox, the interpreter alone) is the floor for comparison.

Percentiles are nearest-rank (``stats.evalgate_percentile``, as in docs/timings.md).
Run: ``python bench/sandbox.py [--executions 200] [--concurrency 2]``. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from collections import Counter

from pytest_evalgate.errors import EvalgateSandboxUnavailableError
from pytest_evalgate.sandbox import (
    EvalgateExecution,
    EvalgateSandboxSpec,
    evalgate_sandbox_prepare,
    evalgate_sandbox_run,
)
from pytest_evalgate.stats import evalgate_percentile

CODE = """
def fizzbuzz(n):
    out = []
    for i in range(1, n + 1):
        out.append("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else
                   "Buzz" if i % 5 == 0 else str(i))
    return out
"""
TESTS = """
assert fizzbuzz(5) == ["1", "2", "Fizz", "4", "Buzz"]
assert fizzbuzz(15)[-1] == "FizzBuzz"
assert len(fizzbuzz(100)) == 100
"""
WARM_UP = 10


async def batch(spec: EvalgateSandboxSpec, executions: int, concurrency: int) -> tuple[
    list[EvalgateExecution], float
]:  # fmt: skip
    """``executions`` runs at most ``concurrency`` at a time; (results, wall seconds)."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> EvalgateExecution:
        async with gate:
            return await evalgate_sandbox_run(CODE, TESTS, spec)

    started = time.perf_counter()
    results = await asyncio.gather(*(one() for _ in range(executions)))
    return list(results), time.perf_counter() - started


def row(isolation: str, results: list[EvalgateExecution], wall: float) -> str:
    starts = [r.start_s * 1000 for r in results]
    runs = [r.run_s * 1000 for r in results]
    outcomes = Counter(r.outcome for r in results)
    cells = [
        f"{isolation:8}", f"{len(results):5d}", f"{wall:7.2f}", f"{len(results) / wall:8.1f}",
        f"{evalgate_percentile(starts, 50):7.1f}", f"{evalgate_percentile(starts, 95):7.1f}",
        f"{evalgate_percentile(runs, 50):7.1f}", f"{evalgate_percentile(runs, 95):7.1f}",
        ", ".join(f"{name} {count}" for name, count in sorted(outcomes.items())),
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


async def main(executions: int, concurrency: int) -> None:
    print(
        f"{executions} executions per isolation at sandbox concurrency {concurrency}; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, "
        f"kernel {platform.release()}, harness uid {os.geteuid()}"
    )
    print("| isolation | runs | wall s | exec/s | start p50 ms | start p95 ms | run p50 ms "
          "| run p95 ms | outcomes |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for isolation in ("bwrap", "unshare", "none"):
        try:
            spec = await evalgate_sandbox_prepare(EvalgateSandboxSpec(isolation=isolation))
        except EvalgateSandboxUnavailableError as error:
            print(f"| {isolation} | not available here: {error.reason[:120]} |")
            continue
        await batch(spec, WARM_UP, concurrency)
        results, wall = await batch(spec, executions, concurrency)
        print(row(isolation, results, wall), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.executions, arguments.concurrency))
