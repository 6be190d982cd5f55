"""EvalgateClient (its own transport, ``client.http1``) vs a bare asyncio + aiohttp loop against
a 50 ms loopback endpoint.

Usage: python bench/client_overhead.py [--requests 5000] [--concurrency 64] [--rounds 2]

A minimal aiohttp server runs in a subprocess on 127.0.0.1 and answers every POST after 50 ms,
as an OpenAI chat completion (or, for ``"stream": true``, as an SSE stream of three chunks plus a
usage chunk). In one run, round after round, this script sends N requests at C in flight through

- ``bare``: an ``asyncio.Semaphore`` + ``aiohttp.ClientSession.post`` + ``json.loads``;
- ``evalgate``: ``EvalgateClient.call`` with ``stream=False`` (same work over ``client.http1``,
  plus the limiter, retry bookkeeping and result values);
- ``evalgate-stream``: ``EvalgateClient.call`` with ``stream=True`` (SSE parsed, timings taken);

and prints requests per second, the fraction of the bound ``C / 0.05 s``, the ratio to the bare
loop of the same round, and client CPU ms per request (``time.process_time``; the server's CPU is
in another process and not counted). Ratios are what to compare: absolute rates move with the
machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from pytest_evalgate.client import EvalgateClient, EvalgateEndpoint
from pytest_evalgate.client.budget import EvalgateLimiter

Runner = Callable[[str, int, int], Awaitable[None]]

DELAY_S = 0.05
BODY = {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 8}
_CHOICE = {"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}
ANSWER = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "choices": [_CHOICE],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    }
).encode()
_CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"choices": [{"index": 0, "delta": {"content": "The answer"}}]},
    {"choices": [{"index": 0, "delta": {"content": " is"}}]},
    {"choices": [{"index": 0, "delta": {"content": " 4"}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}},
]
STREAM = (
    b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in _CHUNKS) + b"data: [DONE]\n\n"
)


# --- the server (subprocess) -----------------------------------------------------------------


async def _handle(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    await asyncio.sleep(DELAY_S)
    if body.get("stream"):
        return web.Response(body=STREAM, content_type="text/event-stream")
    return web.Response(body=ANSWER, content_type="application/json")


async def _serve() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, backlog=1024).start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()


# --- the clients -----------------------------------------------------------------------------


async def _bare(url: str, n: int, concurrency: int) -> None:
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    payload = json.dumps({**BODY, "model": "m", "stream": False}).encode()
    headers = {"Content-Type": "application/json"}
    semaphore = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            async with semaphore, session.post(url, data=payload, headers=headers) as response:
                json.loads(await response.read())

        await asyncio.gather(*(one() for _ in range(n)))


def _evalgate(stream: bool) -> Runner:
    async def run(url: str, n: int, concurrency: int) -> None:
        client = EvalgateClient(EvalgateLimiter(concurrency, None, None), rng_seed=0)
        base = url.removesuffix("/chat/completions")
        endpoint = EvalgateEndpoint(base, "m", "chat", None, 30.0, 1, stream)
        calls = (client.call(endpoint, BODY, f"id-{i}", 20) for i in range(n))
        results = await asyncio.gather(*calls)
        await client.aclose()
        errors = [r.error for r in results if r.error is not None]
        if errors:
            raise SystemExit(f"{len(errors)} errors, first: {errors[0]}")

    return run


def _measure(runner: Runner, url: str, n: int, c: int) -> tuple[float, float]:
    """(requests per second, client CPU ms per request)."""
    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(runner(url, n, c))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return n / wall, cpu / n * 1000.0


def _report(url: str, n: int, c: int, rounds: int) -> None:
    bound = c / DELAY_S
    runners = {"bare": _bare, "evalgate": _evalgate(False), "evalgate-stream": _evalgate(True)}
    _measure(_bare, url, min(n, 500), c)  # warm up the server and the imports
    print(f"{n} requests, {c} in flight, {DELAY_S * 1000:.0f} ms endpoint, bound {bound:.0f} req/s")
    header = ("round", "client", "req/s", "of bound", "vs bare", "cpu ms/req")
    print("{:>5} {:>16} {:>8} {:>9} {:>8} {:>11}".format(*header))
    for round_ in range(1, rounds + 1):
        bare_rps = 0.0
        for name, runner in runners.items():
            rps, cpu_ms = _measure(runner, url, n, c)
            bare_rps = rps if name == "bare" else bare_rps
            print(
                f"{round_:>5} {name:>16} {rps:>8.0f} {rps / bound:>9.1%} "
                f"{rps / bare_rps:>8.1%} {cpu_ms:>11.3f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="EvalgateClient overhead vs bare aiohttp")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve())
        return 0
    command = [sys.executable, __file__, "--serve"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1/chat/completions"
        _report(url, args.requests, args.concurrency, args.rounds)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
