"""The gate's tail (issue 18): segments this process committed are verified as they are
committed and replayed at the gate, not parsed again. From outside: the decision a run makes
over its own segments and a resumed run's older ones is the decision a fresh read of the same
store makes (``--evalgate-aggregate``), and a segment edited between commit and gate is still
found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from suitekit import make_cases, write_suite

GOOD = "simulated://?accuracy=0.9&seed=1"
BAD = "simulated://?accuracy=0.6&seed=2"
# every member but the creation time: counts, rates, rules, flipped cases, perf, slices, ...
DIFFERS_ACROSS_READS = ("created_at",)


def _suite(pytester: pytest.Pytester) -> Path:
    cases = make_cases(["alpha", "beta", "gamma"], 20)
    return write_suite(pytester.path / "suite", {"candidate": GOOD, "baseline": BAD}, cases=cases)


def _decision(path: Path) -> dict[str, Any]:
    decision: dict[str, Any] = json.loads((path / "decision.json").read_text())
    return {key: value for key, value in decision.items() if key not in DIFFERS_ACROSS_READS}


def test_a_resumed_run_gates_what_a_fresh_read_of_its_store_gates(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    first = pytester.runpytest("--evalgate", "suite", "-k", "alpha", "-p", "no:cacheprovider")
    assert first.ret in (0, 1)  # a partial selection; its segments are another run's now
    run = pytester.runpytest(
        "--evalgate", "suite", "--evalgate-report=run", "-p", "no:cacheprovider"
    )
    run.stdout.fnmatch_lines(["*identities completed 120/120*"])
    fresh = pytester.runpytest(
        "--evalgate", "--evalgate-aggregate", "suite", "--evalgate-report=fresh",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    assert run.ret == fresh.ret
    made, read = _decision(pytester.path / "run"), _decision(pytester.path / "fresh")
    assert made == read
    assert made["counts"]["completed"] == 120 and made["flipped"]  # not a trivial decision


def test_a_segment_edited_before_the_gate_is_found(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    # The conftest edits the first committed segment after the runner committed the tail and
    # before the gate reads the store: its bytes no longer match what was verified at commit.
    pytester.makeconftest(
        """
import pytest
from pathlib import Path

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    plugin = config.pluginmanager.get_plugin("evalgate-plugin")
    gate = plugin._gate

    def edited_then_gated(session):
        first = sorted(Path("store").rglob("seg-*.jsonl"))[0]
        first.chmod(0o644)
        data = first.read_bytes()
        first.write_bytes(data.replace(b'"attempts":1', b'"attempts":2', 1))
        gate(session)

    plugin._gate = edited_then_gated
"""
    )
    result = pytester.runpytest(
        "--evalgate", "suite", "--evalgate-store=store", "-p", "no:cacheprovider"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict INVALID*", "*checksum mismatch*"])
