"""The online judge end to end, real processes on loopback: a stable and a candidate simulator
behind ``evalgate shadow serve --keep-question``, ``evalgate online-judge serve`` following the
shadow store and judging with the suite's pinned (simulated) judge, a real Prometheus scraping
its ``/metrics``, and ``evalgate canary check`` with a ``judge_score_delta`` rule reading it.

Two scenarios share one Prometheus, each with its own simulators, proxy, store and online
judge, told apart by the scrape's ``instance`` label (``--selector``): ``equal`` (the candidate
answers like stable: every answer right) passes; ``lower`` (the candidate answers every case
wrong, so the judge scores it lower) fails ``judge_score_delta``; ``refusing`` (the candidate
refuses every request) fails ``refusal_rate_delta`` as well, read from the online judge's
answer and refusal counters. Skipped where the ``prometheus`` binary is absent.

Prometheus starts first and learns the online judges' addresses from its targets file once they
listen: its first scrape comes about 5 s after its start whatever we do (Prometheus 2.42's
discovery throttle), and the twelve processes start meanwhile, each kind all at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from judgekit import write_judged_suite
from promkit import EvalgatePromServer, prometheus_binary, wait_for
from suitekit import make_cases

from pytest_evalgate.cli import main
from pytest_evalgate.simulated import (
    EvalgateSimConfig,
    EvalgateSimProcess,
    evalgate_spawn_simulator,
    evalgate_write_answer_key,
)

CASES = make_cases(["alpha", "beta"], 10)
REPEATS = 2  # each case asked twice: 40 judged answers a version, enough for min -0.2
# the candidate simulator's accuracy, and whether its answer key's targets are refusals
SCENARIOS = {"equal": (1.0, False), "lower": (0.0, False), "refusing": (1.0, True)}
REFUSAL = "I can't help with that."
ONLINE_RULES = (
    "online:\n"
    "  - {metric: judge_score_delta, min: -0.2, interval: 15s, window: 5m}\n"
    "  - {metric: refusal_rate_delta, max: 0.2, interval: 15s, window: 5m}\n"
)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest_evalgate.cli", *args]


class Served:
    """A CLI server as a subprocess whose first stdout line names its port; stopped by pid.
    ``wait_ready`` reads that line, so several can start before any is waited for."""

    def __init__(self, argv: list[str], ready: str) -> None:
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self._ready = ready
        self.address = ""
        self.port = 0

    def wait_ready(self) -> Served:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith(self._ready), line
        self.address = line.strip().removeprefix(self._ready).split("/", 1)[0]
        self.port = int(self.address.rsplit(":", 1)[1])
        return self

    def stop(self) -> dict[str, Any]:
        if self.process.poll() is None:
            self.process.terminate()
        out, _ = self.process.communicate(timeout=60)
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result


@dataclass
class Scenario:
    name: str
    sims: list[EvalgateSimProcess]
    proxy: Served
    judge: Served


def messages(case: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": "user", "content": case["input"]}]  # the suite's prompt: "{input}"


def start_judge(name: str, suite: Path, folder: Path) -> Served:
    """The online judge following scenario ``name``'s store (not waited for)."""
    store = folder / f"store-{name}"
    return Served(
        cli("online-judge", "serve", str(suite), "--store", str(store), "--rate", "1",
            "--poll", "0.05"),
        "evalgate online judge: metrics on http://",
    )  # fmt: skip


def start_sims(
    accuracy: float, keys: list[Path], pool: ThreadPoolExecutor
) -> list[Future[EvalgateSimProcess]]:
    """The stable and the candidate simulator, spawned at once (each returns once it listens)."""
    return [
        pool.submit(evalgate_spawn_simulator, EvalgateSimConfig(accuracy=value, seed=1), key)
        for value, key in zip((1.0, accuracy), keys, strict=True)  # stable, candidate
    ]


def start_proxy(name: str, sims: list[EvalgateSimProcess], folder: Path) -> Served:
    """The shadow proxy in front of ``sims`` writing scenario ``name``'s store (not waited for)."""
    store = folder / f"store-{name}"
    origins = [f"http://127.0.0.1:{sim.port}" for sim in sims]
    return Served(
        cli("shadow", "serve", "--stable", origins[0], "--candidate", origins[1],
            "--percent", "100", "--store", str(store), "--suite", "test-suite",
            "--keep-question"),
        "evalgate shadow proxy listening on http://",
    )  # fmt: skip


def stop_all(served: list[Served], sims: list[Future[EvalgateSimProcess]]) -> None:
    """SIGTERM to every process we started (by pid), all at once, then wait for each; the
    first error is raised after every process was waited for."""
    spawned = [future.result() for future in sims if future.done() and not future.exception()]
    for one in served:
        if one.process.poll() is None:
            one.process.terminate()
    for sim in spawned:
        if sim.process.poll() is None:
            sim.process.terminate()
    errors: list[BaseException] = []
    stops: list[Callable[[], object]] = [*(one.stop for one in served), *(s.stop for s in spawned)]
    for stop in stops:
        try:
            stop()
        except Exception as error:
            errors.append(error)
    if errors:
        raise errors[0]


def ask(scenario: Scenario, case: dict[str, Any]) -> None:
    body = json.dumps({"model": "tiny-app", "messages": messages(case)}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{scenario.proxy.port}/v1/chat/completions", data=body,
        headers={"content-type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def selector(scenario: Scenario) -> str:
    return f'instance="{scenario.judge.address}"'


def reaches(prom: EvalgatePromServer, promql: str, want: float) -> Callable[[], bool]:
    return lambda: prom.value(promql) >= want


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EvalgatePromServer, Path, dict[str, Scenario]]]:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip("no prometheus binary (Debian package prometheus, from scripts/_venv.sh)")
    folder = tmp_path_factory.mktemp("online-judge")
    judge_url = "simulated://?judge=1&accuracy=1.0&seed=5"
    suite = write_judged_suite(folder / "suite", cases=CASES, judge_url=judge_url).parent
    with (suite / "gate.yaml").open("a", encoding="utf-8") as handle:
        handle.write(ONLINE_RULES)
    key, refusing = folder / "answers.jsonl", folder / "refusals.jsonl"
    evalgate_write_answer_key(key, [(messages(c), c["target"], c["category"]) for c in CASES])
    evalgate_write_answer_key(refusing, [(messages(c), REFUSAL, c["category"]) for c in CASES])
    scenarios: dict[str, Scenario] = {}
    served: list[Served] = []  # every judge and proxy started, for the teardown
    sims: list[Future[EvalgateSimProcess]] = []
    # 0.5 s: an instant query reads the last scrape, which a scrape timing out would mark stale
    prom = EvalgatePromServer(binary, folder, [], scrape_s=0.5)
    try:
        with ThreadPoolExecutor(max_workers=2 * len(SCENARIOS)) as pool:
            judges, pairs = {}, {}
            for name, (accuracy, refuses) in SCENARIOS.items():
                judges[name] = start_judge(name, suite, folder)
                served.append(judges[name])
                pairs[name] = start_sims(accuracy, [key, refusing if refuses else key], pool)
                sims += pairs[name]
            prom.set_targets([judge.wait_ready().address for judge in judges.values()])
            for name in SCENARIOS:
                started = [future.result() for future in pairs[name]]
                served.append(start_proxy(name, started, folder))
                scenarios[name] = Scenario(name, started, served[-1], judges[name])
        for scenario in scenarios.values():
            scenario.proxy.wait_ready()
        wait_for(prom.ready, 60, "prometheus /-/ready")
        for scenario in scenarios.values():  # every series scraped at 0 before any answer
            count = f"count(evalgate_online_judge_score_count{{{selector(scenario)}}})"
            wait_for(reaches(prom, count, 2), 60, "both versions' series at 0")
        for _ in range(REPEATS):
            for case in CASES:
                for scenario in scenarios.values():
                    ask(scenario, case)
        want = 2 * REPEATS * len(CASES)
        for scenario in scenarios.values():
            total = f"sum(evalgate_online_judge_score_count{{{selector(scenario)}}})"
            wait_for(reaches(prom, total, want), 90, "every answer judged")
        yield prom, suite, scenarios
    finally:
        try:
            stop_all(served, sims)
        finally:
            prom.stop()


def check(world: Any, name: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str]]:
    """``evalgate canary check`` through the console entry point, in this process (the servers
    it reads are the processes)."""
    prom, suite, scenarios = world
    argv = ["canary", "check", str(suite), "--prometheus", prom.url,
            "--selector", selector(scenarios[name])]  # fmt: skip
    status = main(argv)
    lines = {row.split()[0]: row for row in capsys.readouterr().out.splitlines()[1:-1]}
    return status, lines


def value(line: str) -> float:
    return float(line.split()[1])


def test_an_equal_candidate_passes_judge_score_and_refusal_rules(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines = check(world, "equal", capsys)
    assert status == 0, lines
    for metric in ("judge_score_delta", "refusal_rate_delta"):
        assert value(lines[metric]) == pytest.approx(0.0, abs=1e-9)
        assert " pass " in lines[metric]


def test_a_candidate_the_judge_scores_lower_fails_judge_score_delta(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines = check(world, "lower", capsys)
    assert status == 1, lines
    # every stable answer is right (score 1), every candidate answer wrong (score 0)
    assert value(lines["judge_score_delta"]) == pytest.approx(-1.0, abs=1e-9)
    assert " fail " in lines["judge_score_delta"]
    assert " pass " in lines["refusal_rate_delta"]  # wrong, but no refusal


def test_a_refusing_candidate_fails_refusal_rate_delta_too(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines = check(world, "refusing", capsys)
    assert status == 1, lines
    assert value(lines["refusal_rate_delta"]) == pytest.approx(1.0, abs=1e-9)
    assert " fail " in lines["refusal_rate_delta"]
    assert " fail " in lines["judge_score_delta"]


def test_the_prometheus_values_are_the_online_judges_own(world: Any) -> None:
    prom, _, scenarios = world
    for name in SCENARIOS:
        for version in ("canary", "stable"):
            labels = f'{selector(scenarios[name])},version="{version}"'
            count = prom.value(f"evalgate_online_judge_score_count{{{labels}}}")
            assert count == REPEATS * len(CASES), (name, version)
            mean = prom.value(
                f"evalgate_online_judge_score_sum{{{labels}}}"
                f" / evalgate_online_judge_score_count{{{labels}}}"
            )
            assert mean == (0.0 if name != "equal" and version == "canary" else 1.0)
