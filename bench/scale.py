"""Per-item cost of ``pytest --evalgate`` beside bare pytest with as many trivial items, one run.

For each size (default 10,000 and 100,000 items), in one invocation:

- ``pytest``: bare pytest on one test file of N trivial parametrized items (``assert i >= 0``);
- ``evalgate``: ``pytest --evalgate`` on a generated suite of N cases (1 candidate, 1
  repetition, non-streaming, exact scorer, budget 64) against the simulated model as a
  subprocess at 0 ms latency (started by this script, so not in the measured tree): collection,
  runner child, scoring, store, item loop and gate.

Each row is a child process: wall time, CPU per item (user + system of the pytest process and the
descendants it reaped: the runner child) and peak RSS of the whole process tree (sampled every
20 ms, the runner child included). Ratios are evalgate / pytest at the same size.

Both rows leave out the pytest plugins installed here for our own tests only (hypothesis), and
both run with Python writing bytecode after a warm-up run (``throughput.bench_env``,
``throughput.warm_up``).

Run: ``python bench/scale.py [--sizes 10000,100000]``. Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _tree import run_tree
from throughput import bench_env, foreign_plugins, served_suite, warm_up

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
PYTEST += [part for flag in foreign_plugins() for part in flag.split()]  # both rows alike

TRIVIAL = """import pytest


@pytest.mark.parametrize("i", range({n}))
def test_item(i):
    assert i >= 0
"""


def bare(folder: Path, n: int) -> dict[str, object]:
    path = folder / f"test_trivial_{n}.py"
    path.write_text(TRIVIAL.format(n=n), encoding="utf-8")
    return run_tree([*PYTEST, path.name], folder, env=bench_env())


def evalgate(folder: Path, n: int) -> dict[str, object]:
    with served_suite(folder, n, latency_ms=0) as server:
        warm_up(folder, server.base_url)
        store = folder / f"store-{time.monotonic_ns()}"
        argv = [*PYTEST, "--evalgate", f"--evalgate-store={store}", "evalgate.yaml"]
        return run_tree(argv, folder, env=bench_env())


def _numbers(row: dict[str, object]) -> tuple[float, float, float]:
    return float(str(row["wall"])), float(str(row["cpu"])), float(str(row["rss"]))


def show(name: str, n: int, row: dict[str, object], ref: dict[str, object] | None) -> None:
    wall, cpu, rss = _numbers(row)
    line = (f"{name:<9} {n:>7} items  wall {wall:7.2f} s  CPU {1e3 * cpu / n:6.3f} ms/item  "
            f"peak RSS {rss:7.0f} MB ({1024 * rss / n:5.1f} KB/item)")  # fmt: skip
    line += f"  exit {row['status']}"
    if ref is not None:
        ref_wall, ref_cpu, ref_rss = _numbers(ref)
        line += (f"  | x pytest: wall {wall / ref_wall:.2f}, CPU {cpu / ref_cpu:.2f}, "
                 f"RSS {rss / ref_rss:.2f}")  # fmt: skip
    print(line, flush=True)
    if row["status"] not in (0,):
        print(str(row["output"])[-1500:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    options = parser.parse_args()
    run_tree([*PYTEST, "--version"], Path.cwd(), env=bench_env())  # the plugins' caches
    print(f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}; simulated model at "
          "0 ms latency, budget 64, 1 candidate, 1 repetition", flush=True)  # fmt: skip
    results = {}
    for n in (int(size) for size in options.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="evalgate-scale-") as name:
            folder = Path(name)
            ref = bare(folder, n)
            show("pytest", n, ref, None)
            row = evalgate(folder, n)
            show("evalgate", n, row, ref)
            results[n] = {"pytest": {k: ref[k] for k in ("wall", "cpu", "rss")},
                          "evalgate": {k: row[k] for k in ("wall", "cpu", "rss")}}  # fmt: skip
    print(json.dumps(results))


if __name__ == "__main__":
    main()
