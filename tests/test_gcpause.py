"""The collector held off on the way to the first request (``gcpause.py``): the module alone,
then a real ``pytest --evalgate`` process watched by a conftest."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator

import pytest
from suitekit import write_suite

from pytest_evalgate.session.gcpause import evalgate_pause_gc, evalgate_resume_gc

GOOD = "simulated://?accuracy=1.0&seed=1"


@pytest.fixture
def collector() -> Iterator[None]:
    """Leave the collector as the test found it."""
    was = gc.isenabled()
    try:
        yield
    finally:
        evalgate_resume_gc()
        (gc.enable if was else gc.disable)()


@pytest.mark.usefixtures("collector")
def test_pause_turns_collection_off_and_resume_back_on_once() -> None:
    gc.enable()
    evalgate_pause_gc()
    assert not gc.isenabled()
    evalgate_pause_gc()  # a second pause changes nothing
    evalgate_resume_gc()
    assert gc.isenabled()
    gc.disable()
    evalgate_resume_gc()  # nothing paused now: the caller's choice stays
    assert not gc.isenabled()


@pytest.mark.usefixtures("collector")
def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    evalgate_pause_gc()
    evalgate_resume_gc()
    assert not gc.isenabled()


WATCH = """
import gc, json, pathlib
SEEN = {}
def _note(name):
    SEEN.setdefault(name, gc.isenabled())
    pathlib.Path("gc-seen.json").write_text(json.dumps(SEEN))
def pytest_sessionstart(session):
    _note("sessionstart")
def pytest_runtest_logreport(report):
    _note("item loop")
def pytest_unconfigure(config):
    _note("unconfigure")
"""


@pytest.mark.parametrize(
    ("args", "paused"),
    [(("--evalgate", "suite"), True), (("--evalgate", "--collect-only", "suite"), False)],
    ids=["requesting", "collect-only"],
)
def test_a_requesting_session_collects_again_from_its_item_loop_on(
    pytester: pytest.Pytester, args: tuple[str, ...], paused: bool
) -> None:
    write_suite(pytester.path / "suite", {"candidate": GOOD, "baseline": GOOD})
    pytester.makeconftest(WATCH)
    result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    seen = json.loads((pytester.path / "gc-seen.json").read_text())
    assert seen["sessionstart"] is not paused
    assert seen["unconfigure"] is True
    if not paused:
        assert "item loop" not in seen  # --collect-only runs no item
    else:
        assert seen["item loop"] is True


@pytest.mark.usefixtures("collector")
@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--evalgate", "--no-such-option", "suite"), None),  # refused while pytest parses
        (("--evalgate", "suite"), "yes"),  # refused inside the plugin's configure
    ],
    ids=["parse", "configure"],
)
def test_an_in_process_run_refused_at_start_leaves_the_collector_on(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    env: str | None,
) -> None:
    write_suite(pytester.path / "suite", {"candidate": GOOD, "baseline": GOOD})
    if env is not None:
        monkeypatch.setenv("PYTEST_EVALGATE_ASYNCIO_LOOP", env)
    gc.enable()
    result = pytester.runpytest(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert gc.isenabled()
