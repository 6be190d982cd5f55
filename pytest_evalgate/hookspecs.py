"""Hooks that pytest-evalgate calls (specs only). Implement them in a ``conftest.py`` or plugin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.hookspec
def pytest_evalgate_scorers(config: pytest.Config) -> dict[str, Callable[[str, str], Any]] | None:
    """Return extra scorers by name, usable as ``evaluator.scorer`` in a manifest.

    A scorer is called as ``scorer(output, target)`` and returns a bool or a number in [0, 1].
    Results of all implementations are merged; a name may not shadow a built-in scorer. Called
    once per suite, only when ``--evalgate`` is on.
    """


@pytest.hookspec
def pytest_evalgate_decision(config: pytest.Config, decision: dict[str, Any]) -> None:
    """Called at the controller with the decision record (builtins) after the gate decided.

    A notification for dashboards and alerts: every implementation is called (the return value
    is ignored, so one implementation cannot hide the decision from the others); the record
    must not be modified.
    """
