"""The load phase's own timing error at rising rates, until this machine saturates.

Two simulated models with identical, jitter-free timings (TTFT, TPOT, output tokens) run as
subprocesses on loopback; ``evalgate_run_perf`` drives them open-loop at each rate in turn.
Because the configured values are exact, measured minus configured is the harness's error
(client, event loop, loopback, simulator pacing, CPU contention). Per rate it prints the error of
TTFT, TPOT and e2e at p50 and p95 (ms, both sides pooled), the scheduling delay p50/p95, achieved
over requested rate, the candidate/baseline p95 ratios measured side by side in the same run
(identical models: 1.00 is right), and whether the run was judgeable. It stops after the first
two unjudgeable rates (the generator is saturated by then).

Run: ``python bench/perf_overhead.py [--duration 2] [--rates 10,25,50,...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence

import numpy as np

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.perf.phase import evalgate_run_perf
from pytest_evalgate.perf.result import EvalgatePerfResult
from pytest_evalgate.simulated import evalgate_parse_simulated_url, evalgate_spawn_simulator
from pytest_evalgate.stats import evalgate_percentile

SUITE = os.path.join(os.path.dirname(__file__), "..", "suites", "support", "evalgate.yaml")
TTFT_MS, TPOT_MS, TOKENS = 30.0, 5.0, 20
E2E_MS = TTFT_MS + (TOKENS - 1) * TPOT_MS
PAIR = ("candidate", "baseline")
HEADER = (
    f"{'rate/s':>7} {'ttft p50':>8} {'p95':>6} {'tpot p50':>8} {'p95':>6} {'e2e p50':>8} "
    f"{'p95':>6} {'delay p50':>9} {'p95':>6} {'achieved':>8} {'ttft c/b':>8} {'tpot c/b':>8} "
    f"{'judgeable':>9}"
)


def _manifest(rate: float, duration: float) -> EvalgateManifest:
    perf = {
        "prompts": "prod-shaped.jsonl", "rate": rate, "duration_s": duration,
        "profile": "constant", "warmup_s": 0.5, "seed": 0, "max_tokens": None,
    }  # fmt: skip
    return dataclasses.replace(evalgate_load_manifest(SUITE), perf=perf)


def _run(rate: float, duration: float) -> EvalgatePerfResult:
    url = f"simulated://?ttft_ms={TTFT_MS}&tpot_ms={TPOT_MS}&output_tokens={TOKENS}"
    sims = [evalgate_spawn_simulator(evalgate_parse_simulated_url(url), None) for _ in PAIR]
    try:
        endpoints = {
            name: EvalgateEndpoint(sim.base_url, name, "chat", None, 30.0, 1)
            for name, sim in zip(PAIR, sims, strict=True)
        }
        return evalgate_run_perf(_manifest(rate, duration), endpoints, PAIR)
    finally:
        for sim in sims:
            sim.stop()


def _error_ms(result: EvalgatePerfResult, metric: str, configured_ms: float, q: float) -> float:
    pooled = np.concatenate(result.samples[metric])
    return (evalgate_percentile(pooled, q) * 1e3 - configured_ms) if pooled.size else float("nan")


def _ratio(result: EvalgatePerfResult, metric: str) -> float:
    cand, base = result.samples[metric]
    if not (cand.size and base.size):
        return float("nan")
    return evalgate_percentile(cand, 95) / evalgate_percentile(base, 95)


def _row(rate: float, result: EvalgatePerfResult) -> str:
    errors = [
        _error_ms(result, metric, configured, q)
        for metric, configured in (("ttft", TTFT_MS), ("tpot", TPOT_MS), ("e2e", E2E_MS))
        for q in (50, 95)
    ]
    achieved = min(result.achieved_rate.values()) / result.requested_rate
    cells = " ".join(f"{e:+8.2f}" if i % 2 == 0 else f"{e:+6.2f}" for i, e in enumerate(errors))
    return (
        f"{rate:7g} {cells} {result.delay_p50_s * 1e3:9.2f} {result.delay_p95_s * 1e3:6.2f} "
        f"{achieved:8.1%} {_ratio(result, 'ttft'):8.3f} {_ratio(result, 'tpot'):8.3f} "
        f"{'yes' if result.judgeable else 'no':>9}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=2.0, help="measured seconds per rate")
    parser.add_argument("--rates", default="10,25,50,100,200,400,800,1600")
    args = parser.parse_args(argv)
    print(f"configured: ttft {TTFT_MS} ms, tpot {TPOT_MS} ms, {TOKENS} tokens, e2e {E2E_MS} ms")
    print("errors are measured minus configured, in ms; both sides pooled; cpus:", os.cpu_count())
    print(HEADER)
    refused = 0
    for rate in (float(text) for text in args.rates.split(",")):
        result = _run(rate, args.duration)
        print(_row(rate, result), flush=True)
        if not result.judgeable:
            print(f"        why: {result.reason}")
            refused += 1
            if refused == 2:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
