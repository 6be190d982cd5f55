"""Imports run one way, and programs live at the edge (walks the AST of every module).

- Pure stages never import pytest, nor anything downstream of them.
- The core (every module outside ``pytest_evalgate/cli/``) never prints, never imports argparse,
  never calls ``sys.exit`` or raises ``SystemExit`` (a sub-package's ``__main__.py``, a process
  entry point, may exit with its child's status) and never imports ``pytest_evalgate.cli``.

Sub-packages count: ``runner/child.py`` belongs to the ``runner`` stage.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections.abc import Set as AbstractSet
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_evalgate"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
# The units that are pytest's side of the house: the entry point, its hook specs, the pytest
# nodes, their run protocol and the session (the composition root). Every other unit is pure of
# pytest, so it is unit-tested without pytester.
PYTEST_SIDE = {"plugin", "hookspecs", "items", "protocol", "session"}
EDGE = "cli"
# Programs of their own that no harness module imports: the sandbox driver runs inside the
# sandbox's interpreter (``python3 -I -c SOURCE``) and must name ``SystemExit`` to report it.
ENTRY_PROGRAMS = {"sandbox.driver"}
# What the runner's child process may import of this package: the wire, the client, the budget,
# the record types (and what they import in turn); never its parent side, scoring or a manifest.
CHILD_SIDE = ("runner.child", "runner.child_process", "runner.__main__", "runner.journal")
CHILD_MAY_IMPORT = (
    "pytest_evalgate.runner.child", "pytest_evalgate.runner.child_process",
    "pytest_evalgate.runner.wire", "pytest_evalgate.client",
    "pytest_evalgate.errors", "pytest_evalgate.store.records",
    # the resume journal (issue 15): its writer, its format, and the store it writes to
    "pytest_evalgate.runner.journal", "pytest_evalgate.store.journal",
    "pytest_evalgate.store.location", "pytest_evalgate.store.backend",
    "pytest_evalgate.runner.execution", "pytest_evalgate.sandbox",
    # the journal line's canonical JSON, which the wire result reuses (encoded once)
    "pytest_evalgate.formats.canonical",
    # conversations and tool loops (SPEC 17): the loop, one tool call, a python: tool's import
    "pytest_evalgate.dialogue.loop", "pytest_evalgate.dialogue.toolrun",
    "pytest_evalgate.dialogue.pyimport",
    # multiple choice (SPEC 18): one identity's requests and their log-likelihoods
    "pytest_evalgate.choice.loop", "pytest_evalgate.choice.loglik",
)  # fmt: skip
PARENT_SIDE = (
    "pytest", "pytest_evalgate.runner.parent", "pytest_evalgate.runner.committer",
    "pytest_evalgate.scoring", "pytest_evalgate.manifest", "pydantic", "yaml",
)  # fmt: skip


@functools.cache
def _modules() -> dict[str, Path]:
    """Dotted module name inside the package (``runner.child``, ``cli``) -> its file (walked
    once per session: the tests only read it)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name or "__init__"] = path
    return found


def _stage(module: str) -> str:
    return module.split(".")[0]


def _core() -> dict[str, Path]:
    return {name: path for name, path in _modules().items() if _stage(name) != EDGE}


def _package_of(module: str, path: Path) -> list[str]:
    """The package a relative import in ``module`` starts from, as dotted parts."""
    parts = ["pytest_evalgate", *module.split(".")] if module != "__init__" else ["pytest_evalgate"]
    return parts if path.name == "__init__.py" else parts[:-1]


def _absolute(node: ast.ImportFrom, module: str, path: Path) -> str:
    if node.level == 0:
        return node.module or ""
    base = _package_of(module, path)[: len(_package_of(module, path)) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports_of(tree: ast.AST, module: str, path: Path) -> set[str]:
    """Every module name the tree imports, relative imports resolved; ``from a import b`` also
    counts ``a.b`` (b may be a sub-module)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            origin = _absolute(node, module, path)
            found.add(origin)
            found.update(f"{origin}.{alias.name}" for alias in node.names)
    return found


@functools.cache
def _imports(module: str) -> frozenset[str]:
    path = _modules()[module]
    return frozenset(_imports_of(ast.parse(path.read_text()), module, path))


def _imports_under(imported: AbstractSet[str], target: str) -> bool:
    return any(name == target or name.startswith(target + ".") for name in imported)


def _is_exit(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "exit":
        return isinstance(node.value, ast.Name) and node.value.id == "sys"
    if isinstance(node, ast.ImportFrom) and node.module == "sys":
        return any(alias.name == "exit" for alias in node.names)
    return isinstance(node, ast.Name) and node.id == "SystemExit"


def _program_parts(source: str, module: str, path: Path) -> list[str]:
    """What in a core module's source belongs at the edge: ``print``, argparse, exiting, and
    importing ``pytest_evalgate.cli``. Each finding is ``"<what> line N"``."""
    tree = ast.parse(source)
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name) and node.id == "print":
            found.append(f"print line {line}")
        if _is_exit(node) and path.name != "__main__.py" and module not in ENTRY_PROGRAMS:
            found.append(f"exit line {line}")
    imported = _imports_of(tree, module, path)
    if _imports_under(imported, "argparse"):
        found.append("imports argparse")
    if _imports_under(imported, "pytest_evalgate.cli"):
        found.append("imports pytest_evalgate.cli")
    return found


def test_the_walker_finds_sub_packages() -> None:
    modules = _modules()
    assert "cli" in modules and "cli.command" in modules and "manifest.load" in modules
    assert modules["cli"].name == "__init__.py"
    assert {"manifest", "gate", "session", "store"} <= {_stage(name) for name in modules}


def _units() -> set[str]:
    """The package's units: each sub-package, and each module left in the root."""
    return {_stage(name) for name in _modules() if name != "__init__"}


def _unit_imports() -> dict[str, set[str]]:
    """Unit -> the other units of this package it imports (type-checking imports included)."""
    units = _units()
    found: dict[str, set[str]] = {unit: set() for unit in units}
    for module in _modules():
        for name in _imports(module):
            parts = name.split(".")
            if parts[0] == "pytest_evalgate" and len(parts) > 1 and parts[1] in units:
                found.setdefault(_stage(module), set()).add(parts[1])
    return {unit: imported - {unit} for unit, imported in found.items() if unit != "__init__"}


def _declared() -> dict[str, set[str]]:
    """The package table of docs/architecture.md: ``| `unit/` | job | may import |`` rows."""
    rows: dict[str, set[str]] = {}
    in_table = False
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        if line.startswith("| unit | "):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            unit = cells[0].strip("`").rstrip("/")
            assert unit not in rows, f"docs/architecture.md lists {unit} twice"
            allowed = cells[-1].replace("`", "")
            rows[unit] = {w.strip().rstrip("/") for w in allowed.split(",")} - {"-", ""}
    return rows


def test_every_unit_has_one_row_in_the_architecture_table() -> None:
    assert set(_declared()) == _units()


def test_units_import_only_what_their_row_allows() -> None:
    declared = _declared()
    over = {
        unit: sorted(imported - declared.get(unit, set()))
        for unit, imported in _unit_imports().items()
        if imported - declared.get(unit, set())
    }
    assert over == {}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (a list of nodes, first == last), or [] when it has none."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, set())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_units_import_one_way_without_a_circle() -> None:
    assert _cycle(_unit_imports()) == []
    # the declared order too: a row may not allow what would close a circle
    assert _cycle(_declared()) == []


def test_only_the_pytest_side_imports_pytest() -> None:
    offenders = {m for m in _modules() if _stage(m) not in PYTEST_SIDE and "pytest" in _imports(m)}
    assert offenders == set()
    # and the table says so: pytest appears only in the pytest side's rows
    assert {unit for unit, allowed in _declared().items() if "pytest" in allowed} == PYTEST_SIDE


def test_only_the_edges_import_the_composition_root_and_the_items() -> None:
    for module in _modules():
        imported = _imports(module)
        assert not _imports_under(imported, "pytest_evalgate.plugin"), module
        if module != "plugin" and _stage(module) != "session":
            assert not _imports_under(imported, "pytest_evalgate.session"), module
        # protocol: the light run protocol, a pytest plugin of its own, runs items
        if module not in {"plugin", "protocol", "items"} and _stage(module) != "session":
            assert not _imports_under(imported, "pytest_evalgate.items"), module


def test_core_modules_hold_no_program_parts() -> None:
    found = {
        module: parts
        for module, path in _core().items()
        if (parts := _program_parts(path.read_text(), module, path))
    }
    assert found == {}


def test_the_program_check_catches_each_kind() -> None:
    source = (
        "import argparse\nimport sys\nfrom ..cli import main\n"
        "def f(say=print):\n    print('x')\n    sys.exit(1)\n    raise SystemExit(2)\n"
    )
    parts = _program_parts(source, "runner.child", PACKAGE / "runner" / "child.py")
    assert sorted(parts) == [
        "exit line 6", "exit line 7", "imports argparse", "imports pytest_evalgate.cli",
        "print line 4", "print line 5",
    ]  # fmt: skip


def test_a_sub_package_main_may_exit_but_not_print() -> None:
    source = "import sys\nfrom sys import exit\nprint('ready')\nsys.exit(3)\n"
    main = PACKAGE / "simulated" / "__main__.py"
    assert _program_parts(source, "simulated.__main__", main) == ["print line 3"]
    other = PACKAGE / "simulated" / "server.py"
    assert len(_program_parts(source, "simulated.server", other)) == 3


def test_relative_and_package_imports_of_the_cli_are_seen() -> None:
    init = PACKAGE / "store" / "__init__.py"
    for source in ("from .. import cli", "from ..cli.serve import x", "import pytest_evalgate.cli"):
        assert _program_parts(source, "store", init) == ["imports pytest_evalgate.cli"], source
    assert _program_parts("from . import client", "store", init) == []
    load = PACKAGE / "manifest" / "load.py"
    assert _program_parts("from .client import x", "manifest.load", load) == []


def test_the_entry_point_imports_nothing_heavy() -> None:
    # pytest imports the entry point in every run of every project that installs us.
    code = (
        "import sys, pytest_evalgate.plugin as p;"
        "print(sorted(m for m in ('numpy', 'scipy', 'aiohttp', 'cryptography', 'pydantic')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_runner_child_imports_only_its_own_side() -> None:
    for module in CHILD_SIDE:
        ours = {name for name in _imports(module) if name.startswith("pytest_evalgate.")}
        allowed = {n for n in ours if any(_imports_under({n}, ok) for ok in CHILD_MAY_IMPORT)}
        foreign = ours - allowed
        assert foreign == set(), module
        assert not _imports_under(_imports(module), "pytest"), module


def test_the_runner_child_loads_nothing_of_the_parent_side() -> None:
    # At run time too (what the imports import in turn): the child starts from
    # ``python -m pytest_evalgate.runner``, which loads the package module, then the child.
    # jsonschema too: the tool box imports it where a suite declares tools (dialogue/toolrun.py)
    code = (
        "import sys, pytest_evalgate.runner, pytest_evalgate.runner.child_process;"
        f"print(sorted(m for m in {(*PARENT_SIDE, 'jsonschema')!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _init_extras(source: str, package: str) -> list[str]:
    """What a sub-package's ``__init__.py`` holds beyond its docstring, ``__future__`` and
    re-exports from its own modules (``from pytest_evalgate.<package>.<module> import ...``)
    and ``__all__``: one line per statement that defines or does something."""
    body = ast.parse(source).body
    extras = [] if body and _is_docstring(body[0]) else ["no docstring"]
    own = f"pytest_evalgate.{package}."
    for node in body[0 if extras else 1 :]:
        if isinstance(node, ast.ImportFrom) and (
            node.module == "__future__" or (node.level == 0 and (node.module or "").startswith(own))
        ):
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            continue
        extras.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return extras


def _is_docstring(node: ast.stmt) -> bool:
    value = node.value if isinstance(node, ast.Expr) else None
    return isinstance(value, ast.Constant) and isinstance(value.value, str)


def test_the_init_check_catches_each_kind() -> None:
    doc = '"""Doc."""\nfrom __future__ import annotations\n'
    assert _init_extras(doc + "from pytest_evalgate.x.a import A\n__all__ = ['A']\n", "x") == []
    assert _init_extras("from pytest_evalgate.x.a import A\n", "x") == ["no docstring"]
    for statement in (
        "def f() -> None: ...",
        "class C: ...",
        "LIMIT = 3",
        "import importlib",
        "from pytest_evalgate.y.a import A",
        "from .a import A",
        "if TYPE_CHECKING: pass",
    ):
        extras = _init_extras(doc + statement + "\n", "x")
        assert [e.partition(":")[0] for e in extras] == ["line 3"], statement


def test_sub_package_inits_hold_a_docstring_and_re_exports_only() -> None:
    # The convention of docs/architecture.md ("Package ``__init__`` files"): what a package
    # defines lives in a module named by its job, so ``__init__`` is the table of contents.
    # The root package is the one exception: ``pytest_evalgate/__init__.py`` holds the lazy
    # (PEP 562) loader of the user-facing names, because pytest imports it for the entry point
    # in every run (tests/test_exports.py pins that surface).
    inits = sorted(PACKAGE.glob("*/__init__.py"))
    assert len(inits) >= 20  # every sub-package, not an empty glob
    found = {
        path.parent.name: extras
        for path in inits
        if (extras := _init_extras(path.read_text(encoding="utf-8"), path.parent.name))
    }
    assert found == {}


def _module_edges(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of this package that ``module`` imports, at any depth of its tree (function
    bodies and ``if TYPE_CHECKING:`` blocks included): ``from a import b`` names the module
    ``a.b`` when it is one, else ``a`` (a name ``a`` defines or re-exports)."""
    found: set[str] = set()
    prefix = "pytest_evalgate."
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            origin = _absolute(node, module, path)
            subs = [f"{origin}.{alias.name}" for alias in node.names]
            names = [sub for sub in subs if sub[len(prefix) :] in known] or [origin]
        else:
            continue
        found.update(name[len(prefix) :] for name in names if name.startswith(prefix))
    return {name for name in found if name in known and name != module}


def _module_graph() -> dict[str, set[str]]:
    """Module -> the modules of its own package (its first dotted part) it imports."""
    modules = _modules()
    known = set(modules)
    return {
        module: {m for m in _module_edges(module, path, known) if _stage(m) == _stage(module)}
        for module, path in modules.items()
    }


def test_the_module_graph_sees_type_checking_and_lazy_imports() -> None:
    graph = _module_graph()
    assert "session.gate" in graph["session.core"]  # under TYPE_CHECKING and in a method
    assert "session.judging" in graph["session.running"]  # inside a method only
    assert "session.usage" in graph["session.select"]  # at module level
    modules = _modules()
    edges = _module_edges("plugin", modules["plugin"], set(modules))
    assert "hookspecs" in edges and "__init__" not in edges  # ``from pkg import module``
    assert _cycle({"p.a": {"p.b"}, "p.b": {"p.a"}}) == ["p.a", "p.b", "p.a"]


def test_modules_inside_each_package_import_without_a_circle() -> None:
    graph = _module_graph()
    for package in sorted({_stage(module) for module in graph}):
        inside = {m: edges for m, edges in graph.items() if _stage(m) == package}
        assert _cycle(inside) == [], package
