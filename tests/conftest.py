"""Test-suite wiring.

- ``tests/`` helpers (suitekit, faultserver) are importable as top-level modules.
- ``seaweed``: one real S3 server (SeaweedFS) per test session, for the S3 store's tests.
- ``GITHUB_STEP_SUMMARY`` is removed for every test: a gated run appends its report.md there,
  and this suite's own CI job must not get one summary per inner test run.
- The proxy variables (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, in either
  case) are removed from this process's environment at import, so a developer's proxy cannot
  reach a test's loopback endpoints (subprocesses inherit the cleared environment); the proxy
  tests set them where they mean to.
- The plugin's heavy half (and scipy.stats, which ``stats.py`` imports on first use, and
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

import matplotlib
import pytest
import scipy.stats  # noqa: F401  (imported lazily by stats.py; see the module docstring)

# the report's figures (see the module docstring): Agg first, then what savefig imports
matplotlib.use("Agg")
import matplotlib.backends.backend_agg
import matplotlib.backends.backend_svg
import matplotlib.pyplot

import pytest_evalgate.session.core  # noqa: F401  (see the module docstring)

sys.path.insert(0, str(Path(__file__).parent))

from seaweedkit import EvalgateSeaweed, evalgate_weed_unusable

_PROXY_NAMES = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}
for _name in [name for name in os.environ if name.upper() in _PROXY_NAMES]:
    del os.environ[_name]  # see the module docstring


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


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
