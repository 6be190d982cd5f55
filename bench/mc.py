"""Multiple choice by log-likelihood under the run-wide budget (issue 32): 4-choice cases, one
echoed ``/v1/completions`` request per choice, against the simulated model at 50 ms a request,
budget 64.

The endpoint bound is 64 in flight / 0.05 s = 1,280 requests/s. Side by side in one run,
against the same simulator process: a bare asyncio + aiohttp loop that sends the same per-choice
bodies with 64 in flight, then ``pytest --evalgate`` on the suite (the candidate only).
Printed: requests per second over the request phase (the first record's start to the last
record's end) as a share of the bound and of the bare loop, and the whole command's wall time.
Target (issue 32): the request phase >= 80 % of the bound. Asserts nothing.

    python bench/mc.py [--cases 1000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _calls import phase_from_records, print_rates, run_candidate
from suitekit import make_choice_cases, write_answer_key, write_suite

from pytest_evalgate.choice.loop import evalgate_choice_body
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.server import EvalgateSimServer

LATENCY_S = 0.05
BUDGET = 64


def _suite(folder: Path, cases: int, base_url: str) -> Path:
    return write_suite(
        folder,
        {"candidate": base_url, "baseline": base_url},  # only the candidate is run
        cases=make_choice_cases(cases),
        budget={"max_concurrency": BUDGET, "max_attempts": 2, "timeout_s": 30},
        extra={
            "evaluator": {"revision": "e1", "scorer": "choice", "method": "loglikelihood"},
            "api": "completions",
            "stream": False,
            "prompt": {"revision": "p1", "template": "{input}\nAnswer:"},
        },
    )


async def _bare(base_url: str, bodies: list[dict[str, Any]]) -> tuple[float, int]:
    queue = list(reversed(bodies))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=BUDGET)) as session:

        async def worker() -> None:
            while queue:
                body = queue.pop()
                async with session.post(f"{base_url}/completions", json=body) as resp:
                    answer = await resp.json()
                assert answer["choices"][0]["logprobs"]["token_logprobs"]

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(BUDGET)))
        return time.perf_counter() - started, len(bodies)


def _round(cases: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        config = EvalgateSimConfig(accuracy=0.8, latency_ms=LATENCY_S * 1000, seed=1)
        placeholder = _suite(work / "suite", cases, "http://127.0.0.1:9/v1")
        key = write_answer_key(placeholder, work / "answers.jsonl")
        with EvalgateSimServer(config, answers=key) as server:
            manifest = _suite(work / "suite", cases, server.base_url)
            loaded = evalgate_load_manifest(str(manifest))
            bodies = [
                {**evalgate_choice_body({}, str(case.prompt), " " + choice, 0),
                 "model": "model-candidate"}
                for case in loaded.cases
                for choice in case.choices
            ]  # fmt: skip
            bare = asyncio.run(_bare(server.base_url, bodies))
            run, whole_s = run_candidate(manifest, work)
        phase = phase_from_records(work / ".evalgate", lambda r: int(r["choice"]["count"]))
    print_rates(
        f"{cases} cases x 4 choices, budget {BUDGET}, {LATENCY_S * 1000:.0f} ms/request, "
        f"bound {BUDGET / LATENCY_S:,.0f} requests/s",
        ("requests", "req/s"),
        run,
        bare,
        phase,
        whole_s,
        BUDGET / LATENCY_S,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.rounds):
        _round(args.cases)


if __name__ == "__main__":
    main()
