"""Test-suite wiring.

- ``tests/`` helpers (suitekit, faultserver) are importable as top-level modules.
- The plugin's heavy half (and scipy.stats, which ``stats.py`` imports on first use) is imported
  here, in the outer process: pytester's in-process runs
  restore ``sys.modules`` after each inner session, and numpy refuses to be imported a second
  time into one process ("cannot load module more than once per process"). Real runs import it
  once, under ``--evalgate`` only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import scipy.stats  # noqa: F401  (imported lazily by stats.py; see the module docstring)

import pytest_evalgate.session  # noqa: F401  (see the module docstring)

sys.path.insert(0, str(Path(__file__).parent))
