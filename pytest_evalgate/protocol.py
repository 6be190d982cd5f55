"""A lighter run protocol for ``EvalgateItem``: the same reports, fewer wrappers around them.

pytest runs every item through three hooks (``pytest_runtest_setup``, ``_call``, ``_teardown``)
and their wrappers: output and log capture, skip and xfail marks, unraisable and thread
exceptions. For an EvalgateItem those wrappers have nothing to do (it runs no user code and
prints nothing: it waits for its record and reads it), and at 10,000 items they cost the pytest
process ~2.5 s of CPU, on the core the runner's requests share. So, when nothing else is
listening, ``pytest_runtest_protocol`` runs an EvalgateItem itself, as ``_pytest.runner`` would
with only its own implementations of those three hooks: the same ``SetupState`` for setup and
teardown, the same ``PYTEST_CURRENT_TEST``, the same ``CallInfo``. Every report is still made by
``pytest_runtest_makereport`` (every plugin's wrappers included) and announced by
``pytest_runtest_logstart``, ``_logreport``, ``_logfinish`` and ``pytest_exception_interact``:
the terminal, JUnit, ``-x``, ``--lf``, ``--pdb`` and xdist see what they always saw.

An item takes pytest's own protocol when it carries a mark (skip and xfail are evaluated in the
hooks skipped here; checked per item) or when ``evalgate_light_eligible`` (per suite file) says
no: ``--setup-show``, ``--setup-only`` or ``--setup-plan`` is given, a plugin or conftest outside
pytest implements one of the three hooks, or another plugin runs its own protocol (a rerun
plugin).
What the light path does not do: it captures no output and no log records into the report's
sections (live logging, ``--log-file`` and the terminal are unchanged), and an unraisable or
thread exception is attributed to a later item rather than to this one.

A passed phase of a light-path item gets its report from ``pytest_runtest_makereport`` here,
ahead of pytest's own (every wrapper still runs around it): the report pytest would make, with
the keywords read from the node chain once per item instead of once per phase (~20 generator
steps each). Any phase that raised, and every item on pytest's protocol, is reported by pytest.
"""

from __future__ import annotations

import bdb
import os
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import pytest

from pytest_evalgate.items import EvalgateItem

if TYPE_CHECKING:  # the type of ``item.ihook``; pluggy comes with pytest
    from pluggy import HookRelay

_PHASE_HOOKS = ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown")
_SETUP_OPTIONS = ("setupshow", "setuponly", "setupplan")
# Plugins outside ``_pytest`` whose phase hooks are known to leave an EvalgateItem alone:
# hypothesis's call wrapper acts only on an item whose ``obj`` is a hypothesis test.
_KNOWN_MODULES = frozenset({"_hypothesis_pytestplugin"})
_CURRENT = "PYTEST_CURRENT_TEST"


class EvalgateLightProtocol:
    """The ``pytest_runtest_protocol`` of EvalgateItems that may take the light path."""

    def __init__(self) -> None:
        self._eligible: dict[str, bool] = {}  # per suite file: its hooks are the same

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        if not isinstance(item, EvalgateItem) or not self._light(item):
            return None  # no result: the next implementation (pytest's protocol) runs
        evalgate_run_light(item, nextitem)
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> pytest.TestReport | None:
        if not isinstance(item, EvalgateItem) or call.excinfo is not None:
            return None
        keywords = item.evalgate_report_keywords
        if keywords is None:  # not on the light path: pytest's own report
            return None
        return evalgate_passed_report(item, call, keywords)

    def _light(self, item: EvalgateItem) -> bool:
        eligible = self._eligible.get(item.suite_path)
        if eligible is None:
            eligible = self._eligible[item.suite_path] = evalgate_light_eligible(item, self)
        return eligible and next(item.iter_markers(), None) is None


def evalgate_light_eligible(item: pytest.Item, protocol: object) -> bool:
    """Whether items of ``item``'s file may take the light path (see the module docstring);
    ``protocol`` is the plugin offering it (its own protocol hook is not a foreign one)."""
    if any(item.config.getoption(name, False) for name in _SETUP_OPTIONS):
        return False
    ihook = item.ihook
    for name in _PHASE_HOOKS:
        if not all(_pytest_own(impl.plugin) for impl in getattr(ihook, name).get_hookimpls()):
            return False
    for impl in ihook.pytest_runtest_makereport.get_hookimpls():
        wraps = impl.wrapper or impl.hookwrapper
        if not (wraps or impl.plugin is protocol or _pytest_own(impl.plugin)):
            return False  # a plugin making its own reports: pytest makes them all
    for impl in ihook.pytest_runtest_protocol.get_hookimpls():
        wraps = impl.wrapper or impl.hookwrapper
        if not (wraps or impl.plugin is protocol or _pytest_own(impl.plugin)):
            return False
    return True


def _pytest_own(plugin: object) -> bool:
    module = plugin.__name__ if isinstance(plugin, types.ModuleType) else None
    module = module or type(plugin).__module__
    return module.startswith("_pytest.") or module in _KNOWN_MODULES


def evalgate_run_light(item: EvalgateItem, nextitem: pytest.Item | None) -> None:
    """Run ``item``: logstart, setup, call (when setup passed), teardown, logfinish."""
    ihook = item.ihook
    location = item.location
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=location)
    item.evalgate_report_keywords = dict.fromkeys(item.keywords, 1)
    state = item.session._setupstate  # pytest's own, so collector setup and teardown hold
    reraise: tuple[type[BaseException], ...] = (pytest.exit.Exception,)
    if not item.config.getoption("usepdb", False):
        reraise += (KeyboardInterrupt,)
    setup = _phase(ihook, item, "setup", lambda: state.setup(item), reraise)
    if setup.passed:
        _phase(ihook, item, "call", lambda: _call(item), reraise)
    if item.session.shouldfail or item.session.shouldstop:
        nextitem = None  # as pytest does: a stopping session tears everything down
    _phase(ihook, item, "teardown", lambda: state.teardown_exact(nextitem), reraise)
    item.evalgate_report_keywords = None
    os.environ.pop(_CURRENT, None)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=location)


def _phase(
    ihook: HookRelay,
    item: EvalgateItem,
    when: Literal["setup", "call", "teardown"],
    run: Callable[[], None],
    reraise: tuple[type[BaseException], ...],
) -> pytest.TestReport:
    """One phase as ``_pytest.runner.call_and_report`` runs it (``reraise``: what propagates
    instead of becoming the phase's outcome)."""
    os.environ[_CURRENT] = f"{item.nodeid} ({when})"
    call = pytest.CallInfo.from_call(run, when=when, reraise=reraise)
    report: pytest.TestReport = ihook.pytest_runtest_makereport(item=item, call=call)
    ihook.pytest_runtest_logreport(report=report)
    if _interactive(call, report):
        ihook.pytest_exception_interact(node=item, call=call, report=report)
    return report


def evalgate_passed_report(
    item: EvalgateItem, call: pytest.CallInfo[None], keywords: dict[str, Literal[1]]
) -> pytest.TestReport:
    """``TestReport.from_item_and_call`` for a phase that raised nothing, with ``keywords``
    (the item's, read once) copied in: pytest gives every report a dict of its own."""
    sections = [(f"Captured {key} {when}", text) for when, key, text in item._report_sections]
    return pytest.TestReport(
        getattr(item, "id", item.nodeid),  # pytest 9.2's structured id (no parse), else the str
        item.location,
        dict(keywords),
        "passed",
        None,
        call.when,  # type: ignore[arg-type]  # never "collect": this is an item's phase
        sections=sections,
        duration=call.duration,
        start=call.start,  # by name: a pytest without these parameters keeps them as extras
        stop=call.stop,
        user_properties=item.user_properties,
    )


_LAST = ("last_type", "last_value", "last_traceback", "last_exc")


def _call(item: EvalgateItem) -> None:
    """``item.runtest()``, with ``sys.last_*`` kept for a post-mortem as pytest keeps them."""
    for name in _LAST:
        if hasattr(sys, name):
            delattr(sys, name)
    try:
        item.runtest()
    except Exception as exc:
        sys.last_type, sys.last_value = type(exc), exc
        if sys.version_info >= (3, 12):
            sys.last_exc = exc
        sys.last_traceback = exc.__traceback__.tb_next if exc.__traceback__ else None
        raise


def _interactive(call: pytest.CallInfo[None], report: pytest.TestReport) -> bool:
    """``_pytest.runner.check_interactive_exception``: an error worth ``--pdb``."""
    if call.excinfo is None or hasattr(report, "wasxfail"):
        return False
    return not isinstance(call.excinfo.value, (pytest.skip.Exception, bdb.BdbQuit))
