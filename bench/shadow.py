"""The latency the shadow proxy adds: p50 (and p95) of stable's answer direct and through
``evalgate shadow serve``, side by side in one run at a fixed open-loop rate.

Stable and the candidate are two simulator processes (``--latency-ms`` each); the proxy shadows
``--percent`` of requests to the candidate and keeps the pairs in a temporary store. The client
is one asyncio loop over the project's HTTP/1.1 pool (``client/http1``), sending at ``--rate``
requests per second to each path (direct and proxied interleaved: one of each per tick), so
both see the same moments of the machine. Prints the percentiles and the difference; asserts
nothing (the target, from issue 34: at most 1 ms added at p50 at 200 requests/s).

    python bench/shadow.py --rate 200 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time

from pytest_evalgate.client.http1 import EvalgateHttpPool
from pytest_evalgate.client.http1_head import EvalgateHttpTarget
from pytest_evalgate.simulated import EvalgateSimConfig, evalgate_spawn_simulator

READY = "evalgate shadow proxy listening on http://"


async def one(pool: EvalgateHttpPool, target: EvalgateHttpTarget, body: bytes) -> float:
    started = time.perf_counter()
    response = await pool.evalgate_post(target, {"content-type": "application/json"}, body)
    try:
        await response.evalgate_read()
    finally:
        response.evalgate_release()
    return time.perf_counter() - started


async def load(direct: str, proxied: str, rate: float, seconds: float) -> tuple[list[float], ...]:
    pool = EvalgateHttpPool()
    targets = [EvalgateHttpTarget(url, {}) for url in (direct, proxied)]
    times: tuple[list[float], list[float]] = ([], [])
    tasks: list[asyncio.Task[None]] = []

    async def record(side: int, body: bytes) -> None:
        times[side].append(await one(pool, targets[side], body))

    start, count = time.perf_counter(), int(rate * seconds)
    for index in range(count):
        delay = start + index / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"q{index}"}]})
        order = (0, 1) if index % 2 else (1, 0)
        for side in order:
            tasks.append(asyncio.create_task(record(side, body.encode())))
    await asyncio.gather(*tasks)
    await pool.evalgate_close()
    return times


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if q != 50 else statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s on each path")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="each simulator's latency")
    parser.add_argument("--percent", type=float, default=10.0, help="shadowed share")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds left out at the start")
    args = parser.parse_args()
    config = EvalgateSimConfig(latency_ms=args.latency_ms, output_tokens=30)
    with (
        evalgate_spawn_simulator(config, None) as stable,
        evalgate_spawn_simulator(config, None) as candidate,
        tempfile.TemporaryDirectory() as store,
    ):
        argv = [sys.executable, "-m", "pytest_evalgate.cli", "shadow", "serve",
                "--stable", f"http://127.0.0.1:{stable.port}",
                "--candidate", f"http://127.0.0.1:{candidate.port}",
                "--percent", str(args.percent), "--store", store, "--suite", "bench"]  # fmt: skip
        proxy = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            assert proxy.stdout is not None
            port = int(proxy.stdout.readline().strip().rsplit(":", 1)[1])
            path = "/v1/chat/completions"
            direct, proxied = asyncio.run(
                load(f"http://127.0.0.1:{stable.port}{path}", f"http://127.0.0.1:{port}{path}",
                     args.rate, args.seconds + args.warmup)
            )  # fmt: skip
        finally:
            proxy.terminate()
            out, _ = proxy.communicate(timeout=30)
    skip = int(args.rate * args.warmup)
    direct, proxied = direct[skip:], proxied[skip:]
    print(f"{len(direct)} requests per path at {args.rate:g}/s each, stable latency "
          f"{args.latency_ms:g} ms, {args.percent:g} % shadowed")  # fmt: skip
    for name, values in (("direct", direct), ("proxied", proxied)):
        p50, p95 = percentile(values, 50) * 1000, percentile(values, 95) * 1000
        print(f"{name:8} p50 {p50:7.3f} ms  p95 {p95:7.3f} ms")
    added50 = (percentile(proxied, 50) - percentile(direct, 50)) * 1000
    added95 = (percentile(proxied, 95) - percentile(direct, 95)) * 1000
    print(f"added    p50 {added50:7.3f} ms  p95 {added95:7.3f} ms  (target: p50 <= 1 ms)")
    print(f"proxy: {out.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
