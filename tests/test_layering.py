"""Imports run one way: pure stages never import pytest, nor anything downstream of them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_evalgate"
PURE = {
    "errors", "canonical", "manifest", "shard", "scoring", "simulated", "client", "budget",
    "aggregate", "stats", "gate", "perf", "attest", "report", "decide", "k8s",
    "endpoints", "scheduler",
    "store/__init__", "store/records", "store/backend", "store/writer", "store/reader",
    "store/generations",
    "runner/__init__", "runner/__main__", "runner/parent", "runner/committer", "runner/child",
    "runner/wire",
}  # fmt: skip
# What the runner's child process may import of this package: the wire, the client, the budget,
# the record types (and what they import in turn); never its parent side, scoring or a manifest.
CHILD_SIDE = ("runner/child", "runner/__main__")
CHILD_MAY_IMPORT = {
    "pytest_evalgate.runner.child", "pytest_evalgate.runner.wire", "pytest_evalgate.client",
    "pytest_evalgate.budget", "pytest_evalgate.errors", "pytest_evalgate.store.records",
}  # fmt: skip
PARENT_SIDE = (
    "pytest", "pytest_evalgate.runner.parent", "pytest_evalgate.runner.committer",
    "pytest_evalgate.scoring", "pytest_evalgate.manifest", "pydantic", "yaml",
)  # fmt: skip


def _imports(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_pure_modules_do_not_import_pytest() -> None:
    offenders = {m for m in PURE if (PACKAGE / f"{m}.py").exists() and "pytest" in _imports(m)}
    assert offenders == set()


def test_every_pure_module_named_exists() -> None:
    # A module moved into a package must not drop out of the check above unnoticed.
    missing = {m for m in PURE if not (PACKAGE / f"{m}.py").exists()}
    assert missing == set()


def test_the_runner_child_imports_only_its_own_side() -> None:
    for module in CHILD_SIDE:
        ours = {name for name in _imports(module) if name.startswith("pytest_evalgate")}
        assert ours <= CHILD_MAY_IMPORT, (module, ours - CHILD_MAY_IMPORT)
        assert "pytest" not in _imports(module), module


def test_the_runner_child_loads_nothing_of_the_parent_side() -> None:
    # At run time too (what the imports import in turn): the child starts from
    # ``python -m pytest_evalgate.runner``, which loads the package module, then the child.
    code = (
        "import sys, pytest_evalgate.runner, pytest_evalgate.runner.child;"
        f"print(sorted(m for m in {PARENT_SIDE!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_only_the_edges_import_the_composition_root_and_the_items() -> None:
    for path in PACKAGE.glob("*.py"):
        imported = _imports(path.stem)
        assert "pytest_evalgate.plugin" not in imported, path.stem
        assert "pytest_evalgate.cli" not in imported, path.stem
        if path.stem != "plugin":
            assert "pytest_evalgate.session" not in imported, path.stem
        if path.stem not in {"plugin", "session"}:
            assert "pytest_evalgate.items" not in imported, path.stem


def test_the_entry_point_imports_nothing_heavy() -> None:
    # pytest imports the entry point in every run of every project that installs us.
    code = (
        "import sys, pytest_evalgate.plugin as p;"
        "print(sorted(m for m in ('numpy', 'scipy', 'aiohttp', 'cryptography', 'pydantic')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
