"""One core per side (issue 36): the simulated endpoint pinned to one core, each client to the
other, the bare aiohttp loop and ``pytest --evalgate`` one after the other in one run.

Setup as ``bench/throughput.py`` (N cases, default 10,000; 1 candidate, 1 repetition,
non-streaming; budget 64; simulated model at 50 ms: bound 64 / 0.05 s = 1,280 items/s). The
simulator (and this script, which only waits) runs on the first allowed core; each measured
command runs on the second, and its children (the runner child) inherit that affinity, so
pytest and its runner child share one core, as in a one-CPU pod.

Rows: items/s of the whole command (process start to exit) and of the request phase, % of the
bound, CPU ms per item of the whole process tree (``os.wait4``'s rusage: the command and the
descendants it reaped), peak RSS (summed over the tree, sampled), the connections the simulator
accepted during the row (``connections_accepted``), and the simulator's CPU per request. Then
the ratios: evalgate CPU per item / bare CPU per item, evalgate items/s / bound. CPU is a CPU
time, meaningful on a busy machine; the rates move with other jobs (the load average is shown).
The ``floor`` row is pytest alone on the same core: N trivial parametrised items, no plugin of
ours and no request, the whole command's CPU per item, against the bare loop's: what any plugin
that makes each identity a pytest item pays before it sends a byte.

``--profile DIR`` adds one unmeasured evalgate run under cProfile (the pytest process, and the
runner child through ``PYTEST_EVALGATE_PROFILE_CHILD``) and prints both top-N lists.

Run: ``python bench/onecore.py [--cases 10000] [--rounds 2] [--profile DIR]``. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from _tree import run_tree
from throughput import (
    BOUND,
    CONCURRENCY,
    LATENCY_S,
    bench_env,
    cpu_seconds,
    evalgate_argv,
    served_suite,
    warm_up,
)

from pytest_evalgate.simulated import EvalgateSimProcess

Row = dict[str, float]


def cores() -> tuple[set[int], set[int]]:
    """(the endpoint's core, the clients' core): the first two this process may use."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        raise SystemExit("needs two cores")
    return {allowed[0]}, {allowed[1]}


def measure(
    argv: list[str], folder: Path, server: EvalgateSimProcess, cpus: set[int], env: dict[str, str]
) -> tuple[Row, str]:
    """One pinned command; the row's common columns and its output."""
    server.reset()
    before = cpu_seconds(server.pid)
    started = time.time()
    run = run_tree(argv, folder, env, cpus)
    server_s = cpu_seconds(server.pid) - before
    stats = server.stats()
    output = str(run["output"])
    assert run["status"] == 0, output[-2000:]
    wall, cpu, rss = float(run["wall"]), float(run["cpu"]), float(run["rss"])  # type: ignore[arg-type]
    n = stats["requests_total"]
    row = {"n": n, "wall": wall, "cpu_s": cpu, "rss": rss,
           "connections": stats["connections_accepted"], "server_ms": 1e3 * server_s / max(n, 1),
           "started": started}  # fmt: skip
    return row, output


def bare_row(folder: Path, server: EvalgateSimProcess, cpus: set[int], n: int) -> Row:
    here = Path(__file__).with_name("throughput.py")
    argv = [sys.executable, str(here), "--bare-child", str(folder / "evalgate.yaml")]
    row, output = measure([*argv, server.base_url], folder, server, cpus, bench_env())
    child = json.loads(output.strip().splitlines()[-1])
    assert child["ok"] == n, output
    row["phase_s"] = child["phase_s"]
    return row


def evalgate_row(folder: Path, server: EvalgateSimProcess, cpus: set[int], n: int) -> Row:
    store = folder / f"store-{time.monotonic_ns()}"
    row, output = measure(evalgate_argv(store), folder, server, cpus, bench_env())
    first, last, count = record_span(store)
    assert count == n, output[-2000:]
    row["phase_s"] = last - first
    row["head_s"] = first - row["started"]  # process start to the first request
    row["tail_s"] = row["started"] + row["wall"] - last  # the last answer to exit
    return row


FLOOR_TEST = """import pytest


@pytest.mark.parametrize("case", range({n}))
def test_floor(case):
    pass
"""


def floor_row(folder: Path, cpus: set[int], n: int) -> Row:
    """pytest's own cost per item: ``n`` trivial parametrised items (no plugin of ours, no
    request) on the clients' core, the whole command's CPU as in the other rows."""
    here = folder / "floor"
    here.mkdir(exist_ok=True)
    (here / "test_floor.py").write_text(FLOOR_TEST.format(n=n), encoding="utf-8")
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:evalgate"]
    run = run_tree([*argv, "test_floor.py"], here, bench_env(), cpus)
    assert run["status"] == 0, str(run["output"])[-2000:]
    return {"cpu_s": float(run["cpu"]), "wall": float(run["wall"]), "rss": float(run["rss"])}  # type: ignore[arg-type]


def show_floor(row: Row, bare: Row, n: int) -> None:
    """The floor's row and what it means for the CPU target (2x the bare loop's per item)."""
    floor_ms, bare_ms = 1e3 * row["cpu_s"] / n, 1e3 * bare["cpu_s"] / n
    print(
        f"floor     pytest alone, {n} trivial items: CPU {floor_ms:.3f} ms/item"
        f" = {floor_ms / bare_ms:.2f}x the bare loop's {bare_ms:.3f} | peak RSS"
        f" {row['rss']:>4.0f} MB (the target, 2x bare, is {2 * bare_ms:.3f} ms/item)"
    )


def record_span(store: Path) -> tuple[float, float, int]:
    """(first started_at, last finished_at, number of records) over the store's records, as
    Unix times (comparable with ``time.time()`` taken around the command)."""
    starts, ends = [], []
    for segment in store.rglob("*.jsonl"):
        for line in segment.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            starts.append(datetime.fromisoformat(record["started_at"]).timestamp())
            ends.append(datetime.fromisoformat(record["finished_at"]).timestamp())
    return min(starts), max(ends), len(starts)


def show(name: str, row: Row, n: int) -> None:
    whole, phase = n / row["wall"], n / row["phase_s"]
    print(
        f"{name:<9} whole {whole:>5.0f} items/s = {whole / BOUND:>4.0%} of bound"
        f" | request phase {phase:>5.0f}/s = {phase / BOUND:>4.0%}"
        f" | CPU {1e3 * row['cpu_s'] / n:.3f} ms/item | peak RSS {row['rss']:>4.0f} MB"
        f" | connections {row['connections']:.0f} | server {row['server_ms']:.3f} ms CPU/req"
        f"{edges(row)}"
    )


def edges(row: Row) -> str:
    """Process start to the first request and the last answer to exit (evalgate's row)."""
    if "head_s" not in row:
        return ""
    head, tail = row["head_s"], row["tail_s"]
    return f" | start to first request {head:.2f} s, last answer to exit {tail:.2f} s"


def show_rows(rows: dict[str, Row], n: int) -> None:
    for row_name in ("bare", "evalgate"):
        show(row_name, rows[row_name], n)
    show_floor(rows["floor"], rows["bare"], n)
    ratios(rows, n)


def ratios(rows: dict[str, Row], n: int) -> None:
    bare, ours = rows["bare"], rows["evalgate"]
    cpu = ours["cpu_s"] / bare["cpu_s"]
    rate = n / ours["wall"] / BOUND
    print(
        f"ratios    evalgate CPU/item / bare = {cpu:.2f} (target <= 2.00) | evalgate whole "
        f"items/s / bound = {rate:.0%} (target >= 85 %) | connections "
        f"{ours['connections']:.0f} for {CONCURRENCY} in flight"
    )


def profile(folder: Path, server: EvalgateSimProcess, cpus: set[int], out: Path, top: int) -> None:
    """One evalgate run under cProfile, pytest process and runner child; prints both."""
    out.mkdir(parents=True, exist_ok=True)
    env = bench_env() | {"PYTEST_EVALGATE_PROFILE_CHILD": str(out / "child.prof")}
    argv = evalgate_argv(folder / f"store-prof-{time.monotonic_ns()}")
    argv[1:3] = [__file__, "--profiled-pytest", str(out / "pytest.prof")]  # was: -m pytest
    measure(argv, folder, server, cpus, env)
    for path in [out / "pytest.prof", *sorted(out.glob("child.prof.*"))]:
        for order in ("cumulative", "tottime"):
            print(f"--- {path.name}: top {top} by {order} time")
            stats = pstats.Stats(str(path))
            stats.sort_stats(order).print_stats(top)


def profiled_pytest(out: str, args: list[str]) -> None:
    """``python -m pytest ARGS`` under cProfile on CPU time (the core is shared with the
    runner child, so wall time would count its turns too); the stats go to ``out``."""
    import cProfile
    import runpy

    sys.argv = ["pytest", *args]
    sys.path[0] = os.getcwd()  # as under ``python -m pytest``, not this script's folder
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        profiler.disable()
        profiler.dump_stats(out)


def main() -> None:
    if sys.argv[1:2] == ["--profiled-pytest"]:
        profiled_pytest(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", type=Path, help="also profile one evalgate run into DIR")
    parser.add_argument("--top", type=int, default=30)
    options = parser.parse_args()
    n = options.cases
    server_cpus, client_cpus = cores()
    os.sched_setaffinity(0, server_cpus)  # the simulator (spawned next) inherits it
    rounds: list[dict[str, Row]] = []
    with tempfile.TemporaryDirectory(prefix="evalgate-onecore-") as name:
        folder = Path(name)
        with served_suite(folder, n, int(1000 * LATENCY_S)) as server:
            print(
                f"{n} cases, 1 candidate, 1 repetition, non-streaming, budget {CONCURRENCY}, "
                f"50 ms latency, bound {BOUND:,.0f}/s; endpoint on cpu {sorted(server_cpus)}, "
                f"clients on cpu {sorted(client_cpus)}; load average "
                f"{os.getloadavg()[0]:.2f} at start"
            )
            warm_up(folder, server.base_url)
            for index in range(options.rounds):
                rows = {"bare": bare_row(folder, server, client_cpus, n)}
                rows["evalgate"] = evalgate_row(folder, server, client_cpus, n)
                rows["floor"] = floor_row(folder, client_cpus, n)
                print(f"round {index + 1}, load average {os.getloadavg()[0]:.2f}")
                show_rows(rows, n)
                rounds.append(rows)
            if len(rounds) > 1:
                print("median over rounds:")
                medians = {
                    row_name: {k: statistics.median(r[row_name][k] for r in rounds) for k in row}
                    for row_name, row in rounds[0].items()
                }
                show_rows(medians, n)
            if options.profile is not None:
                profile(folder, server, client_cpus, options.profile, options.top)


if __name__ == "__main__":
    main()
