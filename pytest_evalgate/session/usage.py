"""The one place where a configuration error becomes pytest's usage error (exit status 4)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pytest_evalgate.errors import EvalgateConfigError


@contextmanager
def evalgate_usage_errors() -> Iterator[None]:
    """Turn an ``EvalgateConfigError`` raised inside into ``pytest.UsageError`` (exit 4).

    Only configuration errors: a bug (any other exception) keeps its traceback, so it is never
    reported as if the user's file were wrong.
    """
    try:
        yield
    except EvalgateConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
