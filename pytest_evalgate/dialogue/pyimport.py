"""A ``python:pkg.module:function`` tool callable imported by name (the manifest's check at
load and the runner's child at its first call both use it; no YAML, no manifest here)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

EVALGATE_PYTHON_PREFIX = "python:"


def evalgate_import_tool(call: str, suite_dir: str) -> Any:
    """The function named by ``python:pkg.module:function``, imported with ``suite_dir`` first
    on ``sys.path`` (a suite's own helper modules live beside its manifest). Raises
    ``ImportError``, ``AttributeError`` or ``ValueError`` (not callable, or a malformed name)."""
    module_name, _, function = call[len(EVALGATE_PYTHON_PREFIX) :].partition(":")
    if not module_name or not function:
        raise ValueError("expected python:pkg.module:function")
    if suite_dir not in sys.path:
        sys.path.insert(0, suite_dir)
    target = getattr(importlib.import_module(module_name), function)
    if not callable(target):
        raise ValueError(f"{function!r} is not callable")
    return target
