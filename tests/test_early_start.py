"""Requests start while pytest still collects (issue 18, ``early.py``).

The condition from a configuration alone (unit), then from outside: a conftest holds collection
for a while and counts the requests the simulator has seen by then. A session that requests
the whole suite (with a tier or a shard applied) has started; a session with ``-k`` has not;
either way every identity is requested once and the gate decides as before. A conftest that
deselects items on its own gets the items it kept, and at most the runner's first window of the
others is requested (answered and committed, never waited for).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from suitekit import make_cases, write_suite

from pytest_evalgate.session.early import evalgate_may_start_early

GOOD = "simulated://?accuracy=1.0&seed=1"
TIERS = {"checkpoint": {"fraction": 0.25, "seed": 3}}


def _config(args: list[str], **options: Any) -> SimpleNamespace:
    defaults = {"collectonly": False, "evalgate_aggregate": False, "keyword": "", "markexpr": ""}
    return SimpleNamespace(args=args, option=SimpleNamespace(**{**defaults, **options}))


def test_the_condition_needs_one_manifest_and_no_other_selection(tmp_path: Path) -> None:
    one = tmp_path / "one"
    (one / "data").mkdir(parents=True)
    (one / "evalgate.yaml").write_text("{}")
    two = tmp_path / "two"
    for name in ("a", "b"):
        (two / name).mkdir(parents=True)
        (two / name / "evalgate.yaml").write_text("{}")
    (tmp_path / "hidden" / ".git").mkdir(parents=True)
    (tmp_path / "hidden" / "evalgate.yaml").write_text("{}")
    (tmp_path / "hidden" / ".git" / "evalgate.yaml").write_text("{}")
    manifest = str(one / "evalgate.yaml")
    assert evalgate_may_start_early(_config([manifest]))
    assert evalgate_may_start_early(_config([str(one)]))
    assert evalgate_may_start_early(_config([str(tmp_path / "hidden")]))  # .git not walked
    assert not evalgate_may_start_early(_config([str(two)]))
    assert not evalgate_may_start_early(_config([str(one / "data")]))  # no manifest there
    assert not evalgate_may_start_early(_config([manifest, manifest]))
    assert not evalgate_may_start_early(_config([f"{manifest}::candidate"]))
    assert not evalgate_may_start_early(_config([str(one / "cases.jsonl")]))
    for option in (
        {"keyword": "alpha"}, {"markexpr": "slow"}, {"deselect": ["x"]}, {"lf": True},
        {"stepwise": True}, {"collectonly": True}, {"evalgate_aggregate": True},
        {"numprocesses": 2},
    ):  # fmt: skip
        assert not evalgate_may_start_early(_config([manifest], **option)), option
    worker = _config([manifest])
    worker.workerinput = {}
    assert not evalgate_may_start_early(worker)


# -- from outside ----------------------------------------------------------------------------

HOLD = """
import json, time
from pathlib import Path
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    time.sleep(1.5)  # collection held: an early runner works meanwhile
    log = Path("requests.jsonl")
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    Path("seen-at-collection").write_text(str(seen))
"""


def _suite(pytester: pytest.Pytester, **extra: Any) -> Path:
    cases = make_cases(["alpha", "beta"], 40)
    urls = {"candidate": GOOD, "baseline": "simulated://?accuracy=0.9&seed=2"}
    return write_suite(pytester.path / "suite", urls, cases=cases, **extra)


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, int, list[str]]:
    # in this process: its sessions (and runner children) are the same as a pytest process's
    result = pytester.runpytest_inprocess(
        "--evalgate", "suite", "--evalgate-request-log=requests.jsonl", "-p", "no:cacheprovider",
        *args,
    )  # fmt: skip
    held = pytester.path / "seen-at-collection"
    seen = int(held.read_text()) if held.exists() else -1
    log = (pytester.path / "requests.jsonl").read_text().splitlines()
    identities = [str(json.loads(line).get("identity")) for line in log]
    return result, seen, identities


def test_a_whole_suite_session_requests_while_collection_is_held(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    pytester.makeconftest(HOLD)
    result, seen, identities = _run(pytester)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*verdict PASS*", "*identities completed 160/160*"])
    assert seen > 0, "no request went out while pytest collected"
    assert len(identities) == len(set(identities)) == 160  # each identity requested once


def test_a_keyword_selection_waits_for_the_item_loop(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    pytester.makeconftest(HOLD)
    result, seen, identities = _run(pytester, "-k", "alpha")
    assert seen == 0
    assert len(identities) == 80 and all("/alpha-" in identity for identity in identities)
    result.stdout.fnmatch_lines(["*verdict PARTIAL*"])


def test_an_early_start_requests_only_the_tier_and_the_shard(pytester: pytest.Pytester) -> None:
    _suite(pytester, extra={"tiers": TIERS})
    pytester.makeconftest(HOLD)
    result, seen, identities = _run(pytester, "--evalgate-tier=checkpoint")
    assert seen > 0 and result.ret in (0, 1)
    outcomes = result.parseoutcomes()
    tier_items = outcomes.get("passed", 0) + outcomes.get("failed", 0) - 1  # minus the rule
    assert sorted(set(identities)) == sorted(identities) and len(identities) == tier_items < 160
    (pytester.path / "requests.jsonl").unlink()
    shard, seen, identities = _run(pytester, "--evalgate-shard=1/2", "--evalgate-store=sharded")
    assert seen > 0 and shard.ret == 0
    counts = shard.parseoutcomes()
    kept = counts.get("passed", 0) + counts.get("failed", 0)  # a shard run does not gate
    assert len(identities) == len(set(identities)) == kept < 160


def test_a_conftest_that_deselects_gets_what_it_kept(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    pytester.makeconftest(
        """
import time
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    time.sleep(1.0)  # the early runner works through its first window meanwhile
    kept = [item for item in items if "beta" not in item.nodeid]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
"""
    )
    result, _, identities = _run(pytester)
    result.stdout.fnmatch_lines(
        ["*verdict PARTIAL*", "*identities completed 80/80*", "*80 deselected*"]
    )
    alpha = [identity for identity in identities if "/alpha-" in identity]
    assert len(alpha) == len(set(alpha)) == 80
    assert len(identities) == len(set(identities)) <= 160


def test_an_early_runner_is_closed_when_collection_fails(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    # a broken test module beside the suite: collection fails after the runner started early
    (pytester.path / "suite" / "test_broken.py").write_text("import no_such_module_here\n")
    pytester.makeconftest(HOLD)
    result, seen, identities = _run(pytester)
    assert result.ret == 2  # interrupted: 1 error during collection
    assert seen > 0 and identities  # it had started
    committed = list((pytester.path / ".evalgate").rglob("seg-*.jsonl"))
    lines = sum(len(path.read_bytes().splitlines()) for path in committed)
    assert 0 < lines <= len(identities)  # what was answered is committed, once
