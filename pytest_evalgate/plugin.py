"""pytest plugin entry point (composition root). Inert unless ``--evalgate`` is given."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("evalgate", "LLM evaluations as a release gate")
    group.addoption("--evalgate", action="store_true", default=False, help="turn evalgate on")
