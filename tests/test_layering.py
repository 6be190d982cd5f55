"""Imports run one way: pure stages never import pytest, nor anything downstream of them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_evalgate"
PURE = {
    "errors", "canonical", "manifest", "shard", "scoring", "simulated", "client", "budget",
    "store", "runner", "aggregate", "stats", "gate", "perf", "attest", "report", "decide", "k8s",
    "endpoints", "scheduler",
}  # fmt: skip


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
