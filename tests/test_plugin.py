"""The plugin from outside: options, collection, outcomes, gate, exit codes, JUnit, xdist."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from suitekit import make_cases, write_suite

GOOD = "simulated://?accuracy=1.0&seed=1"
BAD = "simulated://?accuracy=0.0&seed=2"
AUTH = "simulated://?accuracy=1.0&fail_401=1"


def _suite(pytester: pytest.Pytester, candidate: str, baseline: str, **kwargs: object) -> Path:
    return write_suite(
        pytester.path / "suite",
        {"candidate": candidate, "baseline": baseline},
        **kwargs,  # type: ignore[arg-type]
    )


def _decision(path: Path) -> dict[str, object]:
    return json.loads((path / "decision.json").read_text())  # type: ignore[no-any-return]


def test_inert_without_the_flag(pytester: pytest.Pytester) -> None:
    _suite(pytester, GOOD, GOOD)
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "collected 1 item" in out and "= evalgate =" not in out


def test_node_ids_name_suite_candidate_case_and_repetition(pytester: pytest.Pytester) -> None:
    _suite(pytester, GOOD, GOOD, repetitions=2)
    result = pytester.runpytest("--evalgate", "--collect-only", "-q", "suite")
    out = result.stdout.str()
    assert "suite/evalgate.yaml::candidate::alpha-000[r0]" in out
    assert "suite/evalgate.yaml::baseline::beta-005[r1]" in out
    assert "48 tests collected" in out  # 12 cases x 2 candidates x 2 repetitions


def test_k_selects_a_category(pytester: pytest.Pytester) -> None:
    _suite(pytester, GOOD, GOOD)
    result = pytester.runpytest("--evalgate", "--collect-only", "-q", "-k", "beta", "suite")
    out = result.stdout.str()
    assert "12/24 tests collected (12 deselected)" in out
    assert "alpha-" not in out


def test_wrong_answers_fail_items_but_the_gate_decides(pytester: pytest.Pytester) -> None:
    _suite(pytester, GOOD, BAD)
    result = pytester.runpytest(
        "--evalgate", "suite", "--evalgate-report=rep", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=12 + 1, failed=12)  # +1: the gate rule's own testcase
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*wrong answer [[]alpha]: score 0.00*", "*verdict PASS*"])
    assert _decision(pytester.path / "rep")["verdict"] == "pass"


def test_a_regression_fails_the_session(pytester: pytest.Pytester) -> None:
    _suite(pytester, BAD, GOOD)
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict FAIL*", "*non_inferior[[]all]*FAIL*regression*"])


def test_auth_error_is_an_error_outcome_and_one_request(pytester: pytest.Pytester) -> None:
    _suite(pytester, AUTH, GOOD)
    log = pytester.path / "requests.jsonl"
    result = pytester.runpytest(
        "--evalgate", "suite", f"--evalgate-request-log={log}", "-p", "no:cacheprovider"
    )
    outcomes = result.parseoutcomes()
    assert outcomes["errors"] == 1  # the probe; the other 11 are one folded skip
    assert outcomes["skipped"] == 11
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*endpoint error [[]auth] (HTTP 401)*", "*verdict INCOMPLETE*"])
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    to_candidate = [line for line in lines if "/candidate/" in str(line.get("identity"))]
    assert len(to_candidate) == 1


def test_bad_manifest_is_a_usage_error(pytester: pytest.Pytester) -> None:
    path = _suite(pytester, GOOD, GOOD)
    path.write_text(path.read_text() + "surprise: 1\n")
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider")
    assert result.ret == 4
    assert "evalgate.yaml: surprise: unknown key" in result.stderr.str()


def test_junit_has_rule_testcases_and_no_answer_text(pytester: pytest.Pytester) -> None:
    # xunit1: testcases carry properties (xunit2, the default, is in test_junit.py)
    _suite(pytester, GOOD, BAD)
    result = pytester.runpytest(
        "--evalgate", "suite", "--junitxml=out.xml", "-p", "no:cacheprovider",
        "-o", "junit_family=xunit1",
    )  # fmt: skip
    assert result.ret == 0
    text = (pytester.path / "out.xml").read_text()
    root = ET.fromstring(text)
    rules = [case for case in root.iter("testcase") if case.get("classname") == "evalgate.gate"]
    assert [case.get("name") for case in rules] == ["test-suite/non_inferior[all]"]
    names = {prop.get("name") for prop in rules[0].iter("property")}
    assert {"evalgate.estimate", "evalgate.lo", "evalgate.hi", "evalgate.passed"} <= names
    item_props = {prop.get("name") for prop in root.iter("property")}
    assert "evalgate.identity" in item_props
    assert "evalgate answer" not in text and "output:" not in text


def test_resume_sends_no_request_for_committed_identities(pytester: pytest.Pytester) -> None:
    _suite(pytester, GOOD, BAD)
    log = pytester.path / "requests.jsonl"
    args = ("--evalgate", "suite", f"--evalgate-request-log={log}", "-p", "no:cacheprovider")
    pytester.runpytest(*args).assert_outcomes(passed=13, failed=12)
    sent = len(log.read_text().splitlines())
    assert sent == 24
    second = pytester.runpytest(*args)
    second.assert_outcomes(passed=13, failed=12)
    assert len(log.read_text().splitlines()) == sent


def test_aggregate_mode_sends_nothing_and_an_empty_store_is_incomplete(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester, GOOD, BAD)
    result = pytester.runpytest(
        "--evalgate", "--evalgate-aggregate", "suite", "-p", "no:cacheprovider"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict INCOMPLETE*", "*completed 0/24, missing 24*"])


def test_a_slice_gives_a_partial_verdict(pytester: pytest.Pytester) -> None:
    policy = {
        "version": "v",
        "bootstrap": {"resamples": 1000, "seed": 0},
        "rules": [{"slice": "alpha", "rule": "non_inferior", "margin": 0.1}],
    }
    _suite(pytester, GOOD, BAD, policy=policy)
    result = pytester.runpytest("--evalgate", "suite", "-k", "alpha", "--evalgate-report=rep")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*verdict PARTIAL (partial selection: not attestable)*"])
    decision = _decision(pytester.path / "rep")
    assert decision["verdict"] == "partial" and decision["attestable"] is False


def test_shard_run_stores_its_shard_and_does_not_gate(pytester: pytest.Pytester) -> None:
    _suite(pytester, GOOD, BAD, cases=make_cases(["alpha", "beta"], 10), shards=2)
    result = pytester.runpytest(
        "--evalgate", "suite", "--evalgate-shard=0/2", "-p", "no:cacheprovider"
    )
    outcomes = result.parseoutcomes()
    assert outcomes["deselected"] > 0
    assert outcomes["passed"] + outcomes["failed"] + outcomes["deselected"] == 40
    assert result.ret == 0  # wrong answers do not fail a shard; only errors would
    assert "verdict" not in result.stdout.str()


def test_xdist_gives_the_same_decision(pytester: pytest.Pytester) -> None:
    _suite(pytester, GOOD, BAD, cases=make_cases(["alpha", "beta", "gamma"], 8))
    single = pytester.runpytest_inprocess(
        "--evalgate",
        "suite",
        "-p",
        "no:cacheprovider",
        "--evalgate-store=s1",
        "--evalgate-report=r1",
    )
    double = pytester.runpytest_inprocess(
        "--evalgate", "suite", "-p", "no:cacheprovider", "--evalgate-store=s2",
        "--evalgate-report=r2", "-n", "2",
    )  # fmt: skip
    assert single.ret == double.ret == 0
    assert single.parseoutcomes() == double.parseoutcomes()
    one, two = _decision(pytester.path / "r1"), _decision(pytester.path / "r2")
    for key in ("verdict", "counts", "rates", "rules", "definition_digest"):
        assert one[key] == two[key], key


def test_base_url_env_overrides_the_manifest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester, "http://127.0.0.1:9/v1", GOOD)  # port 9: nothing listens
    monkeypatch.setenv("PYTEST_EVALGATE_BASE_URL_CANDIDATE", GOOD)
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=24 + 1)
    assert result.ret == 0


def test_shard_plan_in_the_manifest_decides_the_shard(pytester: pytest.Pytester) -> None:
    from pytest_evalgate.shard.plan import evalgate_plan_document

    cases = make_cases(["alpha"], 6)
    plan = {case["id"]: (0 if case["id"] == "alpha-000" else 1) for case in cases}
    folder = pytester.path / "suite"
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps(evalgate_plan_document(plan, 2)))
    _suite(pytester, GOOD, GOOD, cases=cases, shards=2, extra={"shard_plan": "plan.json"})
    result = pytester.runpytest(
        "--evalgate", "suite", "--evalgate-shard=0/2", "--collect-only", "-q"
    )
    out = result.stdout.str()
    assert "2/12 tests collected (10 deselected)" in out
    assert "alpha-000[r0]" in out and "alpha-001" not in out


def test_junit_is_correct_under_xdist(pytester: pytest.Pytester) -> None:
    _suite(pytester, GOOD, BAD)
    result = pytester.runpytest_inprocess(
        "--evalgate", "suite", "-n", "2", "--junitxml=out.xml", "-p", "no:cacheprovider"
    )
    assert result.ret == 0
    root = ET.fromstring((pytester.path / "out.xml").read_text())
    cases = list(root.iter("testcase"))
    rules = [case for case in cases if case.get("classname") == "evalgate.gate"]
    items = [case for case in cases if case.get("classname") != "evalgate.gate"]
    assert [case.get("name") for case in rules] == ["test-suite/non_inferior[all]"]
    assert len(items) == 24  # one testcase per item, none lost or doubled across workers
    identities = {(case.get("classname"), case.get("name")) for case in items}
    assert len(identities) == 24
    assert sum(1 for case in items if case.find("failure") is not None) == 12


def test_bad_policy_is_a_usage_error(pytester: pytest.Pytester) -> None:
    policy = {"version": "v", "rules": [{"slice": "all", "rule": "non_inferiour", "margin": 0.1}]}
    _suite(pytester, GOOD, GOOD, policy=policy)
    log = pytester.path / "requests.jsonl"
    result = pytester.runpytest(
        "--evalgate", "suite", f"--evalgate-request-log={log}", "-p", "no:cacheprovider"
    )
    assert result.ret == 4
    err = result.stderr.str()
    assert "gate.yaml" in err and "rules[0]" in err and "non_inferiour" in err
    assert not log.exists() or log.read_text() == ""  # refused before any request


def test_policy_slice_that_names_no_category_is_a_usage_error(pytester: pytest.Pytester) -> None:
    policy = {"version": "v", "rules": [{"slice": "biling", "rule": "non_inferior", "margin": 0.1}]}
    _suite(pytester, GOOD, GOOD, policy=policy)
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider")
    assert result.ret == 4
    assert "rules[0].slice: no category 'biling' in the suite" in result.stderr.str()


def test_every_decision_hook_implementation_is_notified(pytester: pytest.Pytester) -> None:
    # A notification, not firstresult: a first implementation returning a value must not stop
    # the others from seeing the decision.
    _suite(pytester, GOOD, GOOD)
    pytester.makeconftest(
        "import json, pathlib\n"
        "class Second:\n"
        "    def pytest_evalgate_decision(self, config, decision):\n"
        "        pathlib.Path('second.json').write_text(json.dumps(decision['verdict']))\n"
        "def pytest_configure(config):\n"
        "    config.pluginmanager.register(Second(), 'second')\n"
        "def pytest_evalgate_decision(config, decision):\n"
        "    pathlib.Path('first.json').write_text(json.dumps(decision['verdict']))\n"
        "    return 'handled'\n"
    )
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider")
    assert result.ret == 0
    assert json.loads((pytester.path / "first.json").read_text()) == "pass"
    assert json.loads((pytester.path / "second.json").read_text()) == "pass"
