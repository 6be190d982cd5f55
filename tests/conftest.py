"""Test-suite wiring.

- ``tests/`` helpers (suitekit, faultserver) are importable as top-level modules.
- ``seaweed``: one real S3 server (SeaweedFS) per test session, for the S3 store's tests.
- The slowest test files are collected first (``_SLOW_FIRST``): ``--dist loadfile`` hands whole
  files to the xdist workers in collection order, so a long file left for the end would run
  alone on one worker while the other idles.
- ``GITHUB_STEP_SUMMARY`` is removed for every test: a gated run appends its report.md there,
  and this suite's own CI job must not get one summary per inner test run.
- ``PYTEST_ADDOPTS`` is set for every test (unless already set) to leave out the hypothesis and
  anyio plugins in the pytest processes the tests start: neither is used there, and they cost
  each start 0.3 s of CPU. Pytester's runs remove the variable and keep them.
- The proxy variables (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, in either
  case) are removed from this process's environment at import, so a developer's proxy cannot
  reach a test's loopback endpoints (subprocesses inherit the cleared environment); the proxy
  tests set them where they mean to.
- ``PYTHONDONTWRITEBYTECODE`` is removed the same way (``scripts/test`` unsets it before this
  process starts): the pytest runs and CLI processes the tests start then write and reuse
  bytecode and pytest's rewritten asserts instead of compiling every module again at each start
  (~1.3 s of CPU each here, hundreds of starts per suite).
- The plugin's heavy half (its gate, decision and report modules too, and hypothesis, whose
  pytest plugin pytester's runs load; and scipy.stats, which ``stats.py`` imports on first use, and
  matplotlib's pyplot with the Agg and SVG backends, which the report imports on first use) is
  imported here, in the outer process: pytester's in-process runs
  restore ``sys.modules`` after each inner session, and numpy refuses to be imported a second
  time into one process ("cannot load module more than once per process"). Real runs import it
  once, under ``--evalgate`` only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import hypothesis  # noqa: F401  (its pytest plugin loads in pytester's runs: see the docstring)
import matplotlib
import pytest
import scipy.stats  # noqa: F401  (imported lazily by stats.py; see the module docstring)

# the report's figures (see the module docstring): Agg first, then what savefig imports
matplotlib.use("Agg")
import matplotlib.backends.backend_agg
import matplotlib.backends.backend_svg
import matplotlib.pyplot

# the plugin's heavy half, and what an in-process gating run imports after its last answer
# (see the module docstring): imported once here, not again by every inner session
import pytest_evalgate.decision.decide
import pytest_evalgate.protocol
import pytest_evalgate.report.write
import pytest_evalgate.session.core
import pytest_evalgate.session.gate  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent))

from seaweedkit import EvalgateSeaweed, evalgate_weed_unusable

_PROXY_NAMES = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}
for _name in [name for name in os.environ if name.upper() in _PROXY_NAMES]:
    del os.environ[_name]  # see the module docstring
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # see the module docstring

# The 45 test files with the longest summed durations, longest first (JUnit times of a whole run
# under ``-n 2``, 2026-12-07, after the waits were cut). A file missing here keeps its place
# after them; a stale order only costs wall time, never a result.
_SLOW_FIRST = (
    "test_demo_outputs.py",
    "test_protocol.py",
    "test_resume.py",
    "test_code_suite.py",
    "test_shards.py",
    "test_judge_e2e.py",
    "test_capacity_slo.py",
    "test_early_start.py",
    "test_execution.py",
    "test_dialogue_suites.py",
    "test_client.py",
    "test_store_failure.py",
    "test_plugin.py",
    "test_aborted_streams.py",
    "test_junit.py",
    "test_trust_chain.py",
    "test_hardening_config.py",
    "test_sandbox_escape.py",
    "test_hostile_endpoint.py",
    "test_store_s3.py",
    "test_runner_child.py",
    "test_store.py",
    "test_perf.py",
    "test_admission_cli.py",
    "test_contamination.py",
    "test_served_model_e2e.py",
    "test_shards_s3.py",
    "test_report_html.py",
    "test_code_escape_plugin.py",
    "test_calibration.py",
    "test_journal.py",
    "test_first_use_lines.py",
    "test_canary_check.py",
    "test_report_run.py",
    "test_shadow_proxy.py",
    "test_weights.py",
    "test_canary_metrics.py",
    "test_simulated.py",
    "test_online_judge_prometheus.py",
    "test_suite_defects.py",
    "test_sandbox_execute.py",
    "test_gate_e2e.py",
    "test_probe_sweep.py",
    "test_client_hostile.py",
    "test_online_judge_units.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slowest files first (see the module docstring); the sort is stable, so every file's
    tests keep their order and stay together."""
    rank = {name: index for index, name in enumerate(_SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# Two third-party plugins this suite's own tools bring, loaded by every pytest a test starts:
# an empty session takes 0.65 s of CPU with them and 0.34 s without, and the evalgate runs the
# tests start (subprocesses and their xdist workers, a few hundred) do not use them.
_INNER_ADDOPTS = "-p no:hypothesispytest -p no:anyio"


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture(autouse=True)
def _inner_runs_without_test_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    # set per test, not at import: this session's own xdist workers start before any test and
    # must keep hypothesis; pytester's runs remove the variable (they keep both plugins)
    if "PYTEST_ADDOPTS" not in os.environ:
        monkeypatch.setenv("PYTEST_ADDOPTS", _INNER_ADDOPTS)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EvalgateSeaweed]:
    """One SeaweedFS S3 server for the session (tests/seaweedkit.py); skips only where the
    ``weed`` binary cannot run on this machine."""
    reason = evalgate_weed_unusable()
    if reason:
        pytest.skip(reason)
    server = EvalgateSeaweed.start(tmp_path_factory.mktemp("seaweed"))
    yield server
    server.stop()
