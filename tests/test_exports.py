"""``pytest_evalgate`` exports the types a user touches, lazily (the entry point stays cheap)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import pytest_evalgate


@pytest.mark.parametrize("name", [n for n in pytest_evalgate.__all__ if n != "__version__"])
def test_every_exported_name_resolves_to_the_defining_module_object(name: str) -> None:
    value = getattr(pytest_evalgate, name)
    module = importlib.import_module(pytest_evalgate._EXPORTS[name])
    assert value is getattr(module, name)


def test_the_user_facing_types_are_exported() -> None:
    wanted = {"EvalgateRecord", "EvalgateIdentity", "EvalgateScorer", "EvalgatePolicy"}
    assert wanted | {"EvalgateDecision", "EvalgateError"} <= set(pytest_evalgate.__all__)


def test_all_lists_exactly_the_lazy_exports() -> None:
    assert set(pytest_evalgate.__all__) == {"__version__", *pytest_evalgate._EXPORTS}


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = pytest_evalgate.Nope  # type: ignore[attr-defined]


def test_importing_the_package_loads_nothing_heavy() -> None:
    heavy = "('numpy', 'scipy', 'aiohttp', 'pydantic', 'pytest_evalgate.store')"
    code = f"import sys, pytest_evalgate; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
