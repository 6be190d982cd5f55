"""``evalgate probe`` from outside: a real ``evalgate`` process against a real simulator process on
127.0.0.1 (issue 16 part B).

1. A simulator with a server-side limit of 16 (``service_slots=16``): the probe finds the knee
   within 12..24 and recommends a budget there; every request went to the given URL once, one
   attempt each.
2. A fatal error (401) at the first request ends the sweep after that one request; transient
   errors (429) are counted, never retried, and a level with more than 1 % of them ends the
   sweep: exit 1 with the reason and no recommendation.
3. Prompts: a suite's perf prompts, else its cases, else the documented default prompts.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from suitekit import make_cases, write_suite

from pytest_evalgate.capacity.probe_load import (
    EVALGATE_PROBE_DEFAULT_PROMPTS,
    evalgate_default_bodies,
    evalgate_suite_bodies,
)
from pytest_evalgate.cli import main
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.process import evalgate_spawn_simulator

_ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+([\d.]+|-)\s+([\d.]+|-)$")


def _probe(*argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest_evalgate.cli", "probe", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def _rows(out: str) -> list[tuple[int, int, int]]:
    found = [_ROW.match(line) for line in out.splitlines()]
    return [(int(m[1]), int(m[2]), int(m[3])) for m in found if m is not None]


# Rounds of the knee test's levels (the default is 8). Every level is waited out, rounds x
# 150 ms (twice that at 32 in flight, three times at 48), so 4 halve the test. A level's steady
# window is then 3 rounds: one stall of the client of 50 ms or more at 16 in flight can lower its
# throughput below 90 % of the best; the midpoints above 16 then find the knee (20 or 24), still
# inside 12..24.
ROUNDS = 4


def test_the_knee_of_a_16_slot_server_is_found_within_12_to_24(tmp_path: Path) -> None:
    config = EvalgateSimConfig(service_slots=16, latency_ms=150.0, output_tokens=8)
    log = tmp_path / "requests.jsonl"
    with evalgate_spawn_simulator(config, None, log) as sim:
        argv = ["--model", "m", "--max-concurrency", "48", "--rounds", str(ROUNDS)]
        done = _probe(sim.base_url, *argv)
        stats = sim.stats()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    recommended = re.fullmatch(r"recommended budget\.max_concurrency: (\d+)", lines[-1])
    assert recommended is not None, done.stdout
    budget = int(recommended[1])
    assert 12 <= budget <= 24, done.stdout
    assert any(line.startswith(f"knee: {budget} (") for line in lines), done.stdout
    rows = _rows(done.stdout)
    # the doublings in order until the plateau ends them (16 -> 32 already adds latency but
    # little throughput when the client turns answers around fast; else 32 -> 48 does), then
    # at most 4 midpoints between the unsaturated 8 and the saturated 32
    levels = [c for c, _, _ in rows]
    doubled = 7 if levels[:7] == [1, 2, 4, 8, 16, 32, 48] else 6
    assert levels[:doubled] == [1, 2, 4, 8, 16, 32, 48][:doubled], done.stdout
    refined = levels[doubled:]
    assert all(8 < c < 32 and c != 16 for c in refined) and len(refined) <= 4, done.stdout
    assert all(requests == ROUNDS * c and errors == 0 for c, requests, errors in rows)
    # only this URL, each request once, one attempt each: what the rows say was sent
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert stats["requests_total"] == len(sent) == sum(requests for _, requests, _ in rows)
    assert stats["by_status"] == {"200": len(sent)}
    assert Counter(entry["attempt"] for entry in sent) == {"1": len(sent)}
    assert len({entry["identity"] for entry in sent}) == len(sent)


def test_a_fatal_first_answer_ends_the_sweep_after_one_request(tmp_path: Path) -> None:
    with evalgate_spawn_simulator(EvalgateSimConfig(fail_401=True), None) as sim:
        done = _probe(sim.base_url, "--model", "m", "--max-concurrency", "64")
        stats = sim.stats()
    assert done.returncode == 1
    assert stats["requests_total"] == 1 and stats["by_status"] == {"401": 1}
    assert _rows(done.stdout) == [(1, 1, 1)]
    assert "  errors at 1: auth 1; first: auth: " in done.stdout
    assert "recommended budget" not in done.stdout
    assert done.stderr == "evalgate probe: probe: no level answered cleanly: nothing to recommend\n"


def test_transient_errors_are_counted_never_retried_and_end_the_sweep(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the first 3 requests get 429: level 1 (8 requests) has 37.5 % errors, far above 1 %
    with evalgate_spawn_simulator(EvalgateSimConfig(fail_429_first=3), None) as sim:
        status = main(["probe", sim.base_url, "--model", "m", "--max-concurrency", "8"])
        stats = sim.stats()
    out, err = capsys.readouterr()
    assert status == 1
    assert stats["requests_total"] == 8 and stats["by_status"] == {"429": 3, "200": 5}
    assert _rows(out) == [(1, 8, 3)]
    assert "  errors at 1: rate_limited 3; first: rate_limited: " in out
    assert err == "evalgate probe: probe: no level answered cleanly: nothing to recommend\n"


def test_a_suite_s_cases_and_no_plateau_recommend_the_top_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_suite(tmp_path / "s", {"candidate": "simulated://"}, cases=make_cases(["a"], 3))
    with evalgate_spawn_simulator(EvalgateSimConfig(latency_ms=20.0), None) as sim:
        argv = [sim.base_url, "--model", "m", "--suite", str(path.parent), "--rounds", "2"]
        status = main(["probe", *argv, "--max-concurrency", "2"])
        stats = sim.stats()
    out, _ = capsys.readouterr()
    assert status == 0
    assert "; 3 prompt(s) from suite test-suite (cases); 2 x concurrency requests" in out
    assert _rows(out) == [(1, 2, 0), (2, 4, 0)] and stats["requests_total"] == 6
    lines = out.splitlines()
    assert lines[-3] == "no knee up to 2 in flight: throughput still grew; probe higher to find it"
    assert (
        lines[-2].startswith("at 2 in flight: ") and "(evalgate plan --tokens-per-s " in lines[-2]
    )
    assert out.endswith("recommended budget.max_concurrency: 2\n")


def test_bad_options_are_usage_errors_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(tmp_path / "s", {"candidate": "simulated://"}).parent
    port_9 = "http://127.0.0.1:9/v1"  # discard: nothing listens, nothing may be sent anyway
    for argv, message in (
        (["simulated://?service_slots=16"], "BASE_URL: must be an http:// or https:// URL"),
        ([port_9, "--levels", "4,2"], "--levels: want ascending positive integers"),
        ([port_9, "--max-concurrency", "0"], "--max-concurrency: must be > 0, got 0"),
        ([port_9, "--api-key-env", "EVALGATE_NO_SUCH"], "no variable EVALGATE_NO_SUCH"),
        ([port_9, "--suite", str(suite), "--api", "completions"], "are for api: chat, not"),
    ):
        assert main(["probe", *argv, "--model", "m"]) == 4, argv
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("evalgate probe: command line: ") and message in err


def test_prompts_come_from_the_suite_or_the_documented_default(tmp_path: Path) -> None:
    cases = make_cases(["alpha"], 3)
    path = write_suite(tmp_path / "s", {"candidate": "simulated://"}, cases=cases)
    bodies = evalgate_suite_bodies(evalgate_load_manifest(str(path)))
    assert [body["messages"] for body in bodies] == [
        [{"role": "user", "content": case["input"]}] for case in cases
    ]
    assert all(body["max_tokens"] == 16 and body["seed"] == 7 for body in bodies)
    (tmp_path / "s" / "prod.jsonl").write_text('{"input": "a production question"}\n')
    text = path.read_text() + "perf: {prompts: prod.jsonl, rate: 1, duration_s: 1}\n"
    path.write_text(text)
    bodies = evalgate_suite_bodies(evalgate_load_manifest(str(path)), max_tokens=5)
    assert [(b["messages"], b["max_tokens"]) for b in bodies] == [
        ([{"role": "user", "content": "a production question"}], 5)
    ]
    default = evalgate_default_bodies("completions")
    assert [body["prompt"] for body in default] == list(EVALGATE_PROBE_DEFAULT_PROMPTS)
    assert {body["max_tokens"] for body in default} == {256}
