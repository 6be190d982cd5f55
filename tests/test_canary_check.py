"""canary check against a real Prometheus (Debian's ``prometheus``, started here on loopback).

One Prometheus scrapes one vLLM-shaped exporter every 0.2 s; the exporter plays four
scenarios at once, told apart by a ``scenario`` label that the checks select on:

- ``slow``: the canary's TTFT is 20 % higher, everything else equal;
- ``equal``: canary and stable alike;
- ``trickle``: the canary gets 1/20 of stable's requests (too few to judge some rules);
- ``idle``: both versions exist at zero and get no traffic.

Rules use a 3 s window (15 scrapes, about 3,000 requests a busy side): the module takes about
8 s, 5 of them Prometheus's own wait before its first scrape. Skipped with the reason where the
binary cannot be had (``scripts/_venv.sh`` installs it with apt-get as root).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from promkit import (
    TICK_S,
    EvalgatePromServer,
    RecordingProxy,
    Traffic,
    VllmExporter,
    prometheus_binary,
    wait_for,
)
from suitekit import write_suite

from pytest_evalgate.canary import (
    EvalgatePrometheus,
    evalgate_analysis_template,
    evalgate_canary_check,
    evalgate_check_lines,
    evalgate_traffic_query,
)
from pytest_evalgate.canary.check import EvalgateCanaryCheck
from pytest_evalgate.cli import main
from pytest_evalgate.errors import EvalgatePrometheusError
from pytest_evalgate.policy import load as gate_policy

pytestmark = pytest.mark.slow

WINDOW = "3s"
WINDOW_S = 3.0
ONLINE = [
    {"metric": "error_rate_delta", "max": 0.02, "interval": "5s", "window": WINDOW},
    {"metric": "ttft_p95_ratio", "max": 1.10, "interval": "5s", "window": WINDOW},
    {"metric": "tpot_p95_ratio", "max": 1.10, "interval": "5s", "window": WINDOW},
    {"metric": "output_length_ratio", "max": 1.10, "interval": "5s", "window": WINDOW},
    {"metric": "judge_score_delta", "min": -0.05, "interval": "5s", "window": WINDOW},
]
POLICY = {
    "version": "canary-test-v1",
    "rules": [{"slice": "all", "rule": "non_inferior", "margin": 0.05}],
    "online": ONLINE,
}
SCENARIOS: dict[str, dict[str, Traffic | None]] = {
    "slow": {"canary": Traffic(ttft_median_s=0.36), "stable": Traffic()},
    "equal": {"canary": Traffic(), "stable": Traffic()},
    "trickle": {"canary": Traffic(per_tick=1), "stable": Traffic()},
    "idle": {"canary": None, "stable": None},
}


Capsys = pytest.CaptureFixture[str]


class World:
    """The running Prometheus, a suite whose gate.yaml holds the online rules, and helpers."""

    def __init__(self, prom: EvalgatePromServer, suite: Path) -> None:
        self.prom = prom
        self.suite = suite
        self.policy = gate_policy.evalgate_load_policy(suite / "gate.yaml")

    def cli(self, capsys: Capsys, command: str, scenario: str, *extra: str) -> tuple[int, str, str]:
        """``evalgate canary COMMAND SUITE --selector scenario=... [--prometheus URL] EXTRA``."""
        argv = ["canary", command, str(self.suite), "--selector", f'scenario="{scenario}"']
        if "--prometheus" not in extra:
            argv += ["--prometheus", self.prom.url]
        status = main([*argv, *extra])
        out, err = capsys.readouterr()
        return status, out, err

    def check(self, scenario: str, window: str | None = None) -> EvalgateCanaryCheck:
        with EvalgatePrometheus(self.prom.url) as prometheus:
            return evalgate_canary_check(
                self.policy, prometheus, selector=f'scenario="{scenario}"', window=window
            )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip(
            "no prometheus binary (Debian package prometheus; scripts/_venv.sh installs it as root)"
        )
    folder = tmp_path_factory.mktemp("canary")
    suite = write_suite(
        folder / "suite", {"candidate": "simulated://", "baseline": "simulated://"}, policy=POLICY
    ).parent
    exporter = VllmExporter(SCENARIOS, seed=7)
    prom = EvalgatePromServer(binary, folder, [exporter.target])
    try:
        exporter.start()
        wait_for(prom.ready, 60, "prometheus /-/ready")
        world = World(prom, suite)
        _wait_for_a_full_window(world)
        yield world
    finally:
        prom.stop()
        exporter.stop()
    assert prom.process.returncode is not None


def _wait_for_a_full_window(world: World) -> None:
    """Until every side of the busy scenarios holds most of a window of requests."""
    ttft = world.policy.online[1]
    queries = [
        evalgate_traffic_query(ttft, version, selector=f'scenario="{scenario}"')
        for scenario in ("slow", "equal")
        for version in ("canary", "stable")
    ]
    # 1,000 requests/s over 3 s, less the window's edges and a loaded machine's lag; 2,250 per
    # side already judges every rule here (traffic factor <= 0.7)
    expected = Traffic().per_tick / TICK_S * WINDOW_S * 0.75
    wait_for(lambda: all(world.prom.value(q) > expected for q in queries), 90, "a full window")


def results(check: EvalgateCanaryCheck) -> dict[str, str]:
    return {rule.rule.metric: rule.result for rule in check.rules}


def test_a_canary_with_20_percent_more_ttft_fails_that_rule_only(
    world: World, capsys: Capsys
) -> None:
    status, out, err = world.cli(capsys, "check", "slow")
    assert (status, err) == (1, "")
    printed = {line.split()[0]: line for line in out.splitlines()[1:-1]}
    assert "  fail  (canary " in printed["ttft_p95_ratio"]
    others = set(printed) - {"ttft_p95_ratio"}
    assert len(others) == len(ONLINE) - 1
    for metric in others:
        assert "  pass  (canary " in printed[metric], printed[metric]
    assert out.splitlines()[-1] == "canary: fail (exit 1)"
    check = world.check("slow")
    assert results(check) == {
        "error_rate_delta": "pass",
        "ttft_p95_ratio": "fail",
        "tpot_p95_ratio": "pass",
        "output_length_ratio": "pass",
        "judge_score_delta": "pass",
    }
    ttft = next(rule for rule in check.rules if rule.rule.metric == "ttft_p95_ratio")
    assert 1.12 < ttft.value < 1.3  # 1.2, seen through vLLM's histogram buckets
    assert ttft.canary_samples > 2000 and ttft.stable_samples > 2000
    assert (check.result, check.exit_status) == ("fail", 1)
    lines = evalgate_check_lines(check)
    assert any(line.startswith("ttft_p95_ratio") and "  fail  (canary " in line for line in lines)
    assert lines[-1] == "canary: fail (exit 1)"


def test_an_equal_canary_passes_every_rule(world: World, capsys: Capsys) -> None:
    status, out, err = world.cli(capsys, "check", "equal")
    assert (status, err) == (0, "")
    assert out.count("  pass  (canary ") == len(ONLINE)
    assert out.splitlines()[-1] == "canary: pass (exit 0)"
    check = world.check("equal")
    assert set(results(check).values()) == {"pass"}
    assert (check.result, check.exit_status) == ("pass", 0)
    for rule in check.rules:
        assert rule.traffic_scale <= 1.0 and not math.isnan(rule.value)
    values = {rule.rule.metric: rule.value for rule in check.rules}
    assert abs(values["error_rate_delta"]) < 0.01 and abs(values["judge_score_delta"]) < 0.02
    for ratio in ("ttft_p95_ratio", "tpot_p95_ratio", "output_length_ratio"):
        assert 0.9 < values[ratio] <= 1.1  # over 3 standard errors from either bound


def test_no_traffic_is_too_little_to_judge(world: World, capsys: Capsys) -> None:
    status, out, err = world.cli(capsys, "check", "idle")
    assert (status, err) == (2, "")
    assert out.count("too little traffic: canary 0, stable 0 ") == len(ONLINE)
    assert out.splitlines()[-1] == "canary: too little traffic (exit 2)"
    check = world.check("idle")
    assert set(results(check).values()) == {"too little traffic"}
    assert (check.result, check.exit_status) == ("too little traffic", 2)
    assert all(math.isnan(rule.value) for rule in check.rules)  # NaN, not an empty result
    for line in evalgate_check_lines(check)[1:-1]:
        assert "too little traffic: canary 0, stable 0" in line
        assert "no canary traffic in the window" in line


def test_a_trickle_of_canary_traffic_says_how_much_more_is_needed(
    world: World, capsys: Capsys
) -> None:
    status, out, _ = world.cli(capsys, "check", "trickle")
    assert status == 2
    assert "too little traffic: canary " in out and "more): raise the canary weight" in out
    check = world.check("trickle")
    by_metric = {rule.rule.metric: rule for rule in check.rules}
    ttft = by_metric["ttft_p95_ratio"]
    assert ttft.result == "too little traffic"
    assert 100 < ttft.canary_samples < 200 < 2000 < ttft.stable_samples
    assert ttft.traffic_scale > 2
    assert {rule.result for rule in check.rules} <= {"pass", "too little traffic"}
    line = next(line for line in evalgate_check_lines(check) if line.startswith("ttft_p95_ratio"))
    need = math.ceil(ttft.traffic_scale * ttft.canary_samples)
    more = need - round(ttft.canary_samples)
    assert f"canary {round(ttft.canary_samples):,}, stable " in line
    assert f"needs about {ttft.traffic_scale:.1f}x that" in line
    assert f"(about {need:,} canary requests in the window, {more:,} more)" in line
    assert "raise the canary weight, or bake and check over a window of about" in line
    assert check.exit_status == 2  # nothing judged failed, something could not be judged


def test_the_check_runs_the_templates_queries_character_for_character(
    world: World, capsys: Capsys
) -> None:
    status, out, _ = world.cli(capsys, "template", "slow")
    assert status == 0
    printed = yaml.safe_load(out)  # the template as printed, and as Argo would read it
    template_queries = [m["provider"]["prometheus"]["query"] for m in printed["spec"]["metrics"]]
    assert len(template_queries) == len(ONLINE)
    proxy = RecordingProxy(world.prom.url, [])
    try:
        status, out, _ = world.cli(capsys, "check", "slow", "--prometheus", proxy.url)
    finally:
        proxy.close()
    assert status == 1
    sent = proxy.queries
    assert [q for q in sent if q in template_queries] == template_queries  # each once, in order
    traffic = [q for q in sent if q not in template_queries]
    assert len(traffic) == 2 * len(template_queries)  # canary and stable samples per rule
    assert all(q.startswith("sum(increase(") and q.endswith(" or vector(0)") for q in traffic)
    assert [rule.query for rule in world.check("slow").rules] == template_queries
    assert (
        evalgate_analysis_template(world.policy, "x", world.prom.url, selector='scenario="slow"')[
            "spec"
        ]["metrics"][1]["provider"]["prometheus"]["query"]
        == template_queries[1]
    )


def test_a_window_override_reaches_every_query(world: World) -> None:
    check = world.check("equal", window="10s")
    for rule in check.rules:
        assert "[10s]" in rule.query and f"[{WINDOW}]" not in rule.query
        assert rule.window == "10s"
    assert check.result in ("pass", "too little traffic")


def test_unreachable_prometheus_exits_1_naming_it(world: World, capsys: Capsys) -> None:
    from promkit import free_port

    url = f"http://127.0.0.1:{free_port()}"
    status, out, err = world.cli(capsys, "check", "equal", "--prometheus", url, "--timeout", "2")
    assert (status, out) == (1, "")
    assert err.startswith(f"evalgate canary: cannot query Prometheus at {url}: ")
    refused = pytest.raises(EvalgatePrometheusError, match=f"cannot query Prometheus at {url}")
    with EvalgatePrometheus(url, timeout_s=2) as prometheus, refused:
        prometheus.query("up", 0)


def test_prometheus_refusals_come_back_with_its_reason(world: World) -> None:
    with EvalgatePrometheus(world.prom.url) as prometheus:
        with pytest.raises(EvalgatePrometheusError, match=r"HTTP 400: .*parse error"):
            prometheus.query("sum(rate(x[5m]", 0)
        with pytest.raises(EvalgatePrometheusError, match="returned 2 series"):
            prometheus.query('vector(1) or label_replace(vector(2), "a", "b", "", "")', 0)
        assert math.isnan(prometheus.query("absent_series_xyz", 0))
        assert prometheus.query("scalar(vector(3))", 0) == 3.0
