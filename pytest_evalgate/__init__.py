"""pytest-evalgate: LLM evaluations as pytest tests, their results as a release gate."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
