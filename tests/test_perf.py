"""The open-loop load phase against two real simulated models on loopback (no mocks).

Tolerances, and why: the client cannot see a token before the simulator sends it, so measured
TTFT and TPOT are bounded below by the configured values (less 5 % for the simulator's own
jitter draw and clock slack). Above, the harness, loopback and a shared 2-core machine add
delay, so the upper bounds are generous (TTFT +25 ms, TPOT +35 %); ``bench/perf_overhead.py``
measures the actual error. Those upper bounds are asserted whenever the run meets the default
judgeability criteria; when it does not (other jobs starving these 2 cores), the run must say it
could not keep up instead. The gate-decision runs use a p95 scheduling-delay limit of 1 s instead
of the default 10 ms: p95 delays of 90-260 ms were seen here under load averages of 7-9, while
paired arrivals keep such stalls common to both sides. The default criterion itself is exercised
by the blocked-loop and overload tests.

Sizes: every loopback run is waited out (its window, then one answer's latency), so the windows
are short: 45 arrivals/s for 1 s after a 0.25 s warm-up, answers of 10 tokens after a 150 ms
TTFT. That is 45 samples a side: identical models give ratio upper bounds near 1.00 against
limits of 1.10 to 1.25, and the 20 % slower candidate a TPOT p95 ratio near 1.16 (above 1.10),
here with and without another process busy on one of the two cores.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from pytest_evalgate.aggregate.paired import EvalgateGateInput
from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.gate.rules import evalgate_evaluate
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.manifest.schema import EvalgatePerfSchema
from pytest_evalgate.perf.metrics import EVALGATE_PERF_METRICS
from pytest_evalgate.perf.phase import evalgate_perf_concurrency, evalgate_run_perf
from pytest_evalgate.perf.plan import evalgate_perf_offsets, evalgate_perf_plan
from pytest_evalgate.perf.prompts import evalgate_perf_bodies
from pytest_evalgate.perf.result import (
    EvalgatePerfResult,
    evalgate_merge_perf,
    evalgate_perf_from_dict,
)
from pytest_evalgate.policy.values import EvalgatePolicy, EvalgateRule
from pytest_evalgate.simulated import evalgate_parse_simulated_url
from pytest_evalgate.simulated.server import EvalgateSimServer

SUPPORT = Path(__file__).resolve().parents[1] / "suites" / "support" / "evalgate.yaml"
PAIR = ("candidate", "baseline")
TTFT_MS, TPOT_MS, TOKENS = 150.0, 40.0, 10
LENIENT_DELAY_S = 1.0


@pytest.fixture(scope="module")
def support() -> EvalgateManifest:
    return evalgate_load_manifest(str(SUPPORT))


def with_perf(manifest: EvalgateManifest, **perf: Any) -> EvalgateManifest:
    block = {
        "prompts": "prod-shaped.jsonl",
        "rate": 45.0,
        "duration_s": 1.0,
        "profile": "constant",
        "warmup_s": 0.25,
        "seed": 0,
        "max_tokens": None,
    }
    return dataclasses.replace(manifest, perf=EvalgatePerfSchema.model_validate({**block, **perf}))


def sim_url(**knobs: Any) -> str:
    base = {"ttft_ms": TTFT_MS, "tpot_ms": TPOT_MS, "output_tokens": TOKENS, "jitter": 0.1}
    return "simulated://?" + "&".join(f"{k}={v}" for k, v in {**base, **knobs}.items())


@contextmanager
def two_models(cand: str, base: str) -> Iterator[tuple[dict[str, EvalgateEndpoint], list[Any]]]:
    """Both simulators in this process, each in its own thread and event loop.

    In-process rather than spawned: a stall of the machine then hits both models and the
    generator together, as one shared host would; with one process per model, an unlucky
    descheduling of one of them on this busy 2-core machine skewed that side's p95 by 12 %.
    """
    configs = [evalgate_parse_simulated_url(url) for url in (cand, base)]
    sims = [EvalgateSimServer(config).start() for config in configs]
    try:
        endpoints = {
            name: EvalgateEndpoint(sim.base_url, name, "chat", None, 10.0, 3)
            for name, sim in zip(PAIR, sims, strict=True)
        }
        yield endpoints, sims
    finally:
        for sim in sims:
            sim.stop()


def measure(manifest: EvalgateManifest, cand: str, base: str, **kw: Any) -> EvalgatePerfResult:
    with two_models(cand, base) as (endpoints, _):
        return evalgate_run_perf(manifest, endpoints, PAIR, **kw)


def perf_policy(**max_ratios: float) -> EvalgatePolicy:
    rules = tuple(
        EvalgateRule("perf_ratio", i, metric=metric, limit=ratio)
        for i, (metric, ratio) in enumerate(max_ratios.items())
    )
    return EvalgatePolicy(version="perf-test", rules=rules, resamples=2000)


def empty_gate_input() -> EvalgateGateInput:
    none = np.zeros(0)
    return EvalgateGateInput(
        case_ids=(),
        categories=np.array([], dtype=str),
        clusters=np.array([], dtype=str),
        candidate_scores=none,
        baseline_scores=none,
        candidate_fail_counts=np.zeros(0, dtype=np.int64),
        candidate_trials=np.zeros(0, dtype=np.int64),
        repetitions=(1, 1),
        perf={m: (np.array([1.0]), np.array([1.0])) for m in EVALGATE_PERF_METRICS},
        error_rates={"candidate": (0, 10), "baseline": (0, 10)},
    )


def gate(result: EvalgatePerfResult, **max_ratios: float) -> dict[str | None, Any]:
    merged = evalgate_merge_perf(empty_gate_input(), result)
    return {r.metric: r for r in evalgate_evaluate(perf_policy(**max_ratios), merged).rules}


RATIOS = {"ttft_p95": 1.25, "tpot_p95": 1.10, "output_tokens_p95": 1.15}


# --------------------------------------------------------------------------- schedule


def test_constant_arrivals_are_i_over_rate() -> None:
    offsets = evalgate_perf_offsets("constant", 20.0, 3.5, seed=9)
    assert offsets.size == 70
    np.testing.assert_allclose(offsets, np.arange(70) / 20.0)


def test_poisson_arrivals_are_seeded_exponential_gaps() -> None:
    a = evalgate_perf_offsets("poisson", 100.0, 200.0, seed=3)
    assert np.array_equal(a, evalgate_perf_offsets("poisson", 100.0, 200.0, seed=3))
    assert not np.array_equal(a[:50], evalgate_perf_offsets("poisson", 100.0, 200.0, seed=4)[:50])
    assert a.max() < 200.0 and abs(a.size - 20_000) < 5 * math.sqrt(20_000)
    gaps = np.diff(a)
    assert sps.kstest(gaps, "expon", args=(0, 1 / 100.0)).pvalue > 1e-3
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05  # exponential: CV 1; constant would be 0


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(EvalgateConfigError, match="profile"):
        evalgate_perf_offsets("burst", 1.0, 1.0, seed=0)


def test_plan_marks_warmup_and_cycles_prompts_in_seeded_order() -> None:
    perf = EvalgatePerfSchema(
        prompts="p.jsonl", rate=10.0, duration_s=12.0, warmup_s=1.0, profile="constant", seed=5
    )
    plan = evalgate_perf_plan(perf, prompt_count=7)
    assert int((~plan.measured).sum()) == 10 and int(plan.measured.sum()) == 120
    assert plan.scheduled_rate == pytest.approx(10.0)
    counts = np.bincount(plan.prompts, minlength=7)
    assert counts.max() - counts.min() <= 1  # every prompt used, evenly
    assert not np.array_equal(plan.prompts[:7], np.arange(7))  # shuffled
    again = evalgate_perf_plan(perf, prompt_count=7)
    assert np.array_equal(plan.prompts, again.prompts)


def test_concurrency_cap_covers_both_sides_over_a_timeout_and_is_bounded() -> None:
    assert evalgate_perf_concurrency(20.0, 10.0) == 400
    assert evalgate_perf_concurrency(0.1, 1.0) == 16
    assert evalgate_perf_concurrency(1000.0, 120.0) == 1024


# --------------------------------------------------------------------------- prompts


def test_bodies_from_the_production_shaped_file(support: EvalgateManifest) -> None:
    bodies = evalgate_perf_bodies(with_perf(support, max_tokens=77))
    lines = SUPPORT.with_name("prod-shaped.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    assert len(bodies) == len(rows)
    for body, row in zip(bodies, rows, strict=True):
        assert body["max_tokens"] == 77 and body["temperature"] == 0.0
        if "messages" in row:
            assert body["messages"] == row["messages"]
        else:  # rendered like a case: the manifest's system prompt, then the input
            assert body["messages"][0]["role"] == "system"
            assert body["messages"][-1] == {"role": "user", "content": row["input"]}
    plain = evalgate_perf_bodies(with_perf(support))
    assert plain[0]["max_tokens"] == support.generation.max_tokens


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"input": "a", "messages": [{"role": "user", "content": "b"}]}', "exactly one"),
        ('{"prompt": "x"}', "exactly one"),
        ('{"messages": []}', "non-empty"),
        ('{"input": 3}', "must be a string"),
        ("{not json", "not valid JSON"),
        ('{"input": NaN}', "NaN is not a JSON number"),
    ],
)
def test_bad_prompt_rows_name_the_line(
    tmp_path: Path, support: EvalgateManifest, line: str, reason: str
) -> None:
    (tmp_path / "p.jsonl").write_text('{"input": "fine"}\n' + line + "\n")
    manifest = dataclasses.replace(with_perf(support, prompts="p.jsonl"), suite_dir=str(tmp_path))
    with pytest.raises(EvalgateConfigError, match=reason) as info:
        evalgate_perf_bodies(manifest)
    assert info.value.key.startswith("line 2")


def test_missing_block_file_or_endpoint_is_refused(
    tmp_path: Path, support: EvalgateManifest
) -> None:
    with pytest.raises(EvalgateConfigError, match="no perf block"):
        evalgate_run_perf(dataclasses.replace(support, perf=None), {}, PAIR)
    (tmp_path / "empty.jsonl").write_text("\n")
    empty = dataclasses.replace(with_perf(support, prompts="empty.jsonl"), suite_dir=str(tmp_path))
    with pytest.raises(EvalgateConfigError, match="no rows"):
        evalgate_perf_bodies(empty)
    with pytest.raises(EvalgateConfigError, match="no endpoint for candidate 'candidate'"):
        evalgate_run_perf(with_perf(support), {}, PAIR)


# --------------------------------------------------------------------------- loopback runs


def test_identical_models_measure_the_configured_timings_and_pass(
    support: EvalgateManifest,
) -> None:
    manifest = with_perf(support)
    with two_models(sim_url(seed=1), sim_url(seed=2)) as (endpoints, sims):
        result = evalgate_run_perf(manifest, endpoints, PAIR)
        served = [sim.stats()["completion_arrivals"] for sim in sims]
    assert served == [57, 57]  # warm-up arrivals (12) are sent too, to both sides
    assert result.scheduled == 45 and dict(result.completed) == {"candidate": 45, "baseline": 45}
    assert 0.95 * 45.0 <= result.achieved_rate["candidate"] <= 45.0
    assert result.delay_p50_s <= result.delay_p95_s <= result.delay_max_s
    for metric, (cand, base) in result.samples.items():
        assert cand.size == base.size == 45, metric
    for side in (0, 1):
        check_timings(result, side)
    lenient = dataclasses.replace(result, judgeable=result.delay_p95_s <= LENIENT_DELAY_S)
    rules = gate(lenient, **RATIOS)
    assert all(rule.passed for rule in rules.values()), [r.reason for r in rules.values()]


def check_timings(result: EvalgatePerfResult, side: int) -> None:
    """Lower bounds always; upper bounds whenever the generator kept up (the run is judgeable).

    On a starved machine the run must instead say that it could not keep up: measured within
    tolerance, or refused, never a silently wrong number that is judged.
    """
    ttft = float(np.median(result.samples["ttft"][side])) * 1e3
    tpot = float(np.median(result.samples["tpot"][side])) * 1e3
    assert ttft >= TTFT_MS * 0.95 and tpot >= TPOT_MS * 0.95, (ttft, tpot)
    if result.judgeable:
        assert ttft <= TTFT_MS + 25.0 and tpot <= TPOT_MS * 1.35, (ttft, tpot)
    else:
        assert "could not keep up" in result.reason
    assert set(result.samples["output_tokens"][side]) == {float(TOKENS)}
    ttft_s, tpot_s, e2e = (result.samples[m][side] for m in ("ttft", "tpot", "e2e"))
    assert np.all(e2e >= ttft_s + (TOKENS - 1) * tpot_s - 1e-9)
    assert np.all(result.from_schedule["e2e"][side] >= e2e)  # from the schedule: never shorter


def test_candidate_twenty_percent_slower_per_token_fails_tpot(support: EvalgateManifest) -> None:
    slow = sim_url(seed=1, tpot_ms=TPOT_MS * 1.2)
    result = measure(with_perf(support), slow, sim_url(seed=2), max_delay_p95_s=LENIENT_DELAY_S)
    assert result.judgeable, result.reason
    rules = gate(result, **RATIOS)
    assert not rules["tpot_p95"].passed and rules["tpot_p95"].estimate > 1.10
    assert rules["output_tokens_p95"].passed


def test_candidate_forty_percent_longer_fails_output_tokens(support: EvalgateManifest) -> None:
    long = sim_url(seed=1, output_tokens=round(TOKENS * 1.4))
    result = measure(with_perf(support), long, sim_url(seed=2), max_delay_p95_s=LENIENT_DELAY_S)
    assert result.judgeable, result.reason
    rules = gate(result, **RATIOS)
    assert not rules["output_tokens_p95"].passed
    assert rules["output_tokens_p95"].estimate == pytest.approx(14 / 10)
    assert "regression" in rules["output_tokens_p95"].reason
    assert rules["tpot_p95"].passed  # per-token speed is unchanged


def test_a_blocked_loop_is_reported_not_judged(support: EvalgateManifest) -> None:
    manifest = with_perf(support, duration_s=1.0, warmup_s=0.0)

    def block(arrival: int) -> None:
        if arrival % 4 == 0:
            time.sleep(0.06)  # the generator's loop stalls: every later arrival is late

    result = measure(manifest, sim_url(seed=1), sim_url(seed=2), on_arrival=block)
    assert not result.judgeable
    assert "could not keep up" in result.reason and "scheduling delay" in result.reason
    assert result.delay_p95_s > 0.010
    rules = gate(result, **RATIOS)
    for rule in rules.values():
        assert not rule.passed and not rule.evaluated
        assert rule.reason.startswith("not evaluated")


def test_a_rate_beyond_two_cores_is_reported_not_judged(support: EvalgateManifest) -> None:
    manifest = with_perf(support, rate=20000.0, duration_s=0.05, warmup_s=0.0, profile="poisson")
    fast = "simulated://?ttft_ms=1&output_tokens=2"
    result = measure(manifest, fast, fast)
    assert not result.judgeable, result.reason
    assert "could not keep up" in result.reason
    assert result.requested_rate == 20000.0 and result.delay_p95_s > 0.010


def test_errors_above_one_percent_make_the_run_unjudgeable(support: EvalgateManifest) -> None:
    manifest = with_perf(support, duration_s=1.0, warmup_s=0.0)
    flaky = sim_url(seed=1, fail_rate=0.3, output_tokens=3)
    result = measure(manifest, flaky, sim_url(seed=2, output_tokens=3), max_delay_p95_s=1.0)
    errors = sum(result.errors["candidate"].values())
    assert set(result.errors["candidate"]) == {"server_error"} and errors > 0
    assert result.completed["candidate"] == result.scheduled - errors  # one attempt, no retry
    assert result.samples["ttft"][0].size == result.completed["candidate"]
    assert not result.judgeable and "candidate:" in result.reason and "errored" in result.reason


# --------------------------------------------------------------------------- values


def synthetic(judgeable: bool) -> EvalgatePerfResult:
    samples = {m: (np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.5])) for m in EVALGATE_PERF_METRICS}
    return EvalgatePerfResult(
        pair=PAIR, profile="constant", duration_s=3.0, warmup_s=0.5, requested_rate=20.0,
        scheduled_rate=20.0, achieved_rate={"candidate": 20.0, "baseline": 19.0}, scheduled=60,
        completed={"candidate": 3, "baseline": 2},
        errors={"candidate": {"timeout": 1}, "baseline": {}},
        delay_p50_s=0.001, delay_p95_s=0.002, delay_max_s=0.003, samples=samples,
        from_schedule={m: samples[m] for m in ("ttft", "e2e")}, judgeable=judgeable,
        reason="because",
    )  # fmt: skip


def test_to_dict_is_json_and_round_trips() -> None:
    result = synthetic(True)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["percentiles"]["ttft"]["candidate"] == {"p50": 2.0, "p95": 3.0}
    assert data["percentiles"]["ttft"]["baseline"] == {"p50": 1.0, "p95": 2.5}
    back = evalgate_perf_from_dict(data)
    assert back.to_dict() == result.to_dict()
    assert np.array_equal(back.samples["tpot"][1], np.array([1.0, 2.5]))
    assert "samples" not in result.to_dict(include_samples=False)
    nothing = dataclasses.replace(result, delay_p50_s=math.nan, delay_max_s=math.nan)
    data = json.loads(json.dumps(nothing.to_dict(), allow_nan=False))
    assert data["delay_p50_s"] is None
    assert math.isnan(evalgate_perf_from_dict(data).delay_max_s)


def test_merge_replaces_perf_only_and_empties_it_when_unjudgeable() -> None:
    original = empty_gate_input()
    merged = evalgate_merge_perf(original, synthetic(True))
    assert np.array_equal(merged.perf["ttft"][0], np.array([1.0, 2.0, 3.0]))
    assert merged.error_rates == original.error_rates and merged.case_ids == original.case_ids
    assert original.perf["ttft"][0].size == 1  # a copy: the input is untouched
    refused = evalgate_merge_perf(original, synthetic(False))
    assert set(refused.perf) == set(EVALGATE_PERF_METRICS)
    assert all(c.size == 0 and b.size == 0 for c, b in refused.perf.values())


def test_perf_module_is_pure_of_pytest() -> None:
    code = "import sys, pytest_evalgate.perf.phase; sys.exit('pytest' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
