"""Test-suite wiring.

- ``tests/`` helpers (suitekit, faultserver) are importable as top-level modules.
- ``GITHUB_STEP_SUMMARY`` is removed for every test: a gated run appends its report.md there,
  and this suite's own CI job must not get one summary per inner test run.
- The plugin's heavy half (and scipy.stats, which ``stats.py`` imports on first use, and
  matplotlib's pyplot with the Agg and SVG backends, which the report imports on first use) is
  imported here, in the outer process: pytester's in-process runs
  restore ``sys.modules`` after each inner session, and numpy refuses to be imported a second
  time into one process ("cannot load module more than once per process"). Real runs import it
  once, under ``--evalgate`` only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib
import pytest
import scipy.stats  # noqa: F401  (imported lazily by stats.py; see the module docstring)

# the report's figures (see the module docstring): Agg first, then what savefig imports
matplotlib.use("Agg")
import matplotlib.backends.backend_agg
import matplotlib.backends.backend_svg
import matplotlib.pyplot

import pytest_evalgate.session  # noqa: F401  (see the module docstring)

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
