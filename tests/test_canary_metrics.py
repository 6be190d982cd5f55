"""The three SPEC 21 canary rules (refusal rate, share of ``length`` stops, tool-call failures)
checked by ``evalgate canary check`` against a real Prometheus (Debian's ``prometheus`` on
loopback) scraping an exporter of the series they read: vLLM's ``vllm:request_success_total``
with ``finished_reason``, the online sampler's ``evalgate_online_answers_total`` /
``evalgate_online_refusals_total`` and the application's ``evalgate_tool_calls_total{outcome}``.

Two scenarios, told apart by a ``scenario`` label: ``worse`` (the canary refuses 12 % against
2 %, stops on ``length`` 20 % against 5 %, fails 12 % of tool calls against 1 %) and ``equal``.
The rules' window is 3 s: Prometheus scrapes every 0.2 s (15 scrapes a window) and each side
plays 2,000 requests a second (6,000 a window). Skipped with the reason where the binary cannot
be had.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import prometheus_client as pc
import pytest
from promkit import (
    EvalgatePromServer,
    _text_format_server,
    prometheus_binary,
    serve_in_thread,
    wait_for,
)
from suitekit import write_suite

from pytest_evalgate.canary import evalgate_analysis_template, evalgate_traffic_query
from pytest_evalgate.cli import main
from pytest_evalgate.policy import load as gate_policy

pytestmark = pytest.mark.slow

WINDOW = "3s"
WINDOW_S = 3.0
ONLINE = [
    {"metric": "refusal_rate_delta", "max": 0.04, "interval": "5s", "window": WINDOW},
    {"metric": "length_stop_share_delta", "max": 0.05, "interval": "5s", "window": WINDOW},
    {"metric": "tool_call_failure_delta", "max": 0.04, "interval": "5s", "window": WINDOW},
]
POLICY = {
    "version": "canary-metrics-v1",
    "rules": [{"slice": "all", "rule": "non_inferior", "margin": 0.05}],
    "online": ONLINE,
}


@dataclass(frozen=True)
class Mix:
    refusals: float = 0.02
    length_stops: float = 0.05
    tool_failures: float = 0.01


SCENARIOS = {
    "worse": {"canary": Mix(0.12, 0.20, 0.12), "stable": Mix()},
    "equal": {"canary": Mix(), "stable": Mix()},
}
PER_TICK = 40  # requests per side every tick
TICK_S = 0.02


class Exporter:
    """The series the three rules read, played in ticks of ``TICK_S``, seeded."""

    def __init__(self) -> None:
        self.registry = pc.CollectorRegistry()
        registry = self.registry
        labels = ["version", "scenario"]
        self.success = pc.Counter(
            "vllm:request_success", "", [*labels, "finished_reason"], registry=registry
        )
        self.answers = pc.Counter("evalgate_online_answers", "", labels, registry=registry)
        self.refusals = pc.Counter("evalgate_online_refusals", "", labels, registry=registry)
        self.tools = pc.Counter("evalgate_tool_calls", "", [*labels, "outcome"], registry=registry)
        self.rng = np.random.default_rng(3)
        self.server = _text_format_server(self.registry)
        self.target = f"127.0.0.1:{self.server.server_port}"
        self.stop_event = threading.Event()
        serve_in_thread(self.server)
        self.thread = threading.Thread(target=self._play, daemon=True)

    def _play(self) -> None:
        next_tick = time.monotonic() + TICK_S  # a late tick is caught up: the rate holds
        while not self.stop_event.wait(max(0.0, next_tick - time.monotonic())):
            for scenario, sides in SCENARIOS.items():
                for version, mix in sides.items():
                    self._tick(scenario, version, mix)
            next_tick += TICK_S

    def _tick(self, scenario: str, version: str, mix: Mix) -> None:
        n, rng, at = PER_TICK, self.rng, {"version": version, "scenario": scenario}
        length = int(rng.binomial(n, mix.length_stops))
        self.success.labels(finished_reason="length", **at).inc(length)
        self.success.labels(finished_reason="stop", **at).inc(n - length)
        self.answers.labels(**at).inc(n)
        self.refusals.labels(**at).inc(int(rng.binomial(n, mix.refusals)))
        failed = int(rng.binomial(n, mix.tool_failures))
        self.tools.labels(outcome="error", **at).inc(failed)
        self.tools.labels(outcome="ok", **at).inc(n - failed)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=10)
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EvalgatePromServer, Path]]:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip("no prometheus binary (Debian package prometheus, from scripts/_venv.sh)")
    folder = tmp_path_factory.mktemp("canary-metrics")
    suite = write_suite(
        folder / "suite", {"candidate": "simulated://", "baseline": "simulated://"}, policy=POLICY
    ).parent
    exporter = Exporter()
    prom = EvalgatePromServer(binary, folder, [exporter.target])
    try:
        exporter.thread.start()
        wait_for(prom.ready, 60, "prometheus /-/ready")
        policy = gate_policy.evalgate_load_policy(suite / "gate.yaml")
        queries = [
            evalgate_traffic_query(rule, version, selector=f'scenario="{scenario}"')
            for rule in policy.online
            for scenario in SCENARIOS
            for version in ("canary", "stable")
        ]
        expected = PER_TICK / TICK_S * WINDOW_S * 0.75
        wait_for(lambda: all(prom.value(q) > expected for q in queries), 90, "a full window")
        yield prom, suite
    finally:
        prom.stop()
        exporter.stop()


def check(
    world: tuple[EvalgatePromServer, Path], scenario: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, str]]:
    prom, suite = world
    argv = ["canary", "check", str(suite), "--prometheus", prom.url,
            "--selector", f'scenario="{scenario}"']  # fmt: skip
    status = main(argv)
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:-1]}
    return status, lines


def test_a_worse_canary_fails_each_of_the_three_rules(
    world: tuple[EvalgatePromServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines = check(world, "worse", capsys)
    assert status == 1
    assert set(lines) == {rule["metric"] for rule in ONLINE}
    for line in lines.values():
        assert "  fail  (canary " in line, line
    refusal = float(lines["refusal_rate_delta"].split()[1])
    assert 0.07 < refusal < 0.13  # 0.10 played
    assert f"tool calls in {WINDOW}" in lines["tool_call_failure_delta"]


def test_an_equal_canary_passes_them(
    world: tuple[EvalgatePromServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines = check(world, "equal", capsys)
    assert status == 0, lines
    for line in lines.values():
        assert "  pass  (canary " in line, line


def test_the_template_carries_the_same_queries(world: tuple[EvalgatePromServer, Path]) -> None:
    prom, suite = world
    policy = gate_policy.evalgate_load_policy(suite / "gate.yaml")
    template = evalgate_analysis_template(policy, "t", prom.url)
    names = [metric["name"] for metric in template["spec"]["metrics"]]
    assert len(names) == 3
    queries = [metric["provider"]["prometheus"]["query"] for metric in template["spec"]["metrics"]]
    assert 'finished_reason="length"' in queries[1] and 'outcome="error"' in queries[2]
    value = prom.value(queries[1].replace("version=", 'scenario="worse",version='))
    assert 0.1 < value < 0.2  # 0.15 played, read back through the template's own query


CELLS = """cells:
  - {name: worse, route: r-worse, namespace: ns-a, pools: {stable: s, canary: c},
     selector: 'scenario="worse"'}
  - {name: equal, route: r-equal, namespace: ns-b, pools: {stable: s, canary: c},
     selector: 'scenario="equal"'}
"""


@pytest.mark.parametrize("cell, status", [("worse", 1), ("equal", 0)])
def test_check_one_cell_reads_that_cell_only(
    world: tuple[EvalgatePromServer, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    cell: str,
    status: int,
) -> None:
    prom, suite = world
    cells = tmp_path / "cells.yaml"
    cells.write_text(CELLS, encoding="utf-8")
    argv = ["canary", "check", str(suite), "--prometheus", prom.url, "--cells", str(cells),
            "--cell", cell]  # fmt: skip
    assert main(argv) == status
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f'cell {cell}: scenario="{cell}"'
