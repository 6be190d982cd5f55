"""The judge package is pure: no pytest, no scipy at import, and imports run one way."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

JUDGE = Path(__file__).resolve().parent.parent / "pytest_evalgate" / "judge"

# module -> the package modules it may import (besides the standard library, numpy, pydantic)
ALLOWED = {
    "__init__": set(),
    # strictmodel and jsonlread are leaves (pydantic; errors): the one config model, the one
    # JSON Lines reader (issue 19)
    "spec": {
        "pytest_evalgate.formats.canonical",
        "pytest_evalgate.errors",
        "pytest_evalgate.formats.strictmodel",
    },
    "prompt": {"pytest_evalgate.formats.canonical", "pytest_evalgate.judge.spec"},
    "parse": {"pytest_evalgate.formats.canonical", "pytest_evalgate.judge.spec"},
    "pairwise": {"pytest_evalgate.errors", "pytest_evalgate.stats", "pytest_evalgate.judge.parse"},
    "refusals": {"pytest_evalgate.errors", "pytest_evalgate.judge.spec"},
    "golden": {
        "pytest_evalgate.errors",
        "pytest_evalgate.formats.jsonlread",
        "pytest_evalgate.judge.parse",
        "pytest_evalgate.judge.spec",
    },
    "agreement": {
        "pytest_evalgate.stats",
        "pytest_evalgate.judge.golden",
        "pytest_evalgate.judge.parse",
        "pytest_evalgate.judge.spec",
    },
    "simjudge": {
        "pytest_evalgate.formats.canonical",
        "pytest_evalgate.errors",
        "pytest_evalgate.judge.agreement",
        "pytest_evalgate.judge.golden",
        "pytest_evalgate.judge.parse",
        "pytest_evalgate.judge.prompt",
        "pytest_evalgate.judge.spec",
    },
}
THIRD_PARTY = {"numpy", "numpy.typing", "pydantic"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_every_judge_module_is_listed() -> None:
    assert {path.stem for path in JUDGE.glob("*.py")} == set(ALLOWED)


def test_judge_modules_import_only_what_stands_upstream() -> None:
    stdlib = sys.stdlib_module_names
    for name, allowed in ALLOWED.items():
        imported = _imports(JUDGE / f"{name}.py")
        ours = {m for m in imported if m.startswith("pytest_evalgate")}
        assert ours <= allowed, (name, ours - allowed)
        others = {m for m in imported - ours if m.split(".")[0] not in stdlib}
        assert others <= THIRD_PARTY - {"__future__"}, (name, others)
        assert not any(m == "pytest" or m.startswith("pytest.") for m in imported), name


def test_the_judge_core_loads_without_pytest_or_scipy() -> None:
    code = (
        "import sys\n"
        "import pytest_evalgate.judge.simjudge, pytest_evalgate.judge.pairwise\n"
        "print(sorted(m for m in ('pytest', 'scipy', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
