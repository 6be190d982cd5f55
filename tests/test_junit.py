"""JUnit that strict consumers accept: under pytest's default ``junit_family`` (xunit2) the file
validates against the Jenkins xunit plugin's junit-10.xsd (the schema pytest checks its own
xunit2 output with, kept in ``tests/data`` with its licence header), with and without ``-n 2``.
Testcase properties only under xunit1/legacy; never a Python None as a value."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from suitekit import make_cases, write_suite

from pytest_evalgate.items import evalgate_junit_properties, evalgate_junit_value

SCHEMA_PATH = Path(__file__).parent / "data" / "junit-10.xsd"
GOOD = "simulated://?accuracy=0.9&seed=5"
BAD = "simulated://?accuracy=0.6&seed=6"
AUTH = "simulated://?accuracy=1.0&fail_401=1"
ARGS = ("--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--junitxml=out.xml")


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(SCHEMA_PATH))


def _suite(pytester: pytest.Pytester, candidate: str = GOOD) -> None:
    policy = {
        "version": "junit-v1",
        "bootstrap": {"resamples": 500, "seed": 0},
        "rules": [
            {"slice": "all", "rule": "non_inferior", "margin": 0.3},
            {"slice": "*", "rule": "no_regression"},
        ],
    }
    write_suite(
        pytester.path / "suite",
        {"candidate": candidate, "baseline": BAD},
        cases=make_cases(["alpha", "beta"], 8),
        policy=policy,
    )


def _root(pytester: pytest.Pytester) -> ET.Element:
    return ET.fromstring((pytester.path / "out.xml").read_text())


def _values(root: ET.Element) -> list[str]:
    return [str(prop.get("value")) for prop in root.iter("property")]


def test_the_schema_is_the_jenkins_one_with_its_licence() -> None:
    text = SCHEMA_PATH.read_text()
    assert "The MIT License (MIT)" in text and "Copyright (c) 2014, Gregory Boissinot" in text
    assert '<xs:element name="testcase">' in text


def test_the_schema_rejects_testcase_properties(schema: xmlschema.XMLSchema) -> None:
    # the reason this issue exists: xunit2 testcases must not carry <properties>
    bad = (
        '<testsuites><testsuite name="s" tests="1" failures="0" errors="0">'
        '<testcase name="t"><properties><property name="a" value="1"/></properties></testcase>'
        "</testsuite></testsuites>"
    )
    assert not schema.is_valid(bad)
    assert schema.is_valid(
        bad.replace('<properties><property name="a" value="1"/></properties>', "")
    )


def test_xunit2_validates_and_carries_the_gate_at_suite_level(
    pytester: pytest.Pytester, schema: xmlschema.XMLSchema
) -> None:
    _suite(pytester)
    result = pytester.runpytest(*ARGS)
    assert result.ret == 0
    schema.validate(str(pytester.path / "out.xml"))
    root = _root(pytester)
    (suite,) = root.iter("testsuite")
    assert all(case.find("properties") is None for case in root.iter("testcase"))
    props = {p.get("name"): p.get("value") for p in suite.find("properties") or []}
    assert props["evalgate.test-suite.verdict"] == "pass"
    assert props["evalgate.test-suite/non_inferior[all].passed"] == "true"
    assert float(props["evalgate.test-suite/non_inferior[all].estimate"]) > -0.3
    assert "evalgate.test-suite/no_regression[alpha].p_adjusted" in props
    assert "evalgate.test-suite/non_inferior[all].p_adjusted" not in props  # None: left out
    assert "None" not in _values(root)
    rules = [case for case in root.iter("testcase") if case.get("classname") == "evalgate.gate"]
    assert [case.get("name") for case in rules] == [
        "test-suite/non_inferior[all]", "test-suite/no_regression[alpha]",
        "test-suite/no_regression[beta]",
    ]  # fmt: skip


def test_xunit2_validates_under_xdist(
    pytester: pytest.Pytester, schema: xmlschema.XMLSchema
) -> None:
    _suite(pytester)
    result = pytester.runpytest_inprocess(*ARGS, "-n", "2")
    assert result.ret == 0
    schema.validate(str(pytester.path / "out.xml"))
    root = _root(pytester)
    items = [case for case in root.iter("testcase") if case.get("classname") != "evalgate.gate"]
    assert len(items) == 32 and all(case.find("properties") is None for case in items)
    suite_props = [p.get("name") for p in root.iter("property")]
    assert suite_props.count("evalgate.test-suite.verdict") == 1  # the controller, once


def test_an_errored_item_still_validates(
    pytester: pytest.Pytester, schema: xmlschema.XMLSchema
) -> None:
    _suite(pytester, candidate=AUTH)
    result = pytester.runpytest(*ARGS)
    assert result.ret == 1
    schema.validate(str(pytester.path / "out.xml"))
    root = _root(pytester)
    assert sum(1 for _ in root.iter("error")) == 1 and "None" not in _values(root)


@pytest.mark.parametrize("family", ["xunit1", "legacy"])
def test_xunit1_items_and_rules_carry_testcase_properties(
    pytester: pytest.Pytester, family: str
) -> None:
    _suite(pytester)
    result = pytester.runpytest(*ARGS, "-o", f"junit_family={family}")
    assert result.ret == 0
    root = _root(pytester)
    item = next(case for case in root.iter("testcase") if case.get("name") == "alpha-000[r0]")
    props = {p.get("name"): p.get("value") for p in item.iter("property")}
    assert props["evalgate.identity"].endswith("/alpha-000/r0")
    assert props["evalgate.category"] == "alpha" and props["evalgate.attempts"] == "1"
    assert "evalgate.error_category" not in props  # no error: no property, not "None"
    rule = next(case for case in root.iter("testcase") if case.get("classname") == "evalgate.gate")
    numbers = {p.get("name"): p.get("value") for p in rule.iter("property")}
    assert numbers["evalgate.passed"] == "true" and numbers["evalgate.verdict"] == "pass"
    assert "evalgate.metric" not in numbers  # a slice rule has no metric: left out
    assert "None" not in _values(root)


def test_xunit1_error_category_of_an_errored_item(pytester: pytest.Pytester) -> None:
    _suite(pytester, candidate=AUTH)
    pytester.runpytest(*ARGS, "-o", "junit_family=xunit1")
    values = {
        p.get("value") for p in _root(pytester).iter("property")
        if p.get("name") == "evalgate.error_category"
    }  # fmt: skip
    assert "auth" in values


def test_property_values() -> None:
    assert evalgate_junit_value(None) is None
    assert evalgate_junit_value(True) == "true" and evalgate_junit_value(False) == "false"
    assert evalgate_junit_value(0.1 + 0.2) == "0.30000000000000004"  # in full
    assert evalgate_junit_value(3) == "3" and evalgate_junit_value("x") == "x"
    assert evalgate_junit_properties([("a", None), ("b", 1.5), ("c", False)]) == [
        ("b", "1.5"), ("c", "false"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "plugin", ["junitxml", "cacheprovider", "logging", "warnings", "stepwise", "terminal", "xdist"]
)
def test_a_suite_runs_without_each_optional_pytest_plugin(
    pytester: pytest.Pytester, plugin: str
) -> None:
    # issue 37: `-p no:junitxml` made every item fail with "unknown configuration value:
    # 'junit_family'"; no plugin of pytest's may be assumed
    _suite(pytester)
    quiet = [] if plugin == "terminal" else ["-q"]  # -q is the terminal plugin's option
    result = pytester.runpytest_inprocess("--evalgate", "suite", *quiet, "-p", f"no:{plugin}")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    if plugin == "terminal":  # nothing reports outcomes; the gate still decided (exit 0)
        assert "Traceback" not in result.stdout.str() + result.stderr.str()
        assert list((pytester.path / ".evalgate").rglob("*.jsonl")), "no record was committed"
    else:
        result.assert_outcomes(passed=24, failed=11)  # as without -p no:X
    assert "junit_family" not in result.stdout.str() + result.stderr.str()
