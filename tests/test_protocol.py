"""The light run protocol of EvalgateItems (``protocol.py``), and the child started at start-up.

From outside: a session on the light path and the same session on pytest's own protocol (a
conftest implementing ``pytest_runtest_setup`` forces it) make the same reports, outcomes, JUnit
testcases and exit status, with wrong answers and endpoint errors among the items, with ``-x``
and with ``-n 2``. In-process, the light path is seen to run every item, none once a conftest
implements one of the phase hooks, and to hand a marked item to pytest. The runner child is
prespawned by the time conftests are configured (not under ``--collect-only``), and what the
item loop left is frozen before the gate.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from xml.etree import ElementTree

import pytest
from suitekit import make_cases, write_suite

from pytest_evalgate import protocol
from pytest_evalgate.plugin import evalgate_prespawn_wanted
from pytest_evalgate.runner import spawn

# one slot and one attempt: which identity meets an error (fail_rate, by arrival) is the same
# in every run, so two runs can be compared item by item
MIXED = "simulated://?accuracy=0.7&fail_rate=0.15&seed=4"
WRONG = "simulated://?accuracy=0.7&seed=4"  # wrong answers only: the same under xdist's two slots
BUDGET = {"max_concurrency": 1, "max_attempts": 1, "timeout_s": 10}

RECORD_REPORTS = """
import json
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    with open("reports.jsonl", "a") as handle:
        line = [report.nodeid, report.when, report.outcome, str(report.longrepr or "")]
        line += [list(report.keywords.items()), list(report.location), report.sections]
        line += [[list(pair) for pair in report.user_properties], type(report).__name__]
        line += [report.stop >= report.start, report.duration >= 0]
        handle.write(json.dumps(line) + "\\n")
    return report
"""

FORCE_PYTEST = """
def pytest_runtest_setup(item):
    with open("setup-hook.txt", "a") as handle:
        handle.write(item.nodeid + "\\n")
"""


def _suite(
    pytester: pytest.Pytester, per_category: int = 12, candidate: str = MIXED, slots: int = 1
) -> None:
    cases = make_cases(["alpha", "beta"], per_category)
    urls = {"candidate": candidate, "baseline": "simulated://?accuracy=0.8&seed=5"}
    budget = {**BUDGET, "max_concurrency": slots}
    write_suite(pytester.path / "suite", urls, cases=cases, budget=budget)


def _run(pytester: pytest.Pytester, conftest: str, *args: str) -> dict[str, Any]:
    pytester.makeconftest(conftest)
    for name in ("reports.jsonl", "setup-hook.txt", "out.xml"):
        (pytester.path / name).unlink(missing_ok=True)
    store = f"--evalgate-store=store-{len(list(pytester.path.glob('store-*')))}"
    # in this process: the two runs compare reports, not processes (xdist's workers are still
    # processes of their own); the runner child is spawned as in a subprocess run
    result = pytester.runpytest_inprocess(
        "--evalgate", "suite", store, "-p", "no:cacheprovider", "-rA", "--junitxml=out.xml", *args
    )
    reports = [
        json.loads(line) for line in (pytester.path / "reports.jsonl").read_text().splitlines()
    ]
    hook = pytester.path / "setup-hook.txt"
    return {
        "ret": result.ret,
        "outcomes": result.parseoutcomes(),
        "reports": sorted(map(tuple, reports)),
        "summary": sorted(
            line for line in result.outlines if re.match(r"(PASSED|FAILED|ERROR) ", line)
        ),
        "junit": _testcases(pytester.path / "out.xml"),
        "setup_hook": hook.read_text().splitlines() if hook.exists() else [],
    }


def _testcases(path: Path) -> list[tuple[str, ...]]:
    """Every JUnit testcase as (classname, name, then each child's tag, message and text)."""
    cases = []
    for case in ElementTree.parse(path).iter("testcase"):
        parts = [case.get("classname", ""), case.get("name", "")]
        for child in case:
            parts += [child.tag, child.get("message", ""), (child.text or "").strip()]
        cases.append(tuple(parts))
    return sorted(cases)


@pytest.mark.parametrize("args", [(), ("-x",), ("-n", "2")], ids=["plain", "exitfirst", "xdist"])
def test_the_light_path_reports_what_pytest_protocol_reports(
    pytester: pytest.Pytester, args: tuple[str, ...]
) -> None:
    if "-n" in args:
        _suite(pytester, candidate=WRONG, slots=2)  # one slot per worker
    else:
        _suite(pytester)
    light = _run(pytester, RECORD_REPORTS, *args)
    full = _run(pytester, RECORD_REPORTS + FORCE_PYTEST, *args)
    assert light["setup_hook"] == []  # nobody else listens: the light path ran the items
    evalgate_items = [line for line in full["setup_hook"] if "evalgate.yaml::" in line]
    assert evalgate_items  # the forced run went through pytest_runtest_setup
    outcomes = light["outcomes"]
    if not args:  # the mixed endpoint gave all three outcomes
        assert outcomes["passed"] and outcomes["failed"] and outcomes["errors"], outcomes
        assert len(evalgate_items) == 48
    if args == ("-x",):
        assert outcomes.get("failed", 0) + outcomes.get("errors", 0) == 1, outcomes
    for key in ("ret", "outcomes", "reports", "summary", "junit"):
        assert light[key] == full[key], key
    whens = {line[1] for line in light["reports"]}
    assert whens == {"setup", "call", "teardown"}


def _count_light_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    ran: list[str] = []
    real = protocol.evalgate_run_light

    def counting(item: Any, nextitem: Any) -> None:
        ran.append(item.nodeid)
        real(item, nextitem)

    monkeypatch.setattr(protocol, "evalgate_run_light", counting)
    return ran


def test_a_phase_hook_anywhere_hands_every_item_to_pytest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester, per_category=3)
    ran = _count_light_runs(monkeypatch)
    result = pytester.runpytest_inprocess("--evalgate", "suite", "-p", "no:cacheprovider")
    assert len(ran) == 12 and result.ret in (0, 1)  # every item took the light path
    ran.clear()
    pytester.makeconftest("def pytest_runtest_teardown(item, nextitem):\n    print('seen')\n")
    result = pytester.runpytest_inprocess(
        "--evalgate", "suite", "-p", "no:cacheprovider", "--evalgate-store=other"
    )
    assert ran == [] and result.ret in (0, 1)
    assert result.parseoutcomes().get("passed", 0) + result.parseoutcomes().get("failed", 0) > 0


def test_a_marked_item_takes_pytest_protocol(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester, per_category=3)
    pytester.makeconftest(
        """
import pytest

def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.endswith("candidate::alpha-000[r0]"):
            item.add_marker(pytest.mark.skip(reason="known bad case"))
        if item.nodeid.endswith("candidate::beta-001[r0]"):
            item.add_marker(pytest.mark.xfail(reason="flaky", strict=False))
"""
    )
    ran = _count_light_runs(monkeypatch)
    result = pytester.runpytest_inprocess("--evalgate", "suite", "-p", "no:cacheprovider", "-rsxX")
    outcomes = result.parseoutcomes()
    assert outcomes["skipped"] == 1
    assert outcomes.get("xfailed", 0) + outcomes.get("xpassed", 0) == 1
    result.stdout.fnmatch_lines(["*known bad case*"])
    assert len(ran) == 10  # the 12 items but the two marked ones
    assert not any("alpha-000" in nodeid and "candidate" in nodeid for nodeid in ran)


def test_the_runner_child_is_prespawned_before_conftests_configure(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester, per_category=2)
    pytester.makeconftest(
        """
from pathlib import Path
from pytest_evalgate.runner import spawn

def pytest_configure(config):
    Path("prespawned.txt").write_text(str(len(spawn._PRESPAWNED)))
"""
    )
    result = pytester.runpytest_subprocess("--evalgate", "suite", "-p", "no:cacheprovider")
    assert result.ret in (0, 1)
    assert (pytester.path / "prespawned.txt").read_text() == "1"
    result = pytester.runpytest_subprocess("--evalgate", "suite", "--co", "-p", "no:cacheprovider")
    assert result.ret == 0
    assert (pytester.path / "prespawned.txt").read_text() == "0"


def test_prespawn_wants_a_requesting_session() -> None:
    base = {"evalgate": True, "collectonly": False, "evalgate_aggregate": False}
    assert evalgate_prespawn_wanted(SimpleNamespace(**base))
    assert not evalgate_prespawn_wanted(SimpleNamespace(**{**base, "evalgate": False}))
    assert not evalgate_prespawn_wanted(SimpleNamespace())
    for name, value in (
        ("collectonly", True), ("evalgate_aggregate", True), ("help", True),
        ("version", 1), ("numprocesses", 2),
    ):  # fmt: skip
        assert not evalgate_prespawn_wanted(SimpleNamespace(**{**base, name: value})), name
    assert evalgate_prespawn_wanted(SimpleNamespace(**{**base, "numprocesses": 0}))


def test_what_the_item_loop_left_is_frozen_before_the_gate(pytester: pytest.Pytester) -> None:
    _suite(pytester, per_category=4)
    pytester.makeconftest(
        """
import gc
from pathlib import Path

def pytest_runtest_logfinish(nodeid, location):
    Path("loop.txt").write_text(str(gc.get_freeze_count()))

def pytest_evalgate_decision(config, decision):
    Path("gate.txt").write_text(str(gc.get_freeze_count()))
"""
    )
    result = pytester.runpytest_subprocess("--evalgate", "suite", "-p", "no:cacheprovider")
    assert result.ret in (0, 1)
    loop = int((pytester.path / "loop.txt").read_text())
    assert 0 < loop < int((pytester.path / "gate.txt").read_text())


def test_the_light_protocol_keeps_pytest_current_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_evalgate.items import EvalgateItem

    _suite(pytester, per_category=1, candidate="simulated://?accuracy=1.0&seed=1")
    seen: list[str] = []
    real_setup, real_runtest = EvalgateItem.setup, EvalgateItem.runtest

    def setup(self: EvalgateItem) -> None:
        seen.append(os.environ["PYTEST_CURRENT_TEST"])
        real_setup(self)

    def runtest(self: EvalgateItem) -> None:
        seen.append(os.environ["PYTEST_CURRENT_TEST"])
        real_runtest(self)

    monkeypatch.setattr(EvalgateItem, "setup", setup)
    monkeypatch.setattr(EvalgateItem, "runtest", runtest)
    ran = _count_light_runs(monkeypatch)
    pytester.runpytest_inprocess("--evalgate", "suite", "-p", "no:cacheprovider")
    assert len(ran) == 4
    first = ran[0]
    assert seen[:2] == [f"{first} (setup)", f"{first} (call)"]
    assert "evalgate.yaml::" not in os.environ.get("PYTEST_CURRENT_TEST", "")  # unset after


def test_an_items_location_is_the_one_pytest_works_out(pytester: pytest.Pytester) -> None:
    _suite(pytester, per_category=2)
    pytester.makeconftest(
        """
import pytest

def pytest_collection_modifyitems(config, items):
    with open("locations.txt", "w") as handle:
        for item in items:
            ours, pytests = item.location, pytest.Item.location.func(item)
            hooks = item.ihook.pytest_runtest_logreport.get_hookimpls()
            own = item.session.gethookproxy(item.path).pytest_runtest_logreport.get_hookimpls()
            same = ours == pytests and hooks == own
            if "evalgate.yaml" in item.nodeid:
                assert not any("other/conftest.py" in str(impl.plugin) for impl in hooks)
            handle.write(f"{same} {ours}\\n")
"""
    )
    other = pytester.path / "other"  # a conftest that must not apply to the suite's items
    other.mkdir()
    (other / "conftest.py").write_text("def pytest_runtest_logreport(report):\n    pass\n")
    (other / "test_other.py").write_text("def test_one():\n    pass\n")
    result = pytester.runpytest_inprocess(
        "--evalgate", "other", "suite", "-p", "no:cacheprovider", "--collect-only", "-q"
    )
    assert result.ret == 0
    lines = (pytester.path / "locations.txt").read_text().splitlines()
    assert lines[0].startswith("True ('other/test_other.py'")
    lines = lines[1:]
    assert len(lines) == 8 and all(
        line.startswith("True ('suite/evalgate.yaml', 0, ") for line in lines
    ), lines


def test_a_session_that_ends_in_a_usage_error_stops_its_prespawned_child(
    pytester: pytest.Pytester,
) -> None:
    # The child was started with this session's environment: the next session of the same
    # process (pytester's in-process runs here) must start its own, not adopt this one.
    _suite(pytester, per_category=2)
    result = pytester.runpytest_inprocess(
        "--evalgate", "suite", "-p", "no:cacheprovider", "--evalgate-shard=3/2"
    )
    assert result.ret == 4
    assert spawn._PRESPAWNED == []
