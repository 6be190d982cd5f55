"""pytest nodes: a suite file, one collector per candidate, one item per identity.

Node ids name suite, candidate, case and repetition:
``suites/support/evalgate.yaml::baseline::refund-002[r1]``. The category and the case id are
keywords, so ``-k billing`` selects a slice. Items do not call endpoints: the runner produced
their records ahead of the item loop; an item waits for its own record, then reports

- **passed** (scored correct), **failed** (scored wrong: the message has the score; target and
  output go to a report section only under ``--evalgate-report-text``, and never to JUnit),
- **error** (setup fails: the endpoint ended in error after retries; category in the message).

JUnit (``--junitxml``) follows the ``junit_family``: under ``xunit1``/``legacy`` every item and
gate-rule testcase carries ``evalgate.*`` properties; under ``xunit2`` (pytest's default, whose
schema forbids testcase properties) testcases carry none, and the gate's verdict and every
rule's numbers are suite-level properties. A None value is never written: the property is left
out.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pytest
from _pytest.junitxml import xml_key  # the LogXML of --junitxml; pytest has no public handle
from _pytest.pathlib import absolutepath

from pytest_evalgate.client.redact import evalgate_redact
from pytest_evalgate.manifest.dataset import EvalgateCase
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.store import EvalgateIdentity

if TYPE_CHECKING:  # the type of ``Node.ihook``; pluggy comes with pytest
    from pluggy import HookRelay


class EvalgateLoadedSuite(Protocol):
    """What items need of a loaded suite."""

    @property
    def manifest(self) -> EvalgateManifest:
        """The suite's manifest."""


class EvalgateSession(Protocol):
    """What items need of the plugin (which imports this module, not the other way)."""

    def evalgate_suite(self, path: str) -> EvalgateLoadedSuite | None:
        """The loaded suite at ``path`` (None after a config error)."""

    def evalgate_wants_candidate(self, name: str) -> bool:
        """Whether the candidate is selected."""

    def evalgate_start_early(self, path: str) -> None:
        """Start requesting the suite's identities while its items are being built."""

    def evalgate_record_for(self, item: EvalgateItem) -> Mapping[str, Any]:
        """The record of ``item`` (blocks until the runner has it)."""


EVALGATE_PLUGIN_KEY = pytest.StashKey[EvalgateSession]()
_CUT = 160


class EvalgateFile(pytest.File):
    """An ``evalgate.yaml``: collects one node per candidate."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        plugin = self.config.stash[EVALGATE_PLUGIN_KEY]
        suite = plugin.evalgate_suite(str(self.path))
        if suite is None:
            return
        plugin.evalgate_start_early(str(self.path))  # requests while the items are built
        for name in suite.manifest.candidates:
            if plugin.evalgate_wants_candidate(name):
                yield EvalgateCandidateNode.from_parent(self, name=name)


class EvalgateCandidateNode(pytest.Collector):
    """One candidate of a suite: collects (case, repetition) items in dataset order."""

    @cached_property
    def evalgate_relfspath(self) -> str:
        """The suite file's path as reports show it (relative to the rootdir): what pytest's
        ``Item.location`` works out for each item (~20 us each), once for all of them."""
        return self.session._node_location_to_relpath(absolutepath(str(self.path)))

    def evalgate_ihook(self) -> HookRelay:
        """``session.gethookproxy`` of the suite file, kept while no conftest is added (pytest
        works it out again at every ``item.ihook``: four times an item, ~10 us each); the
        proxy itself follows plugins registered later."""
        conftests = len(self.config.pluginmanager._conftest_plugins)  # only ever added to
        cached = self._evalgate_ihook
        if cached is None or cached[0] != conftests:
            cached = self._evalgate_ihook = (conftests, self.session.gethookproxy(self.path))
        return cached[1]

    _evalgate_ihook: tuple[int, HookRelay] | None = None

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        parent = self.parent
        assert isinstance(parent, EvalgateFile)
        suite = self.config.stash[EVALGATE_PLUGIN_KEY].evalgate_suite(str(parent.path))
        assert suite is not None
        for case in suite.manifest.cases:
            for repetition in range(suite.manifest.repetitions):
                yield EvalgateItem.from_parent(
                    self, name=f"{case.case_id}[r{repetition}]", case=case, repetition=repetition
                )


class EvalgateItem(pytest.Item):
    """One identity: (dataset revision, case, candidate, repetition)."""

    def __init__(self, *, case: EvalgateCase, repetition: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.repetition = repetition
        self.candidate = self.parent.name if self.parent is not None else ""
        self.suite_path = sys.intern(str(self.path))  # one string for every item of a suite
        self.extra_keyword_matches.update({case.category, case.case_id})
        self.record: Mapping[str, Any] | None = None
        self._key: EvalgateIdentity | None = None
        # the keywords of this item's reports while it runs on the light path (protocol.py)
        self.evalgate_report_keywords: dict[str, Literal[1]] | None = None

    @property
    def evalgate_key(self) -> EvalgateIdentity:
        """The identity key of this item (looked up once: it is read several times per item)."""
        if self._key is None:
            suite = self.config.stash[EVALGATE_PLUGIN_KEY].evalgate_suite(self.suite_path)
            assert suite is not None
            revision = suite.manifest.dataset_revision
            self._key = EvalgateIdentity(
                revision, self.case.case_id, self.candidate, self.repetition
            )
        return self._key

    def setup(self) -> None:
        """Wait for this identity's record; an endpoint error is this item's error."""
        record = self.config.stash[EVALGATE_PLUGIN_KEY].evalgate_record_for(self)
        self.record = record
        if evalgate_testcase_properties(self.config):
            self.user_properties.extend(self._properties(record))
        error = record.get("error")
        if error is not None and error["category"] == "not_requested":
            # One identical reason per stopped candidate: pytest folds these skips into one
            # summary line, while the probe that met the fatal error stays an error.
            pytest.skip(evalgate_redact(error["message"]))
        if error is not None and error["category"] == "missing":  # aggregate mode
            pytest.fail(f"no result [missing]: {evalgate_redact(error['message'])}", pytrace=False)
        if error is not None and error["category"] == "store_failed":  # never passed
            pytest.fail(
                f"no result [store_failed]: {evalgate_redact(error['message'])}", pytrace=False
            )
        if error is not None and error["category"] == "sandbox":  # scorer: code
            message = evalgate_redact(error["message"])
            pytest.fail(f"sandbox error [sandbox]: {message}", pytrace=False)
        if error is not None:
            status = f" (HTTP {error['status']})" if error.get("status") else ""
            pytest.fail(
                f"endpoint error [{error['category']}]{status} after {record.get('attempts', 0)}"
                f" attempt(s): {evalgate_redact(error['message'])}",  # an older record too
                pytrace=False,
            )

    def runtest(self) -> None:
        """Fail when the stored record was scored wrong."""
        record = self.record
        assert record is not None
        if record["passed"]:
            return
        # Eval sets are crown jewels: target and output leave the store only when asked for.
        if self.config.getoption("evalgate_report_text", False):
            self.add_report_section("call", "evalgate answer", self._answer_text(record))
        pytest.fail(
            f"wrong answer [{self.case.category}]: {_why(record)}"
            f" (case {self.case.case_id}, {self.candidate}, r{self.repetition})",
            pytrace=False,
        )

    def teardown(self) -> None:
        """Let the record go: it is committed, and the gate reads the store, never items (at
        100,000 identities the kept records were about 3 KB each of the session's memory)."""
        self.record = None

    def _answer_text(self, record: Mapping[str, Any]) -> str:
        output = evalgate_redact(record.get("output") or "")
        return f"target: {_cut(self.case.target)}\noutput: {_cut(output)}\n"

    def _properties(self, record: Mapping[str, Any]) -> list[tuple[str, str]]:
        timing = record.get("timing") or {}
        usage = record.get("usage") or {}
        error = record.get("error")
        revision, case_id, candidate, repetition = self.evalgate_key
        return evalgate_junit_properties(
            [
                ("evalgate.identity", f"{revision}/{candidate}/{case_id}/r{repetition}"),
                ("evalgate.category", self.case.category),
                ("evalgate.score", record.get("score")),
                ("evalgate.attempts", record.get("attempts")),
                ("evalgate.ttft_s", timing.get("ttft_s")),
                ("evalgate.completion_tokens", usage.get("completion_tokens")),
                ("evalgate.error_category", error["category"] if error else None),
            ]
        )
        sandbox = record.get("sandbox")
        if sandbox is not None:  # scorer: code
            self.user_properties.append(("evalgate.sandbox_outcome", sandbox["outcome"]))

    @property
    def ihook(self) -> HookRelay:
        """pytest's path-sensitive hook proxy, from the candidate node (the same file)."""
        parent = self.parent
        if not isinstance(parent, EvalgateCandidateNode):
            return super().ihook
        return parent.evalgate_ihook()

    @cached_property
    def location(self) -> tuple[str, int | None, str]:
        """pytest's ``Item.location`` of ``reportinfo``, the path's part from the candidate
        node (the same for every item of the suite)."""
        parent = self.parent
        if not isinstance(parent, EvalgateCandidateNode):
            return super().location
        _path, line, domain = self.reportinfo()
        return (parent.evalgate_relfspath, line, domain)

    def reportinfo(self) -> tuple[str, int | None, str]:
        """Location shown in reports: the suite file (its first line: pytest's report of a
        skip mark needs a line) and the identity."""
        return str(self.path), 0, f"{self.candidate}::{self.name}"


def _why(record: Mapping[str, Any]) -> str:
    """A wrong answer's reason: its code's outcome (scorer: code), else its score (and a
    conversation's failed checks, which name tools and turns, never eval text)."""
    sandbox = record.get("sandbox")
    failures = (record.get("dialogue") or {}).get("failures")
    if sandbox is None and failures:  # a conversation or tool loop: its failed checks
        return f"score {record['score']:.2f}: {'; '.join(failures)}"
    if sandbox is None:
        return f"score {record['score']:.2f}"
    message = f": {_cut(sandbox['message'])}" if sandbox["message"] else ""
    return f"{sandbox['outcome']}{message}"


def _cut(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= _CUT else text[: _CUT - 3] + "..."


EVALGATE_GATE_PREFIX = "evalgate.gate::"


class EvalgateTally:
    """Counts failed reports by kind, so the gate, not case failures, decides the session.

    Wrong answers inside a gated run do not fail the session; endpoint errors make the verdict
    incomplete; failures of ordinary tests in the same session always count.
    """

    def __init__(self) -> None:
        self.wrong = 0
        self.errors = 0
        self.gate_failed = 0
        self.other = 0

    def evalgate_count(self, report: pytest.TestReport) -> None:
        """Count one report (called for every report, at workers and the controller)."""
        if not report.failed:
            return
        if report.nodeid.startswith(EVALGATE_GATE_PREFIX):
            self.gate_failed += 1
        elif "evalgate.yaml::" not in report.nodeid:
            self.other += 1
        elif report.when == "call":
            self.wrong += 1
        else:
            self.errors += 1

    def evalgate_failed_count(self, gate_exit: int, gated: bool) -> int:
        """The session's failure count: other failures plus the gate's (or, ungated, errors)."""
        if gated:
            return self.other + (1 if gate_exit else 0)
        return self.other + self.errors


# --------------------------------------------------------------------------- JUnit


def evalgate_testcase_properties(config: pytest.Config) -> bool:
    """Whether testcases may carry ``<properties>``: only under ``junit_family`` xunit1 or
    legacy (the xunit2 schema, Jenkins' junit-10.xsd, forbids them). Never when pytest's
    junitxml plugin is not loaded (``-p no:junitxml``): there is no JUnit file and no
    ``junit_family`` ini key to read."""
    if not config.pluginmanager.has_plugin("junitxml"):
        return False
    return str(config.getini("junit_family")) in ("xunit1", "legacy")


def evalgate_junit_value(value: object) -> str | None:
    """A property value as JUnit text: booleans ``true``/``false``, floats in full (repr),
    None as None (the property is left out, never written as ``"None"``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def evalgate_junit_properties(pairs: list[tuple[str, object]]) -> list[tuple[str, str]]:
    """``pairs`` as JUnit properties, those whose value is None left out."""
    out = []
    for name, value in pairs:
        text = evalgate_junit_value(value)
        if text is not None:
            out.append((name, text))
    return out


def evalgate_suite_properties(decision: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The decision as suite-level properties: ``evalgate.<suite>.verdict`` and friends, and
    ``evalgate.<suite>/<rule>.<number>`` for every rule (valid under every junit family)."""
    suite = decision["suite"]
    pairs: list[tuple[str, object]] = [
        (f"evalgate.{suite}.verdict", decision["verdict"]),
        (f"evalgate.{suite}.definition_digest", decision["definition_digest"]),
        (f"evalgate.{suite}.policy", decision["policy"]["version"]),
        (f"evalgate.{suite}.completed", decision["counts"]["completed"]),
        (f"evalgate.{suite}.expected", decision["counts"]["expected"]),
    ]
    for rule in decision["rules"]:
        for key in ("passed", "estimate", "lo", "hi", "threshold", "n_cases", "p_adjusted"):
            pairs.append((f"evalgate.{suite}/{rule['name']}.{key}", rule.get(key)))
    return evalgate_junit_properties(pairs)


def evalgate_junit_decision(config: pytest.Config, decision: Mapping[str, Any]) -> None:
    """Add the decision's suite-level properties to this process's --junitxml file, if any
    (the controller under xdist: workers write no JUnit file)."""
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    for name, value in evalgate_suite_properties(decision):
        xml.add_global_property(name, value)


def evalgate_rule_reports(
    rule: Mapping[str, Any], decision: Mapping[str, Any], testcase_properties: bool = True
) -> list[pytest.TestReport]:
    """setup/call/teardown reports of one gate rule: a JUnit testcase, classname evalgate.gate;
    its numbers are testcase properties when ``testcase_properties`` (xunit1/legacy)."""
    name = f"{decision['suite']}/{rule['name']}"
    nodeid = f"{EVALGATE_GATE_PREFIX}{name}"
    pairs = [(f"evalgate.{key}", value) for key, value in sorted(rule.items())]
    pairs.append(("evalgate.verdict", decision["verdict"]))
    properties = evalgate_junit_properties(pairs) if testcase_properties else []
    outcome = "passed" if rule["passed"] else "failed"
    longrepr = None if rule["passed"] else f"gate rule {rule['name']} failed: {rule.get('reason')}"

    def report(when: str, result: str, text: str | None) -> pytest.TestReport:
        return pytest.TestReport(
            nodeid=nodeid,
            location=("evalgate.gate", None, name),
            keywords={},
            outcome=result,  # type: ignore[arg-type]
            longrepr=text,
            when=when,  # type: ignore[arg-type]
            user_properties=properties,
        )

    return [
        report("setup", "passed", None),
        report("call", outcome, longrepr),
        report("teardown", "passed", None),
    ]
