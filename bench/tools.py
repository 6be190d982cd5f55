"""Tool loops under the run-wide budget (issue 31): 1,000 tool-using cases of 3 model calls each
(two tool calls, then the answer) against the simulated model at 50 ms per call, budget 64.

The endpoint bound is 64 in flight / 0.05 s = 1,280 model calls/s (3,000 calls in 2.34 s).
Side by side in one run, against the same simulator process: a bare asyncio + aiohttp loop that
drives the same three-call conversations with 64 in flight (no tools run, no store), then
``pytest --evalgate`` on the suite. Printed: model calls per second over the request phase
(first call sent to last answer, from the simulator's request log and the records) as a share
of the bound and of the bare loop, and the whole command's wall time. Target (issue 31): the
request phase >= 80 % of the bound. Asserts nothing.

    python bench/tools.py [--cases 1000] [--rounds 1]
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
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _calls import phase_from_records, print_rates, run_candidate
from suitekit import write_answer_key, write_suite

from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.server import EvalgateSimServer

LATENCY_S = 0.05
BUDGET = 64
ORDER = {"type": "object", "properties": {"order_id": {"type": "string"}},
         "required": ["order_id"]}  # fmt: skip


def _suite(folder: Path, cases: int, base_url: str) -> Path:
    rows = [
        {
            "id": f"case-{i:05d}",
            "category": ("lookup", "refund")[i % 2],
            "input": f"Order A{i}: look it up, check it, then tell me its status.",
            "target": "ok",
            "expect": {"calls": [{"name": "lookup_order", "arguments": {"order_id": f"A{i}"}},
                                 {"name": "check", "arguments": {"order_id": f"A{i}"}}]},
        }
        for i in range(cases)
    ]  # fmt: skip
    fixture = {
        "revision": "bench-v1",
        "tools": [
            {"name": "lookup_order", "parameters": ORDER, "default": {"status": "ok"}},
            {"name": "check", "parameters": ORDER, "default": {"eligible": True}},
        ],
    }
    path = write_suite(
        folder,
        {"candidate": base_url, "baseline": base_url},  # only the candidate is run
        cases=rows,
        budget={"max_concurrency": BUDGET, "max_attempts": 2, "timeout_s": 30},
        extra={
            "evaluator": {"revision": "e1", "scorer": "tools"},
            "tools": {"fixture": "tools.yaml", "revision": "bench-v1", "max_steps": 4},
            "stream": False,
        },
    )
    (folder / "tools.yaml").write_text(yaml.safe_dump(fixture))
    return path


async def _bare(base_url: str, bodies: list[dict[str, Any]]) -> tuple[float, int]:
    """Three calls per conversation (the model's answer appended each time), 64 in flight."""
    queue = list(reversed(bodies))
    calls = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=BUDGET)) as session:

        async def worker() -> None:
            nonlocal calls
            while queue:
                body = queue.pop()
                messages = list(body["messages"])
                for _ in range(3):
                    request = {**body, "messages": messages, "model": "model-candidate"}
                    async with session.post(f"{base_url}/chat/completions", json=request) as resp:
                        answer = await resp.json()
                    calls += 1
                    message = answer["choices"][0]["message"]
                    messages = [*messages, {"role": "assistant", "content": message["content"]}]
                    if message.get("tool_calls"):
                        messages[-1]["tool_calls"] = message["tool_calls"]
                        for call in message["tool_calls"]:
                            messages.append({"role": "tool", "tool_call_id": call["id"],
                                             "content": "{}"})  # fmt: skip

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(BUDGET)))
        return time.perf_counter() - started, calls


def _round(cases: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        config = EvalgateSimConfig(accuracy=1.0, latency_ms=LATENCY_S * 1000, seed=1)
        placeholder = _suite(work / "suite", cases, "http://127.0.0.1:9/v1")
        key = write_answer_key(placeholder, work / "answers.jsonl")
        with EvalgateSimServer(config, answers=key) as server:
            manifest = _suite(work / "suite", cases, server.base_url)
            loaded = evalgate_load_manifest(str(manifest))
            tools = [tool.evalgate_openai() for tool in loaded.fixture.tools]  # type: ignore[union-attr]
            bodies = [
                {"messages": case.evalgate_prompt_json(), "tools": tools, "max_tokens": 16,
                 "temperature": 0.0}
                for case in loaded.cases
            ]  # fmt: skip
            bare = asyncio.run(_bare(server.base_url, bodies))
            run, whole_s = run_candidate(manifest, work)
        phase = phase_from_records(work / ".evalgate", lambda r: len(r["dialogue"]["steps"]))
    print_rates(
        f"{cases} tool cases x 3 model calls, budget {BUDGET}, {LATENCY_S * 1000:.0f} ms/call, "
        f"bound {BUDGET / LATENCY_S:,.0f} calls/s",
        ("calls", "calls/s"),
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
