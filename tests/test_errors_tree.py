"""One exception tree: every exception class the package defines derives from EvalgateError.

Walks every module of ``pytest_evalgate`` (imported, so classes made by any means count) and
checks each ``Exception`` subclass defined there. An exception outside the tree would escape
the plugin's and the console script's handling (usage error, exit 4 or 1) as a bare traceback.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest_evalgate
from pytest_evalgate import errors
from pytest_evalgate.errors import EvalgateError


def _modules() -> list[ModuleType]:
    names = [
        info.name
        for info in pkgutil.walk_packages(pytest_evalgate.__path__, "pytest_evalgate.")
        # a process entry point runs its program on import; it defines no classes
        if not info.name.endswith(".__main__")
    ]
    return [importlib.import_module(name) for name in sorted(names)]


def _defined_exceptions(module: ModuleType) -> list[type[BaseException]]:
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
    ]


def test_walk_sees_the_whole_package() -> None:
    names = {module.__name__ for module in _modules()}
    assert "pytest_evalgate.errors" in names
    assert "pytest_evalgate.formats.yamlread" in names
    assert "pytest_evalgate.simulated.protocol" in names
    assert len(names) > 100


def test_every_exception_of_the_package_is_in_the_tree() -> None:
    outside = [
        f"{module.__name__}.{cls.__name__}"
        for module in _modules()
        for cls in _defined_exceptions(module)
        if not issubclass(cls, EvalgateError)
    ]
    assert outside == []


def test_exceptions_are_defined_in_errors_only() -> None:
    elsewhere = [
        f"{module.__name__}.{cls.__name__}"
        for module in _modules()
        if module is not errors
        for cls in _defined_exceptions(module)
    ]
    assert elsewhere == []


def test_the_two_readers_raise_tree_members() -> None:
    from pytest_evalgate.formats.yamlread import EvalgateYamlError, evalgate_load_yaml
    from pytest_evalgate.simulated.protocol import EvalgateSimHttpError, evalgate_sim_parse

    assert EvalgateYamlError is errors.EvalgateYamlError
    assert EvalgateSimHttpError is errors.EvalgateSimHttpError
    try:
        evalgate_load_yaml("a: 1\na: 2\n")
    except EvalgateError as exc:
        assert isinstance(exc, EvalgateYamlError) and "duplicate key 'a'" in str(exc)
    else:
        raise AssertionError("a duplicate key was accepted")
    try:
        evalgate_sim_parse(bytearray(b"GARBAGE\r\n\r\n"))
    except EvalgateError as exc:
        assert isinstance(exc, EvalgateSimHttpError) and exc.status == 400
    else:
        raise AssertionError("a malformed request line was accepted")
