"""Throughput and CPU cost of the simulated model, measured side by side in one run.

Drives each server (a subprocess on its own core) with a bare asyncio + aiohttp loop: 64 requests
in flight (semaphore), N chat requests, latency_ms=50. The bound is 64 / 0.050 s = 1,280 req/s.
Server CPU per request comes from /proc/PID/stat (utime + stime) before and after the run.

Rows:
- ``simulated``: ``pytest_evalgate.simulated`` (raw asyncio HTTP/1.1 protocol), full answers;
- ``simulated-stream``: the same, ``stream: true`` with usage (ttft_ms=50, tpot_ms=0);
- ``aiohttp.web-floor``: a minimal aiohttp.web handler that only sleeps 50 ms and returns a fixed
  JSON body: the reference the raw protocol was chosen against.

Run: ``python bench/simulator.py [--requests 5000]``. Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from pytest_evalgate.simulated import (
    EvalgateSimProcess,
    evalgate_parse_simulated_url,
    evalgate_spawn_simulator,
    evalgate_write_answer_key,
)

CONCURRENCY = 64
LATENCY_S = 0.050
BOUND = CONCURRENCY / LATENCY_S

_AIOHTTP_FLOOR = """
import asyncio, sys
from aiohttp import web
BODY = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"x"}}]}'
async def handle(request):
    await request.read()
    await asyncio.sleep(0.050)
    return web.Response(body=BODY, content_type="application/json")
async def main():
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{port}/v1", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as handle:
        after_name = handle.read().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


def messages(i: int) -> list[dict[str, str]]:
    """The i-th benchmark prompt."""
    return [{"role": "user", "content": f"benchmark question number {i}: what is the answer?"}]


async def drive(base_url: str, n: int, stream: bool) -> tuple[float, int]:
    """Send ``n`` requests, 64 in flight; returns (wall seconds, count of 200s)."""
    limit = asyncio.Semaphore(CONCURRENCY)
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    ok = 0

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        nonlocal ok
        body: dict[str, Any] = {"model": "sim", "messages": messages(i), "temperature": 0}
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        async with limit, session.post(base_url + "/chat/completions", json=body) as response:
            await response.read()
            ok += response.status == 200

    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(one(session, i) for i in range(min(n, 128))))  # warm connections
        ok = 0
        start = time.perf_counter()
        await asyncio.gather(*(one(session, i) for i in range(n)))
        return time.perf_counter() - start, ok


def spawn_floor() -> EvalgateSimProcess:
    """The aiohttp.web reference server as a subprocess."""
    process = subprocess.Popen(
        [sys.executable, "-c", _AIOHTTP_FLOOR], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    return EvalgateSimProcess(process, int(line.rsplit(":", 1)[1].split("/")[0]))


def measure(
    name: str, start: Callable[[], EvalgateSimProcess], n: int, stream: bool
) -> tuple[float, float]:
    """Run one row, print it, return (req/s, server ms CPU per request)."""
    server = start()
    try:
        client_cpu, server_cpu = time.process_time(), cpu_seconds(server.pid)
        wall, ok = asyncio.run(drive(server.base_url, n, stream))
        server_cpu = cpu_seconds(server.pid) - server_cpu
        client_cpu = time.process_time() - client_cpu
    finally:
        server.stop()
    rate = n / wall
    print(
        f"{name:<20} {ok:>5}/{n:<5} {rate:>8.0f} req/s  {rate / BOUND:>6.1%} of {BOUND:,.0f}/s  "
        f"server {1e3 * server_cpu / n:.3f} ms CPU/req ({server_cpu / wall:.0%} of a core)  "
        f"client {1e3 * client_cpu / n:.3f} ms CPU/req"
    )
    return rate, 1e3 * server_cpu / n


def summarise(results: dict[str, list[tuple[float, float]]]) -> None:
    """Median per row over the rounds, and each row's ratio to the bound."""
    print("median over rounds:")
    for name, rows in results.items():
        rate = statistics.median(r for r, _ in rows)
        cpu = statistics.median(c for _, c in rows)
        print(
            f"  {name:<20} {rate:>6.0f} req/s = {rate / BOUND:.1%} of bound, {cpu:.3f} ms CPU/req"
        )


def main() -> None:
    """Measure every row on this machine, interleaved over rounds (the machine is shared)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    n = options.requests
    with tempfile.TemporaryDirectory() as folder:
        key = os.path.join(folder, "answers.jsonl")
        evalgate_write_answer_key(key, ((messages(i), f"answer {i}", "bench") for i in range(n)))
        config = evalgate_parse_simulated_url("simulated://?accuracy=0.8&latency_ms=50&seed=1")
        stream_config = evalgate_parse_simulated_url("simulated://?accuracy=0.8&ttft_ms=50&seed=1")
        rows: list[tuple[str, Callable[[], EvalgateSimProcess], bool]] = [
            ("simulated", lambda: evalgate_spawn_simulator(config, key), False),
            ("simulated-stream", lambda: evalgate_spawn_simulator(stream_config, key), True),
            ("aiohttp.web-floor", spawn_floor, False),
        ]
        print(f"{n} requests, {CONCURRENCY} in flight, 50 ms per request, {os.cpu_count()} cores")
        results: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in rows}
        for _ in range(options.rounds):
            for name, start, stream in rows:
                results[name].append(measure(name, start, n, stream))
        summarise(results)


if __name__ == "__main__":
    main()
